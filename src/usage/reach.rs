//! How far one person's message has reached: the model calls and the runs (subagents,
//! delegations, team tasks, plan steps) its whole tree has caused, counted under the message
//! the tree traces back to, by every process on the database and across restarts.
//!
//! Runs are taken from the store one at a time (each already writes its own rows). Model
//! calls would cost a write each, so: the first [`LOCAL_CALLS`] of a message's own first
//! turn are counted in its process only, and everything else takes calls from the store in
//! blocks of [`BLOCK`] and uses them up here. Whoever first writes a message's row charges
//! it the local allowance, so a redone turn, a resumed child or another process never gets
//! calls the first turn may have used. A block half used when its process stops is lost:
//! the limit may stop a tree early by up to a block per process, never late.

use crate::policy::CallScope;
use crate::storage::{LimitStore, ReachCount, StoreError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Model calls a message's own first turn counts without the store.
pub const LOCAL_CALLS: u32 = 8;
/// Model calls taken from the store at once.
pub const BLOCK: u32 = 16;
/// Messages remembered here before the ones quiet for an hour are forgotten.
const REMEMBERED: usize = 4_096;
const QUIET: Duration = Duration::from_secs(3_600);
/// The store forgets messages untouched for a day.
const KEPT_MS: i64 = 86_400_000;

#[derive(Clone, Copy)]
struct Counts {
    /// Calls of the message's own first turn counted here only.
    local: u32,
    /// Calls taken from the store and not used yet.
    taken: u32,
    touched: Instant,
}

pub struct Reach {
    store: std::sync::Arc<dyn LimitStore>,
    /// `limits.max_model_calls_per_message`'s allowance for a first turn (what a row created
    /// by anyone is charged for it).
    local: u32,
    by_message: Mutex<HashMap<String, Counts>>,
    /// Writes to the store since it was last pruned.
    writes: AtomicU32,
}

/// What was counted: `Over` when it would pass its limit (then it is not counted).
pub enum Counted {
    Within,
    Over(u32),
}

impl Reach {
    pub fn new(store: std::sync::Arc<dyn LimitStore>, max_model_calls: u32) -> Self {
        Reach {
            store,
            local: LOCAL_CALLS.min(max_model_calls),
            by_message: Mutex::default(),
            writes: AtomicU32::new(0),
        }
    }

    /// Count one more run for the message behind `scope`, unless that would pass `limit`
    /// (0: no limit). Work traced to no message (compaction) is not counted.
    pub async fn run(&self, scope: &CallScope<'_>, limit: u32) -> Result<Counted, StoreError> {
        let Some(origin) = origin_key(scope, limit) else {
            return Ok(Counted::Within);
        };
        let granted = self.take(&origin, ReachCount::Runs, 1, limit).await?;
        Ok(if granted > 0 {
            Counted::Within
        } else {
            Counted::Over(limit)
        })
    }

    /// Count one more model call for the message behind `scope`, unless that would pass
    /// `limit` (`limits.max_model_calls_per_message`; 0: no limit).
    pub async fn call(&self, scope: &CallScope<'_>, limit: u32) -> Result<Counted, StoreError> {
        let Some(origin) = origin_key(scope, limit) else {
            return Ok(Counted::Within);
        };
        {
            let mut map = self.by_message.lock().expect("reach lock");
            let now = Instant::now();
            if map.len() >= REMEMBERED && !map.contains_key(&origin) {
                map.retain(|_, c| now.duration_since(c.touched) < QUIET);
            }
            let counts = map.entry(origin.clone()).or_insert(Counts {
                local: 0,
                taken: 0,
                touched: now,
            });
            counts.touched = now;
            if scope.origin_fresh && counts.local < self.local {
                counts.local += 1;
                return Ok(Counted::Within);
            }
            if counts.taken > 0 {
                counts.taken -= 1;
                return Ok(Counted::Within);
            }
        }
        let granted = self.take(&origin, ReachCount::Calls, BLOCK, limit).await?;
        if granted == 0 {
            return Ok(Counted::Over(limit));
        }
        let mut map = self.by_message.lock().expect("reach lock");
        if let Some(counts) = map.get_mut(&origin) {
            counts.taken += u32::try_from(granted - 1).unwrap_or(0);
        }
        Ok(Counted::Within)
    }

    /// The turn answering the message behind `scope` ended: its first-turn allowance is
    /// spent or no longer wanted (later work on the message is counted in the store), so
    /// its entry goes unless it holds calls taken from the store and not used yet (its
    /// tree's children may still use them). Without this, every message of the last hour
    /// stayed here: after a burst of 10,000 messages their keys, one small allocation each
    /// scattered over the burst's heap, kept about 60 MB of freed pages from going back.
    pub fn turn_ended(&self, scope: &CallScope<'_>, limit: u32) {
        let Some(origin) = origin_key(scope, limit) else {
            return;
        };
        let mut map = self.by_message.lock().expect("reach lock");
        if map.get(&origin).is_some_and(|counts| counts.taken == 0) {
            map.remove(&origin);
            // A table grown by a burst is not kept at its size once the burst is over.
            crate::heap::shrink_sparse(&mut map, REMEMBERED);
        }
    }

    /// Messages remembered now (for tests).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.by_message.lock().expect("reach lock").len()
    }

    async fn take(
        &self,
        origin: &str,
        what: ReachCount,
        want: u32,
        limit: u32,
    ) -> Result<i64, StoreError> {
        let now = crate::clock::now_ms();
        if self.writes.fetch_add(1, Ordering::Relaxed) % 1_024 == 1_023 {
            self.store.reach_forget(now - KEPT_MS).await?;
        }
        self.store
            .reach_take(
                origin,
                what,
                i64::from(want),
                i64::from(limit),
                i64::from(self.local),
                now,
            )
            .await
    }
}

/// The key a message's reach is counted under (None: not counted).
fn origin_key(scope: &CallScope<'_>, limit: u32) -> Option<String> {
    let message = scope.origin_message.filter(|_| limit > 0)?;
    let route = scope.route;
    Some(format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{message}",
        route.channel,
        route.chat_id,
        route.thread_id.as_deref().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SqliteStore;
    use ferroclaw_channel_core::{ChatKind, ChatRoute};

    fn scope<'a>(route: &'a ChatRoute, message: &'a str, fresh: bool) -> CallScope<'a> {
        CallScope {
            session_key: "s",
            agent: "main",
            sender: Some("u"),
            route,
            origin_message: Some(message),
            origin_fresh: fresh,
        }
    }

    #[tokio::test]
    async fn a_message_is_forgotten_when_its_turn_ends_unless_it_holds_store_calls() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("r.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        crate::storage::Store::migrate(&store).await.unwrap();
        let reach = Reach::new(std::sync::Arc::new(store), 20);
        let route = ChatRoute {
            channel: "main".into(),
            kind: ChatKind::Direct,
            chat_id: "c".into(),
            thread_id: None,
        };
        // A first turn's calls are counted here only; its end forgets the message.
        for _ in 0..3 {
            assert!(matches!(
                reach.call(&scope(&route, "m1", true), 20).await.unwrap(),
                Counted::Within
            ));
        }
        assert_eq!(reach.remembered(), 1);
        reach.turn_ended(&scope(&route, "m1", true), 20);
        assert_eq!(reach.remembered(), 0);
        // Work after the turn (a child's call) takes a block from the store: kept while
        // its unused calls are held, so they are not taken again.
        assert!(matches!(
            reach.call(&scope(&route, "m1", false), 20).await.unwrap(),
            Counted::Within
        ));
        reach.turn_ended(&scope(&route, "m1", false), 20);
        assert_eq!(reach.remembered(), 1);
        // The limit still holds across the forgetting: the store charged the first turn's
        // allowance (8) of the 20 allowed and granted the rest (12) as the block, so after
        // that call 11 more pass and the next is refused.
        let mut within = 0;
        while let Counted::Within = reach.call(&scope(&route, "m1", false), 20).await.unwrap() {
            within += 1;
            assert!(within < 100, "the limit never refused");
        }
        assert_eq!(within, 11, "1 + 11 calls after the first turn");
        // No limit: nothing is remembered at all.
        reach.turn_ended(&scope(&route, "m2", true), 0);
        assert!(matches!(
            reach.call(&scope(&route, "m2", true), 0).await.unwrap(),
            Counted::Within
        ));
        assert_eq!(reach.remembered(), 1);
    }
}
