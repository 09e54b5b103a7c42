//! The pacing of a streamed reply: one platform message shows the text so far and is edited
//! at most once per interval; a platform's "slow down" pauses it. Platform calls stay in the
//! adapter; this decides only what to show and when, and keeps the preview's platform id in
//! the service's ledger so that a reply redone after a crash (in this process or another)
//! edits the preview an earlier attempt left instead of leaving it beside a second message.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One streamed reply, locked while a platform call for it is in flight.
pub type SharedLiveReply = Arc<tokio::sync::Mutex<LiveReply>>;

/// Where the platform id of a streamed preview outlives the process (the service's store).
/// Best effort: an implementation logs its failures and the stream goes on without it.
#[async_trait]
pub trait PreviewLedger: Send + Sync {
    /// The preview message an earlier attempt sent for `key`, if any.
    async fn recall(&self, key: &str) -> Option<String>;
    /// A preview message was sent for `key`.
    async fn remember(&self, key: &str, message_id: &str);
    /// The final reply for `key` is delivered: the preview is no longer anyone's to reuse.
    async fn forget(&self, key: &str);
}

/// The replies a channel is streaming now, by chat and the inbound message a reply answers.
pub struct LiveReplies {
    channel: &'static str,
    ledger: Option<Arc<dyn PreviewLedger>>,
    open: Mutex<HashMap<(String, String), SharedLiveReply>>,
}

impl LiveReplies {
    /// Streams of `channel`, their previews kept in `ledger` (none: in memory only).
    pub fn new(channel: &'static str, ledger: Option<Arc<dyn PreviewLedger>>) -> Self {
        LiveReplies {
            channel,
            ledger,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The ledger key: injective (the chat id's length is spelled out).
    fn key(&self, chat: &str, reply: &str) -> String {
        format!("preview:{}:{}:{chat}:{reply}", self.channel, chat.len())
    }

    /// The stream answering `reply` in `chat`, started when there is none, locked. A stream
    /// new to this process first recalls a preview an earlier attempt sent.
    pub async fn lock(&self, chat: &str, reply: &str) -> tokio::sync::OwnedMutexGuard<LiveReply> {
        let shared = self
            .open
            .lock()
            .expect("live replies lock")
            .entry((chat.to_string(), reply.to_string()))
            .or_default()
            .clone();
        let mut live = shared.lock_owned().await;
        if !live.recalled {
            live.recalled = true;
            if live.message.is_none()
                && let Some(ledger) = &self.ledger
            {
                live.message = ledger.recall(&self.key(chat, reply)).await;
            }
        }
        live
    }

    /// The update was made: `text` is on screen (in message `id` when it was just sent,
    /// which the ledger remembers).
    pub async fn shown(
        &self,
        chat: &str,
        reply: &str,
        live: &mut LiveReply,
        text: String,
        id: Option<String>,
    ) {
        if let (Some(id), Some(ledger)) = (&id, &self.ledger) {
            ledger.remember(&self.key(chat, reply), id).await;
        }
        live.shown(text, id);
    }

    /// The final reply answering `reply` takes the stream over: the preview message to put
    /// its first piece in and whether that text must change (see [`LiveReply::settle`]).
    /// None: nothing was shown, here or by an earlier attempt; the reply is sent fresh.
    /// After the reply is delivered, call [`LiveReplies::finished`].
    pub async fn settle_final(
        &self,
        chat: &str,
        reply: &str,
        first_piece: &str,
        interval: Duration,
    ) -> Option<(String, bool)> {
        let stream = self.take(chat, reply).await?;
        let live = stream.lock().await;
        live.settle(first_piece, interval).await
    }

    /// End the stream answering `reply`: this process's, else a preview an earlier attempt
    /// left, if any.
    async fn take(&self, chat: &str, reply: &str) -> Option<SharedLiveReply> {
        let ours = self
            .open
            .lock()
            .expect("live replies lock")
            .remove(&(chat.to_string(), reply.to_string()));
        if ours.is_some() {
            return ours;
        }
        let message = self.ledger.as_ref()?.recall(&self.key(chat, reply)).await?;
        Some(Arc::new(tokio::sync::Mutex::new(LiveReply {
            message: Some(message),
            recalled: true,
            ..LiveReply::default()
        })))
    }

    /// The final reply answering `reply` was delivered (into the preview or fresh).
    pub async fn finished(&self, chat: &str, reply: &str) {
        if let Some(ledger) = &self.ledger {
            ledger.forget(&self.key(chat, reply)).await;
        }
    }
}

/// One reply being streamed into one platform message.
#[derive(Debug, Default)]
pub struct LiveReply {
    /// The platform id of the message showing the reply, once sent.
    pub message: Option<String>,
    text: String,
    shown: String,
    last_edit: Option<Instant>,
    blocked_until: Option<Instant>,
    /// The ledger was asked for an earlier attempt's preview.
    recalled: bool,
}

/// What to do with the platform message now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveUpdate {
    /// Send the first message with this text.
    Send(String),
    /// Replace the text of message `id`.
    Edit { id: String, text: String },
}

impl LiveReply {
    /// Add a delta; the update due now, if any (the preview holds at most `limit` characters,
    /// the final reply is split properly).
    pub fn push(&mut self, delta: &str, limit: usize, interval: Duration) -> Option<LiveUpdate> {
        self.text.push_str(delta);
        let now = Instant::now();
        if self.blocked_until.is_some_and(|until| now < until) {
            return None;
        }
        let preview: String = self.text.chars().take(limit).collect();
        if preview.trim().is_empty() || preview == self.shown {
            return None;
        }
        match &self.message {
            None => Some(LiveUpdate::Send(preview)),
            Some(_) if self.last_edit.is_some_and(|last| now - last < interval) => None,
            Some(id) => Some(LiveUpdate::Edit {
                id: id.clone(),
                text: preview,
            }),
        }
    }

    /// The update was made: `text` is on screen (in message `id` when it was sent).
    fn shown(&mut self, text: String, id: Option<String>) {
        if id.is_some() {
            self.message = id;
        }
        self.shown = text;
        self.last_edit = Some(Instant::now());
    }

    /// The platform asked to wait before the next edit.
    pub fn slow_down(&mut self, wait: Duration) {
        self.blocked_until = Some(Instant::now() + wait);
    }

    /// Whether the message already shows `text`.
    pub fn shows(&self, text: &str) -> bool {
        self.shown == text
    }

    /// When the next edit may be made: one edit per interval, after any requested pause.
    fn next_edit_at(&self, interval: Duration) -> Option<Instant> {
        self.last_edit
            .map(|last| last + interval)
            .max(self.blocked_until)
    }

    /// Before the final reply takes over: wait for the pace when a call is still to come,
    /// then name the preview message to reuse for the first piece and whether its text must
    /// change (None: nothing was shown, send the reply fresh).
    pub async fn settle(&self, first_piece: &str, interval: Duration) -> Option<(String, bool)> {
        let needs_call = self.message.is_none() || !self.shows(first_piece);
        if needs_call && let Some(at) = self.next_edit_at(interval) {
            tokio::time::sleep_until(at.into()).await;
        }
        self.message
            .clone()
            .map(|id| (id, !self.shows(first_piece)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_once_then_edits_at_most_once_per_interval() {
        let mut live = LiveReply::default();
        let interval = Duration::from_secs(60);
        assert_eq!(live.push("  ", 10, interval), None, "blank text waits");
        assert_eq!(
            live.push("Hello", 10, interval),
            Some(LiveUpdate::Send("  Hello".into()))
        );
        live.shown("  Hello".into(), Some("m1".into()));
        assert_eq!(
            live.push(" world", 10, interval),
            None,
            "within the interval"
        );
        let mut fast = LiveReply::default();
        assert_eq!(
            fast.push("a", 5, Duration::ZERO),
            Some(LiveUpdate::Send("a".into()))
        );
        fast.shown("a".into(), Some("m2".into()));
        assert_eq!(
            fast.push("bcdefghijklmn", 5, Duration::ZERO),
            Some(LiveUpdate::Edit {
                id: "m2".into(),
                text: "abcde".into()
            }),
            "the preview is capped at the limit"
        );
        fast.slow_down(Duration::from_secs(60));
        assert_eq!(fast.push("x", 50, Duration::ZERO), None, "paused");
    }
}

#[cfg(test)]
mod ledger_tests {
    use super::*;

    #[derive(Default)]
    struct Ledger(Mutex<HashMap<String, String>>);

    #[async_trait]
    impl PreviewLedger for Ledger {
        async fn recall(&self, key: &str) -> Option<String> {
            self.0.lock().unwrap().get(key).cloned()
        }
        async fn remember(&self, key: &str, message_id: &str) {
            self.0
                .lock()
                .unwrap()
                .insert(key.to_string(), message_id.to_string());
        }
        async fn forget(&self, key: &str) {
            self.0.lock().unwrap().remove(key);
        }
    }

    #[tokio::test]
    async fn a_redone_reply_edits_the_preview_an_earlier_process_sent() {
        let ledger = Arc::new(Ledger::default());
        let first = LiveReplies::new("tg", Some(ledger.clone()));
        let mut live = first.lock("chat", "in1").await;
        assert_eq!(
            live.push("Hel", 50, Duration::ZERO),
            Some(LiveUpdate::Send("Hel".into()))
        );
        first
            .shown("chat", "in1", &mut live, "Hel".into(), Some("m7".into()))
            .await;
        drop(live);
        // The process dies; the next one redoes the turn and streams again.
        let second = LiveReplies::new("tg", Some(ledger.clone()));
        let mut live = second.lock("chat", "in1").await;
        assert_eq!(
            live.push("Hello", 50, Duration::ZERO),
            Some(LiveUpdate::Edit {
                id: "m7".into(),
                text: "Hello".into()
            }),
            "the earlier preview is edited, not a second one sent"
        );
        drop(live);
        // A third process that only delivers the committed reply finds the preview too.
        let third = LiveReplies::new("tg", Some(ledger.clone()));
        let taken = third.take("chat", "in1").await.expect("the preview");
        assert_eq!(taken.lock().await.message.as_deref(), Some("m7"));
        third.finished("chat", "in1").await;
        assert!(third.take("chat", "in1").await.is_none(), "forgotten");
        assert!(
            second.take("chat", "other").await.is_none(),
            "keys are per inbound message"
        );
        assert_ne!(second.key("a:b", "c"), second.key("a", "b:c"), "injective");
    }
}
