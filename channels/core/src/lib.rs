//! The contract between channel adapters and the rest of ferroclaw.
//!
//! This crate owns the normalised message types ([`InboundMessage`], [`OutboundMessage`],
//! [`ChatRoute`]) and the two traits that meet at the adapter boundary:
//! [`Channel`] (ferroclaw → platform: deliver, edit, stream, typing) and [`Inbox`]
//! (platform → ferroclaw: hand over one inbound message, durably).
//!
//! It must not know any platform type (teloxide, serenity, HTTP bodies), nor storage or the
//! engine: adapters depend on it, never the other way round.

mod adapter;
mod approval;
pub mod auth;
pub mod backoff;
pub mod clock;
mod command;
mod deliver;
mod live_reply;
mod liveness;
mod message;
mod route;
mod split;

pub use adapter::{
    AccessMode, AccessRule, BuildError, Built, LogUnavailable, MessageLog, Receiver,
    ReceiverContext, Receiving, user_ids,
};
pub use approval::{ApprovalPrompt, Decision, DecisionOutcome, DecisionRequest};
pub use command::ChatCommand;
pub use deliver::{EditError, PieceSender, TextDelivery};
pub use live_reply::{LiveReplies, LiveReply, LiveUpdate, PreviewLedger, SharedLiveReply};
pub use liveness::{ChannelHealth, ChannelState, Liveness};
pub use message::{
    Attachment, AttachmentKind, AttachmentSource, InboundMessage, OutboundFile, OutboundKind,
    OutboundMessage, Sender,
};
pub use route::{ChatKind, ChatRoute};
pub use split::{SentPieces, split};

use async_trait::async_trait;
use std::time::Duration;

/// Why a delivery did not happen. The outbox worker acts on the variant.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Try the same message again later (network trouble, 5xx, 429, receiver down).
    #[error("delivery failed, will retry: {reason}")]
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The platform asked us to wait (a 429): tried again after `retry_after`, and not
    /// counted towards giving the message up (pacing is not failure).
    #[error("rate limited, will retry: {reason}")]
    RateLimited {
        reason: String,
        retry_after: Duration,
    },
    /// The platform will never accept this message; it is marked failed and skipped.
    #[error("delivery rejected: {0}")]
    Rejected(String),
}

/// What the platform said about a delivered message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The platform's id for the message, kept so later edits can address it.
    pub platform_message_id: Option<String>,
}

/// One channel adapter as the rest of ferroclaw sees it.
#[async_trait]
pub trait Channel: Send + Sync {
    /// The channel instance name used in routes and session keys (`cli`, `telegram`,
    /// `webhook:NAME`).
    fn name(&self) -> &str;

    /// Deliver one bot message (a new message, or an edit when `edit_of` is set).
    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError>;

    /// A piece of a reply that is still being generated for the inbound message
    /// `in_reply_to`. Channels that cannot stream ignore it; the final reply is always
    /// delivered through [`Channel::deliver`].
    async fn stream_delta(&self, _route: &ChatRoute, _in_reply_to: &str, _delta: &str) {}

    /// Show a typing indicator in the chat (and thread). Called every few seconds while a
    /// turn runs; channels without one ignore it.
    async fn typing(&self, _route: &ChatRoute) {}

    /// The bytes of a file the platform holds (an attachment's `Platform` id), at most
    /// `max_bytes` (more is an error). Channels without files refuse.
    async fn fetch_file(&self, _id: &str, _max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        Err(FetchError::Failed("this channel has no files".into()))
    }

    /// True once the adapter is connected to its platform (used by `/readyz`).
    fn is_ready(&self) -> bool {
        true
    }

    /// Whether it is still receiving (SPEC section 21): channels that know when their last
    /// receive completed judge by that; the others are up while connected.
    fn health(&self) -> ChannelHealth {
        ChannelHealth::connected(self.is_ready())
    }
}

/// Why a file could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// It is larger than allowed (bytes, when known).
    #[error("the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Failed(String),
}

/// Outcome of handing an inbound message to ferroclaw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Stored in the journal for the first time; it will be processed exactly once.
    New {
        session_key: String,
        journal_id: i64,
    },
    /// Already in the journal (a platform redelivery or a client retry); not processed again.
    Duplicate {
        session_key: String,
        journal_id: i64,
    },
}

impl Accepted {
    pub fn session_key(&self) -> &str {
        match self {
            Accepted::New { session_key, .. } | Accepted::Duplicate { session_key, .. } => {
                session_key
            }
        }
    }
}

/// The journal could not take the message; the adapter must not acknowledge it upstream.
#[derive(Debug, thiserror::Error)]
#[error("inbox unavailable: {0}")]
pub struct InboxError(pub String);

/// Where adapters hand inbound messages. Returning `Ok` means the message is durable.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Journal a message for the agent its route is bound to.
    async fn accept(&self, message: InboundMessage) -> Result<Accepted, InboxError>;

    /// Journal a message for `agent` when the client chose one (the OpenAI endpoint's
    /// `model = "ferroclaw:<id>"`), else as [`Inbox::accept`].
    async fn accept_for(
        &self,
        message: InboundMessage,
        agent: Option<&str>,
    ) -> Result<Accepted, InboxError> {
        let _ = agent;
        self.accept(message).await
    }

    /// Journal a person's decision on an approval (a button press, a signed call) and carry
    /// it out: one effect however often the platform delivers it.
    async fn decide(&self, request: DecisionRequest) -> Result<DecisionOutcome, InboxError> {
        let _ = request;
        Err(InboxError("approvals are not available here".into()))
    }

    /// The session key a message would be journalled under.
    fn session_key_of(&self, message: &InboundMessage, agent: Option<&str>) -> String {
        message.route.session_key_for(agent.unwrap_or("main"))
    }
}
