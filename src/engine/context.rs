//! Builds the model's view of a session from its stored summary and recent transcript.
//! Reads a bounded number of entries so a turn's cost stays flat as history grows.

use crate::providers::{ChatMessage, Role, ToolCall};
use crate::storage::{TranscriptEntry, TranscriptRole};

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
        .position(|e| e.role == TranscriptRole::User)
        .unwrap_or(history.len());
    for entry in &history[start..] {
        let role = model_role(entry.role);
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
            images: Vec::new(),
        });
    }
    messages
}

/// A chat message's role as the transcript stores it.
pub(super) fn stored_role(role: Role) -> TranscriptRole {
    match role {
        Role::User => TranscriptRole::User,
        Role::Assistant => TranscriptRole::Assistant,
        Role::Tool => TranscriptRole::Tool,
    }
}

/// A stored transcript role as a chat message's.
pub(super) fn model_role(role: TranscriptRole) -> Role {
    match role {
        TranscriptRole::User => Role::User,
        TranscriptRole::Assistant => Role::Assistant,
        TranscriptRole::Tool => Role::Tool,
    }
}

/// The session's own workspace folder: `<root>/<the session key, encoded>`.
pub fn workspace_for(root: &str, session_key: &str) -> std::path::PathBuf {
    std::path::Path::new(root).join(workspace_folder(session_key))
}

/// A folder name that is an injective encoding of the session key: ASCII letters, digits
/// and `-` stay, every other byte becomes `_XX` (upper-case hex), so two keys never share a
/// folder. Names that would be too long for a file system become `_h` + SHA-256 of the key
/// (`h` is not a hex digit, so no escaped name looks like a hashed one).
fn workspace_folder(session_key: &str) -> String {
    const MAX_NAME: usize = 200;
    let mut folder = String::with_capacity(session_key.len() + 16);
    for byte in session_key.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            folder.push(byte as char);
        } else {
            folder.push_str(&format!("_{byte:02X}"));
        }
    }
    if folder.len() > MAX_NAME {
        use sha2::Digest;
        return format!(
            "_h{}",
            hex::encode(sha2::Sha256::digest(session_key.as_bytes()))
        );
    }
    folder
}

#[cfg(test)]
mod tests {
    use super::workspace_folder;

    #[test]
    fn different_session_keys_never_share_a_workspace_folder() {
        let keys = [
            "agent:main:webhook:x:alice/x",
            "agent:main:webhook:x:alice:x",
            "agent:main:webhook:x:alice x",
            "agent:main:webhook:x:alice_x",
            "agent:main:webhook:x:alice_3Ax",
            "agent:main:webhook:acme_eu:cust-42",
            "agent:main:webhook:acme:eu:cust-42",
            "agent:main:webhook:x:..",
            "agent:main:webhook:x:.",
        ];
        let folders: std::collections::HashSet<String> =
            keys.iter().map(|k| workspace_folder(k)).collect();
        assert_eq!(folders.len(), keys.len(), "{folders:?}");
        for f in &folders {
            assert!(
                f.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
        }
        let long = "x".repeat(500);
        let hashed = workspace_folder(&long);
        assert!(hashed.starts_with("_h") && hashed.len() == 66);
        assert_ne!(hashed, workspace_folder(&"x".repeat(501)));
    }
}
