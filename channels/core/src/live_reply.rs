//! The pacing of a streamed reply: one platform message shows the text so far and is edited
//! at most once per interval; a platform's "slow down" pauses it. Platform calls stay in the
//! adapter; this decides only what to show and when.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One streamed reply, locked while a platform call for it is in flight.
pub type SharedLiveReply = Arc<tokio::sync::Mutex<LiveReply>>;

/// The replies a channel is streaming now, by the adapter's key (its chat and the inbound
/// message a reply answers).
pub struct LiveReplies<K> {
    open: Mutex<HashMap<K, SharedLiveReply>>,
}

impl<K> Default for LiveReplies<K> {
    fn default() -> Self {
        LiveReplies {
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> LiveReplies<K> {
    /// The stream for `key`, started when there is none.
    pub fn open(&self, key: K) -> SharedLiveReply {
        self.open
            .lock()
            .expect("live replies lock")
            .entry(key)
            .or_default()
            .clone()
    }

    /// End the stream for `key` (the final reply takes it over), if there is one.
    pub fn take(&self, key: &K) -> Option<SharedLiveReply> {
        self.open.lock().expect("live replies lock").remove(key)
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
    pub fn shown(&mut self, text: String, id: Option<String>) {
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
