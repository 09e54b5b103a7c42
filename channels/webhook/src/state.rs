//! What the webhook routes share: the configured endpoints, the inbox, the bot-message log
//! (`MessageLog`, implemented by the service over its outbox) and the shutdown signal.

use crate::error::{ApiError, err};
use axum::http::StatusCode;
use ferroclaw_channel_core::{Inbox, MessageLog};
use secrecy::SecretString;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
