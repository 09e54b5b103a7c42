//! Wakes a channel's delivery worker when new bot messages were committed.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Notify, broadcast};

#[derive(Clone)]
pub struct OutboxNotifier {
    by_channel: Arc<HashMap<String, Arc<Notify>>>,
    /// Channel names with new messages, for readers other than the worker (event streams).
    observers: broadcast::Sender<String>,
    /// Other processes on the same database (PostgreSQL): they deliver or stream too.
    remote: Option<crate::signals::Signals>,
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
            remote: None,
        }
    }

    /// Also tell other processes about every kick.
    pub fn with_remote(mut self, signals: crate::signals::Signals) -> Self {
        self.remote = Some(signals);
        self
    }

    /// Hear about every kick (a hint to re-read the outbox).
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.observers.subscribe()
    }

    /// Wake the worker of `channel` (a no-op for channels without a worker), here and in
    /// the other processes.
    pub fn kick(&self, channel: &str) {
        if let Some(remote) = &self.remote {
            remote.send(crate::signals::Signal::Outbox {
                channel: channel.to_string(),
            });
        }
        self.kick_here(channel);
    }

    /// Wake this process's worker and readers only (a kick heard from another process).
    pub fn kick_here(&self, channel: &str) {
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
