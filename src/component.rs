//! A capability as the engine sees it: what it hands the engine (its tools, its chat
//! commands, its lines in `/status`, a section of the system prompt) and what it does around
//! a turn (put handles in for its tools, recall what the message calls to mind, read what
//! compaction drops, let go of a session's resources on `/new`).
//!
//! A feature lives in its own folder (its tools, its commands, its store trait) and
//! implements [`Component`]; `crate::features` builds each one once from the config and the
//! services it needs. The engine holds them as trait objects and names none of them. Knows
//! the tool and persona types; not the engine, not a channel.

use crate::agents::AgentProfile;
pub use crate::commands::CommandInfo;
use crate::policy::Persona;
use crate::spawn::Spawner;
use crate::storage::{SessionRow, StoreError};
use crate::tools::{Tool, TurnHandles};
use async_trait::async_trait;
use ferroclaw_channel_core::{ChatRoute, OutboundKind};
use std::sync::Arc;

/// What a command (or a `/status` line) is answered for.
pub struct CommandScope<'a> {
    pub session: &'a SessionRow,
    /// The session's agent.
    pub agent: &'a Arc<AgentProfile>,
    /// Subagents, where this turn may reach them.
    pub spawner: Option<&'a Arc<dyn Spawner>>,
    /// Who asked (a person's platform id, in the session's channel).
    pub sender: Option<&'a str>,
}

/// The turn a component prepares handles for.
pub struct TurnScope<'a> {
    pub session_key: &'a str,
    /// The chat of the message answered, and its platform id.
    pub route: &'a ChatRoute,
    pub message_id: &'a str,
    pub persona: &'a Persona,
    /// Who sent the message (None for a subagent's step or a job).
    pub sender: Option<&'a str>,
    /// How many files came with the message.
    pub attachments: usize,
    /// The subagent run whose outcome the message reports (an internal message).
    pub reports_run: Option<&'a str>,
}

/// The turn whose compaction is about to drop history.
pub struct CompactionScope<'a> {
    pub session_key: &'a str,
    pub route: &'a ChatRoute,
    /// Who sent the message being answered (None for a subagent's step or a job).
    pub sender: Option<&'a str>,
    /// The last transcript entry dropped (with the session, the compaction's identity).
    pub upto: i64,
}

/// A command's answer.
pub type Reply = (OutboundKind, String);

#[async_trait]
pub trait Component: Send + Sync {
    /// The tools it contributes (registered once at start).
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }
    /// The chat commands it answers.
    fn commands(&self) -> &'static [CommandInfo] {
        &[]
    }
    /// Answer `/<name> <args>` (one of [`Component::commands`]).
    async fn command(
        &self,
        _name: &str,
        _args: &str,
        _cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        Ok((OutboundKind::Error, "This command is not available.".into()))
    }
    /// Its lines in `/status`.
    async fn status(&self, _cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    /// Put in what its tools need from this turn (turn handles).
    fn prepare_turn(&self, _turn: &TurnScope<'_>, _handles: &mut TurnHandles) {}
    /// A section of the system prompt for `persona` (after its own prompt).
    fn prompt_section(&self, _persona: &Persona) -> Option<String> {
        None
    }
    /// What it recalls for the message `text` of this turn: a section shown with the turn's
    /// calls after the history (the prompt's changing part: the stable prefix stays cached).
    async fn recall(&self, _turn: &TurnScope<'_>, _text: &str) -> Option<String> {
        None
    }
    /// The instruction of one bounded model call that reads the history compaction is about
    /// to drop (None: it does not need to).
    fn before_compaction(&self) -> Option<&'static str> {
        None
    }
    /// What that call answered.
    async fn compacted(&self, _turn: &CompactionScope<'_>, _answer: &str) {}
    /// A session started fresh (`/new`): let go of what it held for it.
    async fn session_reset(&self, _session_key: &str) {}
}
