//! Files that come with messages (SPEC: media): fetching them within limits, keeping them in
//! the session's workspace (`inbox/`), reading documents (PDF text through `pdf-extract`,
//! bounded in time and size) and transcribing voice notes (`transcribe.rs`).
//!
//! Owns the limits and the file handling; the engine decides what the model is given
//! (`crate::engine` `media.rs`). Knows HTTP and the file system; not channels (platform
//! files are fetched through the engine's `LiveFeedback`) or providers.

pub mod pdf;
mod transcribe;

pub use pdf::PdfLimits;
pub use transcribe::Transcriber;

use crate::config::MediaConfig;
use base64::Engine as _;
use ferroclaw_channel_core::{Attachment, AttachmentKind, FetchError};
use futures::StreamExt;
use std::path::{Path, PathBuf};

/// Why a message's files were not taken; the text is the reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    #[error("The file {name} is too large: the limit is {limit} (media.max_file_bytes).")]
    FileTooLarge { name: String, limit: String },
    #[error(
        "The files of this message are too large together: the limit is {limit} (media.max_message_bytes)."
    )]
    MessageTooLarge { limit: String },
    #[error("Files of type {mime} ({name}) are not accepted here.")]
    TypeRefused { name: String, mime: String },
    #[error("The file {name} could not be fetched: {why}")]
    Fetch { name: String, why: String },
    #[error("The file {name} could not be stored: {why}")]
    Store { name: String, why: String },
}

/// A size for people.
pub fn human(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.0} MB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{:.0} KB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    }
}

/// The file's MIME type: the platform's, else from its name, else by its kind.
pub fn mime_of(attachment: &Attachment) -> String {
    if let Some(mime) = attachment.mime.as_deref().filter(|m| !m.is_empty()) {
        return mime.to_ascii_lowercase();
    }
    if let Some(mime) = mime_from_name(&attachment.name) {
        return mime.into();
    }
    match attachment.kind {
        AttachmentKind::Image => "image/jpeg".into(),
        AttachmentKind::Voice => "audio/ogg".into(),
        AttachmentKind::Audio => "audio/mpeg".into(),
        AttachmentKind::Document => "application/octet-stream".into(),
    }
}

/// The MIME type a file name's extension names, for the types handled here.
pub fn mime_from_name(name: &str) -> Option<&'static str> {
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let by_ext = match ext.as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "wav" => "audio/wav",
        _ => return None,
    };
    Some(by_ext)
}

/// Whether `[media] allowed_types` takes this type.
pub fn allowed(config: &MediaConfig, mime: &str) -> bool {
    config.allowed_types.is_empty()
        || config
            .allowed_types
            .iter()
            .any(|p| mime.starts_with(p.as_str()))
}

/// The bytes of an inline (base64) attachment, at most `max`.
pub fn decode_inline(data: &str, max: u64) -> Result<Vec<u8>, FetchError> {
    // Base64 is 4/3 of the bytes: refuse before decoding what is surely too large.
    if (data.len() as u64) / 4 * 3 > max + 3 {
        return Err(FetchError::TooLarge { limit: max });
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| FetchError::Failed(format!("its content is not base64: {e}")))?;
    if bytes.len() as u64 > max {
        Err(FetchError::TooLarge { limit: max })
    } else {
        Ok(bytes)
    }
}

/// The bytes of an attachment's URL, at most `max`, fetched under the address policy of
/// `web_fetch` (`crate::egress`: no loopback, private or metadata address, no system proxy,
/// redirects checked). The platform's own files are fetched by their channel.
pub async fn fetch_url(
    guarded: &crate::egress::Guarded,
    url: &str,
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    let (client, url) = guarded
        .check(url, crate::egress::Caller::Attachment)
        .map_err(FetchError::Failed)?;
    let response = client
        .get(url)
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| FetchError::Failed(format!("{}", e.without_url())))?;
    if !response.status().is_success() {
        return Err(FetchError::Failed(format!(
            "HTTP {}",
            response.status().as_u16()
        )));
    }
    if response.content_length().is_some_and(|n| n > max) {
        return Err(FetchError::TooLarge { limit: max });
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| FetchError::Failed(format!("{}", e.without_url())))?;
        if (body.len() + chunk.len()) as u64 > max {
            return Err(FetchError::TooLarge { limit: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The longest name a stored file gets, its `-N` suffix left room under 255 bytes.
const MAX_NAME: usize = 200;

/// Keep a file in `workspace/inbox/` under a safe, unused name; returns the path relative to
/// the workspace (`inbox/<name>`) and the full path. Written through
/// [`crate::workspace_fs`]: a link planted at `inbox` or at the name is refused, never
/// written through.
pub fn store(workspace: &Path, name: &str, bytes: &[u8]) -> std::io::Result<(String, PathBuf)> {
    use std::io::Write;
    let clean: String = Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = if clean.trim_matches('.').is_empty() {
        "file".to_string()
    } else {
        clean
    };
    let (mut stem, mut ext) = match clean.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem.to_string(), format!(".{ext}")),
        _ => (clean.clone(), String::new()),
    };
    // File systems take names of at most 255 bytes: a longer one is shortened, keeping a
    // short extension (the cleaned name is ASCII, so any cut is a character boundary).
    if stem.len() + ext.len() > MAX_NAME {
        if ext.len() > 16 {
            ext.clear();
        }
        stem.truncate(MAX_NAME - ext.len());
    }
    let mut name = format!("{stem}{ext}");
    let mut n = 1;
    loop {
        let relative = format!("inbox/{name}");
        match crate::workspace_fs::create_file(
            workspace,
            Path::new(&relative),
            crate::workspace_fs::Existing::Refuse,
        ) {
            Ok(mut file) => {
                file.write_all(bytes)?;
                let path = workspace.join(&relative);
                return Ok((relative, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => {
                n += 1;
                name = format!("{stem}-{n}{ext}");
            }
            Err(e) => return Err(e),
        }
    }
}

/// A document's text: PDF through `pdf-extract` in a bounded child process (`pdf.rs`: memory,
/// CPU and time limits, output capped), text types as UTF-8 (at most `max_text_bytes`). Err
/// names why it could not be read.
pub async fn document_text(
    mime: &str,
    bytes: Vec<u8>,
    limits: PdfLimits,
) -> Result<String, String> {
    if mime == "application/pdf" {
        return pdf::extract(bytes, limits).await;
    }
    if mime.starts_with("text/") || mime == "application/json" {
        let end = bytes.len().min(limits.max_text_bytes);
        return Ok(String::from_utf8_lossy(&bytes[..end]).into_owned());
    }
    Err(format!("{mime} files are stored, not read"))
}

/// At most `max` characters of `text`, whitespace runs folded, marked when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let folded: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max {
        return folded;
    }
    let mut out: String = folded.chars().take(max).collect();
    out.push_str(" […]");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_are_safe_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = store(dir.path(), "../../etc/pass wd.txt", b"1").unwrap();
        let (b, _) = store(dir.path(), "pass wd.txt", b"2").unwrap();
        assert_eq!(a, "inbox/pass_wd.txt");
        assert_eq!(b, "inbox/pass_wd-2.txt");
        let (c, _) = store(dir.path(), "..", b"3").unwrap();
        assert_eq!(c, "inbox/file");
        let (d, _) = store(dir.path(), &format!("{}.pdf", "x".repeat(400)), b"4").unwrap();
        assert_eq!(d, format!("inbox/{}.pdf", "x".repeat(MAX_NAME - 4)));
    }

    #[test]
    fn a_planted_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("inbox")).unwrap();
        assert!(store(&ws, "cron", b"* * * * * root id").is_err());
        std::fs::remove_file(ws.join("inbox")).unwrap();
        std::fs::create_dir_all(ws.join("inbox")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), ws.join("inbox/a.txt")).unwrap();
        // A dangling link takes the name: the file goes under another one, inside.
        let (path, _) = store(&ws, "a.txt", b"ok").unwrap();
        assert_eq!(path, "inbox/a-2.txt");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    proptest::proptest! {
        /// Arbitrary names (#33: adversarial media) land in `inbox/` under a safe name, and
        /// arbitrary inline content is decoded within its limit or refused.
        #[test]
        fn arbitrary_names_and_content_stay_bounded(
            name in ".{0,300}",
            data in "[A-Za-z0-9+/=\\s\\x00-\\x7f]{0,400}",
            max in 0u64..300,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (relative, path) = store(dir.path(), &name, b"x").unwrap();
            let inner = relative.strip_prefix("inbox/").unwrap();
            proptest::prop_assert!(!inner.is_empty() && !inner.contains('/') && inner != "." && inner != "..");
            proptest::prop_assert!(path.starts_with(dir.path()));
            if let Ok(bytes) = decode_inline(&data, max) {
                proptest::prop_assert!(bytes.len() as u64 <= max);
            }
        }
    }

    #[test]
    fn inline_content_is_decoded_within_the_limit() {
        let data = base64::engine::general_purpose::STANDARD.encode(b"hello");
        assert_eq!(decode_inline(&data, 10).unwrap(), b"hello");
        assert_eq!(
            decode_inline(&data, 3).unwrap_err(),
            FetchError::TooLarge { limit: 3 }
        );
    }
}
