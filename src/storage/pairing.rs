//! Pairing codes and who is paired.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

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

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_pairing(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::PairingRow> {
                use sqlx::Row;
                Ok($crate::storage::PairingRow {
                    channel: row.try_get("channel")?,
                    user_id: row.try_get("user_id")?,
                    user_name: row.try_get("user_name")?,
                    code: row.try_get("code")?,
                    state: $crate::storage::states::parse_stored(
                        "pairing state",
                        &row.try_get::<String, _>("state")?,
                        $crate::storage::PairingState::parse,
                    )?,
                    created_at: row.try_get("created_at")?,
                    expires_at: row.try_get("expires_at")?,
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
        impl $crate::storage::PairingStore for $store {
            async fn pairing_get(&self, channel: &str, user_id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::PairingRow>> {
                let row = sqlx::query("SELECT * FROM pairing WHERE channel = $1 AND user_id = $2")
                    .bind(channel)
                    .bind(user_id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_pairing).transpose()
            }

            async fn pairing_request(
                &self,
                request: &$crate::storage::PairingRequest,
                max_pending: i64,
            ) -> $crate::storage::StoreResult<$crate::storage::PairingOutcome> {
                use $crate::storage::PairingOutcome;
                let mut tx = self.write.begin().await?;
                sqlx::query("DELETE FROM pairing WHERE state = 'pending' AND expires_at <= $1")
                    .bind(request.now_ms)
                    .execute(&mut *tx)
                    .await?;
                let existing: Option<String> = sqlx::query_scalar("SELECT state FROM pairing WHERE channel = $1 AND user_id = $2")
                    .bind(&request.channel)
                    .bind(&request.user_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if existing.is_some() {
                    tx.commit().await?;
                    return Ok(PairingOutcome::Pending);
                }
                let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pairing WHERE channel = $1 AND state = 'pending'")
                    .bind(&request.channel)
                    .fetch_one(&mut *tx)
                    .await?;
                if pending >= max_pending {
                    // Make room by dropping the oldest pending code: a few strangers must not
                    // block pairing for everyone until their codes expire.
                    sqlx::query(
                        "DELETE FROM pairing WHERE channel = $1 AND state = 'pending' AND user_id IN \
                         (SELECT user_id FROM pairing WHERE channel = $1 AND state = 'pending' \
                          ORDER BY created_at, user_id LIMIT $2)",
                    )
                    .bind(&request.channel)
                    .bind(pending - max_pending + 1)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query(
                    "INSERT INTO pairing (channel, user_id, user_name, code, state, created_at, expires_at) \
                     VALUES ($1,$2,$3,$4,'pending',$5,$6)",
                )
                .bind(&request.channel)
                .bind(&request.user_id)
                .bind(&request.user_name)
                .bind(&request.code)
                .bind(request.now_ms)
                .bind(request.expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(PairingOutcome::Created(request.code.clone()))
            }

            async fn pairing_list(&self, now_ms: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::PairingRow>> {
                let rows = sqlx::query(
                    "SELECT * FROM pairing WHERE state = 'approved' OR expires_at > $1 ORDER BY state, created_at",
                )
                .bind(now_ms)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_pairing).collect()
            }

            async fn pairing_approve(&self, code: &str, now_ms: i64) -> $crate::storage::StoreResult<Option<$crate::storage::PairingRow>> {
                let rows = sqlx::query(
                    "UPDATE pairing SET state = 'approved', approved_at = $2, code = NULL \
                     WHERE code = $1 AND state = 'pending' AND expires_at > $2 RETURNING *",
                )
                .bind(code)
                .bind(now_ms)
                .fetch_all(&self.write) // see insert_journal: RETURNING writes read to the end
                .await?;
                rows.first().map(Self::decode_pairing).transpose()
            }

            async fn pairing_revoke(&self, user_id: &str) -> $crate::storage::StoreResult<u64> {
                Ok(sqlx::query("DELETE FROM pairing WHERE user_id = $1")
                    .bind(user_id)
                    .execute(&self.write)
                    .await?
                    .rows_affected())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
