//! Team task boards and teammates' inboxes.
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Team boards and inboxes (SPEC section 12).
#[async_trait]
pub trait TeamStore: Send + Sync {
    /// Add a task (open); returns it with its id.
    async fn team_task_create(&self, task: &NewTeamTask, now_ms: i64) -> StoreResult<TeamTask>;
    /// A team's tasks, oldest first.
    async fn team_tasks(&self, team: &str) -> StoreResult<Vec<TeamTask>>;
    /// Write a task back if its status is still `expected` (false: someone changed it).
    async fn team_task_save(
        &self,
        task: &TeamTask,
        expected: TeamTaskStatus,
        now_ms: i64,
    ) -> StoreResult<bool>;
    /// Queue a message for each recipient.
    async fn team_message_send(
        &self,
        team: &str,
        sender: &str,
        recipients: &[String],
        text: &str,
        now_ms: i64,
    ) -> StoreResult<()>;
    /// A member's unread messages, marked read.
    async fn team_inbox_take(
        &self,
        team: &str,
        recipient: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<TeamMessage>>;
}

macro_rules! rows {
    ($store:ty, $db:ty) => {
        impl $store {
            pub(in crate::storage) fn decode_team_task(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::TeamTask> {
                use sqlx::Row;
                let corrupt = |what: &str, e: serde_json::Error| {
                    $crate::storage::StoreError::Corrupt(format!("team task {what}: {e}"))
                };
                let blocked: String = row.try_get("blocked_by")?;
                let comments: String = row.try_get("comments")?;
                let origin: Option<String> = row.try_get("origin")?;
                Ok($crate::storage::TeamTask {
                    id: row.try_get("id")?,
                    team: row.try_get("team")?,
                    title: row.try_get("title")?,
                    description: row.try_get("description")?,
                    status: $crate::storage::states::parse_stored(
                        "team task status",
                        &row.try_get::<String, _>("status")?,
                        $crate::storage::TeamTaskStatus::parse,
                    )?,
                    assignee: row.try_get("assignee")?,
                    owner: row.try_get("owner")?,
                    blocked_by: serde_json::from_str(&blocked)
                        .map_err(|e| corrupt("blockers", e))?,
                    result: row.try_get("result")?,
                    comments: serde_json::from_str(&comments)
                        .map_err(|e| corrupt("comments", e))?,
                    created_by: row.try_get("created_by")?,
                    origin: origin
                        .map(|o| serde_json::from_str(&o))
                        .transpose()
                        .map_err(|e| corrupt("origin", e))?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
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
        impl $crate::storage::TeamStore for $store {
            async fn team_task_create(&self, task: &$crate::storage::NewTeamTask, now_ms: i64) -> $crate::storage::StoreResult<$crate::storage::TeamTask> {
                let origin = task.origin.as_ref().map(|o| serde_json::to_string(o).expect("origins serialise"));
                let row = sqlx::query(
                    "INSERT INTO team_tasks (team, title, description, status, assignee, owner, blocked_by, result, \
                     comments, created_by, origin, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, NULL, $6, NULL, '[]', $7, $8, $9, $9) RETURNING *",
                )
                .bind(&task.team)
                .bind(&task.title)
                .bind(&task.description)
                .bind($crate::storage::TeamTaskStatus::Open.as_str())
                .bind(&task.assignee)
                .bind(serde_json::to_string(&task.blocked_by).expect("ids serialise"))
                .bind(&task.created_by)
                .bind(origin)
                .bind(now_ms)
                .fetch_one(&self.write)
                .await?;
                Self::decode_team_task(&row)
            }

            async fn team_tasks(&self, team: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::TeamTask>> {
                let rows = sqlx::query("SELECT * FROM team_tasks WHERE team = $1 ORDER BY id")
                    .bind(team)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_team_task).collect()
            }

            async fn team_task_save(&self, task: &$crate::storage::TeamTask, expected: $crate::storage::TeamTaskStatus, now_ms: i64) -> $crate::storage::StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE team_tasks SET status = $3, owner = $4, result = $5, comments = $6, assignee = $7, updated_at = $8 \
                     WHERE team = $1 AND id = $2 AND status = $9",
                )
                .bind(&task.team)
                .bind(task.id)
                .bind(task.status.as_str())
                .bind(&task.owner)
                .bind(&task.result)
                .bind(serde_json::to_string(&task.comments).expect("comments serialise"))
                .bind(&task.assignee)
                .bind(now_ms)
                .bind(expected.as_str())
                .execute(&self.write)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn team_message_send(&self, team: &str, sender: &str, recipients: &[String], text: &str, now_ms: i64) -> $crate::storage::StoreResult<()> {
                let mut tx = self.write.begin().await?;
                for recipient in recipients {
                    sqlx::query("INSERT INTO team_messages (team, sender, recipient, text, created_at) VALUES ($1, $2, $3, $4, $5)")
                        .bind(team)
                        .bind(sender)
                        .bind(recipient)
                        .bind(text)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn team_inbox_take(&self, team: &str, recipient: &str, now_ms: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::TeamMessage>> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "UPDATE team_messages SET read_at = $3 WHERE team = $1 AND recipient = $2 AND read_at IS NULL \
                     RETURNING id, sender, text, created_at",
                )
                .bind(team)
                .bind(recipient)
                .bind(now_ms)
                .fetch_all(&self.write)
                .await?;
                let mut messages = rows
                    .iter()
                    .map(|row| Ok($crate::storage::TeamMessage {
                        id: row.try_get("id")?,
                        sender: row.try_get("sender")?,
                        text: row.try_get("text")?,
                        created_at: row.try_get("created_at")?,
                    }))
                    .collect::<$crate::storage::StoreResult<Vec<_>>>()?;
                messages.sort_by_key(|m| m.id);
                Ok(messages)
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);
