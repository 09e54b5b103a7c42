//! Long-term memory per person and per chat (SPEC section 20).
//!
//! Owns who sees which memories: a person's (`person:<channel>:<user>`, one person across
//! channels once linked with `/link`) are used wherever that person writes, except that a
//! group chat is shown only its own (`chat:<channel>:<chat>`) unless
//! `memory.personal_in_groups` lets the speaker's own in; a chat's are seen by everyone in
//! it. Every read goes to the store with the scopes this module chose: the store has no
//! read without them. Also: recall before a turn (the best `recall_k` within
//! `recall_max_tokens`, shown after the stable prompt prefix), the tools and commands
//! (`tools.rs`, `component.rs`), facts saved before compaction drops them, and the optional
//! embeddings of hybrid search (`embed.rs`). Knows the store and the chat's identity; not
//! the engine, not a channel.

mod component;
mod embed;
mod rank;
mod tools;

pub use component::{COMMANDS, MemoryComponent};
pub use embed::Embedder;
pub use rank::terms;

use crate::config::MemoryConfig;
use crate::storage::{MemoryRow, MemoryStore, NewMemory, person_scope};
use ferroclaw_channel_core::{ChatKind, ChatRoute};
use std::sync::Arc;

/// The longest memory kept (characters).
pub const MAX_TEXT_CHARS: usize = 1_000;
/// Rows with vectors compared with a query, newest first (cosine in process).
const VECTOR_ROWS: i64 = 2_000;

/// Who asks, and where: the chat and, for a person's message, its sender.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub route: &'a ChatRoute,
    pub sender: Option<&'a str>,
}

impl Asker<'_> {
    fn in_group(&self) -> bool {
        self.route.kind == ChatKind::Group
    }

    /// The sender as `<channel>:<user id>` (channel names as in the log).
    pub fn member(&self) -> Option<String> {
        self.sender.map(|s| format!("{}:{s}", self.route.channel))
    }

    /// The chat's scope (threads of a chat share it).
    pub fn chat_scope(&self) -> String {
        format!("chat:{}:{}", self.route.channel, self.route.chat_id)
    }
}

/// Where a save goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveScope {
    /// The person talking.
    Me,
    /// The chat (everyone in it sees it).
    Chat,
}

pub struct Memory {
    store: Arc<dyn MemoryStore>,
    config: MemoryConfig,
    embedder: Option<Embedder>,
}

impl Memory {
    pub fn new(
        store: Arc<dyn MemoryStore>,
        config: MemoryConfig,
        embedder: Option<Embedder>,
    ) -> Self {
        Memory {
            store,
            config,
            embedder,
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The scope of the asker's own memories (None without a sender).
    async fn own_scope(&self, who: &Asker<'_>) -> Result<Option<String>, String> {
        let Some(member) = who.member() else {
            return Ok(None);
        };
        let person = self.store.memory_person(&member).await.map_err(store)?;
        Ok(Some(person_scope(&person)))
    }

    /// What `who` may be shown here: the chat's memories and, in a private chat (or a group
    /// when `personal_in_groups`), the sender's own.
    pub async fn visible_scopes(&self, who: &Asker<'_>) -> Result<Vec<String>, String> {
        let mut scopes = vec![who.chat_scope()];
        if !who.in_group() || self.config.personal_in_groups {
            scopes.extend(self.own_scope(who).await?);
        }
        Ok(scopes)
    }

    /// What `who` may forget: their own memories (anywhere) and the chat's.
    pub async fn forgettable_scopes(&self, who: &Asker<'_>) -> Result<Vec<String>, String> {
        let mut scopes = vec![who.chat_scope()];
        scopes.extend(self.own_scope(who).await?);
        Ok(scopes)
    }

    /// Save `text`. `call_ref` makes a redone save the same row. `(id, saved now)`.
    pub async fn save(
        &self,
        who: &Asker<'_>,
        scope: SaveScope,
        text: &str,
        tags: &[String],
        session_key: Option<&str>,
        call_ref: Option<String>,
    ) -> Result<(i64, bool), String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("there is nothing to remember (`text` is empty)".into());
        }
        if text.chars().count() > MAX_TEXT_CHARS {
            return Err(format!(
                "a memory holds at most {MAX_TEXT_CHARS} characters; save the fact alone"
            ));
        }
        let scope = match scope {
            SaveScope::Chat => who.chat_scope(),
            SaveScope::Me => self.own_scope(who).await?.ok_or(
                "no person is talking in this turn; save it with scope \"chat\"".to_string(),
            )?,
        };
        let tags: Vec<String> = tags.iter().flat_map(|t| terms(t)).take(8).collect();
        let embedding = match &self.embedder {
            Some(embedder) => match embedder.embed(&[text]).await {
                Ok(mut vectors) => vectors.pop().map(|v| (v, embedder.model.clone())),
                Err(why) => {
                    // Saved without a vector: found by its words until re-saved.
                    tracing::warn!(error = %why, "memory saved without an embedding");
                    None
                }
            },
            None => None,
        };
        self.store
            .memory_save(&NewMemory {
                scope,
                text: text.to_string(),
                tags: tags.join(" "),
                created_at: crate::clock::now_ms(),
                session_key: session_key.map(str::to_string),
                call_ref,
                embedding,
            })
            .await
            .map_err(store)
    }

    /// The best `k` memories of `scopes` for `query`: full text ranked with age, fused with
    /// vector neighbours when an embedding model is configured.
    pub async fn search(
        &self,
        scopes: &[String],
        query: &str,
        k: usize,
    ) -> Result<Vec<MemoryRow>, String> {
        let words = terms(query);
        let hits = self
            .store
            .memory_search(scopes, &words, rank::PER_TERM as i64);
        let vectors = self.neighbours(scopes, query);
        let (hits, vectors) = tokio::join!(hits, vectors);
        let text = rank::text_matches(&words, hits.map_err(store)?, rank::PER_TERM);
        Ok(rank::fuse(text, vectors, crate::clock::now_ms(), k))
    }

    /// Rows of `scopes` with their similarity to `query` (none without an embedder, or when
    /// the endpoint fails: the text search still answers).
    async fn neighbours(&self, scopes: &[String], query: &str) -> Vec<(MemoryRow, f32)> {
        let Some(embedder) = &self.embedder else {
            return Vec::new();
        };
        let texts = [query];
        let (asked, rows) = tokio::join!(
            embedder.embed(&texts),
            self.store
                .memory_vectors(scopes, &embedder.model, VECTOR_ROWS)
        );
        let (mut asked, rows) = match (asked, rows) {
            (Ok(asked), Ok(rows)) => (asked, rows),
            (Err(why), _) => {
                tracing::warn!(error = %why, "memory search without vectors");
                return Vec::new();
            }
            (_, Err(err)) => {
                tracing::warn!(error = %err, "memory search without vectors");
                return Vec::new();
            }
        };
        let Some(query) = asked.pop() else {
            return Vec::new();
        };
        rows.into_iter()
            .map(|mut row| {
                let similarity = rank::cosine(&query, row.embedding.as_deref().unwrap_or(&[]));
                row.embedding = None;
                (row, similarity)
            })
            .collect()
    }

    /// The section shown with a turn answering `text`: the best memories within the token
    /// budget, or None.
    pub async fn recall(&self, who: &Asker<'_>, text: &str) -> Option<String> {
        if !self.config.enabled || self.config.recall_k == 0 {
            return None;
        }
        // A message with no word worth searching ("hi", "ok?") finds nothing by text.
        if self.embedder.is_none() && terms(text).is_empty() {
            return None;
        }
        let found = async {
            let scopes = self.visible_scopes(who).await?;
            self.search(&scopes, text, self.config.recall_k as usize)
                .await
        }
        .await;
        let rows = match found {
            Ok(rows) => rows,
            Err(why) => {
                tracing::warn!(error = %why, "recall failed; the turn goes on without memories");
                return None;
            }
        };
        section(&rows, self.config.recall_max_tokens as usize)
    }

    /// Forget memory `id` if `who` may.
    pub async fn forget(&self, who: &Asker<'_>, id: i64) -> Result<bool, String> {
        let scopes = self.forgettable_scopes(who).await?;
        self.store.memory_forget(&scopes, id).await.map_err(store)
    }

    /// Forget all of `who`'s own memories and, in a private chat, the chat's. How many.
    pub async fn forget_all(&self, who: &Asker<'_>) -> Result<u64, String> {
        let mut gone = 0;
        if let Some(own) = self.own_scope(who).await? {
            gone += self.store.memory_forget_scope(&own).await.map_err(store)?;
        }
        if !who.in_group() {
            gone += self
                .store
                .memory_forget_scope(&who.chat_scope())
                .await
                .map_err(store)?;
        }
        Ok(gone)
    }

    /// The newest memories `who` may see here.
    pub async fn recent(&self, who: &Asker<'_>, limit: i64) -> Result<Vec<MemoryRow>, String> {
        let scopes = self.visible_scopes(who).await?;
        self.store
            .memory_recent(&scopes, limit)
            .await
            .map_err(store)
    }

    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }
}

/// Memories as the model is shown them, best first, within `max_tokens` (≈ 4 characters a
/// token).
pub fn section(rows: &[MemoryRow], max_tokens: usize) -> Option<String> {
    let header = "[Memories: facts remembered from earlier conversations (#id for memory_forget); use them when they help]";
    let mut text = header.to_string();
    let mut shown = 0;
    for row in rows {
        let line = format!("\n- #{} {}", row.id, row.text);
        if (text.len() + line.len()) / 4 > max_tokens {
            continue;
        }
        text.push_str(&line);
        shown += 1;
    }
    (shown > 0).then_some(text)
}

fn store(err: crate::storage::StoreError) -> String {
    tracing::warn!(error = %err, "memory store failed");
    "the memory store is not available right now".into()
}
