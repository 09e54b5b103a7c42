//! The inbound journal: every message, stored before it is acknowledged.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// A journal entry whose turn was started this many times, each time ending with the
/// process, is given up (answered with an error) instead of being started again.
/// (The journal counts the starts; the partial index `inbound_given_up` is on
/// `attempts >= 3`: change both together.)
pub const MAX_TURN_ATTEMPTS: i64 = 3;

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
    /// Sessions of the messages given up (answered after `MAX_TURN_ATTEMPTS` starts) since
    /// `since_ms`, newest first (at most 100).
    async fn journal_given_up_since(&self, since_ms: i64) -> StoreResult<Vec<String>>;
}

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_journal(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::JournalEntry> {
                use sqlx::Row;
                let payload: String = row.try_get("payload")?;
                let message = serde_json::from_str(&payload)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(format!("journal payload: {e}")))?;
                Ok($crate::storage::JournalEntry {
                    id: row.try_get("id")?,
                    session_key: row.try_get("session_key")?,
                    message,
                    redo: false,
                })
            }

            /// Journal a message (unique per channel, chat and platform id): its id, or None
            /// when it is already there.
            pub(in crate::storage) async fn insert_journal<'c, E>(
                executor: E,
                message: &ferroclaw_channel_core::InboundMessage,
                session_key: &str,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<Option<i64>>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                let payload = serde_json::to_string(message)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                Ok(sqlx::query_scalar(
                    "INSERT INTO inbound (channel, chat_id, platform_id, session_key, payload, received_at) \
                     VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (channel, chat_id, platform_id) DO NOTHING RETURNING id",
                )
                .bind(&message.route.channel)
                .bind(&message.route.chat_id)
                .bind(&message.platform_message_id)
                .bind(session_key)
                .bind(payload)
                .bind(now_ms)
                // `fetch_all`, never `fetch_optional`, for a write with RETURNING: SQLite
                // commits an autocommit statement when it runs to completion, and a commit that
                // fails there (a full disk) is only reported to a caller that reads to the end.
                .fetch_all(executor)
                .await?
                .into_iter()
                .next())
            }
        }
    };
}

rows!(super::SqliteStore, sqlx::Sqlite);
rows!(super::PostgresStore, sqlx::Postgres);

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::JournalStore for $store {
            async fn journal_insert(
                &self,
                message: &ferroclaw_channel_core::InboundMessage,
                session_key: &str,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<$crate::storage::JournalInsert> {
                let inserted = Self::insert_journal(&self.write, message, session_key, now_ms).await?;
                if let Some(id) = inserted {
                    return Ok($crate::storage::JournalInsert::New($crate::storage::JournalEntry {
                        id,
                        session_key: session_key.to_string(),
                        message: message.clone(),
                        redo: false,
                    }));
                }
                let (id, session_key): (i64, String) = sqlx::query_as(
                    "SELECT id, session_key FROM inbound WHERE channel = $1 AND chat_id = $2 AND platform_id = $3",
                )
                .bind(&message.route.channel)
                .bind(&message.route.chat_id)
                .bind(&message.platform_message_id)
                .fetch_one(&self.write)
                .await?;
                Ok($crate::storage::JournalInsert::Duplicate { id, session_key })
            }

            async fn journal_given_up_since(&self, since_ms: i64) -> $crate::storage::StoreResult<Vec<String>> {
                // `attempts >= 3` as a literal: the partial index `inbound_given_up` is used.
                const _: () = assert!($crate::storage::MAX_TURN_ATTEMPTS == 3);
                Ok(sqlx::query_scalar(
                    "SELECT session_key FROM inbound WHERE attempts >= 3 AND done_at >= $1 \
                     ORDER BY done_at DESC LIMIT 100",
                )
                .bind(since_ms)
                .fetch_all(&self.read)
                .await?)
            }

            async fn journal_begin_attempt(&self, id: i64) -> $crate::storage::StoreResult<i64> {
                let attempts: Vec<i64> = sqlx::query_scalar(
                    "UPDATE inbound SET attempts = attempts + 1 WHERE id = $1 RETURNING attempts",
                )
                .bind(id)
                .fetch_all(&self.write) // see insert_journal: RETURNING writes read to the end
                .await?;
                Ok(attempts.first().copied().unwrap_or(0))
            }

            async fn journal_pending(&self) -> $crate::storage::StoreResult<Vec<$crate::storage::JournalEntry>> {
                let rows = sqlx::query(
                    "SELECT id, session_key, payload FROM inbound WHERE state = 'pending' ORDER BY id",
                )
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_journal).collect()
            }

            async fn journal_state(&self, id: i64) -> $crate::storage::StoreResult<Option<$crate::storage::JournalState>> {
                let state: Option<String> = sqlx::query_scalar("SELECT state FROM inbound WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                state
                    .map(|s| $crate::storage::states::parse_stored("journal state", &s, $crate::storage::JournalState::parse))
                    .transpose()
            }

            async fn journal_usage(&self, id: i64) -> $crate::storage::StoreResult<(i64, i64)> {
                let row: Option<(i64, i64)> = sqlx::query_as("SELECT tokens_in, tokens_out FROM inbound WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                Ok(row.unwrap_or((0, 0)))
            }

            async fn journal_next(&self, session_key: &str) -> $crate::storage::StoreResult<Option<$crate::storage::JournalEntry>> {
                let row = sqlx::query($crate::storage::sql_text::journal_next!())
                .bind(session_key)
                .fetch_optional(&self.read)
                .await?;
                row.as_ref().map(Self::decode_journal).transpose()
            }

            async fn journal_unleased(&self, now_ms: i64, limit: i64) -> $crate::storage::StoreResult<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT i.session_key FROM inbound i WHERE i.state = 'pending' AND NOT EXISTS \
                     (SELECT 1 FROM session_leases l WHERE l.session_key = i.session_key AND l.expires_at > $1) \
                     GROUP BY i.session_key ORDER BY MIN(i.id) LIMIT $2",
                )
                .bind(now_ms)
                .bind(limit)
                .fetch_all(&self.read)
                .await?)
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
