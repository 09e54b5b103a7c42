//! The generic signed webhook channel (SPEC section 5, Webhook).
//!
//! Owns the HTTP surface under `/v1/webhooks/NAME/...` (signature check, body validation,
//! answers), the signed callback delivery, and the conversation message list. It hands
//! inbound messages to an [`Inbox`] and reads bot messages from a [`MessageLog`]; it does
//! not know storage, sessions or the engine.

mod callback;
mod error;
mod events;
mod ingress;
mod signature;
mod state;

pub use callback::WebhookChannel;
pub use ingress::router;
pub use signature::{sign, verify};
pub use state::{MessageLog, WebhookEndpoint};

/// Channel instance name for webhook `name` (`webhook:NAME`).
pub fn channel_name(name: &str) -> String {
    format!("webhook:{name}")
}
