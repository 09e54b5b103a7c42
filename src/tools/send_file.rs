//! `send_file`: a file from the session's workspace, delivered natively by the chat's
//! channel (a Telegram photo or document, a webhook download) through the outbox, so exactly
//! once; a path outside the workspace, or through a symlink, is refused.
//!
//! The file is copied out of the workspace when it is queued (opened with no link followed,
//! into `<agent workspace>/.sent/`, which no session's sandbox mounts), so what is delivered
//! later — a retry, a download an hour on — is what was sent, whatever a sandboxed command
//! does to the workspace meanwhile. Files above [`MAX_SEND_BYTES`] are refused.

use super::{Tool, ToolContext, ToolError};
use crate::storage::NewOutbound;
use async_trait::async_trait;
use ferroclaw_channel_core::{OutboundFile, OutboundKind};
use serde_json::{Value, json};

pub struct SendFile {
    store: std::sync::Arc<dyn crate::storage::Store>,
    outbox: crate::outbox::OutboxNotifier,
    /// A file holding a configured secret (in any form it scans for) is not sent.
    redactor: std::sync::Arc<crate::redact::Redactor>,
}

impl SendFile {
    pub fn new(
        store: std::sync::Arc<dyn crate::storage::Store>,
        outbox: crate::outbox::OutboxNotifier,
        redactor: std::sync::Arc<crate::redact::Redactor>,
    ) -> Self {
        SendFile {
            store,
            outbox,
            redactor,
        }
    }
}

/// The largest file `send_file` sends (Telegram's own limit for a bot's document).
pub const MAX_SEND_BYTES: u64 = 50 * 1024 * 1024;

/// The folder beside the sessions' workspaces where queued files are kept (session folders
/// never start with `.`, so no session — and no sandbox — sees it).
fn spool_dir(workspace: &std::path::Path) -> std::path::PathBuf {
    workspace.parent().unwrap_or(workspace).join(".sent")
}

/// Copies the workspace file `relative` into the spool; returns the copy's path and size. A
/// copy holding a secret is removed and refused (the copy is what would be sent, so what is
/// scanned is what leaves, whatever happens to the workspace file meanwhile).
fn spool(
    workspace: &std::path::Path,
    relative: &str,
    name: &str,
    redactor: &crate::redact::Redactor,
) -> Result<(std::path::PathBuf, u64), ToolError> {
    use std::io::Read;
    let (file, size) = crate::workspace_fs::open_read(workspace, std::path::Path::new(relative))
        .map_err(|e| {
            ToolError(format!(
                "cannot send `{relative}`: {}",
                crate::workspace_fs::describe(&e)
            ))
        })?;
    let too_large = || {
        ToolError(format!(
            "`{relative}` is too large to send: the limit is {}",
            crate::media::human(MAX_SEND_BYTES)
        ))
    };
    if size > MAX_SEND_BYTES {
        return Err(too_large());
    }
    // A folder per file keeps its name as it was (channels send the file under it).
    let dir = spool_dir(workspace).join(uuid::Uuid::new_v4().simple().to_string());
    std::fs::create_dir_all(&dir).map_err(|e| ToolError(format!("cannot queue the file: {e}")))?;
    let copy = dir.join(name);
    let mut out = std::fs::File::create(&copy)
        .map_err(|e| ToolError(format!("cannot queue the file: {e}")))?;
    // The file may grow after the size was read: copy at most the limit and one byte more.
    let copied = std::io::copy(&mut file.take(MAX_SEND_BYTES + 1), &mut out)
        .map_err(|e| ToolError(format!("cannot queue the file: {e}")))?;
    if copied > MAX_SEND_BYTES {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(too_large());
    }
    drop(out);
    let held = std::fs::File::open(&copy).and_then(|f| {
        redactor
            .find_in(std::io::BufReader::new(f))
            .map(|n| n.map(str::to_string))
    });
    match held {
        Ok(None) => Ok((copy, copied)),
        Ok(Some(variable)) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(ToolError(format!(
                "`{relative}` was not sent: it contains the secret of {variable}, which never leaves the service"
            )))
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(ToolError(format!("cannot queue the file: {e}")))
        }
    }
}

#[async_trait]
impl Tool for SendFile {
    fn name(&self) -> &str {
        "send_file"
    }
    fn description(&self) -> &str {
        "Send a file from your workspace to this chat (an image as a photo, other files as documents), \
         with an optional caption."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "relative to your workspace"},
                "caption": {"type": "string"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let path = args["path"].as_str().unwrap_or_default();
        let name = std::path::Path::new(path)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file")
            .to_string();
        let (workspace, relative, file_name, redactor) = (
            cx.workspace.clone(),
            path.to_string(),
            name.clone(),
            self.redactor.clone(),
        );
        let (copy, size) = tokio::task::spawn_blocking(move || {
            spool(&workspace, &relative, &file_name, &redactor)
        })
        .await
        .map_err(|e| ToolError(format!("cannot queue the file: {e}")))??;
        let mime = crate::media::mime_from_name(&name)
            .unwrap_or("application/octet-stream")
            .to_string();
        let message = NewOutbound {
            route: cx.route.clone(),
            kind: OutboundKind::Reply,
            text: args["caption"].as_str().unwrap_or_default().to_string(),
            in_reply_to: cx.in_reply_to.clone(),
            edit_of: None,
            file: Some(OutboundFile {
                path: copy.display().to_string(),
                name: name.clone(),
                mime: mime.clone(),
            }),
            approval: None,
        };
        crate::outbox::post(&*self.store, &self.outbox, &cx.session_key, message)
            .await
            .map_err(|e| ToolError(format!("the file could not be queued: {e}")))?;
        Ok(format!("sent {name} ({mime}, {size} bytes)"))
    }
}
