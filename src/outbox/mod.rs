//! The outbox: where every bot message leaves ferroclaw.
//!
//! Turns commit bot messages to the `outbox` table; one [`DeliveryWorker`] per channel
//! delivers them through the channel adapter, in order within each conversation and
//! concurrently across conversations, retrying with backoff until the platform takes them,
//! and marks each delivered. Undelivered messages survive restarts. This module knows the
//! [`Channel`](ferroclaw_channel_core::Channel) trait, never a platform.

mod card;
mod delivery;
mod notifier;

pub use card::StatusCard;
pub use delivery::{DeliveryClaims, DeliveryWorker, PassOutcome};
pub use notifier::OutboxNotifier;

use crate::storage::{NewOutbound, OutboxStore, StoreResult};

/// Queue one bot message outside a turn commit (cards, status messages, interim messages)
/// and wake its channel's worker. Returns its outbox id.
pub async fn post(
    store: &dyn OutboxStore,
    notifier: &OutboxNotifier,
    session_key: &str,
    message: NewOutbound,
) -> StoreResult<i64> {
    let channel = message.route.channel.clone();
    let id = store
        .outbox_push(session_key, &[message], crate::clock::now_ms())
        .await?[0];
    notifier.kick(&channel);
    Ok(id)
}
