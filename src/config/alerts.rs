//! The alert keys (SPEC section 21): where an operator is told that a channel is down or
//! deliveries are stuck, and after how long.

use serde::{Deserialize, Serialize};

/// `[alerts]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Chats to tell, `"<channel>:<chat id>"` (`"telegram:42"`, `"webhook:ops:alerts"`), in
    /// order: the first whose channel is not down gets it.
    pub chats: Vec<String>,
    /// A URL POSTed each alert as JSON, signed like webhook callbacks.
    pub webhook_url: String,
    /// The variable holding the webhook's signing secret.
    pub webhook_secret_env: String,
    /// A command run with the alert in `FERROCLAW_ALERT` (and its JSON on stdin).
    pub command: String,
    /// A channel down this long is an incident.
    pub channel_down_secs: u64,
    /// Deliveries to a channel failing this long (its oldest waiting message tried and
    /// refused) is an incident.
    pub delivery_pending_secs: u64,
    /// The store not writable this long is an incident (told by webhook or command: a chat
    /// alert needs the store).
    pub store_down_secs: u64,
    /// An approval waiting this long for a decision is an incident.
    pub approval_waiting_secs: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            chats: Vec::new(),
            webhook_url: String::new(),
            webhook_secret_env: String::new(),
            command: String::new(),
            channel_down_secs: 120,
            delivery_pending_secs: 300,
            store_down_secs: 30,
            approval_waiting_secs: 300,
        }
    }
}

impl AlertsConfig {
    /// Whether anyone is to be told.
    pub fn any_target(&self) -> bool {
        !self.chats.is_empty() || !self.webhook_url.is_empty() || !self.command.is_empty()
    }

    /// Entries that are not `<channel>:<chat id>`.
    pub fn problems(&self) -> Vec<(String, String)> {
        self.chats
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !c.rsplit_once(':')
                    .is_some_and(|(channel, chat)| !channel.is_empty() && !chat.is_empty())
            })
            .map(|(i, c)| {
                (
                    format!("alerts.chats[{i}]"),
                    format!("`{c}` is not <channel>:<chat id> (\"telegram:42\")"),
                )
            })
            .collect()
    }
}
