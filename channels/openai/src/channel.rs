//! The `api` channel: nothing to push (a request reads its reply), and streamed text handed
//! to the request waiting for it in this process.

use async_trait::async_trait;
use ferroclaw_channel_core::{Channel, ChatRoute, Delivered, DeliveryError, OutboundMessage};
use std::collections::HashMap;
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

pub struct ApiChannel {
    streams: Arc<Streams>,
}

impl ApiChannel {
    pub(crate) fn new(streams: Arc<Streams>) -> Self {
        ApiChannel { streams }
    }
}

#[async_trait]
impl Channel for ApiChannel {
    fn name(&self) -> &str {
        crate::CHANNEL
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
