//! Wakes a channel's delivery worker when new bot messages were committed.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Notify, broadcast};

#[derive(Clone)]
pub struct OutboxNotifier {
    by_channel: Arc<HashMap<String, Arc<Notify>>>,
    /// Channel names with new messages, for readers other than the worker (event streams).
    observers: broadcast::Sender<String>,
}

impl OutboxNotifier {
    pub fn new<'a>(channels: impl IntoIterator<Item = &'a str>) -> Self {
        OutboxNotifier {
            by_channel: Arc::new(
                channels
                    .into_iter()
                    .map(|c| (c.to_string(), Arc::new(Notify::new())))
                    .collect(),
            ),
            observers: broadcast::channel(256).0,
        }
    }

    /// Hear about every kick (a hint to re-read the outbox).
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.observers.subscribe()
    }

    /// Wake the worker of `channel` (a no-op for channels without a worker).
    pub fn kick(&self, channel: &str) {
        if let Some(notify) = self.by_channel.get(channel) {
            notify.notify_one();
        }
        if self.observers.receiver_count() > 0 {
            let _ = self.observers.send(channel.to_string());
        }
    }

    pub(super) fn handle(&self, channel: &str) -> Arc<Notify> {
        self.by_channel
            .get(channel)
            .cloned()
            .unwrap_or_else(|| Arc::new(Notify::new()))
    }
}
