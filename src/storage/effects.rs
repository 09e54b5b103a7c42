//! Tool side effects recorded per turn, replayed when the turn is redone.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

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

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::EffectStore for $store {
            async fn tool_effect_get(&self, turn_key: &str, call_key: &str) -> $crate::storage::StoreResult<Option<String>> {
                Ok(sqlx::query_scalar("SELECT result FROM tool_effects WHERE turn_key = $1 AND call_key = $2")
                    .bind(turn_key)
                    .bind(call_key)
                    .fetch_optional(&self.read)
                    .await?)
            }

            async fn tool_effect_put(&self, turn_key: &str, call_key: &str, result: &str, now_ms: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("INSERT INTO tool_effects (turn_key, call_key, result, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                    .bind(turn_key)
                    .bind(call_key)
                    .bind(result)
                    .bind(now_ms)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn tool_effect_forget(&self, turn_key: &str, call_key: &str) -> $crate::storage::StoreResult<()> {
                sqlx::query("DELETE FROM tool_effects WHERE turn_key = $1 AND call_key = $2")
                    .bind(turn_key)
                    .bind(call_key)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
