//! How far one person's message has reached: the model calls and the runs (subagents,
//! delegations, team tasks, plan steps) its whole tree has caused, counted in this process
//! under the message the tree traces back to.

use crate::policy::CallScope;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Messages remembered before the ones quiet for an hour are forgotten.
const REMEMBERED: usize = 4_096;
const QUIET: Duration = Duration::from_secs(3_600);

#[derive(Clone, Copy)]
struct Counts {
    calls: u32,
    runs: u32,
    touched: Instant,
}

#[derive(Default)]
pub struct Reach {
    by_message: Mutex<HashMap<String, Counts>>,
}

/// What was counted: `Err` when it went over its limit (then it is not counted).
pub enum Counted {
    Within,
    Over(u32),
}

impl Reach {
    /// Count one more model call (`run` false) or run (`run` true) for the message behind
    /// `scope`, unless that would pass `limit` (0: no limit). Work traced to no message
    /// (compaction) is not counted.
    pub fn count(&self, scope: &CallScope<'_>, run: bool, limit: u32) -> Counted {
        let (Some(message), true) = (scope.origin_message, limit > 0) else {
            return Counted::Within;
        };
        let route = scope.route;
        let key = format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{message}",
            route.channel,
            route.chat_id,
            route.thread_id.as_deref().unwrap_or_default()
        );
        let now = Instant::now();
        let mut map = self.by_message.lock().expect("reach lock");
        if map.len() >= REMEMBERED && !map.contains_key(&key) {
            map.retain(|_, c| now.duration_since(c.touched) < QUIET);
        }
        let counts = map.entry(key).or_insert(Counts {
            calls: 0,
            runs: 0,
            touched: now,
        });
        counts.touched = now;
        let slot = if run {
            &mut counts.runs
        } else {
            &mut counts.calls
        };
        if *slot >= limit {
            return Counted::Over(limit);
        }
        *slot += 1;
        Counted::Within
    }
}
