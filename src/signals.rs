//! Signals between `serve` processes on one PostgreSQL database (`LISTEN/NOTIFY` on the
//! channel `ferroclaw`): `/stop` reaches the process running the session's turn and its
//! subagents, `/subagents kill` and a run's inbox wake-up (a steer, a child's outcome) the process running the child, a commit's outbox wake-up reaches the process that delivers and every
//! process serving an event stream, and an approval's decision the process whose call waits. Each process hears its own notifications too and
//! ignores them by origin. SQLite (one process) has none of this.
//!
//! Knows the database URL and the signal shapes; the composition root decides what a
//! signal does (see `App`).

use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgPoolOptions};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const CHANNEL: &str = "ferroclaw";

/// What one process tells the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Signal {
    /// `/stop` for a session: end its running turn and kill its subagents.
    Stop { session: String },
    /// `/subagents kill` (or the tool) for children running in another process.
    Kill { session: String, target: String },
    /// Something was put in run `run_id`'s inbox (a steer, or its child's outcome): the
    /// process running it wakes it (a steer also interrupts its step).
    Mail { run_id: String, steer: bool },
    /// New bot messages were committed for a channel.
    Outbox { channel: String },
    /// Approval request `id` was decided (or withdrawn): the process whose call waits for it
    /// reads it at once instead of at its next poll.
    Approval { id: String },
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    origin: String,
    #[serde(flatten)]
    signal: Signal,
}

/// The sending side: queues signals for the notifying task (never blocks a caller).
#[derive(Clone)]
pub struct Signals {
    tx: mpsc::UnboundedSender<Signal>,
}

impl Signals {
    pub fn send(&self, signal: Signal) {
        let _ = self.tx.send(signal);
    }
}

/// Start signalling on `url`: the sender, and the task that notifies and listens (calling
/// `heard` for every signal of another process) until `cancel`.
pub fn start(
    url: &str,
    cancel: CancellationToken,
    heard: impl Fn(Signal) + Send + Sync + 'static,
) -> (
    Signals,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let origin = uuid::Uuid::new_v4().simple().to_string();
    let url = url.to_string();
    (Signals { tx }, run(url, origin, rx, cancel, heard))
}

/// The most signals one NOTIFY statement carries.
const MAX_BATCH: usize = 64;

/// `first` and whatever else is queued already (at most [`MAX_BATCH`]), each once, in order,
/// as notification payloads: under load a commit's outbox wake-up is queued many times
/// while one NOTIFY is under way, and one statement then carries them all.
fn batch(first: Signal, queued: &mut mpsc::UnboundedReceiver<Signal>, origin: &str) -> Vec<String> {
    let mut signals = vec![first];
    while signals.len() < MAX_BATCH {
        let Ok(signal) = queued.try_recv() else { break };
        if !signals.contains(&signal) {
            signals.push(signal);
        }
    }
    signals
        .into_iter()
        .map(|signal| {
            serde_json::to_string(&Envelope {
                origin: origin.to_string(),
                signal,
            })
            .expect("plain data serialises")
        })
        .collect()
}

async fn run(
    url: String,
    origin: String,
    mut outgoing: mpsc::UnboundedReceiver<Signal>,
    cancel: CancellationToken,
    heard: impl Fn(Signal) + Send + Sync + 'static,
) {
    let pool = match PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&url)
    {
        Ok(pool) => pool,
        Err(err) => {
            tracing::error!(error = %err, "signals: bad database URL; other processes will not hear /stop or wake-ups");
            return;
        }
    };
    loop {
        let mut listener = match PgListener::connect(&url).await {
            Ok(l) => l,
            Err(err) => {
                tracing::warn!(error = %err, "signals: cannot listen; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        if let Err(err) = listener.listen(CHANNEL).await {
            tracing::warn!(error = %err, "signals: LISTEN failed; retrying");
            continue;
        }
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                next = outgoing.recv() => {
                    let Some(signal) = next else { return };
                    let payloads = batch(signal, &mut outgoing, &origin);
                    if let Err(err) = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                        .bind(CHANNEL)
                        .bind(payloads)
                        .execute(&pool)
                        .await
                    {
                        tracing::warn!(error = %err, "signals: NOTIFY failed");
                    }
                }
                received = listener.recv() => match received {
                    Ok(note) => {
                        if let Ok(envelope) = serde_json::from_str::<Envelope>(note.payload())
                            && envelope.origin != origin
                        {
                            heard(envelope.signal);
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "signals: connection lost; listening again");
                        break;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_signals_go_in_one_batch_each_once_in_order() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let outbox = |channel: &str| Signal::Outbox {
            channel: channel.to_string(),
        };
        for signal in [outbox("telegram"), outbox("webhook"), outbox("telegram")] {
            tx.send(signal).unwrap();
        }
        for n in 0..MAX_BATCH + 5 {
            tx.send(Signal::Approval { id: n.to_string() }).unwrap();
        }
        let payloads = batch(outbox("webhook"), &mut rx, "me");
        assert_eq!(payloads.len(), MAX_BATCH);
        let first: Vec<Envelope> = payloads[..3]
            .iter()
            .map(|p| serde_json::from_str(p).unwrap())
            .collect();
        assert_eq!(
            first.iter().map(|e| e.signal.clone()).collect::<Vec<_>>(),
            [
                outbox("webhook"),
                outbox("telegram"),
                Signal::Approval { id: "0".into() }
            ]
        );
        assert!(first.iter().all(|e| e.origin == "me"));
        // What did not fit stays queued for the next statement.
        let rest = batch(rx.try_recv().unwrap(), &mut rx, "me");
        assert_eq!(rest.len(), 7);
    }
}
