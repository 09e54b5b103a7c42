//! The seam between the agent loop and subagents: what a turn may ask of them
//! ([`Spawner`]) and what a running agent reports about its steps ([`StepObserver`]).
//!
//! The engine and the tools depend on these traits, never on the subagent registry; the
//! registry (`crate::subagents`) implements them and the composition root (`crate::app`)
//! hands it to the lanes, which pass it into each turn. So the module graph has no cycle and
//! nothing is wired after construction.

use crate::providers::ModelRef;
use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// A subagent's own session key (SPEC section 3): `agent:<agent>:subagent:<run>`.
pub fn subagent_session_key(agent: &str, run_id: &str) -> String {
    format!("agent:{agent}:subagent:{run_id}")
}

/// The run whose session is `session_key` (the inverse of [`subagent_session_key`]), if it
/// is a subagent's own session.
pub fn run_of_session(session_key: &str) -> Option<&str> {
    session_key
        .strip_prefix("agent:")
        .and_then(|rest| rest.split_once(":subagent:"))
        .map(|(_, run_id)| run_id)
}

/// Where a spawn comes from: the spawning session and the chat/thread to announce into.
#[derive(Clone)]
pub struct SpawnScope {
    pub parent_session: String,
    pub origin: ChatRoute,
    pub origin_message: Option<String>,
    /// Depth of the spawning agent (the user's agent is 0).
    pub depth: u32,
    pub parent_model: ModelRef,
    pub parent_system: Arc<str>,
    /// Tool names the spawning agent has.
    pub parent_tools: Arc<[String]>,
    /// The spawning agent (its id and `may_delegate` links decide `agent_id`).
    pub agent: Arc<crate::agents::AgentProfile>,
    /// Spawns already made by the turn this scope belongs to
    /// (`subagents.max_spawns_per_turn` caps them).
    pub spawned_this_turn: Arc<AtomicU32>,
    /// The person whose message the tree started from (their platform id in `origin`'s
    /// channel): the tree's turns work for them (their caps, their approvals in a DM).
    pub requester: Option<String>,
}

/// What a run does for the turn that started it: its model calls are accounted under it
/// (`crate::policy::CallKind`), and all of them are background work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunWork {
    /// `sessions_spawn`.
    #[default]
    Subagent,
    /// `delegate` to another agent.
    Delegate,
    /// A team task's run.
    TeamTask,
}

impl RunWork {
    pub fn is_subagent(&self) -> bool {
        *self == RunWork::Subagent
    }
}

/// The `sessions_spawn` parameters.
#[derive(Debug, Clone, Default)]
pub struct SpawnRequest {
    pub task: String,
    pub label: Option<String>,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub tools: Option<Vec<String>>,
    pub session_mode: bool,
    /// Run the child's `exec` and file tools in its own container.
    pub sandbox: bool,
    pub timeout_secs: Option<u64>,
    /// Run the child as this agent (None: the spawning agent itself).
    pub agent_id: Option<String>,
    /// A `delegate` that waits: when the child ends while its caller still waits, the
    /// outcome goes to the caller only (no announcement, no parent turn).
    pub waited: bool,
    /// A team task's run: `agent_id` is a member of this team (no `may_delegate` link needed).
    pub team: Option<String>,
    /// What the run does for its parent (how its calls are accounted).
    pub work: RunWork,
    /// The tool call that asks, the same when its turn is redone (`tools::current_call`):
    /// the run's id is derived from it, so a redone call finds the run it started before
    /// instead of starting the same work twice.
    pub call: Option<String>,
    /// The asking turn is redone: look for the run an earlier attempt of `call` started (a
    /// first attempt skips the lookup, so calls made together start in the order given).
    pub redo: bool,
}

/// An accepted spawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Spawned {
    pub run_id: String,
    pub session_key: String,
    pub status: &'static str,
}

/// One child of a session, as `/subagents` and the `subagents` tool list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub id: String,
    pub label: String,
    pub status: String,
    pub runtime_secs: i64,
    pub model: String,
}

/// What a wait for a child found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReport {
    pub run_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'static str>,
}

/// Why a subagent request was not carried out; the text is shown to the model or the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// A limit, the hook or the arguments refused it.
    #[error("{0}")]
    Refused(String),
    /// No such child, or it already ended.
    #[error("{0}")]
    NotFound(String),
    /// The store failed.
    #[error("could not record the run: {0}")]
    Store(String),
}

/// Subagents as a turn sees them.
#[async_trait]
pub trait Spawner: Send + Sync {
    /// Start a child; returns at once.
    async fn spawn(&self, scope: &SpawnScope, request: SpawnRequest)
    -> Result<Spawned, SpawnError>;
    /// Kill a session's child (`target` = run id or label) or `all`. Returns how many.
    fn kill(&self, parent_session: &str, target: &str) -> usize;
    /// Interrupt a child's current step and continue with `message` (kept until the child
    /// takes it, wherever it runs).
    async fn steer(
        &self,
        parent_session: &str,
        target: &str,
        message: &str,
    ) -> Result<(), SpawnError>;
    /// True when children may also run in other processes (which were told of a kill).
    fn spans_processes(&self) -> bool {
        false
    }
    /// Block until a child ends (or `timeout`).
    async fn wait(
        &self,
        parent_session: &str,
        target: &str,
        timeout: Duration,
    ) -> Result<RunReport, SpawnError>;
    /// This session's children, oldest first.
    async fn list(&self, parent_session: &str) -> Result<Vec<RunSummary>, SpawnError>;
    /// Live (queued or running) children of a session.
    fn live_children(&self, parent_session: &str) -> usize;
}

/// Hears which tools a running agent is about to use (a subagent edits its status message).
#[async_trait]
pub trait StepObserver: Send + Sync {
    async fn tools(&self, names: &[&str]);
    /// Output of a running tool (`exec`), as it arrives.
    async fn output(&self, _chunk: &str) {}
    /// The running tool's output is complete (show what a throttle held back).
    async fn output_end(&self) {}
}

/// What a turn can do with subagents: the registry and where this turn's children belong.
#[derive(Clone)]
pub struct SpawnHandle {
    pub spawner: Arc<dyn Spawner>,
    pub scope: Arc<SpawnScope>,
}
