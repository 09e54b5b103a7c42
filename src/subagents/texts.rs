//! What runs look like in the chat.

pub fn status(label: &str, state: &str) -> String {
    format!("🤖 {label}: {state}")
}

pub fn state_word(state: &str) -> &'static str {
    match state {
        "done" => "done",
        "failed" => "failed",
        "timed_out" => "timed out",
        "killed" => "killed",
        "interrupted" => "interrupted",
        "running" => "running",
        _ => "queued",
    }
}

pub fn announcement(label: &str, state: &str, result: &str) -> String {
    format!("🤖 {label} — {}\n{result}", state_word(state))
}

/// The internal message that starts the parent's turn.
pub fn for_parent(label: &str, run_id: &str, state: &str, result: &str) -> String {
    format!(
        "[Subagent \"{label}\" (run {run_id}) ended: {}]\n{result}\n\n(This is an automatic report, not a message from the user. \
         Summarise it for the user, spawn more, or kill the others as needed.)",
        state_word(state)
    )
}
