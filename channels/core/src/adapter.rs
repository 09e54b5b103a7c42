//! The adapter contract: what a channel crate gives the service, built in one pass.
//!
//! A channel crate turns its settings into [`Built`]: the delivery side (one [`Channel`] per
//! instance, needed by the outbox workers and the engine's live feedback before anything
//! runs), the access rules of its instances, and a [`Receiver`] — the receiving side, started
//! once the service's [`Inbox`] exists. Starting it returns the routes to mount on the
//! service's HTTP server and the task to run; the service owns both. Nothing is wired after
//! construction, and the service names no channel kind outside its one list of factories.

use crate::{Channel, Inbox, OutboundMessage};
use async_trait::async_trait;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Who may talk to the bot on a channel (SPEC section 5, access).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    Open,
    Allowlist,
    Pairing,
}

/// A channel instance's access rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    pub mode: AccessMode,
    pub allowed_users: Vec<String>,
}

/// What a channel crate builds from its settings.
pub struct Built {
    /// One per channel instance (a webhook config may name several endpoints).
    pub channels: Vec<Arc<dyn Channel>>,
    /// Access rules by channel instance name (instances without one are open).
    pub access: Vec<(String, AccessRule)>,
    /// The receiving side, started by the service once its inbox exists.
    pub receiver: Box<dyn Receiver>,
}

/// A channel that cannot be built from its settings; names the config key to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct BuildError {
    pub key: String,
    pub message: String,
}

impl BuildError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        BuildError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// What the service gives a receiver when it starts.
pub struct ReceiverContext {
    /// Where inbound messages go; `Ok` means durable, and only then is the platform told.
    pub inbox: Arc<dyn Inbox>,
    /// Bot messages already queued, for channels that serve them to clients.
    pub messages: Arc<dyn MessageLog>,
    /// The service is stopping: end long polls and streams.
    pub shutdown: CancellationToken,
}

/// What a started receiver needs from the service.
#[derive(Default)]
pub struct Receiving {
    /// Routes to mount on the service's HTTP server.
    pub router: Option<axum::Router>,
    /// A task to run until `shutdown` (long polling, a gateway connection).
    pub task: Option<BoxFuture<'static, ()>>,
    /// One line for the start-up log ("telegram (long polling)").
    pub description: Vec<String>,
}

/// The receiving side of an adapter.
pub trait Receiver: Send {
    /// True when the platform allows one consumer only (long polling, a gateway session):
    /// the service then starts it only in the process that leads, and such a receiver
    /// mounts no routes.
    fn exclusive(&self) -> bool {
        false
    }
    /// Start receiving until `cx.shutdown`. An exclusive receiver is started again after its
    /// earlier task ended, when its process leads again.
    fn start(&self, cx: ReceiverContext) -> Receiving;
}

/// A read of bot messages that failed; the adapter logs it and answers "unavailable" (the
/// cause is never shown to a client).
#[derive(Debug, thiserror::Error)]
#[error("bot messages unavailable: {0}")]
pub struct LogUnavailable(pub String);

/// Reads bot messages (backed by the outbox) and observes turns, for channels that let a
/// client read them (the webhook's list, `?wait=` and event stream).
#[async_trait]
pub trait MessageLog: Send + Sync {
    /// Messages of one conversation with seq > `after`.
    async fn conversation(
        &self,
        channel: &str,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable>;
    /// Messages of the whole channel with seq > `after`.
    async fn after(
        &self,
        channel: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable>;
    /// The channel's newest seq (0 when none).
    async fn last_seq(&self, channel: &str) -> Result<i64, LogUnavailable>;
    /// Messages answering inbound `message_id` of a conversation.
    async fn replies(
        &self,
        channel: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable>;
    /// Wait until the turn of journal entry `journal_id` has ended; false on timeout.
    async fn wait_answered(&self, journal_id: i64, timeout: Duration) -> bool;
    /// Tokens (input, output) the turn of journal entry `journal_id` used; (0, 0) until it
    /// is answered.
    async fn turn_usage(&self, _journal_id: i64) -> Result<(i64, i64), LogUnavailable> {
        Ok((0, 0))
    }
    /// One bot message of a channel by its seq (a file's download).
    async fn message(
        &self,
        _channel: &str,
        _seq: i64,
    ) -> Result<Option<OutboundMessage>, LogUnavailable> {
        Ok(None)
    }
    /// Wakes when new bot messages may exist (a hint: readers re-query after it).
    fn subscribe(&self) -> broadcast::Receiver<String>;
}

/// Platform user ids as strings; numbers are accepted too (`allowed_users = [7]`), since
/// Telegram and Discord ids are numbers.
pub fn user_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(i64),
        Unsigned(u64),
    }
    Ok(<Vec<Id> as serde::Deserialize>::deserialize(d)?
        .into_iter()
        .map(|id| match id {
            Id::Text(s) => s,
            Id::Number(n) => n.to_string(),
            Id::Unsigned(n) => n.to_string(),
        })
        .collect())
}
