//! Streamed replies under the leak scan: each reply's pieces are scanned with what was held
//! back from the piece before, and a tail that could be the start of a secret is held until
//! the next piece shows whether it is one (the final reply, delivered whole, is scanned
//! whole, so what a stream still holds is never lost: the final text continues what was
//! streamed). Only replies with a tail held are kept. Knows nothing of channels.

use super::{Redactor, Sink};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Mutex;

/// At most this many replies are followed at once; beyond it the oldest half is forgotten
/// (a forgotten reply's held tail is only missing from its preview, never from the reply).
const MAX_STREAMS: usize = 1024;

#[derive(Default)]
pub(super) struct Streams {
    held: Mutex<State>,
}

#[derive(Default)]
struct State {
    clock: u64,
    by_reply: HashMap<String, Held>,
}

struct Held {
    tail: String,
    /// When it was last touched (a counter), to forget the oldest first.
    touched: u64,
}

impl Streams {
    /// What of `delta` (after what was held for `key`) may be sent now, redacted.
    pub(super) fn next(&self, redactor: &Redactor, key: String, delta: &str) -> String {
        let mut state = self.held.lock().expect("streams lock");
        state.clock += 1;
        let clock = state.clock;
        let held = &mut state.by_reply;
        if held.len() >= MAX_STREAMS && !held.contains_key(&key) {
            let mut ages: Vec<u64> = held.values().map(|h| h.touched).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            held.retain(|_, h| h.touched > cut);
        }
        let mut slot = match held.entry(key) {
            Entry::Occupied(slot) => slot,
            Entry::Vacant(slot) => slot.insert_entry(Held {
                tail: String::new(),
                touched: clock,
            }),
        };
        let entry = slot.get_mut();
        entry.touched = clock;
        entry.tail.push_str(delta);
        let scanned = redactor.redact(&entry.tail, Sink::Stream).into_owned();
        let end = redactor.safe_end(&scanned);
        entry.tail = scanned[end..].to_string();
        if entry.tail.is_empty() {
            slot.remove();
        }
        let mut ready = scanned;
        ready.truncate(end);
        ready
    }

    /// How many replies have a tail held.
    #[cfg(test)]
    fn holding(&self) -> usize {
        self.held.lock().expect("streams lock").by_reply.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::SecretString;
    use std::collections::BTreeMap;

    #[test]
    fn a_secret_split_across_pieces_never_leaves_in_part() {
        let map: BTreeMap<String, SecretString> = [(
            "KEY".to_string(),
            SecretString::from("sk-live-abcdef0123456789"),
        )]
        .into();
        let redactor = Redactor::new(&map);
        let streams = Streams::default();
        let key = || "telegram|1|m1".to_string();
        let mut sent = String::new();
        for piece in [
            "The key is sk-live-ab",
            "cdef01",
            "23456789 and more",
            " text",
        ] {
            sent.push_str(&streams.next(&redactor, key(), piece));
        }
        assert_eq!(sent, "The key is [redacted:KEY] and more text");
        assert!(!sent.contains("sk-live-ab"));
        assert_eq!(streams.holding(), 0, "nothing held, nothing kept");
        // A tail that turns out not to be a secret is sent with the next piece.
        assert_eq!(streams.next(&redactor, key(), "ok sk-"), "ok ");
        assert_eq!(streams.next(&redactor, key(), "ip"), "sk-ip");
    }
}
