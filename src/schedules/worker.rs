//! The scheduler: one task per process that fires due jobs. A due run is journalled as the
//! job's turn in the same transaction that moves the job's `next_run` on (a compare-and-set
//! on the due time), so a due time fires exactly once, across restarts and with several
//! processes on one database; the entry then goes to the lanes like any message. A run
//! found late by more than `missed_after_secs` (the service was down) follows the job's
//! policy: `run_once` fires it once now, `skip` only moves it on.
//!
//! Recurring jobs cannot amplify: a run while the job's previous turn is still waiting or
//! running is skipped (moved on, no turn), and so is every run beyond
//! `schedules.max_turns_per_minute` job turns in this process's last minute. A cancelled
//! job's queued turns are dropped by the turn handler (`lanes/handler.rs`).

use super::ScheduleHandle;
use crate::storage::{Job, JournalEntry, MissedPolicy, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest the scheduler sleeps without looking (jobs added by another process).
const MAX_SLEEP: Duration = Duration::from_secs(30);

pub struct Scheduler {
    /// When this process started its recent job turns (the last minute's).
    recent: std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>,
    store: Arc<dyn Store>,
    handle: ScheduleHandle,
    /// The lanes, through the composition root.
    turns: mpsc::UnboundedSender<JournalEntry>,
}

impl Scheduler {
    pub fn new(
        store: Arc<dyn Store>,
        handle: ScheduleHandle,
        turns: mpsc::UnboundedSender<JournalEntry>,
    ) -> Self {
        Scheduler {
            recent: Default::default(),
            store,
            handle,
            turns,
        }
    }

    /// Fire due jobs until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        loop {
            let now = crate::clock::now_ms();
            match self.store.jobs_due(now, 100).await {
                Ok(jobs) => {
                    for job in jobs {
                        self.fire(&job, now).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not read due jobs"),
            }
            let next = self.store.jobs_next_due().await.ok().flatten();
            let wait = next.map_or(MAX_SLEEP, |at| {
                Duration::from_millis((at - crate::clock::now_ms()).max(0) as u64).min(MAX_SLEEP)
            });
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.handle.woken() => {}
            }
        }
    }

    /// Takes a slot of `max_turns_per_minute` for a job turn about to start; false when the
    /// last minute's are all taken.
    fn within_rate(&self) -> bool {
        let cap = self.handle.config.max_turns_per_minute as usize;
        let mut recent = self.recent.lock().expect("rate lock");
        let now = std::time::Instant::now();
        while recent
            .front()
            .is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= cap {
            return false;
        }
        recent.push_back(now);
        true
    }

    async fn fire(&self, job: &Job, now: i64) {
        let Some(due) = job.next_run else { return };
        let late = now - due > (self.handle.config.missed_after_secs as i64).saturating_mul(1000);
        let mut run = !late || job.missed == MissedPolicy::RunOnce;
        // The next run after now: missed occurrences in between are not run one by one.
        let next = super::next_run(job, due.max(now));
        let session = super::session_of(job);
        let mut held = None;
        if run {
            match self.store.job_turn_pending(&job.id, &session).await {
                Ok(false) => {}
                Ok(true) => held = Some("skipped_overlap"),
                Err(e) => {
                    tracing::warn!(job = %job.id, error = %e, "could not check a job's last turn");
                    return;
                }
            }
        }
        if run && held.is_none() && !self.within_rate() {
            held = Some("skipped_rate");
        }
        if let Some(why) = held {
            tracing::warn!(job = %job.id, why, "a job run is skipped");
            run = false;
        }
        let message = run.then(|| super::turn_message(job, due));
        let turn = message.as_ref().map(|m| (m, session.as_str()));
        match self.store.job_advance(&job.id, due, next, turn, now).await {
            Ok((true, entry)) => {
                let outcome = match (run, late) {
                    (false, _) => held.unwrap_or("skipped"),
                    (true, true) => "missed_run_once",
                    (true, false) => "fired",
                };
                crate::metrics::job_run(outcome);
                tracing::info!(job = %job.id, outcome, late_ms = now - due, "scheduled job");
                if let Some(entry) = entry
                    && self.turns.send(entry).is_err()
                {
                    tracing::debug!("lanes closed; the job's turn runs after restart");
                }
            }
            Ok((false, _)) => {
                // Another process fired it: the slot this run took is given back.
                if run {
                    self.recent.lock().expect("rate lock").pop_back();
                }
            }
            Err(e) => tracing::warn!(job = %job.id, error = %e, "could not fire a job"),
        }
    }
}
