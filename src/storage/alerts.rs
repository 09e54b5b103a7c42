//! Operator alert incidents and the leader's channel health (SPEC section 21).
//!
//! An incident is one row from when a condition starts failing until it ends: the alert is
//! claimed by the UPDATE that sets `alerted_ms` from NULL, the "resolved" by the DELETE that
//! returns the row, so each is sent once whichever process leads. The trait, then its SQL,
//! written once for both dialects. Knows rows; not what a condition means.

use super::*;
use async_trait::async_trait;

/// An open incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incident {
    pub since_ms: i64,
    /// When its alert was sent (None: not yet).
    pub alerted_ms: Option<i64>,
}

#[async_trait]
pub trait AlertStore: Send + Sync {
    /// The incident of `key`, opened at `now_ms` unless it is open already.
    async fn incident_open(&self, key: &str, now_ms: i64) -> StoreResult<Incident>;
    /// Claim the sending of `key`'s alert: true once, for the first caller.
    async fn incident_claim_alert(&self, key: &str, now_ms: i64) -> StoreResult<bool>;
    /// End the incident of `key`: the row it had, to the one caller that ended it.
    async fn incident_close(&self, key: &str) -> StoreResult<Option<Incident>>;
    /// Every open incident by key.
    async fn incidents(&self) -> StoreResult<Vec<(String, Incident)>>;
    /// Replace the leader's reported health of `channels` (name, JSON).
    async fn channel_health_put(
        &self,
        channels: &[(String, String)],
        now_ms: i64,
    ) -> StoreResult<()>;
    /// The leader's reported health: (name, JSON, when).
    async fn channel_health_all(&self) -> StoreResult<Vec<(String, String, i64)>>;
}

macro_rules! sql {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::AlertStore for $store {
            async fn incident_open(&self, key: &str, now_ms: i64) -> $crate::storage::StoreResult<$crate::storage::Incident> {
                sqlx::query("INSERT INTO alert_incidents (key, since_ms) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                    .bind(key)
                    .bind(now_ms)
                    .execute(&self.write)
                    .await?;
                let (since_ms, alerted_ms): (i64, Option<i64>) =
                    sqlx::query_as("SELECT since_ms, alerted_ms FROM alert_incidents WHERE key = $1")
                        .bind(key)
                        .fetch_one(&self.write)
                        .await?;
                Ok($crate::storage::Incident { since_ms, alerted_ms })
            }

            async fn incident_claim_alert(&self, key: &str, now_ms: i64) -> $crate::storage::StoreResult<bool> {
                let done = sqlx::query("UPDATE alert_incidents SET alerted_ms = $2 WHERE key = $1 AND alerted_ms IS NULL")
                    .bind(key)
                    .bind(now_ms)
                    .execute(&self.write)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn incident_close(&self, key: &str) -> $crate::storage::StoreResult<Option<$crate::storage::Incident>> {
                // A write with RETURNING: read with fetch_all.
                let rows: Vec<(i64, Option<i64>)> =
                    sqlx::query_as("DELETE FROM alert_incidents WHERE key = $1 RETURNING since_ms, alerted_ms")
                        .bind(key)
                        .fetch_all(&self.write)
                        .await?;
                Ok(rows.into_iter().next().map(|(since_ms, alerted_ms)| $crate::storage::Incident { since_ms, alerted_ms }))
            }

            async fn incidents(&self) -> $crate::storage::StoreResult<Vec<(String, $crate::storage::Incident)>> {
                let rows: Vec<(String, i64, Option<i64>)> =
                    sqlx::query_as("SELECT key, since_ms, alerted_ms FROM alert_incidents ORDER BY key")
                        .fetch_all(&self.read)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(key, since_ms, alerted_ms)| (key, $crate::storage::Incident { since_ms, alerted_ms }))
                    .collect())
            }

            async fn channel_health_put(&self, channels: &[(String, String)], now_ms: i64) -> $crate::storage::StoreResult<()> {
                let mut tx = self.write.begin().await?;
                for (channel, health) in channels {
                    sqlx::query(
                        "INSERT INTO channel_health (channel, health, at_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (channel) DO UPDATE SET health = excluded.health, at_ms = excluded.at_ms",
                    )
                    .bind(channel)
                    .bind(health)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn channel_health_all(&self) -> $crate::storage::StoreResult<Vec<(String, String, i64)>> {
                Ok(sqlx::query_as("SELECT channel, health, at_ms FROM channel_health ORDER BY channel")
                    .fetch_all(&self.read)
                    .await?)
            }
        }
    };
}

sql!(super::SqliteStore);
sql!(super::PostgresStore);
