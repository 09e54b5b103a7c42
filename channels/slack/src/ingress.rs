//! One payload, whichever way it came (a Socket Mode envelope or an Events API request):
//! translated, then journalled (a message) or carried out (a button press). `Ok` means it is
//! durable or needs nothing, and only then is Slack acknowledged; an unacknowledged
//! envelope or a failed request is redelivered by Slack, and the journal takes it once.

use crate::api::WebApi;
use crate::translate::{self, Inbound};
use ferroclaw_channel_core::Inbox;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::OnceCell;

/// What a payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// An `event_callback` (its `event` inside).
    Event,
    SlashCommand,
    Interactive,
}

pub struct Ingress {
    pub inbox: Arc<dyn Inbox>,
    pub api: Arc<WebApi>,
    pub require_mention: bool,
    /// The bot's own user id (`auth.test`), asked once.
    bot_user: OnceCell<String>,
}

impl Ingress {
    pub fn new(inbox: Arc<dyn Inbox>, api: Arc<WebApi>, require_mention: bool) -> Self {
        Ingress {
            inbox,
            api,
            require_mention,
            bot_user: OnceCell::new(),
        }
    }

    /// The bot's user id (mentions name it; its own messages are not turns).
    pub async fn bot_user(&self) -> Result<&str, String> {
        self.bot_user
            .get_or_try_init(|| async {
                let me = self
                    .api
                    .call("auth.test", &serde_json::json!({}))
                    .await
                    .map_err(|e| format!("auth.test failed: {e}"))?;
                me["user_id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| "auth.test gave no user_id".to_string())
            })
            .await
            .map(String::as_str)
    }

    /// Hand `payload` over. Err: not durable (do not acknowledge; Slack redelivers).
    pub async fn handle(&self, kind: PayloadKind, payload: &Value) -> Result<(), String> {
        let inbound = match kind {
            PayloadKind::Event => {
                let bot = self.bot_user().await?;
                translate::event(&payload["event"], bot, self.require_mention)
            }
            PayloadKind::SlashCommand => translate::slash_command(payload),
            PayloadKind::Interactive => translate::interaction(payload),
        };
        match inbound {
            Inbound::Message(message) => self
                .inbox
                .accept(message)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Inbound::Decision(request) => self
                .inbox
                .decide(request)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Inbound::Ignore(why) => {
                tracing::debug!(why, "Slack payload needs no turn");
                Ok(())
            }
        }
    }
}
