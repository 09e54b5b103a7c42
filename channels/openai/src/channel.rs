//! The `api` channel: nothing to push (a request reads its reply), and streamed text handed
//! to the request waiting for it in this process.

use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, ChannelHealth, ChatRoute, Delivered, DeliveryError, OutboundMessage,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Requests streaming right now, by (session, request id).
#[derive(Default)]
pub(crate) struct Streams {
    open: Mutex<HashMap<(String, String), mpsc::UnboundedSender<String>>>,
}

/// A request's stream of text pieces; closed when dropped.
pub(crate) struct OpenStream {
    streams: Arc<Streams>,
    key: (String, String),
    pub(crate) pieces: mpsc::UnboundedReceiver<String>,
}

impl Streams {
    /// Receive the pieces of the reply to request `request_id` of `session`.
    pub(crate) fn open(self: &Arc<Self>, session: &str, request_id: &str) -> OpenStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let key = (session.to_string(), request_id.to_string());
        self.open
            .lock()
            .expect("streams lock")
            .insert(key.clone(), tx);
        OpenStream {
            streams: self.clone(),
            key,
            pieces: rx,
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.streams
            .open
            .lock()
            .expect("streams lock")
            .remove(&self.key);
    }
}

/// Completion requests answered, and how many were refused (4xx) or failed (5xx): what
/// the channel's health shows.
#[derive(Default)]
pub(crate) struct Counts {
    requests: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

impl Counts {
    pub(crate) fn answered(&self, status: u16) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match status {
            400..500 => self.refused.fetch_add(1, Ordering::Relaxed),
            500.. => self.errors.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

pub struct ApiChannel {
    streams: Arc<Streams>,
    counts: Arc<Counts>,
}

impl ApiChannel {
    pub(crate) fn new(streams: Arc<Streams>, counts: Arc<Counts>) -> Self {
        ApiChannel { streams, counts }
    }
}

#[async_trait]
impl Channel for ApiChannel {
    fn name(&self) -> &str {
        crate::CHANNEL
    }

    /// Requests come to us: up while the service serves, with its request counts.
    fn health(&self) -> ChannelHealth {
        let mut health = ChannelHealth::connected(true);
        for (name, count) in [
            ("requests", &self.counts.requests),
            ("requests_refused", &self.counts.refused),
            ("requests_failed", &self.counts.errors),
        ] {
            health
                .figures
                .insert(name.to_string(), count.load(Ordering::Relaxed));
        }
        health
    }

    /// Replies are read by the request that asked (from the message log); nothing is sent.
    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        Ok(Delivered {
            platform_message_id: Some(message.id.to_string()),
        })
    }

    async fn stream_delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        let key = (route.chat_id.clone(), in_reply_to.to_string());
        if let Some(tx) = self.streams.open.lock().expect("streams lock").get(&key) {
            let _ = tx.send(delta.to_string());
        }
    }
}
