//! What the webhook routes share: the configured endpoints, the inbox, the bot-message log
//! (the [`MessageLog`] trait the service implements over its outbox) and the shutdown signal.

use crate::error::{ApiError, err};
use async_trait::async_trait;
use axum::http::StatusCode;
use ferroclaw_channel_core::{Inbox, OutboundMessage};
use secrecy::SecretString;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Reads bot messages (backed by the outbox) and observes turns, for the list, `wait` and
/// event-stream endpoints. Errors are strings: the endpoint only logs them and answers 503.
#[async_trait]
pub trait MessageLog: Send + Sync {
    /// Messages of one conversation with seq > `after`.
    async fn conversation(
        &self,
        channel: &str,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, String>;
    /// Messages of the whole channel with seq > `after`.
    async fn after(
        &self,
        channel: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, String>;
    /// The channel's newest seq (0 when none).
    async fn last_seq(&self, channel: &str) -> Result<i64, String>;
    /// Messages answering inbound `message_id` of a conversation.
    async fn replies(
        &self,
        channel: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Vec<OutboundMessage>, String>;
    /// Wait until the turn of journal entry `journal_id` has ended; false on timeout.
    async fn wait_answered(&self, journal_id: i64, timeout: Duration) -> bool;
    /// Wakes when new bot messages may exist (a hint: readers re-query after it).
    fn subscribe(&self) -> broadcast::Receiver<String>;
}

/// One configured webhook name.
pub struct WebhookEndpoint {
    pub secret: SecretString,
}

/// The longest `?wait=` honoured.
pub const MAX_WAIT_SECS: u64 = 120;

pub(crate) struct AppState {
    pub(crate) endpoints: HashMap<String, WebhookEndpoint>,
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) log: Arc<dyn MessageLog>,
    pub(crate) max_body_bytes: usize,
    /// Ends waits and event streams when the service shuts down.
    pub(crate) shutdown: CancellationToken,
}

impl AppState {
    /// The configured endpoint `name`, or 404.
    pub(crate) fn endpoint(&self, name: &str) -> Result<&WebhookEndpoint, ApiError> {
        self.endpoints
            .get(name)
            .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("unknown webhook `{name}`")))
    }
}
