//! A turn's taint: what untrusted content it has read, shared by its tool calls.

use std::sync::{Arc, Mutex};

/// What made a turn untrusted (the first source it read), as a turn handle: the component
/// puts it in when the turn starts (an attached file, a group sender who is not an approver,
/// the outcome of a subagent run — looked up by the gate, which can read the store), the gate
/// marks it when a tool's result is untrusted (a fetched page).
#[derive(Clone, Default)]
pub struct Taint(Arc<Mutex<Held>>);

#[derive(Default)]
struct Held {
    source: Option<String>,
    /// A subagent run whose outcome this turn reads, not yet looked up.
    reported_run: Option<String>,
}

impl Taint {
    pub fn new(source: Option<String>) -> Self {
        Taint(Arc::new(Mutex::new(Held {
            source,
            reported_run: None,
        })))
    }

    /// A turn that reads the outcome of run `run_id`: tainted if that run read untrusted
    /// content (see [`Taint::take_reported_run`]).
    pub fn reporting(run_id: &str) -> Self {
        Taint(Arc::new(Mutex::new(Held {
            source: None,
            reported_run: Some(run_id.to_string()),
        })))
    }

    /// Record `source` unless the turn is tainted already (the first source is the reason);
    /// true when this made it tainted.
    pub fn mark(&self, source: impl FnOnce() -> String) -> bool {
        let mut held = self.0.lock().expect("taint lock");
        if held.source.is_some() {
            return false;
        }
        held.source = Some(source());
        true
    }

    /// What the turn read that it cannot trust, if anything.
    pub fn source(&self) -> Option<String> {
        self.0.lock().expect("taint lock").source.clone()
    }

    /// The run whose outcome this turn reads, the first time it is asked.
    pub fn take_reported_run(&self) -> Option<String> {
        self.0.lock().expect("taint lock").reported_run.take()
    }
}
