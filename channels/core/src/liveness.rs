//! Whether a channel is still receiving (SPEC section 21): each adapter notes when its last
//! receive completed (a long poll that returned, empty or not; a heartbeat acknowledged; an
//! event) and when the last message came; the channel is `up`, `degraded` or `down` by how
//! long ago that was, against the rule the adapter sets. Connected is not alive: a poll
//! stuck for hours passes `getMe`, not this.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A channel's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelState {
    Up,
    /// Late, not yet given up on.
    Degraded,
    Down,
}

impl ChannelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelState::Up => "up",
            ChannelState::Degraded => "degraded",
            ChannelState::Down => "down",
        }
    }
}

/// What a channel says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelHealth {
    pub state: ChannelState,
    /// Seconds since its last completed receive (None: it does not track one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_receive_age_secs: Option<u64>,
    /// Seconds since the last message came in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_age_secs: Option<u64>,
    /// Why it is not up, when the adapter knows (the last error, a conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Times its receiver was started again with a new connection since the service started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u64,
    /// The adapter's own counts (a webhook's `callbacks_ok`, `callbacks_failed`).
    #[serde(default, flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ChannelHealth {
    /// A channel that tracks no receives: up while connected.
    pub fn connected(ready: bool) -> Self {
        ChannelHealth {
            state: if ready {
                ChannelState::Up
            } else {
                ChannelState::Down
            },
            last_receive_age_secs: None,
            last_message_age_secs: None,
            detail: None,
            restarts: 0,
            figures: BTreeMap::new(),
        }
    }
}

/// The receive times of one channel and its rule.
pub struct Liveness {
    born: Instant,
    /// Milliseconds after `born`, plus one (0: never).
    last_receive: AtomicU64,
    last_message: AtomicU64,
    detail: Mutex<Option<String>>,
    restarts: AtomicU64,
    degraded_after: Duration,
    down_after: Duration,
}

impl Liveness {
    /// Degraded when no receive completed for `degraded_after`, down after `down_after`
    /// (counted from creation until the first).
    pub fn new(degraded_after: Duration, down_after: Duration) -> Self {
        Liveness {
            born: Instant::now(),
            last_receive: AtomicU64::new(0),
            last_message: AtomicU64::new(0),
            detail: Mutex::new(None),
            restarts: AtomicU64::new(0),
            degraded_after,
            down_after,
        }
    }

    fn now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64 + 1
    }

    /// A receive completed (its trouble, if any, is over).
    pub fn received(&self) {
        self.last_receive.store(self.now(), Ordering::Release);
        *self.detail.lock().expect("liveness lock") = None;
    }

    /// A message came in.
    pub fn message(&self) {
        self.last_message.store(self.now(), Ordering::Release);
    }

    /// What is wrong now (shown until the next completed receive).
    pub fn trouble(&self, detail: String) {
        *self.detail.lock().expect("liveness lock") = Some(detail);
    }

    /// The receiver was started again with a new client and connection.
    pub fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::AcqRel);
    }

    /// How long since the last completed receive (since creation before the first).
    pub fn silent_for(&self) -> Duration {
        self.age(&self.last_receive)
            .unwrap_or_else(|| self.born.elapsed())
    }

    /// The rule's time without a completed receive after which the channel is down.
    pub fn down_after(&self) -> Duration {
        self.down_after
    }

    fn age(&self, at: &AtomicU64) -> Option<Duration> {
        match at.load(Ordering::Acquire) {
            0 => None,
            at => Some(Duration::from_millis(self.now().saturating_sub(at))),
        }
    }

    /// The state by the rule; `connected` false is down whatever the times say.
    pub fn health(&self, connected: bool) -> ChannelHealth {
        let receive = self.age(&self.last_receive);
        let silent = self.silent_for();
        let state = if !connected || silent > self.down_after {
            ChannelState::Down
        } else if silent > self.degraded_after {
            ChannelState::Degraded
        } else {
            ChannelState::Up
        };
        ChannelHealth {
            state,
            last_receive_age_secs: receive.map(|d| d.as_secs()),
            last_message_age_secs: self.age(&self.last_message).map(|d| d.as_secs()),
            detail: self.detail.lock().expect("liveness lock").clone(),
            restarts: self.restarts.load(Ordering::Acquire),
            figures: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_turns_a_channel_degraded_then_down_and_a_receive_brings_it_back() {
        let l = Liveness::new(Duration::from_millis(30), Duration::from_millis(60));
        l.received();
        assert_eq!(l.health(true).state, ChannelState::Up);
        assert_eq!(l.health(false).state, ChannelState::Down);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(l.health(true).state, ChannelState::Degraded);
        l.trouble("502 Bad Gateway".into());
        std::thread::sleep(Duration::from_millis(30));
        let down = l.health(true);
        assert_eq!(down.state, ChannelState::Down);
        assert_eq!(down.detail.as_deref(), Some("502 Bad Gateway"));
        l.received();
        l.restarted();
        assert_eq!(
            l.health(true),
            ChannelHealth {
                state: ChannelState::Up,
                last_receive_age_secs: Some(0),
                last_message_age_secs: None,
                detail: None,
                restarts: 1,
                figures: BTreeMap::new(),
            }
        );
        // What a follower reads back is what the leader wrote.
        let json = serde_json::to_string(&l.health(true)).unwrap();
        assert_eq!(
            serde_json::from_str::<ChannelHealth>(&json).unwrap(),
            l.health(true)
        );
    }
}
