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
            /// One statement of a turn's commit, onto `query`; with `guard`, the statement
            /// changes nothing unless that CTE (the answered-mark) returned a row.
            fn push_turn_part<'a>(
                query: &mut sqlx::QueryBuilder<'a, $db>,
                turn: &'a $crate::storage::TurnCommit,
                part: TurnPart,
                guard: Option<&'static str>,
            ) -> $crate::storage::StoreResult<()> {
                use $crate::storage::sql_text::{close_guard, open_guard, where_guard};
                match part {
                    TurnPart::Answered(journal_id) => {
                        // Returns the id only when it was still pending (else the turn was
                        // answered already, by another worker or before a restart).
                        query
                            .push("UPDATE inbound SET state = 'done', done_at = ")
                            .push_bind(turn.now_ms)
                            .push(", tokens_in = ")
                            .push_bind(turn.tokens_in)
                            .push(", tokens_out = ")
                            .push_bind(turn.tokens_out)
                            .push(" WHERE id = ")
                            .push_bind(journal_id)
                            .push(" AND state = 'pending' RETURNING id");
                    }
                    // The turn is answered: its recorded side effects are no longer needed.
                    TurnPart::ClearEffects(journal_id) => {
                        query
                            .push("DELETE FROM tool_effects WHERE turn_key = ")
                            .push_bind($crate::storage::effects_key(journal_id));
                        where_guard(query, guard);
                    }
                    TurnPart::ClearRunEffects => {
                        let (run_id, step) = turn.run_step.as_ref().expect("a run's step");
                        query
                            .push("DELETE FROM tool_effects WHERE turn_key = ")
                            .push_bind($crate::storage::run_effects_key(run_id, *step));
                        where_guard(query, guard);
                    }
                    TurnPart::RunStepDone => {
                        let (run_id, step) = turn.run_step.as_ref().expect("a run's step");
                        query
                            .push("UPDATE runs SET step_input = NULL WHERE id = ")
                            .push_bind(run_id)
                            .push(" AND step = ")
                            .push_bind(*step);
                        where_guard(query, guard);
                    }
                    TurnPart::Entries => {
                        query.push(
                            "INSERT INTO transcript (session_key, epoch, role, content, tool_calls, tool_call_id, model, \
                             tokens_in, tokens_out, created_at) ",
                        );
                        open_guard(query, guard);
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
                        close_guard(query, guard);
                    }
                    TurnPart::Outbound(i) => {
                        Self::push_outbound_insert(query, &turn.session_key, &turn.outbound[i], turn.now_ms, guard)?;
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
                        where_guard(query, guard);
                    }
                }
                Ok(())
            }
        }
    };
}

macro_rules! sql {
    ($store:ty, $db:ty) => {
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
                self.commit_parts(turn, &TurnPart::all(turn)).await
            }
        }
    };
}

/// One statement of a turn's commit (see `commit_turn`).
#[derive(Clone, Copy)]
enum TurnPart {
    /// The journal entry marked answered; returns its id if it was still pending.
    Answered(i64),
    ClearEffects(i64),
    ClearRunEffects,
    RunStepDone,
    Entries,
    /// Returns the outbox row's id.
    Outbound(usize),
    Totals,
}

impl TurnPart {
    /// A turn's statements in the order they run: the answered-mark first, so that a turn
    /// answered already changes nothing.
    fn all(turn: &TurnCommit) -> Vec<TurnPart> {
        let mut parts = Vec::with_capacity(turn.outbound.len() + 6);
        if let Some(journal_id) = turn.journal_id {
            parts.push(TurnPart::Answered(journal_id));
            if turn.clear_effects {
                parts.push(TurnPart::ClearEffects(journal_id));
            }
        }
        if turn.run_step.is_some() {
            parts.extend([TurnPart::ClearRunEffects, TurnPart::RunStepDone]);
        }
        if !turn.entries.is_empty() {
            parts.push(TurnPart::Entries);
        }
        parts.extend((0..turn.outbound.len()).map(TurnPart::Outbound));
        parts.push(TurnPart::Totals);
        parts
    }
}

/// What a commit's statements returned, checked: the outbox ids in order, or why the turn
/// must not be committed.
fn returned_ids(turn: &TurnCommit, mut returned: Vec<i64>) -> StoreResult<Vec<i64>> {
    if let Some(journal_id) = turn.journal_id {
        // The answered-mark returns one id or none; each outbox insert returns one.
        if returned.len() == turn.outbound.len() {
            return Err(StoreError::AlreadyAnswered(journal_id));
        }
        if returned.first() == Some(&journal_id) {
            returned.remove(0);
        }
    }
    if returned.len() != turn.outbound.len() {
        return Err(StoreError::Corrupt(format!(
            "a turn's commit returned {} outbox ids for {} messages",
            returned.len(),
            turn.outbound.len()
        )));
    }
    Ok(returned)
}

impl super::SqliteStore {
    /// The turn's statements as one batch that begins the transaction, then COMMIT: two
    /// round trips to the connection's thread (a separate BEGIN and answered-mark were two
    /// more).
    async fn commit_parts(&self, turn: &TurnCommit, parts: &[TurnPart]) -> StoreResult<Vec<i64>> {
        let mut tx = self.write.begin_in_batch().await?;
        let mut batch = sqlx::QueryBuilder::<sqlx::Sqlite>::new(tx.begin_sql());
        for (n, part) in parts.iter().enumerate() {
            if n > 0 {
                batch.push("; ");
            }
            Self::push_turn_part(&mut batch, turn, *part, None)?;
        }
        let returned = batch.build_query_scalar().fetch_all(&mut *tx).await?;
        match returned_ids(turn, returned) {
            Ok(ids) => {
                tx.commit().await?;
                Ok(ids)
            }
            Err(why) => {
                tx.rollback().await?;
                Err(why)
            }
        }
    }
}

impl super::PostgresStore {
    /// The turn's statements as one statement of data-modifying CTEs, so one round trip and
    /// atomic without a transaction (BEGIN, a statement per part and COMMIT kept a backend
    /// idle in its transaction for each round trip, which two instances on one server waited
    /// on). Every part but the answered-mark is guarded by it: a turn answered already
    /// writes nothing. Rows come back as (part, id): 0 the answered-mark, k + 1 the k-th
    /// outbox row. The statement has committed when the rows are checked, so the count check
    /// in `returned_ids` reports a mismatch (each guarded insert returns exactly one row) but
    /// no longer undoes it, as the transaction did.
    async fn commit_parts(&self, turn: &TurnCommit, parts: &[TurnPart]) -> StoreResult<Vec<i64>> {
        const ANSWERED: &str = "answered";
        let guard = turn.journal_id.map(|_| ANSWERED);
        let mut statement = sqlx::QueryBuilder::<sqlx::Postgres>::new("WITH ");
        let mut selects = Vec::with_capacity(turn.outbound.len() + 1);
        for (n, part) in parts.iter().enumerate() {
            if n > 0 {
                statement.push(", ");
            }
            match part {
                TurnPart::Answered(_) => {
                    statement.push(ANSWERED);
                    selects.push(format!("SELECT 0::int4 AS part, id FROM {ANSWERED}"));
                }
                TurnPart::Outbound(k) => {
                    statement.push(format_args!("o{k}"));
                    selects.push(format!("SELECT {}::int4, id FROM o{k}", k + 1));
                }
                _ => {
                    statement.push(format_args!("p{n}"));
                }
            }
            statement.push(" AS (");
            let guard = if matches!(part, TurnPart::Answered(_)) {
                None
            } else {
                guard
            };
            Self::push_turn_part(&mut statement, turn, *part, guard)?;
            statement.push(")");
        }
        if selects.is_empty() {
            statement.push(" SELECT 0::int4 AS part, 0::int8 AS id WHERE false");
        } else {
            statement
                .push(" ")
                .push(selects.join(" UNION ALL "))
                .push(" ORDER BY part");
        }
        let rows: Vec<(i32, i64)> = statement.build_query_as().fetch_all(&self.write).await?;
        if let Some(journal_id) = turn.journal_id
            && rows.first().is_none_or(|(part, _)| *part != 0)
        {
            return Err(StoreError::AlreadyAnswered(journal_id));
        }
        let returned = rows.into_iter().map(|(_, id)| id).collect();
        returned_ids(turn, returned)
    }
}

parts!(super::SqliteStore, sqlx::Sqlite);
parts!(super::PostgresStore, sqlx::Postgres);
sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
