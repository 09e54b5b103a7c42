//! Session lanes: in order within a session, concurrent across sessions (SPEC section 3).
//!
//! A lane exists only while its session has work: the first message for an idle session
//! spawns a lane task, later messages queue behind it, and the lane removes itself when its
//! queue is empty, so idle sessions hold no memory. Every lane task is owned by the
//! [`TaskTracker`] and stops on the [`CancellationToken`]; a turn interrupted that way leaves
//! its journal entry pending, to be answered after restart. `/stop` is different: it ends the
//! running turn through its own token and the turn commits what it finished.

mod answered;
mod handler;

pub use answered::TurnWatch;
pub use handler::{MAX_TURN_ATTEMPTS, TurnHandler};

use crate::storage::{JournalEntry, LaneClaim, Store};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Clone)]
pub struct Lanes {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Lane {
    queue: VecDeque<JournalEntry>,
    /// Stops the running turn (`/stop`).
    running: Option<CancellationToken>,
}

/// How a leased lane's work on the journal ended.
enum Worked {
    /// Nothing was pending: the lease was given up with that read.
    Released,
    /// Stopped with the lease still held: shutting down, the journal unreadable, or an entry
    /// still pending after its attempts. The lane is dropped; a sweep takes the session later.
    Held,
}

/// Drop a finished lane. A table a burst grew (thousands of sessions at once) is not kept
/// at its size once the burst is over.
fn forget(lanes: &mut HashMap<String, Lane>, key: &str) {
    lanes.remove(key);
    crate::heap::shrink_sparse(lanes, 64);
}

struct Inner {
    lanes: Mutex<HashMap<String, Lane>>,
    handler: Arc<TurnHandler>,
    tracker: TaskTracker,
    /// Hard stop: abort running turns without committing them.
    cancel: CancellationToken,
    /// Soft stop: finish the running turn, start no new one.
    closing: AtomicBool,
    active: watch::Sender<usize>,
    /// Several processes on one database: sessions are worked under a lease.
    leases: Option<Leases>,
    /// Ends the lease sweep (shutdown).
    sweep_stop: CancellationToken,
    /// Whether an entry taken over from another process runs (access, `/stop`).
    gate: Arc<dyn EntryGate>,
}

/// Decides whether a journal entry runs as a turn (access, `/stop`), answering it when not.
/// Entries a lane takes from the journal without having been dispatched here (another
/// process journalled them, or a dead one) go through it first.
#[async_trait::async_trait]
pub trait EntryGate: Send + Sync {
    async fn admit(
        &self,
        entry: &JournalEntry,
        lanes: &Lanes,
    ) -> Result<bool, crate::storage::StoreError>;
}

/// Session leases (PostgreSQL shared by several processes): a lane works its session only
/// while it holds the session's lease, taking entries from the journal in order (whichever
/// process journalled them); a sweep claims sessions with pending entries and no live lease
/// (a dead process's, or ones nobody claimed).
pub struct Leases {
    pub store: Arc<dyn Store>,
    /// This process.
    pub owner: String,
    pub ttl: Duration,
}

impl Lanes {
    pub fn new(
        handler: Arc<TurnHandler>,
        cancel: CancellationToken,
        leases: Option<Leases>,
        gate: Arc<dyn EntryGate>,
    ) -> Self {
        let lanes = Lanes {
            inner: Arc::new(Inner {
                lanes: Mutex::new(HashMap::new()),
                handler,
                tracker: TaskTracker::new(),
                cancel,
                closing: AtomicBool::new(false),
                active: watch::channel(0).0,
                leases,
                sweep_stop: CancellationToken::new(),
                gate,
            }),
        };
        if lanes.inner.leases.is_some() {
            let inner = lanes.inner.clone();
            lanes
                .inner
                .tracker
                .spawn(async move { inner.sweep().await });
        }
        lanes
    }

    /// Start a lane for a session with no local entry (leased mode: its work is in the
    /// journal).
    fn wake(&self, key: String) {
        let mut lanes = self.inner.lanes.lock().expect("lanes lock");
        if lanes.contains_key(&key) || self.inner.closing.load(Ordering::Acquire) {
            return;
        }
        lanes.insert(key.clone(), Lane::default());
        self.inner.active.send_modify(|n| *n += 1);
        let inner = self.inner.clone();
        self.inner
            .tracker
            .spawn(async move { inner.run_lane(key).await });
    }

    /// Queue a journalled message on its session's lane.
    pub fn submit(&self, entry: JournalEntry) {
        if self.inner.closing.load(Ordering::Acquire) {
            return; // it stays pending in the journal and is answered after restart
        }
        let key = entry.session_key.clone();
        crate::metrics::lane_depth(1.0);
        let mut lanes = self.inner.lanes.lock().expect("lanes lock");
        if let Some(lane) = lanes.get_mut(&key) {
            lane.queue.push_back(entry);
            return;
        }
        lanes.insert(
            key.clone(),
            Lane {
                queue: VecDeque::from([entry]),
                running: None,
            },
        );
        self.inner.active.send_modify(|n| *n += 1);
        let inner = self.inner.clone();
        self.inner
            .tracker
            .spawn(async move { inner.run_lane(key).await });
    }

    /// End the running turn of `session_key` (`/stop`). True when a turn was running.
    pub fn stop(&self, session_key: &str) -> bool {
        let lanes = self.inner.lanes.lock().expect("lanes lock");
        match lanes.get(session_key).and_then(|l| l.running.as_ref()) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Sessions with a turn running or queued now.
    pub fn busy(&self) -> Vec<String> {
        let lanes = self.inner.lanes.lock().expect("lanes lock");
        let mut keys: Vec<String> = lanes.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Resolve when no lane has work.
    pub async fn wait_idle(&self) {
        let mut rx = self.inner.active.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Stop taking work, let running turns finish for up to `grace`, then abort the rest.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.closing.store(true, Ordering::Release);
        self.inner.sweep_stop.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "turns still running after the grace period; they will be redone after restart"
            );
            self.inner.cancel.cancel();
            self.inner.tracker.wait().await;
        }
    }
}

impl Inner {
    async fn run_lane(self: Arc<Self>, key: String) {
        if self.leases.is_some() {
            // Boxed: the leased lane's future is the larger (the journal's next entry and
            // the lease held beside the turn), and without it every local lane's task was
            // sized for it: 8.0 KB a turn in flight where 6.6 do (10,000 in flight: 14 MB).
            Box::pin(self.run_leased_lane(key)).await;
        } else {
            self.run_local_lane(key).await;
        }
        self.active.send_modify(|n| *n -= 1);
    }

    /// Every quarter lease: claim sessions with pending entries and no live lease.
    async fn sweep(self: Arc<Self>) {
        let Some(leases) = &self.leases else { return };
        let every = (leases.ttl / 4).max(Duration::from_millis(250));
        let lanes = Lanes {
            inner: self.clone(),
        };
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.sweep_stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            match leases
                .store
                .journal_unleased(crate::clock::now_ms(), 100)
                .await
            {
                Ok(keys) => {
                    for key in keys {
                        lanes.wake(key);
                    }
                }
                Err(err) => tracing::warn!(error = %err, "lease sweep: journal unreadable"),
            }
        }
    }

    /// Leased mode: hold the session's lease (renewed while working), run its pending
    /// journal entries in order, release it; take again what was queued here meanwhile.
    async fn run_leased_lane(self: &Arc<Self>, key: String) {
        let leases = self.leases.as_ref().expect("leased mode");
        let ttl_ms = leases.ttl.as_millis() as i64;
        loop {
            let now = crate::clock::now_ms();
            let (first, fence) = match leases
                .store
                .lease_claim_next(&key, &leases.owner, now, now + ttl_ms)
                .await
            {
                Ok(LaneClaim::Held { next, fence }) => (next.map(|entry| *entry), fence),
                // Another process works it (from the journal) or the sweep retries.
                Ok(LaneClaim::NotHeld) => {
                    self.drop_lane(&key);
                    return;
                }
                Err(err) => {
                    tracing::warn!(session = %key, error = %err, "could not claim a session lease");
                    self.drop_lane(&key);
                    return;
                }
            };
            let beat = CancellationToken::new();
            let heartbeat = {
                let (beat, store, owner) =
                    (beat.clone(), leases.store.clone(), leases.owner.clone());
                let (key, ttl) = (key.clone(), leases.ttl);
                self.tracker.spawn(async move {
                    loop {
                        tokio::select! {
                            _ = beat.cancelled() => return,
                            _ = tokio::time::sleep(ttl / 3) => {}
                        }
                        let until = crate::clock::now_ms() + ttl.as_millis() as i64;
                        if let Err(err) = store.lease_renew(std::slice::from_ref(&key), &owner, until).await {
                            tracing::warn!(session = %key, error = %err, "could not renew a session lease");
                        }
                    }
                })
            };
            let worked = self.work_journal(&key, leases, first, fence).await;
            beat.cancel();
            let _ = heartbeat.await;
            let Worked::Released = worked else {
                if let Err(err) = leases.store.lease_release(&key, &leases.owner).await {
                    tracing::warn!(session = %key, error = %err, "could not release a session lease");
                }
                self.drop_lane(&key);
                return;
            };
            // Released with nothing pending in the journal. What this process journalled
            // meanwhile is in the local queue; another process's entry arriving later is
            // claimed by its wake-up or the sweep.
            let mut lanes = self.lanes.lock().expect("lanes lock");
            match lanes.get(&key) {
                Some(lane) if !lane.queue.is_empty() => continue,
                _ => {
                    forget(&mut lanes, &key);
                    return;
                }
            }
        }
    }

    /// Run the session's pending entries in journal order while the lease is held, starting
    /// with `first` (read with the claim). Each step reads the next pending entry and gives
    /// the lease up in the same statement when there is none. `fence`: the journal's highest
    /// id read after the lease was claimed (see [`LaneClaim::Held`]).
    async fn work_journal(
        self: &Arc<Self>,
        key: &str,
        leases: &Leases,
        first: Option<JournalEntry>,
        fence: i64,
    ) -> Worked {
        let mut found = first;
        // The entry run last: read again as the next one, it is still pending after its
        // attempts (left for a later sweep).
        let mut ran: Option<i64> = None;
        loop {
            if self.cancel.is_cancelled() || self.closing.load(Ordering::Acquire) {
                return Worked::Held;
            }
            let next = match found.take() {
                Some(next) => next,
                None => match leases.store.lease_next_or_release(key, &leases.owner).await {
                    Ok(Some(next)) => next,
                    Ok(None) => return Worked::Released,
                    Err(err) => {
                        tracing::warn!(session = %key, error = %err, "journal unreadable; the session is retried later");
                        return Worked::Held;
                    }
                },
            };
            if ran == Some(next.id) {
                return Worked::Held;
            }
            ran = Some(next.id);
            let stop = CancellationToken::new();
            let local = {
                let mut lanes = self.lanes.lock().expect("lanes lock");
                let lane = lanes.entry(key.to_string()).or_default();
                lane.running = Some(stop.clone());
                let at = lane.queue.iter().position(|q| q.id == next.id);
                at.and_then(|i| lane.queue.remove(i))
            };
            if local.is_some() {
                crate::metrics::lane_depth(-1.0);
            }
            // Not submitted here: journalled by another process or left by a dead one, so it
            // has not passed this process's gate, and it may have run before — unless it came
            // into the journal after this lease was taken (above the fence): then no one has
            // started it, and it runs as a first attempt (no attempt counted, nothing to redo).
            let taken_over = local.is_none();
            let fresh = next.id > fence;
            let entry = local.unwrap_or(JournalEntry {
                redo: !fresh,
                ..next
            });
            if taken_over {
                let lanes = Lanes {
                    inner: self.clone(),
                };
                match self.gate.admit(&entry, &lanes).await {
                    Ok(true) => {}
                    Ok(false) => continue, // answered by the gate (refused, paired, /stop)
                    Err(err) => {
                        tracing::warn!(journal_id = entry.id, error = %err, "could not check a taken-over entry");
                        return Worked::Held;
                    }
                }
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Worked::Held,
                () = self.handle_with_retry(entry, &stop) => {}
            }
            if let Some(lane) = self.lanes.lock().expect("lanes lock").get_mut(key) {
                lane.running = None;
            }
        }
    }

    /// Forget a lane (its entries stay pending in the journal).
    fn drop_lane(&self, key: &str) {
        if let Some(lane) = self.lanes.lock().expect("lanes lock").remove(key) {
            crate::metrics::lane_depth(-(lane.queue.len() as f64));
        }
    }

    async fn run_local_lane(self: &Arc<Self>, key: String) {
        loop {
            let stop = CancellationToken::new();
            let next = {
                let mut lanes = self.lanes.lock().expect("lanes lock");
                let closing = self.closing.load(Ordering::Acquire);
                let lane = lanes
                    .get_mut(&key)
                    .expect("a lane exists while its task runs");
                match if closing {
                    None
                } else {
                    lane.queue.pop_front()
                } {
                    Some(entry) => {
                        crate::metrics::lane_depth(-1.0);
                        lane.running = Some(stop.clone());
                        // Mostly the one message: the emptied queue's buffer is let go, not
                        // held beside the turn (10,000 in flight: 3 MB).
                        if lane.queue.is_empty() {
                            lane.queue = VecDeque::new();
                        }
                        entry
                    }
                    None => {
                        // Closing: what is left stays pending in the journal.
                        crate::metrics::lane_depth(-(lane.queue.len() as f64));
                        forget(&mut lanes, &key);
                        break;
                    }
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    forget(&mut self.lanes.lock().expect("lanes lock"), &key);
                    break;
                }
                () = self.handle_with_retry(next, &stop) => {}
            }
            if let Some(lane) = self.lanes.lock().expect("lanes lock").get_mut(&key) {
                lane.running = None;
            }
        }
    }

    /// Taken by value: the lane's task holds one copy of the entry while its turn runs.
    async fn handle_with_retry(&self, mut entry: JournalEntry, stop: &CancellationToken) {
        // A turn found unfinished on start is counted before the model is called: a message
        // whose turn kills the process (an abort no unwind can catch) is given up after a few
        // restarts, not replayed into the same crash forever.
        if entry.redo {
            match self.handler.begin_attempt(&entry).await {
                Ok(redone) if redone >= MAX_TURN_ATTEMPTS => {
                    tracing::error!(session = %entry.session_key, journal_id = entry.id, redone, "turn never finished in earlier runs; giving it up");
                    if let Err(err) = self.handler.answer_given_up(&entry).await {
                        tracing::error!(journal_id = entry.id, error = %err, "could not record the given-up turn");
                    }
                    return;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(journal_id = entry.id, error = %err, "could not count the turn attempt")
                }
            }
        }
        for attempt in 1u32.. {
            if attempt > 1 {
                entry.redo = true; // an in-process retry is a redo too
            }
            // A bug that panics in one turn must neither kill the service nor wedge the lane
            // (and must not repeat on every restart): the message is answered with an error.
            let turn = std::panic::AssertUnwindSafe(self.handler.handle(&entry, stop));
            let Ok(result) = futures::FutureExt::catch_unwind(turn).await else {
                tracing::error!(session = %entry.session_key, journal_id = entry.id, "turn panicked; answering with an error");
                if let Err(err) = self.handler.answer_failed(&entry).await {
                    tracing::error!(journal_id = entry.id, error = %err, "could not record the failed turn");
                }
                return;
            };
            match result {
                Ok(()) => return,
                Err(err) => {
                    // The store refused (a full disk, a lost database): the entry stays
                    // first in its lane and is tried again until the store takes it, so an
                    // acknowledged message is answered within seconds of space returning,
                    // not after a restart. The lane's task is cancelled on shutdown.
                    if attempt == 3 {
                        tracing::error!(session = %entry.session_key, journal_id = entry.id, error = %err, "turn still failing; retrying every few seconds until the store takes it");
                    } else if attempt < 3 {
                        tracing::warn!(session = %entry.session_key, journal_id = entry.id, attempt, error = %err, "turn failed");
                    }
                    tokio::time::sleep(retry_delay(attempt)).await;
                }
            }
        }
    }
}

/// The wait before a failed turn's next attempt: 200, 400, 600 ms, then 1, 2, 4, 5, 5… s.
fn retry_delay(attempt: u32) -> Duration {
    if attempt <= 3 {
        Duration::from_millis(200 * u64::from(attempt))
    } else {
        Duration::from_secs(1u64 << (attempt - 4).min(3)).min(Duration::from_secs(5))
    }
}

#[cfg(test)]
mod retry_tests {
    use super::{Lane, forget, retry_delay};
    use std::collections::HashMap;
    use std::time::Duration;

    #[test]
    fn the_lane_table_a_burst_grew_shrinks_as_its_lanes_end() {
        let mut lanes: HashMap<String, Lane> = (0..10_000)
            .map(|n| {
                let lane = Lane {
                    queue: Default::default(),
                    running: None,
                };
                (format!("s{n}"), lane)
            })
            .collect();
        let grown = lanes.capacity();
        for n in 0..10_000 {
            forget(&mut lanes, &format!("s{n}"));
            assert!(!lanes.contains_key(&format!("s{n}")));
        }
        assert!(lanes.is_empty());
        assert!(
            lanes.capacity() <= 64,
            "grown to {grown}, left at {}",
            lanes.capacity()
        );
    }

    #[test]
    fn failed_turns_are_retried_soon_and_then_every_five_seconds() {
        let delays: Vec<u64> = (1..=9).map(|a| retry_delay(a).as_millis() as u64).collect();
        assert_eq!(delays, [200, 400, 600, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(5));
    }
}
