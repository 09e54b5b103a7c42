//! What runs look like in the chat.

use crate::storage::RunState;

pub fn status(label: &str, state: &str) -> String {
    format!("🤖 {label}: {state}")
}

pub fn announcement(label: &str, state: RunState, result: &str) -> String {
    format!("🤖 {label} — {}\n{result}", state.word())
}

/// The internal message that starts the parent's turn.
pub fn for_parent(label: &str, run_id: &str, state: RunState, result: &str) -> String {
    format!(
        "[Subagent \"{label}\" (run {run_id}) ended: {}]\n{result}\n\n(This is an automatic report, not a message from the user. \
         Summarise it for the user, spawn more, or kill the others as needed.)",
        state.word()
    )
}
