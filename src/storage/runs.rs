//! Subagent runs: their rows, claims and leases across processes, state and status message.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

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
    /// Set a run's state (e.g. running) and, when given, its start time and status message.
    async fn run_set_state(
        &self,
        id: &str,
        state: RunState,
        started_at: Option<i64>,
    ) -> StoreResult<()>;
    async fn run_set_status_message(&self, id: &str, outbox_id: i64) -> StoreResult<()>;
}

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_run(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::RunRow> {
                use sqlx::Row;
                let route: String = row.try_get("origin_route")?;
                let announced: i64 = row.try_get("announced")?;
                Ok($crate::storage::RunRow {
                    id: row.try_get("id")?,
                    agent: row.try_get("agent")?,
                    parent_session: row.try_get("parent_session")?,
                    origin_route: serde_json::from_str(&route).map_err(|e| {
                        $crate::storage::StoreError::Corrupt(format!("run route: {e}"))
                    })?,
                    origin_message: row.try_get("origin_message")?,
                    depth: row.try_get("depth")?,
                    label: row.try_get("label")?,
                    task: row.try_get("task")?,
                    model: row.try_get("model")?,
                    mode: $crate::storage::states::parse_stored(
                        "run mode",
                        &row.try_get::<String, _>("mode")?,
                        $crate::storage::RunMode::parse,
                    )?,
                    state: $crate::storage::states::parse_stored(
                        "run state",
                        &row.try_get::<String, _>("state")?,
                        $crate::storage::RunState::parse,
                    )?,
                    result: row.try_get("result")?,
                    status_message: row.try_get("status_message")?,
                    announced: announced != 0,
                    created_at: row.try_get("created_at")?,
                    started_at: row.try_get("started_at")?,
                    ended_at: row.try_get("ended_at")?,
                    spec: row.try_get("spec")?,
                    step: row.try_get("step")?,
                    step_input: row.try_get("step_input")?,
                    starts: row.try_get("starts")?,
                })
            }
        }
    };
}

rows!(super::SqliteStore, sqlx::Sqlite);
rows!(super::PostgresStore, sqlx::Postgres);

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::RunStore for $store {
            async fn run_insert(&self, run: &$crate::storage::RunRow) -> $crate::storage::StoreResult<()> {
                let route = serde_json::to_string(&run.origin_route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                sqlx::query(
                    "INSERT INTO runs (id, parent_session, origin_route, origin_message, depth, label, task, model, mode, \
                     state, created_at, agent, spec, step, step_input, starts) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)",
                )
                .bind(&run.id)
                .bind(&run.parent_session)
                .bind(route)
                .bind(&run.origin_message)
                .bind(run.depth)
                .bind(&run.label)
                .bind(&run.task)
                .bind(&run.model)
                .bind(run.mode.as_str())
                .bind(run.state.as_str())
                .bind(run.created_at)
                .bind(&run.agent)
                .bind(&run.spec)
                .bind(run.step)
                .bind(&run.step_input)
                .bind(run.starts)
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn run_get(&self, id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::RunRow>> {
                let row = sqlx::query("SELECT * FROM runs WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
                row.as_ref().map(Self::decode_run).transpose()
            }

            async fn runs_of(&self, parent_session: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query("SELECT * FROM runs WHERE parent_session = $1 ORDER BY created_at, id")
                    .bind(parent_session)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_recent(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query("SELECT * FROM runs ORDER BY created_at DESC, id DESC LIMIT $1")
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_unannounced(&self, expired_at: Option<i64>) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query(
                    "SELECT * FROM runs WHERE announced = 0 \
                     AND ($1 IS NULL OR lease_until IS NULL OR lease_until < $1) ORDER BY created_at, id",
                )
                .bind(expired_at)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_lease(&self, ids: &[String], until_ms: i64) -> $crate::storage::StoreResult<()> {
                if ids.is_empty() {
                    return Ok(());
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE runs SET lease_until = ");
                update.push_bind(until_ms);
                update.push(" WHERE announced = 0 AND id IN (");
                let mut list = update.separated(", ");
                for id in ids {
                    list.push_bind(id);
                }
                update.push(")");
                update.build().execute(&self.write).await?;
                Ok(())
            }

            async fn run_claim(&self, id: &str, expired_at: Option<i64>, lease_until: Option<i64>) -> $crate::storage::StoreResult<Option<i64>> {
                // One UPDATE: of two processes claiming at once, the second finds the lease
                // the first set (PostgreSQL re-reads the row after the first commits).
                let starts: Option<i64> = sqlx::query_scalar(
                    "UPDATE runs SET starts = starts + 1, lease_until = $3 WHERE id = $1 AND announced = 0 \
                     AND ($2 IS NULL OR lease_until IS NULL OR lease_until < $2) RETURNING starts",
                )
                .bind(id)
                .bind(expired_at)
                .bind(lease_until)
                .fetch_optional(&self.write)
                .await?;
                Ok(starts)
            }

            async fn run_set_state(&self, id: &str, state: $crate::storage::RunState, started_at: Option<i64>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE runs SET state = $2, started_at = COALESCE($3, started_at) WHERE id = $1 AND announced = 0")
                    .bind(id)
                    .bind(state.as_str())
                    .bind(started_at)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn run_set_status_message(&self, id: &str, outbox_id: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE runs SET status_message = $2 WHERE id = $1")
                    .bind(id)
                    .bind(outbox_id)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
