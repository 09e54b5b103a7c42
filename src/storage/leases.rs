//! Session leases: which process works a session (several processes on one PostgreSQL database).
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

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

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::LeaseStore for $store {
            async fn lease_claim(&self, session_key: &str, owner: &str, now_ms: i64, until_ms: i64) -> $crate::storage::StoreResult<bool> {
                // A write with RETURNING: read with fetch_all (see the module note).
                let held: Vec<String> = sqlx::query_scalar(
                    "INSERT INTO session_leases (session_key, owner, expires_at) VALUES ($1, $2, $4) \
                     ON CONFLICT (session_key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
                     WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= $3 \
                     RETURNING owner",
                )
                .bind(session_key)
                .bind(owner)
                .bind(now_ms)
                .bind(until_ms)
                .fetch_all(&self.write)
                .await?;
                Ok(!held.is_empty())
            }

            async fn lease_renew(&self, keys: &[String], owner: &str, until_ms: i64) -> $crate::storage::StoreResult<()> {
                if keys.is_empty() {
                    return Ok(());
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE session_leases SET expires_at = ");
                update.push_bind(until_ms);
                update.push(" WHERE owner = ");
                update.push_bind(owner);
                update.push(" AND session_key IN (");
                let mut keys_list = update.separated(", ");
                for key in keys {
                    keys_list.push_bind(key);
                }
                update.push(")");
                update.build().execute(&self.write).await?;
                Ok(())
            }

            async fn lease_release(&self, session_key: &str, owner: &str) -> $crate::storage::StoreResult<()> {
                sqlx::query("DELETE FROM session_leases WHERE session_key = $1 AND owner = $2")
                    .bind(session_key)
                    .bind(owner)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
