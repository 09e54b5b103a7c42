//! Wakes a channel's delivery worker when new bot messages were committed.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct OutboxNotifier {
    by_channel: Arc<HashMap<String, Arc<Notify>>>,
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
        }
    }

    /// Wake the worker of `channel` (a no-op for channels without a worker).
    pub fn kick(&self, channel: &str) {
        if let Some(notify) = self.by_channel.get(channel) {
            notify.notify_one();
        }
    }

    pub(super) fn handle(&self, channel: &str) -> Arc<Notify> {
        self.by_channel
            .get(channel)
            .cloned()
            .unwrap_or_else(|| Arc::new(Notify::new()))
    }
}
