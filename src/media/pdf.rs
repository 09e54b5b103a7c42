//! A PDF's text, read where a bound holds: in a child process (this same binary, the hidden
//! `pdf-text` command) that limits its own address space and CPU time before it parses, is
//! killed at the timeout, and whose output is read up to a cap. A decompression bomb or a
//! parser that loops then costs that child, never the service: the service's memory is the
//! capped output, and a crash of the parser is an answer ("could not be read"), not a crash
//! that the redone turn would repeat.
//!
//! The protocol is the child's stdout: a marker line, `OK` or `ERR`, then the text or the
//! reason. Owns the child and its limits; knows nothing of sessions or models.

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The first line of the child's answer.
const MARKER: &str = "ferroclaw-pdf-text/1";

/// What one extraction may use.
#[derive(Debug, Clone, Copy)]
pub struct PdfLimits {
    /// Wall-clock time before the child is killed (its CPU limit is the same, rounded up).
    pub timeout: Duration,
    /// The child's address space (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Bytes of text kept; the rest is cut off.
    pub max_text_bytes: usize,
}

/// The text of `bytes` (a PDF), or why it could not be read.
pub async fn extract(bytes: Vec<u8>, limits: PdfLimits) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the PDF reader is unavailable: {e}"))?;
    extract_with(&exe, bytes, limits).await
}

/// [`extract`] with the binary that runs the child named (tests point at the built binary).
pub async fn extract_with(
    exe: &std::path::Path,
    bytes: Vec<u8>,
    limits: PdfLimits,
) -> Result<String, String> {
    let mut child = tokio::process::Command::new(exe)
        .arg("pdf-text")
        .arg("--memory-bytes")
        .arg(limits.memory_bytes.to_string())
        .arg("--cpu-secs")
        .arg(limits.timeout.as_secs().max(1).to_string())
        .arg("--max-text-bytes")
        .arg(limits.max_text_bytes.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("the PDF reader could not start: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    // The marker, a status line and at most `max_text_bytes` of text, plus a little.
    let cap = (limits.max_text_bytes + MARKER.len() + 64) as u64;
    let work = async {
        let feed = async {
            // A child that stops reading (it died) is not an error here: its answer says.
            let _ = stdin.write_all(&bytes).await;
            drop(stdin);
        };
        let mut out = Vec::new();
        let read = async {
            let _ = (&mut stdout).take(cap).read_to_end(&mut out).await;
        };
        tokio::join!(feed, read);
        let status = child.wait().await;
        (out, status)
    };
    let (out, status) = match tokio::time::timeout(limits.timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            return Err(format!(
                "reading it took longer than {} s",
                limits.timeout.as_secs()
            ));
        }
    };
    let text = String::from_utf8_lossy(&out);
    let mut lines = text.splitn(3, '\n');
    match (lines.next(), lines.next(), lines.next()) {
        (Some(MARKER), Some("OK"), rest) => Ok(rest.unwrap_or_default().to_string()),
        (Some(MARKER), Some("ERR"), rest) => Err(rest.unwrap_or("unknown").to_string()),
        _ => Err(match status {
            Ok(status) if status.success() => "the PDF reader gave no answer".to_string(),
            // Killed by its CPU limit, or aborted when its memory ran out.
            Ok(_) => "the PDF needs more memory or time to read than is allowed".to_string(),
            Err(e) => format!("the PDF reader failed: {e}"),
        }),
    }
}

/// The child: limits itself, reads the PDF from stdin, answers on stdout. Returns the exit
/// code.
pub fn run_child(memory_bytes: u64, cpu_secs: u64, max_text_bytes: usize) -> i32 {
    // A parser panic is an answer, not a line on anyone's terminal.
    std::panic::set_hook(Box::new(|_| {}));
    let limited = rlimit::setrlimit(rlimit::Resource::AS, memory_bytes, memory_bytes)
        .and_then(|()| rlimit::setrlimit(rlimit::Resource::CPU, cpu_secs, cpu_secs + 1))
        .and_then(|()| rlimit::setrlimit(rlimit::Resource::CORE, 0, 0));
    let mut stdout = std::io::stdout().lock();
    let mut answer = |status: &str, body: &str| {
        let _ = write!(stdout, "{MARKER}\n{status}\n{body}");
        let _ = stdout.flush();
    };
    if let Err(e) = limited {
        answer(
            "ERR",
            &format!("the PDF reader could not limit itself: {e}"),
        );
        return 3;
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        answer("ERR", &format!("the PDF could not be read: {e}"));
        return 3;
    }
    match std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(&bytes)) {
        Err(_) => {
            answer("ERR", "the PDF is malformed (its reader gave up)");
            3
        }
        Ok(Err(e)) => {
            answer("ERR", &format!("the PDF could not be read: {e}"));
            3
        }
        Ok(Ok(mut text)) => {
            if text.len() > max_text_bytes {
                let mut cut = max_text_bytes;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            answer("OK", &text);
            0
        }
    }
}
