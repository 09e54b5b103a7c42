//! Reads of the outbox as a log: one row, the backlog, a conversation, the replies to a message (webhook, SSE, OpenAI endpoint, admin API).
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Reads of the outbox as a log: one row, the backlog, a conversation, the replies to a message (webhook, SSE, OpenAI endpoint, admin API).
#[async_trait]
pub trait OutboxReads: Send + Sync {
    /// The highest outbox id of a channel (0 when it has none).
    async fn outbox_last_id(&self, channel: &str) -> StoreResult<i64>;
    /// One outbox row by id.
    async fn outbox_get(&self, id: i64) -> StoreResult<Option<OutboxEntry>>;
    /// Undelivered messages of every channel, oldest first.
    async fn outbox_backlog(&self, limit: i64) -> StoreResult<Vec<OutboxEntry>>;
    /// How many messages wait for delivery, per channel.
    async fn outbox_backlog_counts(&self) -> StoreResult<Vec<(String, i64)>>;
    /// Messages of a channel (all conversations) with id > `after`, oldest first.
    async fn outbox_after(
        &self,
        channel: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// Messages answering the inbound platform message `in_reply_to` in one conversation.
    async fn outbox_replies(
        &self,
        channel: &str,
        chat_id: &str,
        in_reply_to: &str,
    ) -> StoreResult<Vec<OutboxEntry>>;
    /// Messages of one conversation with id > `after`, oldest first.
    async fn outbox_conversation(
        &self,
        channel: &str,
        chat_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<OutboxEntry>>;
}

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::OutboxReads for $store {
            async fn outbox_last_id(&self, channel: &str) -> $crate::storage::StoreResult<i64> {
                let id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM outbox WHERE channel = $1")
                    .bind(channel)
                    .fetch_one(&self.read)
                    .await?;
                Ok(id.unwrap_or(0))
            }

            async fn outbox_get(&self, id: i64) -> $crate::storage::StoreResult<Option<$crate::storage::OutboxEntry>> {
                let row = sqlx::query(concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.id = $1"))
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_outbox).transpose()
            }

            async fn outbox_backlog(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.state = 'pending' ORDER BY o.id LIMIT $1"),
                )
                .bind(limit)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }

            async fn outbox_backlog_counts(&self) -> $crate::storage::StoreResult<Vec<(String, i64)>> {
                Ok(sqlx::query_as(
                    "SELECT channel, COUNT(*) FROM outbox WHERE state = 'pending' GROUP BY channel ORDER BY channel",
                )
                .fetch_all(&self.read)
                .await?)
            }

            async fn outbox_after(&self, channel: &str, after: i64, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.channel = $1 AND o.id > $2 ORDER BY o.id LIMIT $3"),
                )
                .bind(channel)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }

            async fn outbox_replies(&self, channel: &str, chat_id: &str, in_reply_to: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.channel = $1 AND o.chat_id = $2 AND o.in_reply_to = $3 ORDER BY o.id"),
                )
                .bind(channel)
                .bind(chat_id)
                .bind(in_reply_to)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }

            async fn outbox_conversation(
                &self,
                channel: &str,
                chat_id: &str,
                after: i64,
                limit: i64,
            ) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::sql_text::outbox_select!(), "WHERE o.channel = $1 AND o.chat_id = $2 AND o.id > $3 ORDER BY o.id LIMIT $4"),
                )
                .bind(channel)
                .bind(chat_id)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_outbox).collect()
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
