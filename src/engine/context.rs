//! Builds the model's view of a session from its stored summary and recent transcript.
//! Reads a bounded number of entries so a turn's cost stays flat as history grows.

use crate::providers::{ChatMessage, Role, ToolCall};
use crate::storage::TranscriptEntry;

/// Transcript entries loaded per turn (older history lives in the session summary).
pub const HISTORY_ENTRIES: i64 = 48;

pub fn history_messages(summary: Option<&str>, history: &[TranscriptEntry]) -> Vec<ChatMessage> {
    let mut messages = Vec::with_capacity(history.len() + 1);
    if let Some(summary) = summary {
        messages.push(ChatMessage::text(
            Role::User,
            format!("[Summary of the earlier conversation]\n{summary}"),
        ));
    }
    // A window may start in the middle of a tool exchange; skip to the first user message.
    let start = history
        .iter()
        .position(|e| e.role == "user")
        .unwrap_or(history.len());
    for entry in &history[start..] {
        let Some(role) = Role::parse(&entry.role) else {
            continue;
        };
        let tool_calls: Vec<ToolCall> = entry
            .tool_calls
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        messages.push(ChatMessage {
            role,
            content: entry.content.clone(),
            tool_calls,
            tool_call_id: entry.tool_call_id.clone(),
        });
    }
    messages
}

/// The session's own workspace folder: `<root>/<session key with unsafe characters replaced>`.
pub fn workspace_for(root: &str, session_key: &str) -> std::path::PathBuf {
    let folder: String = session_key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    std::path::Path::new(root).join(folder)
}
