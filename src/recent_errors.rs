//! The last warnings and errors, kept in memory for the status page (a `tracing` layer). Log
//! lines never carry secrets or message bodies at WARN, so showing them is safe.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// How many lines are kept.
const KEEP: usize = 20;

static RECENT: Mutex<VecDeque<Recent>> = Mutex::new(VecDeque::new());

/// One warning or error.
#[derive(Debug, Clone)]
pub struct Recent {
    pub at_ms: i64,
    pub level: &'static str,
    pub text: String,
}

/// The kept lines, newest first.
pub fn recent() -> Vec<Recent> {
    RECENT
        .lock()
        .expect("recent errors lock")
        .iter()
        .rev()
        .cloned()
        .collect()
}

/// Keeps WARN and ERROR events.
pub struct RecentErrors;

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for RecentErrors {
    fn on_event(&self, event: &Event<'_>, _cx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let mut recent = RECENT.lock().expect("recent errors lock");
        if recent.len() == KEEP {
            recent.pop_front();
        }
        recent.push_back(Recent {
            at_ms: crate::clock::now_ms(),
            level: if level == Level::ERROR {
                "error"
            } else {
                "warn"
            },
            text: text.0,
        });
    }
}
