//! Session lanes: in order within a session, concurrent across sessions (SPEC section 3).
//!
//! A lane exists only while its session has work: the first message for an idle session
//! spawns a lane task, later messages queue behind it, and the lane removes itself when its
//! queue is empty, so idle sessions hold no memory. Every lane task is owned by the
//! [`TaskTracker`] and stops on the [`CancellationToken`]; a turn interrupted that way leaves
//! its journal entry pending, to be answered after restart. `/stop` is different: it ends the
//! running turn through its own token and the turn commits what it finished.

use crate::storage::JournalEntry;
use crate::turns::{MAX_TURN_ATTEMPTS, TurnHandler};
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

struct Inner {
    lanes: Mutex<HashMap<String, Lane>>,
    handler: Arc<TurnHandler>,
    tracker: TaskTracker,
    /// Hard stop: abort running turns without committing them.
    cancel: CancellationToken,
    /// Soft stop: finish the running turn, start no new one.
    closing: AtomicBool,
    active: watch::Sender<usize>,
}

impl Lanes {
    pub fn new(handler: Arc<TurnHandler>, cancel: CancellationToken) -> Self {
        Lanes {
            inner: Arc::new(Inner {
                lanes: Mutex::new(HashMap::new()),
                handler,
                tracker: TaskTracker::new(),
                cancel,
                closing: AtomicBool::new(false),
                active: watch::channel(0).0,
            }),
        }
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
                        entry
                    }
                    None => {
                        // Closing: what is left stays pending in the journal.
                        crate::metrics::lane_depth(-(lane.queue.len() as f64));
                        lanes.remove(&key);
                        break;
                    }
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    self.lanes.lock().expect("lanes lock").remove(&key);
                    break;
                }
                () = self.handle_with_retry(&next, &stop) => {}
            }
            if let Some(lane) = self.lanes.lock().expect("lanes lock").get_mut(&key) {
                lane.running = None;
            }
        }
        self.active.send_modify(|n| *n -= 1);
    }

    async fn handle_with_retry(&self, entry: &JournalEntry, stop: &CancellationToken) {
        // A turn found unfinished on start is counted before the model is called: a message
        // whose turn kills the process (an abort no unwind can catch) is given up after a few
        // restarts, not replayed into the same crash forever.
        let mut entry = entry.clone();
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
        for attempt in 1..=3u32 {
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
                    tracing::warn!(session = %entry.session_key, journal_id = entry.id, attempt, error = %err, "turn failed");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
        tracing::error!(session = %entry.session_key, journal_id = entry.id, "turn left pending after 3 attempts; it is retried on restart");
    }
}
