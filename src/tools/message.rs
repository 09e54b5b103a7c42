//! `message`: post an interim message to the current chat and thread.

use super::{Tool, ToolContext, ToolError};
use crate::storage::NewOutbound;
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use serde_json::{Value, json};

pub struct MessageTool {
    store: std::sync::Arc<dyn crate::storage::Store>,
    outbox: crate::outbox::OutboxNotifier,
}

impl MessageTool {
    pub fn new(
        store: std::sync::Arc<dyn crate::storage::Store>,
        outbox: crate::outbox::OutboxNotifier,
    ) -> Self {
        MessageTool { store, outbox }
    }
}

#[async_trait]
impl Tool for MessageTool {
    fn name(&self) -> &str {
        "message"
    }
    fn description(&self) -> &str {
        "Post an interim message to the user in the current chat (progress, a question) while you keep working."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string", "minLength": 1}},
               "required": ["text"], "additionalProperties": false})
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        #[derive(serde::Deserialize)]
        struct Args {
            text: String,
        }
        let Args { text } = super::typed(args)?;
        let message = NewOutbound {
            route: cx.route.clone(),
            kind: OutboundKind::Reply,
            text,
            in_reply_to: cx.in_reply_to.clone(),
            edit_of: None,
            file: None,
            approval: None,
        };
        crate::outbox::post(&*self.store, &self.outbox, &cx.session_key, message)
            .await
            .map_err(|e| ToolError(format!("could not post the message: {e}")))?;
        Ok("message posted".into())
    }
}
