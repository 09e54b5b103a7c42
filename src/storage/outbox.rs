//! The outbox queue: bot messages waiting for delivery, in order per conversation, retried with back-off.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

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
    /// [`outbox_mark_delivered`](Self::outbox_mark_delivered) and `owner`'s lease
    /// `lease_key` given up, together (one round trip on PostgreSQL).
    async fn outbox_mark_delivered_release(
        &self,
        delivered: &[(i64, Option<String>)],
        now_ms: i64,
        lease_key: &str,
        owner: &str,
    ) -> StoreResult<()>;
}

/// `UPDATE outbox …` marking `delivered` (id, platform id) delivered at `now_ms`.
fn push_mark_delivered<'a, DB: sqlx::Database>(
    update: &mut sqlx::QueryBuilder<'a, DB>,
    delivered: &[(i64, Option<String>)],
    now_ms: i64,
) where
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    update.push("UPDATE outbox SET state = 'delivered', delivered_at = ");
    update.push_bind(now_ms);
    update.push(", attempts = attempts + 1, platform_message_id = CASE id");
    for (id, platform_id) in delivered {
        update
            .push(" WHEN ")
            .push_bind(*id)
            .push(" THEN ")
            .push_bind(platform_id.clone());
    }
    update.push(" ELSE platform_message_id END WHERE id IN (");
    let mut ids = update.separated(", ");
    for (id, _) in delivered {
        ids.push_bind(*id);
    }
    update.push(")");
}

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_outbox(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::OutboxEntry> {
                use sqlx::Row;
                let route: String = row.try_get("route")?;
                let kind: String = row.try_get("kind")?;
                Ok($crate::storage::OutboxEntry {
                    message: ferroclaw_channel_core::OutboundMessage {
                        id: row.try_get("id")?,
                        route: serde_json::from_str(&route)
                            .map_err(|e| $crate::storage::StoreError::Corrupt(format!("outbox route: {e}")))?,
                        kind: $crate::storage::types::kind_from_db(&kind)?,
                        text: row.try_get("text")?,
                        in_reply_to: row.try_get("in_reply_to")?,
                        edit_of: row.try_get("edit_of")?,
                        edit_platform_id: row.try_get("edit_platform_id")?,
                        file: row
                            .try_get::<Option<String>, _>("file")?
                            .map(|f| serde_json::from_str(&f))
                            .transpose()
                            .map_err(|e| $crate::storage::StoreError::Corrupt(format!("outbox file: {e}")))?,
                        approval: row
                            .try_get::<Option<String>, _>("approval")?
                            .map(|a| serde_json::from_str(&a))
                            .transpose()
                            .map_err(|e| $crate::storage::StoreError::Corrupt(format!("outbox approval: {e}")))?,
                    },
                    session_key: row.try_get("session_key")?,
                    state: $crate::storage::states::parse_stored("outbox state", &row.try_get::<String, _>("state")?, $crate::storage::OutboxState::parse)?,
                    attempts: row.try_get("attempts")?,
                    next_attempt_at: row.try_get("next_attempt_at")?,
                    platform_message_id: row.try_get("platform_message_id")?,
                })
            }

            pub(in crate::storage) async fn insert_outbound<'c, E>(
                executor: E,
                session_key: &str,
                message: &$crate::storage::NewOutbound,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<i64>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                let mut insert = sqlx::QueryBuilder::<$db>::new("");
                Self::push_outbound_insert(&mut insert, session_key, message, now_ms, None)?;
                Ok(insert.build_query_scalar().fetch_one(executor).await?)
            }

            /// One outbox row's `INSERT … RETURNING id`, onto `query` (alone, one statement of
            /// a SQLite batch, or one CTE of PostgreSQL's turn commit, where `guard` names the
            /// CTE that must have returned a row for the row to be inserted).
            pub(in crate::storage) fn push_outbound_insert<'a>(
                query: &mut sqlx::QueryBuilder<'a, $db>,
                session_key: &'a str,
                message: &'a $crate::storage::NewOutbound,
                now_ms: i64,
                guard: Option<&'static str>,
            ) -> $crate::storage::StoreResult<()> {
                let route = serde_json::to_string(&message.route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                query.push(
                    "INSERT INTO outbox (session_key, channel, chat_id, thread_id, route, kind, text, \
                     in_reply_to, edit_of, created_at, file, approval) ",
                );
                $crate::storage::sql_text::open_guard(query, guard);
                query.push_values([(message, route)], |mut row, (message, route)| {
                    row.push_bind(session_key)
                        .push_bind(&message.route.channel)
                        .push_bind(&message.route.chat_id)
                        .push_bind(&message.route.thread_id)
                        .push_bind(route)
                        .push_bind(message.kind.as_str())
                        .push_bind(&message.text)
                        .push_bind(&message.in_reply_to)
                        .push_bind(message.edit_of)
                        .push_bind(now_ms)
                        .push_bind(message.file.as_ref().map(|f| serde_json::to_string(f).expect("files serialise")))
                        .push_bind(message.approval.as_ref().map(|a| serde_json::to_string(a).expect("prompts serialise")));
                });
                $crate::storage::sql_text::close_guard(query, guard);
                query.push(" RETURNING id");
                Ok(())
            }
        }
    };
}

rows!(super::SqliteStore, sqlx::Sqlite);
rows!(super::PostgresStore, sqlx::Postgres);

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::OutboxStore for $store {
            async fn outbox_push(
                &self,
                session_key: &str,
                messages: &[$crate::storage::NewOutbound],
                now_ms: i64,
            ) -> $crate::storage::StoreResult<Vec<i64>> {
                let mut tx = self.write.begin().await?;
                let mut ids = Vec::with_capacity(messages.len());
                for message in messages {
                    ids.push(Self::insert_outbound(&mut *tx, session_key, message, now_ms).await?);
                }
                tx.commit().await?;
                Ok(ids)
            }

            async fn outbox_pending(&self, channel: &str, limit: i64, now_ms: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.channel = $1 AND o.state = 'pending' \
                     AND ", $crate::storage::sql_text::outbox_not_held_back!(), " ORDER BY o.id LIMIT $2"),
                )
                .bind(channel)
                .bind(limit)
                .bind(now_ms)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }

            async fn outbox_pending_in(&self, channel: &str, chat_id: &str, thread_id: Option<&str>, limit: i64, now_ms: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.channel = $1 AND o.state = 'pending' \
                     AND o.chat_id = $4 AND o.thread_id IS NOT DISTINCT FROM $5 \
                     AND ", $crate::storage::sql_text::outbox_not_held_back!(), " ORDER BY o.id LIMIT $2"),
                )
                .bind(channel)
                .bind(limit)
                .bind(now_ms)
                .bind(chat_id)
                .bind(thread_id)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }

            async fn outbox_next_attempt(&self, channel: &str, now_ms: i64) -> $crate::storage::StoreResult<Option<i64>> {
                let at: Option<i64> = sqlx::query_scalar(
                    "SELECT MIN(next_attempt_at) FROM outbox WHERE channel = $1 AND state = 'pending' AND next_attempt_at >= $2",
                )
                .bind(channel)
                .bind(now_ms)
                .fetch_one(&self.read)
                .await?;
                Ok(at)
            }

            async fn outbox_mark_delivered(&self, delivered: &[(i64, Option<String>)], now_ms: i64) -> $crate::storage::StoreResult<()> {
                if delivered.is_empty() {
                    return Ok(());
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("");
                push_mark_delivered(&mut update, delivered, now_ms);
                update.build().execute(&self.write).await?;
                Ok(())
            }

            async fn outbox_mark_delivered_release(&self, delivered: &[(i64, Option<String>)], now_ms: i64, lease_key: &str, owner: &str) -> $crate::storage::StoreResult<()> {
                self.mark_delivered_release(delivered, now_ms, lease_key, owner).await
            }

            async fn outbox_retry_later(&self, id: i64, next_attempt_ms: i64, error: &str, counted: bool) -> $crate::storage::StoreResult<()> {
                sqlx::query(
                    "UPDATE outbox SET attempts = attempts + $4, next_attempt_at = $2, last_error = $3 WHERE id = $1",
                )
                .bind(id)
                .bind(next_attempt_ms)
                .bind(error)
                .bind(i64::from(counted))
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn outbox_mark_rejected(&self, id: i64, error: &str) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE outbox SET state = 'rejected', attempts = attempts + 1, last_error = $2 WHERE id = $1")
                    .bind(id)
                    .bind(error)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);

/// PostgreSQL: the delivered-mark and the release a single statement with a data-modifying
/// CTE, atomic without a transaction.
impl PostgresStore {
    async fn mark_delivered_release(
        &self,
        delivered: &[(i64, Option<String>)],
        now_ms: i64,
        lease_key: &str,
        owner: &str,
    ) -> StoreResult<()> {
        let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new("");
        if !delivered.is_empty() {
            query.push("WITH marked AS (");
            push_mark_delivered(&mut query, delivered, now_ms);
            query.push(") ");
        }
        query.push("DELETE FROM session_leases WHERE session_key = ");
        query.push_bind(lease_key);
        query.push(" AND owner = ");
        query.push_bind(owner);
        query.build().execute(&self.write).await?;
        Ok(())
    }
}

/// SQLite (one process): the same in two statements.
impl SqliteStore {
    async fn mark_delivered_release(
        &self,
        delivered: &[(i64, Option<String>)],
        now_ms: i64,
        lease_key: &str,
        owner: &str,
    ) -> StoreResult<()> {
        self.outbox_mark_delivered(delivered, now_ms).await?;
        self.lease_release(lease_key, owner).await
    }
}
