//! Usage rows written in groups: every answered call hands its row (and its reservation's
//! settlement) to one writer task and waits until it is stored (so `/usage` and the admin
//! API read what was answered), and the writer stores whatever has queued meanwhile in one
//! statement (one transaction when reservations settle with it). Under load a hundred calls
//! cost the store one insert, not a hundred turns at its single writer. Reservations made
//! meanwhile are taken together too (on SQLite in one transaction), after the batch's
//! settlements have given back what the answered calls did not use.

use crate::storage::{BudgetHold, NewUsage, UsageStore};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

/// Most rows one statement stores (15 values each, well within SQLite's variable limit).
const MOST: usize = 256;

/// A call's row and, for a call that reserved, its holds and the real cost minus the
/// reservation.
pub struct Stored {
    pub row: NewUsage,
    pub settle: Option<(Vec<BudgetHold>, f64)>,
}

/// What the writer is handed.
enum Job {
    /// A row to store (and the reservation it settles); the sender hears when it is.
    Row(Box<Stored>, oneshot::Sender<Result<(), String>>),
    /// Give a dropped call's reservation back (nobody waits for it).
    Release(Vec<BudgetHold>, f64),
    /// Reserve a call's worst case against its holds; the caller hears whether it fit.
    Reserve(Vec<BudgetHold>, f64, oneshot::Sender<Reserved>),
}

/// A reservation's answer: taken, or the index of the hold whose cap it would pass.
pub type Reserved = Result<Result<(), usize>, String>;

pub struct UsageWriter {
    queue: mpsc::UnboundedSender<Job>,
    /// The writer task: it ends when the queue's last sender goes, and with the writer.
    _task: AbortOnDropHandle<()>,
}

impl UsageWriter {
    /// Start the writer task (on the current Tokio runtime).
    pub fn start(store: Arc<dyn UsageStore>) -> Self {
        let (queue, mut jobs) = mpsc::unbounded_channel::<Job>();
        let task = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MOST);
            while jobs.recv_many(&mut batch, MOST).await > 0 {
                let mut values = Vec::with_capacity(batch.len());
                let mut settles = Vec::new();
                let mut waiting = Vec::with_capacity(batch.len());
                let mut reserves = Vec::new();
                let mut reserving = Vec::new();
                for job in batch.drain(..) {
                    match job {
                        Job::Row(done, stored) => {
                            let Stored { row, settle } = *done;
                            values.push(row);
                            settles.extend(settle);
                            waiting.push(stored);
                        }
                        Job::Release(holds, amount) => {
                            if let Err(e) = store.budget_settle(&holds, -amount).await {
                                tracing::warn!(error = %e, "could not release a dropped call's reservation");
                            }
                        }
                        Job::Reserve(holds, amount, answer) => {
                            reserves.push((holds, amount));
                            reserving.push(answer);
                        }
                    }
                }
                if !values.is_empty() {
                    let result = store
                        .usage_record(&values, &settles)
                        .await
                        .map_err(|e| e.to_string());
                    for stored in waiting {
                        let _ = stored.send(result.clone());
                    }
                }
                if !reserves.is_empty() {
                    match store.budget_reserve_each(&reserves).await {
                        Ok(answers) => {
                            for (answer, taken) in reserving.into_iter().zip(answers) {
                                let _ = answer.send(Ok(taken));
                            }
                        }
                        Err(e) => {
                            let e = e.to_string();
                            for answer in reserving {
                                let _ = answer.send(Err(e.clone()));
                            }
                        }
                    }
                }
            }
        });
        UsageWriter {
            queue,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// Store a call's row and settle its reservation (with the others queued now, in one
    /// transaction); returns once it is stored.
    pub async fn record(&self, call: Stored) -> Result<(), String> {
        let (stored, done) = oneshot::channel();
        self.queue
            .send(Job::Row(Box::new(call), stored))
            .map_err(|_| "the usage writer has stopped".to_string())?;
        done.await
            .unwrap_or_else(|_| Err("the usage writer has stopped".into()))
    }

    /// Reserve `amount` against every hold, all or none (with the others asked for now);
    /// returns once it is taken or refused.
    pub async fn reserve(&self, holds: Vec<BudgetHold>, amount: f64) -> Reserved {
        let (answer, reserved) = oneshot::channel();
        self.queue
            .send(Job::Reserve(holds, amount, answer))
            .map_err(|_| "the usage writer has stopped".to_string())?;
        reserved
            .await
            .unwrap_or_else(|_| Err("the usage writer has stopped".into()))
    }

    /// Give a reservation back without waiting (a call dropped before it ended).
    pub fn release(&self, holds: Vec<BudgetHold>, amount: f64) {
        if self.queue.send(Job::Release(holds, amount)).is_err() {
            tracing::warn!("the usage writer has stopped: a reservation stays held");
        }
    }
}
