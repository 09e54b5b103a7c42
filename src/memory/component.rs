//! Memory as the engine sees it: the three tools, `/memory` and `/link` for people, the
//! recalled section of each turn, and the facts a compaction would drop.

use super::tools::{MemoryForget, MemorySave, MemorySearch};
use super::{Asker, Memory, SaveScope};
use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, CompactionScope, Component, Reply, TurnScope};
use crate::storage::StoreError;
use crate::tools::Tool;
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[
    command(
        "memory",
        "What I remember",
        Some("[search <words> | forget <id> | forget all]"),
        "/memory — what I remember here; /memory search <words>; /memory forget <id>; \
         /memory forget all (everything about you, and this chat's in a private chat)",
    ),
    command(
        "link",
        "Share your memories with your account on another channel",
        Some("[code]"),
        "/link — a code to send from your other account; /link <code> — link this account",
    ),
];

/// How long a `/link` code is valid.
const LINK_CODE_MS: i64 = 10 * 60 * 1000;
/// Memories `/memory` lists.
const LISTED: i64 = 20;

/// Instruction of the call that reads history compaction is about to drop (tests
/// recognise it by its first words).
pub const FLUSH_PROMPT: &str = "You keep an assistant's long-term memory. From the conversation below, \
list the durable facts worth remembering in later conversations (who the user is, their preferences, \
names, decisions, commitments), one per line, each a sentence that stands alone, at most 10. Leave out \
small talk, questions and anything only true for the moment. If there is nothing worth keeping, reply \
with the single word NOTHING.";
/// Facts one flush may save.
const FLUSH_FACTS: usize = 10;

pub struct MemoryComponent {
    memory: Arc<Memory>,
}

impl MemoryComponent {
    pub fn new(memory: Arc<Memory>) -> Self {
        MemoryComponent { memory }
    }

    async fn link(&self, args: &str, who: &Asker<'_>) -> Result<Reply, String> {
        let Some(member) = who.member() else {
            return Ok((
                OutboundKind::Error,
                "Only a person can link accounts.".into(),
            ));
        };
        let store = self.memory.store();
        let now = crate::clock::now_ms();
        if args.is_empty() {
            let code = format!("{:08}", uuid::Uuid::new_v4().as_u128() % 100_000_000);
            store
                .memory_link_offer(&member, &code, now + LINK_CODE_MS)
                .await
                .map_err(super::store)?;
            return Ok((
                OutboundKind::Status,
                format!(
                    "Send `/link {code}` from your other account (any channel) within 10 minutes: \
                     both will share what I remember about you."
                ),
            ));
        }
        match store
            .memory_link_claim(args, &member, now)
            .await
            .map_err(super::store)?
        {
            Some(person) => Ok((
                OutboundKind::Status,
                format!("Linked: this account shares its memories with {person}."),
            )),
            None => Ok((
                OutboundKind::Error,
                "That code is unknown or expired. Send /link from your other account for a new one."
                    .into(),
            )),
        }
    }

    async fn memory(&self, args: &str, who: &Asker<'_>) -> Result<Reply, String> {
        let (verb, rest) = args.split_once(' ').unwrap_or((args, ""));
        let rest = rest.trim();
        match (verb, rest) {
            ("", _) => {
                let rows = self.memory.recent(who, LISTED).await?;
                Ok(listing("🧠 What I remember here", &rows, who))
            }
            ("search", q) if !q.is_empty() => {
                let scopes = self.memory.visible_scopes(who).await?;
                let rows = self.memory.search(&scopes, q, LISTED as usize).await?;
                Ok(listing(&format!("🔎 Memories for “{q}”"), &rows, who))
            }
            ("forget", "all") => {
                let gone = self.memory.forget_all(who).await?;
                Ok((OutboundKind::Status, format!("Forgot {gone} memories.")))
            }
            ("forget", id) => {
                let Ok(id) = id.trim_start_matches('#').parse::<i64>() else {
                    return Ok((
                        OutboundKind::Error,
                        "Usage: /memory forget <id> (as /memory shows it), or /memory forget all"
                            .into(),
                    ));
                };
                Ok(if self.memory.forget(who, id).await? {
                    (OutboundKind::Status, format!("Forgot memory #{id}."))
                } else {
                    (
                        OutboundKind::Error,
                        format!("There is no memory #{id} you can forget here."),
                    )
                })
            }
            _ => Ok((
                OutboundKind::Error,
                "Usage: /memory, /memory search <words>, /memory forget <id>|all".into(),
            )),
        }
    }
}

fn listing(title: &str, rows: &[crate::storage::MemoryRow], who: &Asker<'_>) -> Reply {
    let mut lines = vec![title.to_string()];
    if rows.is_empty() {
        lines.push("(nothing)".into());
    }
    for row in rows {
        let whose = if row.scope.starts_with("chat:") {
            "chat"
        } else {
            "you"
        };
        lines.push(format!("#{} [{whose}] {}", row.id, row.text));
    }
    if who.route.kind == ferroclaw_channel_core::ChatKind::Group {
        lines.push("What I remember about you alone is listed in a private chat.".into());
    }
    (OutboundKind::Status, lines.join("\n"))
}

#[async_trait]
impl Component for MemoryComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        if !self.memory.enabled() {
            return Vec::new();
        }
        vec![
            Arc::new(MemorySave(self.memory.clone())),
            Arc::new(MemorySearch(self.memory.clone())),
            Arc::new(MemoryForget(self.memory.clone())),
        ]
    }

    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    async fn command(
        &self,
        name: &str,
        args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        if !self.memory.enabled() {
            return Ok((
                OutboundKind::Error,
                "Memory is off ([memory] enabled = false).".into(),
            ));
        }
        let who = Asker {
            route: &cx.session.route,
            sender: cx.sender,
        };
        let answer = match name {
            "link" => self.link(args.trim(), &who).await,
            _ => self.memory(args.trim(), &who).await,
        };
        Ok(answer.unwrap_or_else(|why| (OutboundKind::Error, format!("⚠️ {why}."))))
    }

    async fn recall(&self, turn: &TurnScope<'_>, text: &str) -> Option<String> {
        let who = Asker {
            route: turn.route,
            sender: turn.sender,
        };
        self.memory.recall(&who, text).await
    }

    fn before_compaction(&self) -> Option<&'static str> {
        (self.memory.enabled() && self.memory.config().flush_before_compaction)
            .then_some(FLUSH_PROMPT)
    }

    /// Each fact line saved: a private chat's for its person, a group's for the chat. The
    /// n-th fact of the compaction up to `upto` has one identity, so a redone compaction
    /// saves nothing twice.
    async fn compacted(&self, turn: &CompactionScope<'_>, answer: &str) {
        let who = Asker {
            route: turn.route,
            sender: turn.sender,
        };
        let scope =
            if who.sender.is_some() && who.route.kind != ferroclaw_channel_core::ChatKind::Group {
                SaveScope::Me
            } else {
                SaveScope::Chat
            };
        let facts = answer
            .lines()
            .map(|l| l.trim().trim_start_matches(['-', '*', '•']).trim())
            .filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("nothing"))
            .take(FLUSH_FACTS);
        let mut saved = 0;
        for (n, fact) in facts.enumerate() {
            let text: String = fact.chars().take(super::MAX_TEXT_CHARS).collect();
            let call_ref = format!("flush:{}:{}:{n}", turn.session_key, turn.upto);
            match self
                .memory
                .save(
                    &who,
                    scope,
                    &text,
                    &[],
                    Some(turn.session_key),
                    Some(call_ref),
                )
                .await
            {
                Ok(_) => saved += 1,
                Err(why) => tracing::warn!(error = %why, "a fact from compaction was not saved"),
            }
        }
        if saved > 0 {
            tracing::info!(saved, "facts saved to memory before compaction");
        }
    }
}
