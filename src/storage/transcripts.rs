//! Transcripts and the one commit of a finished turn (entries, bot messages, usage and the answered-mark in one transaction).
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Transcripts and the one commit of a finished turn (entries, bot messages, usage and the answered-mark in one transaction).
#[async_trait]
pub trait TranscriptStore: Send + Sync {
    /// The newest `limit` transcript entries of the session's epoch after `after_id`, oldest
    /// first. Cost depends on `limit`, not on the transcript's length.
    async fn transcript_recent(
        &self,
        key: &str,
        epoch: i64,
        after_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Atomically: append transcript entries, queue bot messages, add token usage, and mark
    /// the journal entry answered. Returns the outbox ids in order.
    async fn commit_turn(&self, turn: &TurnCommit) -> StoreResult<Vec<i64>>;
}

macro_rules! parts {
    ($store:ty, $db:ty) => {
        impl $store {
            /// One statement of a turn's commit, onto `query`.
            fn push_turn_part<'a>(
                query: &mut sqlx::QueryBuilder<'a, $db>,
                turn: &'a $crate::storage::TurnCommit,
                part: TurnPart,
            ) -> $crate::storage::StoreResult<()> {
                match part {
                    TurnPart::Entries => {
                        query.push(
                            "INSERT INTO transcript (session_key, epoch, role, content, tool_calls, tool_call_id, model, \
                             tokens_in, tokens_out, created_at) ",
                        );
                        query.push_values(&turn.entries, |mut row, entry| {
                            row.push_bind(&turn.session_key)
                                .push_bind(turn.epoch)
                                .push_bind(entry.role.as_str())
                                .push_bind(&entry.content)
                                .push_bind(&entry.tool_calls)
                                .push_bind(&entry.tool_call_id)
                                .push_bind(&entry.model)
                                .push_bind(entry.tokens_in)
                                .push_bind(entry.tokens_out)
                                .push_bind(turn.now_ms);
                        });
                    }
                    TurnPart::Outbound(i) => {
                        Self::push_outbound_insert(query, &turn.session_key, &turn.outbound[i], turn.now_ms)?;
                    }
                    TurnPart::Totals => {
                        query
                            .push("UPDATE sessions SET tokens_in = tokens_in + ")
                            .push_bind(turn.tokens_in)
                            .push(", tokens_out = tokens_out + ")
                            .push_bind(turn.tokens_out)
                            .push(", last_model = COALESCE(")
                            .push_bind(&turn.last_model)
                            .push(", last_model), updated_at = ")
                            .push_bind(turn.now_ms)
                            .push(" WHERE key = ")
                            .push_bind(&turn.session_key);
                    }
                }
                Ok(())
            }
        }
    };
}

macro_rules! sql {
    ($store:ty, $db:ty, $batched:literal) => {
        #[async_trait::async_trait]
        impl $crate::storage::TranscriptStore for $store {
            async fn transcript_recent(
                &self,
                key: &str,
                epoch: i64,
                after_id: i64,
                limit: i64,
            ) -> $crate::storage::StoreResult<Vec<$crate::storage::TranscriptEntry>> {
                let rows: Vec<(i64, String, String, Option<String>, Option<String>, Option<String>, i64, i64)> =
                    sqlx::query_as(
                        "SELECT id, role, content, tool_calls, tool_call_id, model, tokens_in, tokens_out \
                         FROM transcript WHERE session_key = $1 AND epoch = $2 AND id > $3 \
                         ORDER BY id DESC LIMIT $4",
                    )
                    .bind(key)
                    .bind(epoch)
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?;
                Ok(rows
                    .into_iter()
                    .rev()
                    .map(|(id, role, content, tool_calls, tool_call_id, model, tokens_in, tokens_out)| {
                        let role: String = role;
                        let role = $crate::storage::states::parse_stored("transcript role", &role, $crate::storage::TranscriptRole::parse)?;
                        Ok($crate::storage::TranscriptEntry { id, role, content, tool_calls, tool_call_id, model, tokens_in, tokens_out })
                    })
                    .collect::<$crate::storage::StoreResult<Vec<_>>>()?)
            }

            async fn commit_turn(&self, turn: &$crate::storage::TurnCommit) -> $crate::storage::StoreResult<Vec<i64>> {
                let mut tx = self.write.begin().await?;
                if let Some(journal_id) = turn.journal_id {
                    let done = sqlx::query(
                        "UPDATE inbound SET state = 'done', done_at = $2, tokens_in = $3, tokens_out = $4 \
                         WHERE id = $1 AND state = 'pending'",
                    )
                        .bind(journal_id)
                        .bind(turn.now_ms)
                        .bind(turn.tokens_in)
                        .bind(turn.tokens_out)
                        .execute(&mut *tx)
                        .await?;
                    if done.rows_affected() != 1 {
                        return Err($crate::storage::StoreError::AlreadyAnswered(journal_id));
                    }
                    // The turn is answered: its recorded side effects are no longer needed.
                    if turn.clear_effects {
                        sqlx::query("DELETE FROM tool_effects WHERE turn_key = $1")
                            .bind($crate::storage::effects_key(journal_id))
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                if let Some((run_id, step)) = &turn.run_step {
                    sqlx::query("DELETE FROM tool_effects WHERE turn_key = $1")
                        .bind($crate::storage::run_effects_key(run_id, *step))
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("UPDATE runs SET step_input = NULL WHERE id = $1 AND step = $2")
                        .bind(run_id)
                        .bind(step)
                        .execute(&mut *tx)
                        .await?;
                }
                // The turn's rows: its transcript entries (one statement), its bot messages
                // (one each, returning their ids) and the session's totals. SQLite runs them as
                // one batch of statements, one round trip to the connection's thread;
                // PostgreSQL's extended protocol takes one statement at a time.
                let mut parts = Vec::with_capacity(turn.outbound.len() + 2);
                if !turn.entries.is_empty() {
                    parts.push(TurnPart::Entries);
                }
                parts.extend((0..turn.outbound.len()).map(TurnPart::Outbound));
                parts.push(TurnPart::Totals);
                let ids: Vec<i64> = if $batched {
                    let mut batch = sqlx::QueryBuilder::<$db>::new("");
                    for (n, part) in parts.into_iter().enumerate() {
                        if n > 0 {
                            batch.push("; ");
                        }
                        Self::push_turn_part(&mut batch, turn, part)?;
                    }
                    batch.build_query_scalar().fetch_all(&mut *tx).await?
                } else {
                    let mut ids = Vec::with_capacity(turn.outbound.len());
                    for part in parts {
                        let mut statement = sqlx::QueryBuilder::<$db>::new("");
                        Self::push_turn_part(&mut statement, turn, part)?;
                        if let TurnPart::Outbound(_) = part {
                            ids.push(statement.build_query_scalar().fetch_one(&mut *tx).await?);
                        } else {
                            statement.build().execute(&mut *tx).await?;
                        }
                    }
                    ids
                };
                if ids.len() != turn.outbound.len() {
                    return Err($crate::storage::StoreError::Corrupt(format!(
                        "a turn's commit returned {} outbox ids for {} messages",
                        ids.len(),
                        turn.outbound.len()
                    )));
                }
                tx.commit().await?;
                Ok(ids)
            }
        }
    };
}

/// One statement of a turn's commit (see `commit_turn`).
#[derive(Clone, Copy)]
enum TurnPart {
    Entries,
    Outbound(usize),
    Totals,
}

parts!(super::SqliteStore, sqlx::Sqlite);
parts!(super::PostgresStore, sqlx::Postgres);
sql!(super::SqliteStore, sqlx::Sqlite, true);
sql!(super::PostgresStore, sqlx::Postgres, false);
