//! `send_file`: a file from the session's workspace, delivered natively by the chat's
//! channel (a Telegram photo or document, a webhook download) through the outbox, so exactly
//! once; a path outside the workspace is refused.

use super::{Tool, ToolContext, ToolError};
use crate::storage::NewOutbound;
use async_trait::async_trait;
use ferroclaw_channel_core::{OutboundFile, OutboundKind};
use serde_json::{Value, json};

pub struct SendFile;

#[async_trait]
impl Tool for SendFile {
    fn name(&self) -> &'static str {
        "send_file"
    }
    fn description(&self) -> &'static str {
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
        let full = super::confine(&cx.workspace, path)?;
        let meta = std::fs::metadata(&full)
            .map_err(|_| ToolError(format!("no file `{path}` in your workspace")))?;
        if !meta.is_file() {
            return Err(ToolError(format!("`{path}` is not a file")));
        }
        let name = full
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file")
            .to_string();
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
                path: full.display().to_string(),
                name: name.clone(),
                mime: mime.clone(),
            }),
        };
        crate::outbox::post(&*cx.store, &cx.outbox, &cx.session_key, message)
            .await
            .map_err(|e| ToolError(format!("the file could not be queued: {e}")))?;
        Ok(format!("sent {name} ({mime}, {} bytes)", meta.len()))
    }
}
