//! Session rows: model override, epoch, plan, summary, the list the admin API pages.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Sessions: one row per conversation and agent.
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
}

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_session(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::SessionRow> {
                use sqlx::Row;
                let route: String = row.try_get("route")?;
                Ok($crate::storage::SessionRow {
                    key: row.try_get("key")?,
                    route: serde_json::from_str(&route).map_err(|e| {
                        $crate::storage::StoreError::Corrupt(format!("session route: {e}"))
                    })?,
                    epoch: row.try_get("epoch")?,
                    model: row.try_get("model")?,
                    summary: row.try_get("summary")?,
                    summary_upto: row.try_get("summary_upto")?,
                    tokens_in: row.try_get("tokens_in")?,
                    tokens_out: row.try_get("tokens_out")?,
                    last_model: row.try_get("last_model")?,
                    updated_at: row.try_get("updated_at")?,
                    plan: row.try_get("plan")?,
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
        impl $crate::storage::SessionStore for $store {
            async fn session_get_or_create(
                &self,
                key: &str,
                route: &ferroclaw_channel_core::ChatRoute,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<$crate::storage::SessionRow> {
                if let Some(row) = self.session_get(key).await? {
                    return Ok(row);
                }
                let route = serde_json::to_string(route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                sqlx::query(
                    "INSERT INTO sessions (key, route, created_at, updated_at) VALUES ($1,$2,$3,$3) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(key)
                .bind(route)
                .bind(now_ms)
                .execute(&self.write)
                .await?;
                let row = sqlx::query("SELECT * FROM sessions WHERE key = $1")
                    .bind(key)
                    .fetch_one(&self.write)
                    .await?;
                Self::decode_session(&row)
            }

            async fn session_get(&self, key: &str) -> $crate::storage::StoreResult<Option<$crate::storage::SessionRow>> {
                let row = sqlx::query("SELECT * FROM sessions WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_session).transpose()
            }

            async fn session_set_model(&self, key: &str, model: Option<&str>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET model = $2 WHERE key = $1")
                    .bind(key)
                    .bind(model)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_reset(&self, key: &str, now_ms: i64) -> $crate::storage::StoreResult<i64> {
                let epoch: i64 = sqlx::query_scalar(
                    "UPDATE sessions SET epoch = epoch + 1, summary = NULL, summary_upto = 0, plan = NULL, updated_at = $2 \
                     WHERE key = $1 RETURNING epoch",
                )
                .bind(key)
                .bind(now_ms)
                .fetch_all(&self.write) // see insert_journal: RETURNING writes read to the end
                .await?
                .first()
                .copied()
                .ok_or(sqlx::Error::RowNotFound)?;
                Ok(epoch)
            }

            async fn session_set_plan(&self, key: &str, plan: Option<&str>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET plan = $2 WHERE key = $1")
                    .bind(key)
                    .bind(plan)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_set_summary(&self, key: &str, summary: &str, upto: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET summary = $2, summary_upto = $3 WHERE key = $1")
                    .bind(key)
                    .bind(summary)
                    .bind(upto)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_list(&self, key_prefix: Option<&str>, limit: i64, offset: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::SessionRow>> {
                // A prefix compare (not LIKE): channel names may hold `_` or `%`.
                let rows = sqlx::query(
                    "SELECT * FROM sessions WHERE $1 IS NULL OR substr(key, 1, length($1)) = $1 \
                     ORDER BY updated_at DESC, key LIMIT $2 OFFSET $3",
                )
                    .bind(key_prefix)
                    .bind(limit)
                    .bind(offset)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_session).collect()
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
