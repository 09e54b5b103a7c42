//! Rows the store reads and writes, in ferroclaw's own types.

use super::states::{OutboxState, PairingState, RunMode, RunState, TranscriptRole};
use ferroclaw_channel_core::{ChatRoute, InboundMessage, OutboundKind, OutboundMessage};

/// The key under which the side effects of a journal entry's turn are recorded
/// (`tool_effects.turn_key`).
pub fn effects_key(journal_id: i64) -> String {
    format!("j{journal_id}")
}

/// The key under which the side effects of a subagent run's step are recorded.
pub fn run_effects_key(run_id: &str, step: i64) -> String {
    format!("r{run_id}:{step}")
}

/// The range `[from, to)` holding the keys of every step of a run (`;` follows `:`), so the
/// primary key's index serves a delete of them all.
pub fn run_effects_range(run_id: &str) -> (String, String) {
    (format!("r{run_id}:"), format!("r{run_id};"))
}

/// One journalled inbound message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub id: i64,
    pub session_key: String,
    pub message: InboundMessage,
    /// Its turn may have run before (found unanswered on start, or retried in-process): the
    /// attempt is counted and recorded side effects are replayed, not repeated. A first
    /// attempt costs no extra write.
    pub redo: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // built once per inbound message; boxing buys nothing
pub enum JournalInsert {
    New(JournalEntry),
    Duplicate { id: i64, session_key: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub key: String,
    pub route: ChatRoute,
    pub epoch: i64,
    pub model: Option<String>,
    pub summary: Option<String>,
    pub summary_upto: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub last_model: Option<String>,
    pub updated_at: i64,
    /// The session's plan as JSON (see `crate::plan`), if it has one.
    pub plan: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptEntry {
    pub id: i64,
    pub role: TranscriptRole,
    pub content: String,
    /// JSON array of tool calls made by an assistant message.
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub model: Option<String>,
    pub tokens_in: i64,
    pub tokens_out: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTranscriptEntry {
    pub role: TranscriptRole,
    pub content: String,
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub model: Option<String>,
    pub tokens_in: i64,
    pub tokens_out: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutbound {
    pub route: ChatRoute,
    pub kind: OutboundKind,
    pub text: String,
    pub in_reply_to: Option<String>,
    pub edit_of: Option<i64>,
    /// A file to send with `text` as its caption.
    pub file: Option<ferroclaw_channel_core::OutboundFile>,
    /// The approval request a message of kind `approval` asks.
    pub approval: Option<ferroclaw_channel_core::ApprovalPrompt>,
}

/// Everything one turn writes, committed in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCommit {
    /// The journal entry this turn answers (None for internal turns).
    pub journal_id: Option<i64>,
    pub session_key: String,
    pub epoch: i64,
    pub entries: Vec<NewTranscriptEntry>,
    pub outbound: Vec<NewOutbound>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub last_model: Option<String>,
    pub now_ms: i64,
    /// Drop the side effects recorded for the journal entry's turn (it called tools, or was
    /// redone); a turn without tool calls skips the statement.
    pub clear_effects: bool,
    /// A subagent's step (run id, step number): its recorded side effects are dropped and
    /// the run is marked as past that step, in the same transaction.
    pub run_step: Option<(String, i64)>,
}

/// One outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub message: OutboundMessage,
    pub session_key: String,
    pub state: OutboxState,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub platform_message_id: Option<String>,
}

pub(crate) fn kind_from_db(s: &str) -> Result<OutboundKind, super::StoreError> {
    OutboundKind::parse(s)
        .ok_or_else(|| super::StoreError::Corrupt(format!("unknown outbox kind `{s}`")))
}

/// One row of the pairing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRow {
    pub channel: String,
    pub user_id: String,
    pub user_name: String,
    pub code: Option<String>,
    pub state: PairingState,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRequest {
    pub channel: String,
    pub user_id: String,
    pub user_name: String,
    pub code: String,
    pub now_ms: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingOutcome {
    Created(String),
    Pending,
}

/// One subagent run (the `runs` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub id: String,
    /// The agent it runs as.
    pub agent: String,
    pub parent_session: String,
    pub origin_route: ChatRoute,
    pub origin_message: Option<String>,
    pub depth: i64,
    pub label: String,
    pub task: String,
    pub model: String,
    pub mode: RunMode,
    pub state: RunState,
    pub result: Option<String>,
    pub status_message: Option<i64>,
    pub announced: bool,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// What the run runs with, as the subagent registry wrote it (JSON; None for a run
    /// stored before runs could be resumed).
    pub spec: Option<String>,
    /// The step it is on (1 for the task).
    pub step: i64,
    /// That step's input while it runs; None once the step committed.
    pub step_input: Option<String>,
    /// How many times a process started it.
    pub starts: i64,
}

/// What `Store::run_finish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per run's end; boxing buys nothing
pub enum RunFinished {
    /// The run was announced before (by an earlier attempt or another process): nothing
    /// was written.
    AlreadyAnnounced,
    /// Announced now; the parent's new journal entry, when the parent is told.
    Announced { parent_turn: Option<JournalEntry> },
}

/// Everything a run's end writes, in one transaction: the run's outcome, its announcement
/// (and status edit) in the origin thread, and the internal message for the parent session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFinish {
    pub run_id: String,
    pub state: RunState,
    pub result: String,
    /// None for a `delegate` whose caller took the outcome as its result.
    pub announcement: Option<NewOutbound>,
    pub status_edit: Option<NewOutbound>,
    /// Journalled for the parent session so the parent agent reacts (None: nobody to tell).
    pub parent_message: Option<(InboundMessage, String)>,
    /// For a subagent's own child: `(parent run id, outcome)`, put in that run's inbox when
    /// it still runs (it becomes a step of the parent).
    pub report: Option<(String, String)>,
    pub now_ms: i64,
}

/// What a running subagent was told and has not taken yet (`run_inbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailKind {
    /// A `steer` instruction from the session that spawned it.
    Steer,
    /// The outcome of a child it spawned.
    Report,
}

impl MailKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MailKind::Steer => "steer",
            MailKind::Report => "report",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "steer" => Some(MailKind::Steer),
            "report" => Some(MailKind::Report),
            _ => None,
        }
    }
}

/// One waiting item of a run's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMail {
    pub id: i64,
    pub kind: MailKind,
    pub text: String,
}

/// Where a team task's runs belong: the lead's session and the chat/thread it was asked in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskOrigin {
    pub session: String,
    pub route: ChatRoute,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A comment on a team task.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskComment {
    pub agent: String,
    pub text: String,
}

/// A task to add to a team's board.
#[derive(Debug, Clone)]
pub struct NewTeamTask {
    pub team: String,
    pub title: String,
    pub description: String,
    pub assignee: Option<String>,
    pub blocked_by: Vec<i64>,
    pub created_by: String,
    pub origin: Option<TaskOrigin>,
}

/// A task on a team's board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamTask {
    pub id: i64,
    pub team: String,
    pub title: String,
    pub description: String,
    pub status: crate::storage::TeamTaskStatus,
    pub assignee: Option<String>,
    /// The member working it.
    pub owner: Option<String>,
    pub blocked_by: Vec<i64>,
    pub result: Option<String>,
    pub comments: Vec<TaskComment>,
    pub created_by: String,
    pub origin: Option<TaskOrigin>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A message between team members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamMessage {
    pub id: i64,
    pub sender: String,
    pub text: String,
    pub created_at: i64,
}

/// A scheduled job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    /// The session whose turn created it (its `/schedules` lists it).
    pub session_key: String,
    pub agent: String,
    pub origin_route: ChatRoute,
    pub origin_message: Option<String>,
    pub kind: crate::storage::JobKind,
    /// The cron expression, or the one-shot time as asked.
    pub spec: String,
    pub timezone: String,
    /// What the agent is asked when it fires.
    pub prompt: String,
    /// Run in the origin session (else the job's own session).
    pub in_origin: bool,
    /// A check that stays silent when there is nothing to report.
    pub heartbeat: bool,
    pub missed: crate::storage::MissedPolicy,
    pub state: crate::storage::JobState,
    pub next_run: Option<i64>,
    pub runs: i64,
    pub last_run: Option<i64>,
    /// How many job turns led to it (0: a person asked for it).
    pub chain: i64,
    /// The message whose turn created it.
    pub created_in: String,
    pub created_at: i64,
}
