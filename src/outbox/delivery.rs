//! One channel's delivery loop.
//!
//! Alone on its database a worker delivers every pending row. Beside other processes on one
//! PostgreSQL database (see [`DeliveryClaims`]) it delivers a conversation only while it holds
//! that conversation's delivery lease, so every process delivers and no row is sent by two.

use super::OutboxNotifier;
use crate::clock::now_ms;
use crate::storage::{OutboxEntry, Store};
use ferroclaw_channel_core::{Channel, DeliveryError};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const BATCH: i64 = 512;
/// Delivery attempts after which a message is given up and marked failed.
const MAX_ATTEMPTS: i64 = 50;

/// A delivered message: its outbox id and the platform's id for it.
type Delivery = (i64, Option<String>);
const CONVERSATIONS_IN_FLIGHT: usize = 32;
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Deliveries shared with other processes: a conversation is delivered under a lease
/// (`delivery:<channel>:<chat>:<thread>` in the lease table), read again once it is held, and
/// released after its rows are marked delivered. A process that dies mid-conversation leaves
/// the lease to expire after `ttl`; then another process delivers what is left.
pub struct DeliveryClaims {
    /// This process (the same owner as its session leases).
    pub owner: String,
    pub ttl: Duration,
}

pub struct DeliveryWorker {
    store: Arc<dyn Store>,
    claims: Option<DeliveryClaims>,
    channel: Arc<dyn Channel>,
    wake: Arc<Notify>,
    /// One pass at a time: the run loop and an explicit flush never deliver the same row twice.
    pass_lock: tokio::sync::Mutex<()>,
    /// Some row may be waiting for a retry time: look up the earliest after a pass. True at
    /// start (an earlier run may have left some); false once the lookup finds none.
    may_be_waiting: std::sync::atomic::AtomicBool,
}

/// What one pass over the pending messages found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PassOutcome {
    pub delivered: usize,
    /// Messages left pending (waiting for a retry).
    pub deferred: usize,
    /// Earliest time (unix ms) a waiting message of the channel may be tried again (looked
    /// up after the pass while retries exist).
    pub next_attempt_at: Option<i64>,
    /// The batch was full: there may be more right now.
    pub more: bool,
}

impl DeliveryWorker {
    pub fn new(
        store: Arc<dyn Store>,
        channel: Arc<dyn Channel>,
        notifier: &OutboxNotifier,
    ) -> Self {
        let wake = notifier.handle(channel.name());
        DeliveryWorker {
            store,
            claims: None,
            channel,
            wake,
            pass_lock: tokio::sync::Mutex::new(()),
            may_be_waiting: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Share deliveries with other processes on the same database.
    pub fn with_claims(mut self, claims: DeliveryClaims) -> Self {
        self.claims = Some(claims);
        self
    }

    /// Deliver until cancelled; then one last pass (the shutdown flush).
    /// `max_idle`: the longest sleep with nothing due (short where other processes add
    /// messages unannounced).
    pub async fn run(self: Arc<Self>, cancel: CancellationToken, max_idle: Duration) {
        let name = self.channel.name().to_string();
        loop {
            // A panicking adapter must not end this channel's deliveries for good.
            let pass = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(self.pass()));
            let outcome = match pass.await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(err)) => {
                    tracing::warn!(channel = %name, error = %err, "outbox read failed");
                    PassOutcome {
                        next_attempt_at: Some(now_ms() + 1000),
                        ..Default::default()
                    }
                }
                Err(_) => {
                    tracing::error!(channel = %name, "delivery pass panicked; retrying in 5 s");
                    PassOutcome {
                        next_attempt_at: Some(now_ms() + 5000),
                        ..Default::default()
                    }
                }
            };
            if outcome.more {
                continue;
            }
            let sleep = outcome
                .next_attempt_at
                .map(|at| Duration::from_millis((at - now_ms()).max(1) as u64))
                .unwrap_or(max_idle)
                .min(max_idle);
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        if let Err(err) = self.pass().await {
            tracing::warn!(channel = %name, error = %err, "final outbox flush failed");
        }
    }

    /// Deliver what is due now: each conversation in order, conversations concurrently.
    pub async fn pass(&self) -> Result<PassOutcome, crate::storage::StoreError> {
        let _one_pass = self.pass_lock.lock().await;
        let started = now_ms();
        let pending = self
            .store
            .outbox_pending(self.channel.name(), BATCH, started)
            .await?;
        let more = pending.len() as i64 == BATCH;
        let mut conversations: BTreeMap<(String, Option<String>), Vec<OutboxEntry>> =
            BTreeMap::new();
        for entry in pending {
            let route = &entry.message.route;
            conversations
                .entry((route.chat_id.clone(), route.thread_id.clone()))
                .or_default()
                .push(entry);
        }
        let results: Vec<(PassOutcome, Vec<Delivery>)> =
            futures::stream::iter(conversations.into_values())
                .map(|entries| self.deliver_claimed(entries))
                .buffer_unordered(CONVERSATIONS_IN_FLIGHT)
                .collect()
                .await;
        let mut total = PassOutcome {
            more,
            ..Default::default()
        };
        // One statement marks everything this pass delivered (before the next pass reads).
        let delivered: Vec<Delivery> = results
            .iter()
            .flat_map(|(_, d)| d.iter().cloned())
            .collect();
        self.mark_delivered(&delivered).await;
        for (r, _) in results {
            total.delivered += r.delivered;
            total.deferred += r.deferred;
        }
        // Rows this pass did not read may be waiting too (deferred by an earlier pass, or
        // held back behind one). Only asked while retries exist: a healthy channel skips it.
        use std::sync::atomic::Ordering::{Acquire, Release};
        if total.deferred > 0 {
            self.may_be_waiting.store(true, Release);
        }
        if !total.more && self.may_be_waiting.load(Acquire) {
            total.next_attempt_at = self
                .store
                .outbox_next_attempt(self.channel.name(), started)
                .await?;
            if total.next_attempt_at.is_none() {
                self.may_be_waiting.store(false, Release);
            }
        }
        Ok(total)
    }

    /// Deliver a conversation's rows: at once alone, under its lease beside other processes
    /// (then read again once held, and marked delivered before the lease is let go).
    async fn deliver_claimed(&self, entries: Vec<OutboxEntry>) -> (PassOutcome, Vec<Delivery>) {
        let Some(claims) = &self.claims else {
            return self.deliver_conversation(entries).await;
        };
        let route = &entries[0].message.route;
        let (chat, thread) = (route.chat_id.clone(), route.thread_id.clone());
        let key = format!(
            "delivery:{}:{chat}:{}",
            self.channel.name(),
            thread.as_deref().unwrap_or("")
        );
        let now = now_ms();
        match self
            .store
            .lease_claim(
                &key,
                &claims.owner,
                now,
                now + claims.ttl.as_millis() as i64,
            )
            .await
        {
            Ok(true) => {}
            // Another process delivers it; an error is tried again on the next pass.
            Ok(false) => return (PassOutcome::default(), Vec::new()),
            Err(err) => {
                tracing::warn!(channel = self.channel.name(), error = %err, "could not claim a conversation's deliveries");
                let outcome = PassOutcome {
                    deferred: entries.len(),
                    ..Default::default()
                };
                return (outcome, Vec::new());
            }
        }
        // Read again in a statement after the claim: its snapshot then holds what the
        // lease's last holder marked delivered before giving the lease up.
        let fresh = self
            .store
            .outbox_pending_in(self.channel.name(), &chat, thread.as_deref(), BATCH, now)
            .await;
        let (outcome, done) = match fresh {
            Ok(fresh) if fresh.is_empty() => (PassOutcome::default(), Vec::new()),
            Ok(fresh) => self.deliver_conversation(fresh).await,
            Err(err) => {
                tracing::warn!(channel = self.channel.name(), error = %err, "outbox read failed");
                (PassOutcome::default(), Vec::new())
            }
        };
        // The lease is given up with the mark (or alone, when nothing went out).
        let owner = &claims.owner;
        self.retried("mark messages delivered and release their lease", || {
            self.store
                .outbox_mark_delivered_release(&done, now_ms(), &key, owner)
        })
        .await;
        // Marked already: nothing left for the pass to mark.
        (outcome, Vec::new())
    }

    /// Record deliveries; retried, because a row left pending would be delivered again.
    async fn mark_delivered(&self, delivered: &[Delivery]) {
        self.retried("mark messages delivered", || {
            self.store.outbox_mark_delivered(delivered, now_ms())
        })
        .await;
    }

    /// Run a store write up to five times, backing off between tries; given up, what it
    /// would have recorded is redone (a delivery) or expires (a lease).
    async fn retried<'a, F, Fut>(&self, what: &str, write: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), crate::storage::StoreError>> + 'a,
    {
        for attempt in 1..=5u64 {
            match write().await {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(channel = self.channel.name(), attempt, error = %err, "could not {what}");
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
            }
        }
    }

    /// Deliver one conversation's messages in order; returns what happened and what was
    /// delivered (outbox id, platform id).
    /// Every row given is due: `outbox_pending` leaves out conversations whose first row
    /// waits for its retry.
    async fn deliver_conversation(
        &self,
        entries: Vec<OutboxEntry>,
    ) -> (PassOutcome, Vec<Delivery>) {
        let mut outcome = PassOutcome::default();
        let mut done = Vec::new();
        let total = entries.len();
        // Platform ids of messages delivered earlier in this pass, for edits read with them.
        let mut delivered_ids: HashMap<i64, String> = HashMap::new();
        for (i, mut entry) in entries.into_iter().enumerate() {
            if let Some(original) = entry.message.edit_of
                && entry.message.edit_platform_id.is_none()
            {
                entry.message.edit_platform_id = delivered_ids.get(&original).cloned();
            }
            let id = entry.message.id;
            match self.channel.deliver(&entry.message).await {
                Ok(delivered) => {
                    if let Some(pid) = &delivered.platform_message_id {
                        delivered_ids.insert(id, pid.clone());
                    }
                    done.push((id, delivered.platform_message_id));
                    outcome.delivered += 1;
                    crate::metrics::outbound(self.channel.name());
                }
                Err(DeliveryError::Rejected(reason)) => {
                    crate::metrics::delivery_failed(self.channel.name(), false);
                    tracing::warn!(channel = self.channel.name(), outbox_id = id, %reason, "platform rejected message");
                    let _ = self.store.outbox_mark_rejected(id, &reason).await;
                }
                Err(error @ (DeliveryError::Retry { .. } | DeliveryError::RateLimited { .. })) => {
                    // A wait the platform asked for (a 429) is pacing, not failure: it is
                    // honoured and not counted towards giving up.
                    let (reason, retry_after, rate_limited) = match error {
                        DeliveryError::RateLimited {
                            reason,
                            retry_after,
                        } => (reason, Some(retry_after), true),
                        DeliveryError::Retry {
                            reason,
                            retry_after,
                        } => (reason, retry_after, false),
                        DeliveryError::Rejected(_) => unreachable!("matched above"),
                    };
                    crate::metrics::delivery_failed(
                        self.channel.name(),
                        rate_limited || entry.attempts + 1 < MAX_ATTEMPTS,
                    );
                    if !rate_limited && entry.attempts + 1 >= MAX_ATTEMPTS {
                        tracing::error!(channel = self.channel.name(), outbox_id = id, attempts = entry.attempts + 1, %reason, "delivery given up; message marked failed");
                        let _ = self
                            .store
                            .outbox_mark_rejected(
                                id,
                                &format!("gave up after {MAX_ATTEMPTS} attempts: {reason}"),
                            )
                            .await;
                        continue;
                    }
                    let backoff = retry_after
                        .unwrap_or_else(|| backoff(entry.attempts))
                        .min(MAX_BACKOFF);
                    let at = now_ms() + backoff.as_millis() as i64;
                    tracing::info!(channel = self.channel.name(), outbox_id = id, attempts = entry.attempts + 1, %reason, "delivery failed; will retry");
                    let _ = self
                        .store
                        .outbox_retry_later(id, at, &reason, !rate_limited)
                        .await;
                    // Order within a conversation: the rest waits behind this one.
                    outcome.deferred = total - i;
                    return (outcome, done);
                }
            }
        }
        (outcome, done)
    }
}

/// 250 ms, 500 ms, 1 s, ... capped at [`MAX_BACKOFF`].
fn backoff(attempts: i64) -> Duration {
    let exp = attempts.clamp(0, 10) as u32;
    Duration::from_millis(250u64.saturating_mul(1 << exp)).min(MAX_BACKOFF)
}
