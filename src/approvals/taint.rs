//! A turn's taint: what untrusted content it has read, shared by its tool calls.

use std::sync::{Arc, Mutex};

/// What made a turn untrusted (the first source it read), as a turn handle: the component
/// puts it in when the turn starts (an attachment, a group sender who is not an approver),
/// the gate marks it when a tool's result is untrusted (a fetched page).
#[derive(Clone, Default)]
pub struct Taint(Arc<Mutex<Option<String>>>);

impl Taint {
    pub fn new(source: Option<String>) -> Self {
        Taint(Arc::new(Mutex::new(source)))
    }

    /// Record `source` unless the turn is tainted already (the first source is the reason).
    pub fn mark(&self, source: impl FnOnce() -> String) {
        let mut held = self.0.lock().expect("taint lock");
        if held.is_none() {
            *held = Some(source());
        }
    }

    /// What the turn read that it cannot trust, if anything.
    pub fn source(&self) -> Option<String> {
        self.0.lock().expect("taint lock").clone()
    }
}
