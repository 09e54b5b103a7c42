//! The memory keys (SPEC section 20): what is remembered, how much of it a turn is shown,
//! and whether a person's own memories reach a group chat.

use serde::{Deserialize, Serialize};

/// `[memory]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub enabled: bool,
    /// The most memories shown with a turn.
    pub recall_k: u32,
    /// The most tokens (≈ 4 characters each) those memories may take.
    pub recall_max_tokens: u32,
    /// Whether the person talking in a group chat has their own memories recalled there
    /// (others never see them: only the speaker's are used).
    pub personal_in_groups: bool,
    /// `"<provider>/<model>"` on an OpenAI-compatible `/embeddings` endpoint: search is then
    /// hybrid (full text and vectors); empty: full text only.
    pub embedding_model: String,
    /// Before compaction drops history, one model call saves its durable facts.
    pub flush_before_compaction: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            recall_k: 5,
            recall_max_tokens: 600,
            personal_in_groups: false,
            embedding_model: String::new(),
            flush_before_compaction: true,
        }
    }
}
