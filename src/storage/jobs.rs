//! Scheduled jobs, and what the scheduler asks of them: the due ones, and the one transaction that fires a run.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Scheduled jobs (`crate::schedules`).
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
}

/// What the scheduler asks: the due jobs, and firing one (`next_run` compare-and-set and
/// the job turn's journal entry in one transaction).
#[async_trait]
pub trait DueJobStore: Send + Sync {
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

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_job(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::Job> {
                use sqlx::Row;
                use $crate::storage::states::parse_stored;
                let route: String = row.try_get("origin_route")?;
                let flag = |name: &str| -> $crate::storage::StoreResult<bool> {
                    Ok(row.try_get::<i64, _>(name)? != 0)
                };
                Ok($crate::storage::Job {
                    id: row.try_get("id")?,
                    session_key: row.try_get("session_key")?,
                    agent: row.try_get("agent")?,
                    origin_route: serde_json::from_str(&route).map_err(|e| {
                        $crate::storage::StoreError::Corrupt(format!("job route: {e}"))
                    })?,
                    origin_message: row.try_get("origin_message")?,
                    kind: parse_stored(
                        "job kind",
                        &row.try_get::<String, _>("kind")?,
                        $crate::storage::JobKind::parse,
                    )?,
                    spec: row.try_get("spec")?,
                    timezone: row.try_get("timezone")?,
                    prompt: row.try_get("prompt")?,
                    in_origin: flag("in_origin")?,
                    heartbeat: flag("heartbeat")?,
                    missed: parse_stored(
                        "job missed policy",
                        &row.try_get::<String, _>("missed")?,
                        $crate::storage::MissedPolicy::parse,
                    )?,
                    state: parse_stored(
                        "job state",
                        &row.try_get::<String, _>("state")?,
                        $crate::storage::JobState::parse,
                    )?,
                    next_run: row.try_get("next_run")?,
                    runs: row.try_get("runs")?,
                    last_run: row.try_get("last_run")?,
                    chain: row.try_get("chain")?,
                    created_in: row.try_get("created_in")?,
                    created_at: row.try_get("created_at")?,
                })
            }
        }
    };
}

rows!(super::SqliteStore, sqlx::Sqlite);
rows!(super::PostgresStore, sqlx::Postgres);

macro_rules! job_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::JobStore for $store {
            async fn job_insert(&self, job: &$crate::storage::Job) -> $crate::storage::StoreResult<()> {
                let route = serde_json::to_string(&job.origin_route).expect("routes serialise");
                sqlx::query(
                    "INSERT INTO jobs (id, session_key, agent, origin_route, origin_message, kind, spec, timezone, prompt, \
                     in_origin, heartbeat, missed, state, next_run, runs, last_run, chain, created_in, created_at) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)",
                )
                .bind(&job.id)
                .bind(&job.session_key)
                .bind(&job.agent)
                .bind(route)
                .bind(&job.origin_message)
                .bind(job.kind.as_str())
                .bind(&job.spec)
                .bind(&job.timezone)
                .bind(&job.prompt)
                .bind(i64::from(job.in_origin))
                .bind(i64::from(job.heartbeat))
                .bind(job.missed.as_str())
                .bind(job.state.as_str())
                .bind(job.next_run)
                .bind(job.runs)
                .bind(job.last_run)
                .bind(job.chain)
                .bind(&job.created_in)
                .bind(job.created_at)
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn job_get(&self, id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::Job>> {
                let row = sqlx::query("SELECT * FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_job).transpose()
            }

            async fn jobs_of(&self, session_key: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query("SELECT * FROM jobs WHERE session_key = $1 ORDER BY created_at DESC, id")
                    .bind(session_key)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_recent(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query("SELECT * FROM jobs ORDER BY created_at DESC, id LIMIT $1")
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_live_count(&self, session_key: &str) -> $crate::storage::StoreResult<i64> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE session_key = $1 AND state = 'active'")
                    .bind(session_key)
                    .fetch_one(&self.read)
                    .await?)
            }

            async fn jobs_created_in(&self, message_id: &str) -> $crate::storage::StoreResult<i64> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE created_in = $1")
                    .bind(message_id)
                    .fetch_one(&self.read)
                    .await?)
            }

            async fn job_cancel(&self, session_key: &str, id: &str) -> $crate::storage::StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE jobs SET state = 'cancelled', next_run = NULL WHERE id = $1 AND session_key = $2 AND state = 'active'",
                )
                .bind(id)
                .bind(session_key)
                .execute(&self.write)
                .await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}

job_store!(super::SqliteStore, sqlx::Sqlite);
job_store!(super::PostgresStore, sqlx::Postgres);

macro_rules! due_job_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::DueJobStore for $store {
            async fn jobs_due(&self, now_ms: i64, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query(
                    "SELECT * FROM jobs WHERE state = 'active' AND next_run <= $1 ORDER BY next_run, id LIMIT $2",
                )
                .bind(now_ms)
                .bind(limit)
                // The writer (SQLite): an idle service's scheduler does not open a reader
                // connection (a thread and its cache) just to learn there is nothing due.
                .fetch_all(&self.write)
                .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_next_due(&self) -> $crate::storage::StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar("SELECT MIN(next_run) FROM jobs WHERE state = 'active'")
                    .fetch_one(&self.write)
                    .await?)
            }

            async fn job_turn_pending(&self, id: &str, session_key: &str) -> $crate::storage::StoreResult<bool> {
                // Job turns' ids are `job:<id>:<due>` (schedules::turn_message); ids are hex.
                let pending: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM inbound WHERE session_key = $1 AND state = 'pending' \
                     AND platform_id LIKE $2 LIMIT 1",
                )
                .bind(session_key)
                .bind(format!("job:{id}:%"))
                .fetch_optional(&self.write)
                .await?;
                Ok(pending.is_some())
            }

            async fn job_advance(
                &self,
                id: &str,
                due: i64,
                next: Option<i64>,
                turn: Option<(&ferroclaw_channel_core::InboundMessage, &str)>,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<(bool, Option<$crate::storage::JournalEntry>)> {
                let mut tx = self.write.begin().await?;
                let state = if next.is_some() { "active" } else { "done" };
                let fired = i64::from(turn.is_some());
                let moved = sqlx::query(
                    "UPDATE jobs SET next_run = $3, state = $4, runs = runs + $5, \
                     last_run = CASE WHEN $5 = 1 THEN $6 ELSE last_run END \
                     WHERE id = $1 AND state = 'active' AND next_run = $2",
                )
                .bind(id)
                .bind(due)
                .bind(next)
                .bind(state)
                .bind(fired)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                if moved.rows_affected() != 1 {
                    return Ok((false, None));
                }
                let mut entry = None;
                if let Some((message, session_key)) = turn {
                    let id = Self::insert_journal(&mut *tx, message, session_key, now_ms).await?;
                    entry = id.map(|id| $crate::storage::JournalEntry {
                        id,
                        session_key: session_key.to_string(),
                        message: message.clone(),
                        redo: false,
                    });
                }
                tx.commit().await?;
                Ok((true, entry))
            }
        }
    };
}

due_job_store!(super::SqliteStore, sqlx::Sqlite);
due_job_store!(super::PostgresStore, sqlx::Postgres);
