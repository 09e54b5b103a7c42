//! Durable state: sessions, transcripts, the inbound journal and the outbox (SPEC section 11).
//!
//! [`Store`] (the sum of one trait per aggregate: journal, leases, sessions, transcripts,
//! outbox, outbox reads, pairing, runs, run steps, tool effects, teams, jobs, usage, approvals, memories,
//! alert incidents) is the only way
//! the rest of ferroclaw touches the database. Each aggregate is one file holding its trait
//! and its SQL, written once and expanded for the SQLite and the PostgreSQL store, so the two
//! cannot drift apart; both pass one conformance suite (`tests/it/store_conformance.rs`). This module knows rows and
//! transactions; it does not know channels, models or chat commands.

mod alerts;
mod approvals;
mod connect;
mod effects;
mod jobs;
mod journal;
mod leases;
mod limits;
mod memories;
mod outbox;
mod outbox_reads;
mod pairing;
mod postgres;
mod run_steps;
mod runs;
mod sessions;
mod sql_text;
mod sqlite;
mod sqlite_conns;
mod sqlite_schema;
mod states;
mod teams;
mod transcripts;
mod types;
mod usage;

pub use alerts::{AlertStore, Incident};
pub use approvals::{
    ApprovalDecision, ApprovalRow, ApprovalRule, ApprovalRuleStore, ApprovalState, ApprovalStore,
    NewApproval, TaintStore,
};
pub use connect::{
    SchemaState, SchemaTooNew, connect, pending_migrations, refuse_newer_schema, schema_state,
};
pub use effects::EffectStore;
pub use jobs::{DueJobStore, JobStore};
pub use journal::{JournalStore, MAX_TURN_ATTEMPTS};
pub use leases::{LaneClaim, LeaseStore};
pub use limits::{LimitStore, RateCheck, ReachCount};
pub use memories::{
    MemoryLinkStore, MemoryRow, MemoryStore, NewMemory, person_scope, scope_token, words_of,
};
pub use outbox::OutboxStore;
pub use outbox_reads::OutboxReads;
pub use pairing::PairingStore;
pub use postgres::PostgresStore;
pub use run_steps::RunStepStore;
pub use runs::RunStore;
pub use sessions::SessionStore;
pub use sqlite::SqliteStore;
pub use sqlite_schema::fresh_image;
pub use states::{
    JobKind, JobState, JournalState, MissedPolicy, OutboxState, PairingState, RunMode, RunState,
    TeamTaskStatus, TranscriptRole,
};
pub use teams::TeamStore;
pub use transcripts::TranscriptStore;
pub use types::*;
pub use usage::{BudgetHold, NewUsage, UsageFilter, UsageGroup, UsageStore, UsageTotal};

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
/// is one statement or one transaction. Each aggregate is one file with its trait and its
/// SQL, written once for both dialects (`journal.rs`, `sessions.rs`, `outbox.rs`, ...).
#[async_trait]
pub trait Store:
    JournalStore
    + SessionStore
    + TranscriptStore
    + OutboxStore
    + OutboxReads
    + PairingStore
    + RunStore
    + RunStepStore
    + EffectStore
    + LeaseStore
    + TeamStore
    + JobStore
    + DueJobStore
    + UsageStore
    + LimitStore
    + ApprovalStore
    + ApprovalRuleStore
    + TaintStore
    + MemoryStore
    + AlertStore
    + Send
    + Sync
{
    /// Apply pending migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap write round trip (used by `/readyz`): fails when the database cannot write.
    async fn ping(&self) -> StoreResult<()>;
    /// Let go what the store caches in this process (SQLite's page caches, which a burst
    /// fills): called once a burst is over, before the heap is trimmed.
    async fn release_memory(&self);
}

/// `Store` itself over each dialect (its aggregates are in their own files).
macro_rules! store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::Store for $store {
            async fn migrate(&self) -> $crate::storage::StoreResult<()> {
                // Each store migrates its own way (`sqlite_schema.rs`, `postgres.rs`).
                self.migrate_schema().await
            }

            async fn release_memory(&self) {
                self.release_idle_memory().await
            }

            async fn ping(&self) -> $crate::storage::StoreResult<()> {
                // A write, not a read: a database that can no longer write (a full disk) is
                // not ready, although it still answers reads.
                sqlx::query("INSERT INTO write_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at")
                    .bind($crate::clock::now_ms())
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

store!(SqliteStore);
store!(PostgresStore);
