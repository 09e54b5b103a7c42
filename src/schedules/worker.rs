//! The scheduler: one task per process that fires due jobs. A due run is journalled as the
//! job's turn in the same transaction that moves the job's `next_run` on (a compare-and-set
//! on the due time), so a due time fires exactly once, across restarts and with several
//! processes on one database; the entry then goes to the lanes like any message. A run
//! found late by more than `missed_after_secs` (the service was down) follows the job's
//! policy: `run_once` fires it once now, `skip` only moves it on.

use super::ScheduleHandle;
use crate::storage::{Job, JournalEntry, MissedPolicy, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest the scheduler sleeps without looking (jobs added by another process).
const MAX_SLEEP: Duration = Duration::from_secs(30);

pub struct Scheduler {
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

    async fn fire(&self, job: &Job, now: i64) {
        let Some(due) = job.next_run else { return };
        let late = now - due > self.handle.config.missed_after_secs as i64 * 1000;
        let run = !late || job.missed == MissedPolicy::RunOnce;
        // The next run after now: missed occurrences in between are not run one by one.
        let next = super::next_run(job, due.max(now));
        let session = super::session_of(job);
        let message = run.then(|| super::turn_message(job, due));
        let turn = message.as_ref().map(|m| (m, session.as_str()));
        match self.store.job_advance(&job.id, due, next, turn, now).await {
            Ok((true, entry)) => {
                let outcome = match (run, late) {
                    (false, _) => "skipped",
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
            Ok((false, _)) => {} // another process fired it
            Err(e) => tracing::warn!(job = %job.id, error = %e, "could not fire a job"),
        }
    }
}
