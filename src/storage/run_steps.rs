//! A run's steps: its inbox (steers, children's outcomes), the step it is on, and its one finishing transaction (outcome, announcement, the parent's entry).
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// A run's steps: its inbox (steers, children's outcomes), the step it is on, and its one finishing transaction (outcome, announcement, the parent's entry).
#[async_trait]
pub trait RunStepStore: Send + Sync {
    /// The run starts step `step` with `input` (resumed from there if its process dies);
    /// with `mail`, that inbox item is taken in the same transaction (false: it was gone).
    async fn run_set_step(
        &self,
        id: &str,
        step: i64,
        input: &str,
        mail: Option<i64>,
    ) -> StoreResult<bool>;
    /// Put something in a run's inbox; false when the run has ended (nothing is written).
    async fn run_mail_put(
        &self,
        run_id: &str,
        kind: MailKind,
        text: &str,
        now_ms: i64,
    ) -> StoreResult<bool>;
    /// The oldest item waiting in a run's inbox.
    async fn run_mail_next(&self, run_id: &str) -> StoreResult<Option<RunMail>>;
    /// End a run and announce it, once (a second call writes nothing).
    async fn run_finish(&self, finish: &RunFinish) -> StoreResult<RunFinished>;
}

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::RunStepStore for $store {
            async fn run_set_step(&self, id: &str, step: i64, input: &str, mail: Option<i64>) -> $crate::storage::StoreResult<bool> {
                let mut tx = self.write.begin().await?;
                if let Some(mail) = mail {
                    let taken = sqlx::query("DELETE FROM run_inbox WHERE id = $1 AND run_id = $2")
                        .bind(mail)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    if taken.rows_affected() != 1 {
                        return Ok(false);
                    }
                }
                sqlx::query("UPDATE runs SET step = $2, step_input = $3 WHERE id = $1 AND announced = 0")
                    .bind(id)
                    .bind(step)
                    .bind(input)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn run_mail_put(&self, run_id: &str, kind: $crate::storage::MailKind, text: &str, now_ms: i64) -> $crate::storage::StoreResult<bool> {
                let put = sqlx::query($crate::storage::sql_text::run_mail_insert!())
                .bind(run_id)
                .bind(kind.as_str())
                .bind(text)
                .bind(now_ms)
                .execute(&self.write)
                .await?;
                Ok(put.rows_affected() == 1)
            }

            async fn run_mail_next(&self, run_id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::RunMail>> {
                use sqlx::Row;
                let row = sqlx::query("SELECT id, kind, text FROM run_inbox WHERE run_id = $1 ORDER BY id LIMIT 1")
                    .bind(run_id)
                    .fetch_optional(&self.write)
                    .await?;
                row.map(|row| {
                    let kind: String = row.try_get("kind")?;
                    Ok($crate::storage::RunMail {
                        id: row.try_get("id")?,
                        kind: $crate::storage::MailKind::parse(&kind).ok_or_else(|| {
                            $crate::storage::StoreError::Corrupt(format!("run inbox kind `{kind}`"))
                        })?,
                        text: row.try_get("text")?,
                    })
                })
                .transpose()
            }

            async fn run_finish(
                &self,
                finish: &$crate::storage::RunFinish,
            ) -> $crate::storage::StoreResult<$crate::storage::RunFinished> {
                let mut tx = self.write.begin().await?;
                let ended = sqlx::query(
                    "UPDATE runs SET state = $2, result = $3, ended_at = $4, announced = 1 WHERE id = $1 AND announced = 0",
                )
                .bind(&finish.run_id)
                .bind(finish.state.as_str())
                .bind(&finish.result)
                .bind(finish.now_ms)
                .execute(&mut *tx)
                .await?;
                if ended.rows_affected() != 1 {
                    return Ok($crate::storage::RunFinished::AlreadyAnnounced);
                }
                // Side effects recorded by steps that never committed (a kill, a timeout):
                // the run will not be resumed, so they are no longer needed.
                let (from, to) = $crate::storage::run_effects_range(&finish.run_id);
                sqlx::query("DELETE FROM tool_effects WHERE turn_key >= $1 AND turn_key < $2")
                    .bind(from)
                    .bind(to)
                    .execute(&mut *tx)
                    .await?;
                // What it was told and never took goes with it.
                sqlx::query("DELETE FROM run_inbox WHERE run_id = $1")
                    .bind(&finish.run_id)
                    .execute(&mut *tx)
                    .await?;
                if let Some((parent_run, report)) = &finish.report {
                    sqlx::query($crate::storage::sql_text::run_mail_insert!())
                    .bind(parent_run)
                    .bind($crate::storage::MailKind::Report.as_str())
                    .bind(report)
                    .bind(finish.now_ms)
                    .execute(&mut *tx)
                    .await?;
                }
                let session_key: String = sqlx::query_scalar("SELECT parent_session FROM runs WHERE id = $1")
                    .bind(&finish.run_id)
                    .fetch_one(&mut *tx)
                    .await?;
                if let Some(edit) = &finish.status_edit {
                    Self::insert_outbound(&mut *tx, &session_key, edit, finish.now_ms).await?;
                }
                if let Some(announcement) = &finish.announcement {
                    Self::insert_outbound(&mut *tx, &session_key, announcement, finish.now_ms).await?;
                }
                let mut journal = None;
                if let Some((message, parent_key)) = &finish.parent_message {
                    let id = Self::insert_journal(&mut *tx, message, parent_key, finish.now_ms).await?;
                    journal = id.map(|id| $crate::storage::JournalEntry {
                        id,
                        session_key: parent_key.clone(),
                        message: message.clone(),
                        redo: false,
                    });
                }
                tx.commit().await?;
                Ok($crate::storage::RunFinished::Announced { parent_turn: journal })
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
