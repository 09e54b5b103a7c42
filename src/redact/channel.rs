//! Every channel is wrapped in [`Redacting`] when the service is built: what its `deliver`
//! sends (text, caption, an approval prompt's fields) and what its `stream_delta` shows has
//! passed the leak scan first. The adapters themselves never see a secret to send.

use super::stream::Streams;
use super::{Redactor, Sink};
use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, ChatRoute, Delivered, DeliveryError, FetchError, OutboundMessage,
};
use std::borrow::Cow;
use std::sync::Arc;

pub struct Redacting {
    inner: Arc<dyn Channel>,
    redactor: Arc<Redactor>,
    streams: Streams,
}

impl Redacting {
    /// `channel` behind the scan (as it was when there is nothing to scan for).
    pub fn wrap(channel: Arc<dyn Channel>, redactor: &Arc<Redactor>) -> Arc<dyn Channel> {
        if redactor.is_empty() {
            return channel;
        }
        Arc::new(Redacting {
            inner: channel,
            redactor: redactor.clone(),
            streams: Streams::default(),
        })
    }
}

/// A streamed reply's key: its chat, thread and the message it answers.
fn stream_key(route: &ChatRoute, in_reply_to: &str) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{in_reply_to}",
        route.channel,
        route.chat_id,
        route.thread_id.as_deref().unwrap_or("")
    )
}

/// `message` with every secret redacted (borrowed when it holds none).
pub fn redact_message<'m>(
    redactor: &Redactor,
    message: &'m OutboundMessage,
    sink: Sink,
) -> Cow<'m, OutboundMessage> {
    let text = redactor.redact(&message.text, sink);
    let prompt = message.approval.as_ref().map(|p| {
        (
            redactor.redact(&p.arguments, sink),
            redactor.redact(&p.reason, sink),
        )
    });
    let prompt_changed = prompt
        .as_ref()
        .is_some_and(|(a, r)| matches!(a, Cow::Owned(_)) || matches!(r, Cow::Owned(_)));
    if matches!(text, Cow::Borrowed(_)) && !prompt_changed {
        return Cow::Borrowed(message);
    }
    let mut clean = message.clone();
    clean.text = text.into_owned();
    if let (Some(p), Some((arguments, reason))) = (clean.approval.as_mut(), prompt) {
        p.arguments = arguments.into_owned();
        p.reason = reason.into_owned();
    }
    Cow::Owned(clean)
}

#[async_trait]
impl Channel for Redacting {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        let clean = redact_message(&self.redactor, message, Sink::Chat);
        self.inner.deliver(&clean).await
    }

    async fn stream_delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        let ready = self
            .streams
            .next(&self.redactor, stream_key(route, in_reply_to), delta);
        if !ready.is_empty() {
            self.inner.stream_delta(route, in_reply_to, &ready).await;
        }
    }

    async fn typing(&self, route: &ChatRoute) {
        self.inner.typing(route).await
    }

    async fn fetch_file(&self, id: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        self.inner.fetch_file(id, max_bytes).await
    }

    fn is_ready(&self) -> bool {
        self.inner.is_ready()
    }

    fn health(&self) -> ferroclaw_channel_core::ChannelHealth {
        self.inner.health()
    }
}
