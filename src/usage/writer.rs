//! Usage rows written in groups: every answered call hands its row to one writer task and
//! waits until it is stored (so `/usage` and the admin API read what was answered), and the
//! writer stores whatever has queued meanwhile in one statement. Under load a hundred calls
//! cost the store one insert, not a hundred turns at its single writer.

use crate::storage::{NewUsage, UsageStore};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

/// Most rows one statement stores (15 values each, well within SQLite's variable limit).
const MOST: usize = 256;

struct Pending {
    row: NewUsage,
    stored: oneshot::Sender<Result<(), String>>,
}

pub struct UsageWriter {
    queue: mpsc::UnboundedSender<Pending>,
    /// The writer task: it ends when the queue's last sender goes, and with the writer.
    _task: AbortOnDropHandle<()>,
}

impl UsageWriter {
    /// Start the writer task (on the current Tokio runtime).
    pub fn start(store: Arc<dyn UsageStore>) -> Self {
        let (queue, mut rows) = mpsc::unbounded_channel::<Pending>();
        let task = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MOST);
            while rows.recv_many(&mut batch, MOST).await > 0 {
                let (values, waiting): (Vec<NewUsage>, Vec<_>) =
                    batch.drain(..).map(|p| (p.row, p.stored)).unzip();
                let result = store
                    .usage_record(&values, None)
                    .await
                    .map_err(|e| e.to_string());
                for stored in waiting {
                    let _ = stored.send(result.clone());
                }
            }
        });
        UsageWriter {
            queue,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// Store `row` (with the others queued now); returns once it is stored.
    pub async fn record(&self, row: NewUsage) -> Result<(), String> {
        let (stored, done) = oneshot::channel();
        self.queue
            .send(Pending { row, stored })
            .map_err(|_| "the usage writer has stopped".to_string())?;
        done.await
            .unwrap_or_else(|_| Err("the usage writer has stopped".into()))
    }
}
