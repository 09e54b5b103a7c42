//! The outbox: where every bot message leaves ferroclaw.
//!
//! Turns commit bot messages to the `outbox` table; one [`DeliveryWorker`] per channel
//! delivers them through the channel adapter, in order within each conversation and
//! concurrently across conversations, retrying with backoff until the platform takes them,
//! and marks each delivered. Undelivered messages survive restarts. This module knows the
//! [`Channel`](ferroclaw_channel_core::Channel) trait, never a platform.

mod delivery;
mod notifier;

pub use delivery::{DeliveryWorker, PassOutcome};
pub use notifier::OutboxNotifier;
