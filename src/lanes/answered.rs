//! Observing the end of turns (a journal entry answered), for webhook `?wait=`.
//! A hint channel only: the journal in the store is the truth, checked after subscribing.

use crate::storage::{JournalState, Store};
use std::time::Duration;
use tokio::sync::broadcast;

#[derive(Clone)]
pub struct TurnWatch {
    tx: broadcast::Sender<i64>,
    /// Also re-read the journal this often (turns another process runs send no hint here).
    poll: Option<Duration>,
}

impl Default for TurnWatch {
    fn default() -> Self {
        TurnWatch {
            tx: broadcast::channel(1024).0,
            poll: None,
        }
    }
}

impl TurnWatch {
    /// A watch that also polls the journal (several processes share the database).
    pub fn polling(every: Duration) -> Self {
        TurnWatch {
            poll: Some(every),
            ..TurnWatch::default()
        }
    }

    /// Announce that journal entry `journal_id` has been answered.
    pub fn answered(&self, journal_id: i64) {
        let _ = self.tx.send(journal_id);
    }

    /// Wait until `journal_id` is answered; false on timeout.
    pub async fn wait(&self, store: &dyn Store, journal_id: i64, timeout: Duration) -> bool {
        let mut rx = self.tx.subscribe();
        let done = async {
            loop {
                if matches!(
                    store.journal_state(journal_id).await,
                    Ok(Some(JournalState::Done))
                ) {
                    return;
                }
                loop {
                    let hint = match self.poll {
                        Some(every) => match tokio::time::timeout(every, rx.recv()).await {
                            Ok(hint) => hint,
                            Err(_) => break, // re-read the journal
                        },
                        None => rx.recv().await,
                    };
                    match hint {
                        Ok(id) if id == journal_id => return,
                        Ok(_) => continue,
                        // Missed some: re-check the journal.
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        };
        tokio::time::timeout(timeout, done).await.is_ok()
    }
}
