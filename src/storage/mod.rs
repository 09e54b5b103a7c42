//! Durable state: sessions, transcripts, the inbound journal and the outbox (SPEC section 11).
//!
//! [`Store`] (the sum of one trait per aggregate: journal, sessions, outbox, pairing, runs,
//! tool effects) is the only way the rest of ferroclaw touches the database. It has one SQLite and
//! one PostgreSQL implementation that share their SQL text (`shared_sql.rs`) and pass one
//! conformance suite (`tests/it/store_conformance.rs`). This module knows rows and
//! transactions; it does not know channels, models or chat commands.

mod connect;
mod postgres;
mod shared_sql;
mod sqlite;
mod sqlite_schema;
mod states;
mod types;

pub use connect::connect;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use states::{
    JobKind, JobState, JournalState, MissedPolicy, OutboxState, PairingState, RunMode, RunState,
    TeamTaskStatus, TranscriptRole,
};
pub use types::*;

use async_trait::async_trait;
use ferroclaw_channel_core::{ChatRoute, InboundMessage};

/// Storage failures. Callers retry later or report; they never see SQL.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The journal entry was already answered (by an earlier attempt or another process).
    #[error("journal entry {0} was already answered")]
    AlreadyAnswered(i64),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The whole store: every aggregate, plus migrations and the readiness probe. Each method
/// is one statement or one transaction; an implementation may use its own dialect per
/// aggregate (both share their SQL today, `shared_sql.rs`).
#[async_trait]
pub trait Store:
    JournalStore
    + SessionStore
    + OutboxStore
    + PairingStore
    + RunStore
    + EffectStore
    + LeaseStore
    + TeamStore
    + JobStore
    + Send
    + Sync
{
    /// Apply pending migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap write round trip (used by `/readyz`): fails when the database cannot write.
    async fn ping(&self) -> StoreResult<()>;
}

/// The inbound journal: every message, stored before it is acknowledged.
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Journal an inbound message. A message already journalled for the same channel, chat
    /// and platform id is reported as a duplicate and not stored again.
    async fn journal_insert(
        &self,
        message: &InboundMessage,
        session_key: &str,
        now_ms: i64,
    ) -> StoreResult<JournalInsert>;
    /// Count one more turn attempt for a journal entry; returns the count (0 when there is
    /// no such entry).
    async fn journal_begin_attempt(&self, id: i64) -> StoreResult<i64>;
    /// Journal entries not yet answered, oldest first.
    async fn journal_pending(&self) -> StoreResult<Vec<JournalEntry>>;
    /// State of one journal entry (`pending` or `done`).
    async fn journal_state(&self, id: i64) -> StoreResult<Option<JournalState>>;
    /// The tokens (input, output) the turn answering entry `id` used; (0, 0) while it runs.
    async fn journal_usage(&self, id: i64) -> StoreResult<(i64, i64)>;
    /// The oldest pending entry of one session.
    async fn journal_next(&self, session_key: &str) -> StoreResult<Option<JournalEntry>>;
    /// Sessions with pending entries whose lease is free or expired at `now_ms`, oldest
    /// entry first (work another process left, or nobody claimed yet).
    async fn journal_unleased(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<String>>;
}

/// Session leases: which process works a session's pending entries (several processes on
/// one PostgreSQL database).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Take (or keep) the lease of `session_key` for `owner` until `until_ms`, when it is
    /// free, expired at `now_ms`, or already `owner`'s. Returns whether `owner` holds it.
    async fn lease_claim(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<bool>;
    /// Extend `owner`'s leases of `keys`.
    async fn lease_renew(&self, keys: &[String], owner: &str, until_ms: i64) -> StoreResult<()>;
    /// Give the lease up (only `owner`'s).
    async fn lease_release(&self, session_key: &str, owner: &str) -> StoreResult<()>;
}

/// Sessions, their transcripts, and the one commit of a finished turn.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session row, created (epoch 0) when it does not exist yet.
    async fn session_get_or_create(
        &self,
        key: &str,
        route: &ChatRoute,
        now_ms: i64,
    ) -> StoreResult<SessionRow>;
    async fn session_get(&self, key: &str) -> StoreResult<Option<SessionRow>>;
    /// Set (or clear) the session's model override.
    async fn session_set_model(&self, key: &str, model: Option<&str>) -> StoreResult<()>;
    /// Start a fresh transcript: bump the epoch (old entries stay, archived) and drop the
    /// summary and the plan. Returns the new epoch.
    async fn session_reset(&self, key: &str, now_ms: i64) -> StoreResult<i64>;
    /// Store (or clear) the session's plan JSON.
    async fn session_set_plan(&self, key: &str, plan: Option<&str>) -> StoreResult<()>;
    /// Store a compaction summary covering transcript entries up to `upto` (inclusive).
    async fn session_set_summary(&self, key: &str, summary: &str, upto: i64) -> StoreResult<()>;
    /// Sessions, most recently active first.
    /// Sessions, most recently active first; `key_prefix` filters (a channel's sessions all
    /// start with `agent:main:<channel>:`), `offset` pages.
    async fn session_list(
        &self,
        key_prefix: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<SessionRow>>;

    /// The newest `limit` transcript entries of the session's epoch after `after_id`, oldest
    /// first. Cost depends on `limit`, not on the transcript's length.
    async fn transcript_recent(
        &self,
        key: &str,
        epoch: i64,
        after_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Atomically: append transcript entries, queue bot messages, add token usage, and mark
    /// the journal entry answered. Returns the outbox ids in order.
    async fn commit_turn(&self, turn: &TurnCommit) -> StoreResult<Vec<i64>>;
}

/// Bot messages waiting for delivery, and reads of those delivered.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Queue bot messages outside a turn commit (interim messages, edits).
    async fn outbox_push(
        &self,
        session_key: &str,
        messages: &[NewOutbound],
        now_ms: i64,
    ) -> StoreResult<Vec<i64>>;
    /// Undelivered messages of a channel that are due at `now_ms`, oldest first. A
    /// conversation whose earliest pending message waits for its retry yields nothing (order
    /// within a conversation), so a receiver that is down costs nothing until it is due.
    async fn outbox_pending(
        &self,
        channel: &str,
        limit: i64,
        now_ms: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// [`outbox_pending`](Self::outbox_pending) of one conversation (chat and thread): read
    /// again by a process once it holds the conversation's delivery lease.
    async fn outbox_pending_in(
        &self,
        channel: &str,
        chat_id: &str,
        thread_id: Option<&str>,
        limit: i64,
        now_ms: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// The earliest retry time (unix ms), at or after `since_ms`, among the channel's pending
    /// messages (rows held back behind a waiting one have older times and are not counted).
    async fn outbox_next_attempt(&self, channel: &str, now_ms: i64) -> StoreResult<Option<i64>>;
    /// Mark messages delivered, with the platform id each got, in one statement.
    async fn outbox_mark_delivered(
        &self,
        delivered: &[(i64, Option<String>)],
        now_ms: i64,
    ) -> StoreResult<()>;
    /// Try row `id` again at `next_attempt_ms`; `counted` false for a rate limit, which is
    /// the platform pacing us, not the message failing (it does not bring the give-up nearer).
    async fn outbox_retry_later(
        &self,
        id: i64,
        next_attempt_ms: i64,
        error: &str,
        counted: bool,
    ) -> StoreResult<()>;
    async fn outbox_mark_rejected(&self, id: i64, error: &str) -> StoreResult<()>;
    /// The highest outbox id of a channel (0 when it has none).
    async fn outbox_last_id(&self, channel: &str) -> StoreResult<i64>;
    /// One outbox row by id.
    async fn outbox_get(&self, id: i64) -> StoreResult<Option<OutboxEntry>>;
    /// Undelivered messages of every channel, oldest first.
    async fn outbox_backlog(&self, limit: i64) -> StoreResult<Vec<OutboxEntry>>;
    /// How many messages wait for delivery, per channel.
    async fn outbox_backlog_counts(&self) -> StoreResult<Vec<(String, i64)>>;
    /// Messages of a channel (all conversations) with id > `after`, oldest first.
    async fn outbox_after(
        &self,
        channel: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// Messages answering the inbound platform message `in_reply_to` in one conversation.
    async fn outbox_replies(
        &self,
        channel: &str,
        chat_id: &str,
        in_reply_to: &str,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// Messages of one conversation with id > `after`, oldest first.
    async fn outbox_conversation(
        &self,
        channel: &str,
        chat_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
}

/// Pairing codes and approved users.
#[async_trait]
pub trait PairingStore: Send + Sync {
    /// The pairing row of a user on a channel, if any (expired pending rows included).
    async fn pairing_get(&self, channel: &str, user_id: &str) -> StoreResult<Option<PairingRow>>;
    /// Ask for a pairing code: `Created` with the new code, `Pending` when one is already
    /// pending; when `max_pending` codes are pending on the channel the oldest is dropped. Expired pending
    /// codes are dropped first.
    async fn pairing_request(
        &self,
        request: &PairingRequest,
        max_pending: i64,
    ) -> StoreResult<PairingOutcome>;
    /// Pending (unexpired) and approved rows.
    async fn pairing_list(&self, now_ms: i64) -> StoreResult<Vec<PairingRow>>;
    /// Approve a pending, unexpired code. Returns the approved row.
    async fn pairing_approve(&self, code: &str, now_ms: i64) -> StoreResult<Option<PairingRow>>;
    /// Forget a user on every channel (approved or pending). Returns the rows removed.
    async fn pairing_revoke(&self, user_id: &str) -> StoreResult<u64>;
}

/// Subagent runs and their one announcement.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Record a new run.
    async fn run_insert(&self, run: &RunRow) -> StoreResult<()>;
    async fn run_get(&self, id: &str) -> StoreResult<Option<RunRow>>;
    /// Runs of a parent session, oldest first.
    async fn runs_of(&self, parent_session: &str) -> StoreResult<Vec<RunRow>>;
    /// The newest runs of every session, newest first.
    async fn runs_recent(&self, limit: i64) -> StoreResult<Vec<RunRow>>;
    /// Runs whose outcome has not been announced (interrupted by a stop), oldest first;
    /// with `expired_at`, only those whose lease (if any) ended before it (another process
    /// may still run the others).
    async fn runs_unannounced(&self, expired_at: Option<i64>) -> StoreResult<Vec<RunRow>>;
    /// Extend the lease of live runs `ids` (the process running them).
    async fn runs_lease(&self, ids: &[String], until_ms: i64) -> StoreResult<()>;
    /// Take a run over to start it (again): only an unannounced run whose lease, with
    /// `expired_at`, ended before then; sets its lease to `lease_until` and counts the start.
    /// Returns how many times it has now been started, or None when it is not this caller's.
    async fn run_claim(
        &self,
        id: &str,
        expired_at: Option<i64>,
        lease_until: Option<i64>,
    ) -> StoreResult<Option<i64>>;
    /// The run starts step `step` with `input` (resumed from there if its process dies);
    /// with `mail`, that inbox item is taken in the same transaction (false: it was gone).
    async fn run_set_step(
        &self,
        id: &str,
        step: i64,
        input: &str,
        mail: Option<i64>,
    ) -> StoreResult<bool>;
    /// Put something in a run's inbox; false when the run has ended (nothing is written).
    async fn run_mail_put(
        &self,
        run_id: &str,
        kind: MailKind,
        text: &str,
        now_ms: i64,
    ) -> StoreResult<bool>;
    /// The oldest item waiting in a run's inbox.
    async fn run_mail_next(&self, run_id: &str) -> StoreResult<Option<RunMail>>;
    /// Set a run's state (e.g. running) and, when given, its start time and status message.
    async fn run_set_state(
        &self,
        id: &str,
        state: RunState,
        started_at: Option<i64>,
    ) -> StoreResult<()>;
    async fn run_set_status_message(&self, id: &str, outbox_id: i64) -> StoreResult<()>;
    /// End a run and announce it, once (a second call writes nothing).
    async fn run_finish(&self, finish: &RunFinish) -> StoreResult<RunFinished>;
}

/// Side effects recorded per turn, replayed when a turn is redone.
#[async_trait]
pub trait EffectStore: Send + Sync {
    /// The recorded result of a side-effecting tool call of a turn (`crate::tools::EffectLog`).
    async fn tool_effect_get(&self, turn_key: &str, call_key: &str) -> StoreResult<Option<String>>;
    /// Record the result of a side-effecting tool call of a turn.
    async fn tool_effect_put(
        &self,
        turn_key: &str,
        call_key: &str,
        result: &str,
        now_ms: i64,
    ) -> StoreResult<()>;
    /// Drop one recorded effect (it is no longer anyone's to replay).
    async fn tool_effect_forget(&self, turn_key: &str, call_key: &str) -> StoreResult<()>;
}

/// Team boards and inboxes (SPEC section 12).
#[async_trait]
pub trait TeamStore: Send + Sync {
    /// Add a task (open); returns it with its id.
    async fn team_task_create(&self, task: &NewTeamTask, now_ms: i64) -> StoreResult<TeamTask>;
    /// A team's tasks, oldest first.
    async fn team_tasks(&self, team: &str) -> StoreResult<Vec<TeamTask>>;
    /// Write a task back if its status is still `expected` (false: someone changed it).
    async fn team_task_save(
        &self,
        task: &TeamTask,
        expected: TeamTaskStatus,
        now_ms: i64,
    ) -> StoreResult<bool>;
    /// Queue a message for each recipient.
    async fn team_message_send(
        &self,
        team: &str,
        sender: &str,
        recipients: &[String],
        text: &str,
        now_ms: i64,
    ) -> StoreResult<()>;
    /// A member's unread messages, marked read.
    async fn team_inbox_take(
        &self,
        team: &str,
        recipient: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<TeamMessage>>;
}

/// Scheduled jobs.
#[async_trait]
pub trait JobStore: Send + Sync {
    async fn job_insert(&self, job: &Job) -> StoreResult<()>;
    async fn job_get(&self, id: &str) -> StoreResult<Option<Job>>;
    /// Jobs created by a session (every state), newest first.
    async fn jobs_of(&self, session_key: &str) -> StoreResult<Vec<Job>>;
    /// The most recent jobs of every session (admin API).
    async fn jobs_recent(&self, limit: i64) -> StoreResult<Vec<Job>>;
    /// Active jobs a session has.
    async fn jobs_live_count(&self, session_key: &str) -> StoreResult<i64>;
    /// Jobs created by the turn that answered message `message_id`.
    async fn jobs_created_in(&self, message_id: &str) -> StoreResult<i64>;
    /// Cancel an active job of a session; false when there is none.
    async fn job_cancel(&self, session_key: &str, id: &str) -> StoreResult<bool>;
    /// Active jobs due at `now_ms`, earliest first.
    async fn jobs_due(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<Job>>;
    /// The earliest next run of any active job.
    async fn jobs_next_due(&self) -> StoreResult<Option<i64>>;
    /// Whether a turn of job `id` (journalled in `session_key`) is still waiting or running.
    async fn job_turn_pending(&self, id: &str, session_key: &str) -> StoreResult<bool>;
    /// One due time of a job, in one transaction: move `next_run` from `due` to `next` (None:
    /// the job is done) if no one else did, and when `turn` is given journal it. Returns
    /// whether this call did it, and the journal entry to run.
    async fn job_advance(
        &self,
        id: &str,
        due: i64,
        next: Option<i64>,
        turn: Option<(&InboundMessage, &str)>,
        now_ms: i64,
    ) -> StoreResult<(bool, Option<JournalEntry>)>;
}
