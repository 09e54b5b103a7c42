//! The SQL both stores run, written once. `impl_store!` expands the same method bodies for
//! the SQLite and the PostgreSQL pool types (both accept `$N` placeholders), so the two
//! implementations cannot drift apart. Each store has a `write` pool and a `read` pool
//! (the same pool for PostgreSQL; a single-connection writer for SQLite, which serialises
//! writers in-process instead of spinning on the file lock).

/// Outbox rows with the platform id of the message each edit replaces.
macro_rules! outbox_select {
    () => {
        "SELECT o.*, e.platform_message_id AS edit_platform_id FROM outbox o \
         LEFT JOIN outbox e ON e.id = o.edit_of "
    };
}

/// Rows due at `$3`: a conversation whose earliest pending row waits for its retry yields
/// nothing (order within a conversation). Shared by the channel-wide and the
/// one-conversation reads of pending rows.
macro_rules! outbox_not_held_back {
    () => {
        "NOT EXISTS (SELECT 1 FROM outbox w WHERE w.channel = o.channel AND w.state = 'pending' \
         AND w.chat_id = o.chat_id AND w.next_attempt_at > $3 AND w.id <= o.id \
         AND w.thread_id IS NOT DISTINCT FROM o.thread_id)"
    };
}

/// One item into a run's inbox (`$1` run id, `$2` kind, `$3` text, `$4` now), only while the
/// run has not ended.
macro_rules! run_mail_insert {
    () => {
        "INSERT INTO run_inbox (run_id, kind, text, created_at) SELECT $1, $2, $3, $4 \
         WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1 AND announced = 0)"
    };
}

macro_rules! impl_store {
    ($store:ty, $db:ty) => {
        impl $store {
            fn decode_journal(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::JournalEntry> {
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

            fn decode_session(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::SessionRow> {
                use sqlx::Row;
                let route: String = row.try_get("route")?;
                Ok($crate::storage::SessionRow {
                    key: row.try_get("key")?,
                    route: serde_json::from_str(&route)
                        .map_err(|e| $crate::storage::StoreError::Corrupt(format!("session route: {e}")))?,
                    epoch: row.try_get("epoch")?,
                    model: row.try_get("model")?,
                    summary: row.try_get("summary")?,
                    summary_upto: row.try_get("summary_upto")?,
                    tokens_in: row.try_get("tokens_in")?,
                    tokens_out: row.try_get("tokens_out")?,
                    last_model: row.try_get("last_model")?,
                    updated_at: row.try_get("updated_at")?,
                    plan: row.try_get("plan")?,
                })
            }

            fn decode_outbox(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::OutboxEntry> {
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
                    },
                    session_key: row.try_get("session_key")?,
                    state: $crate::storage::states::parse_stored("outbox state", &row.try_get::<String, _>("state")?, $crate::storage::OutboxState::parse)?,
                    attempts: row.try_get("attempts")?,
                    next_attempt_at: row.try_get("next_attempt_at")?,
                    platform_message_id: row.try_get("platform_message_id")?,
                })
            }

            fn decode_run(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::RunRow> {
                use sqlx::Row;
                let route: String = row.try_get("origin_route")?;
                let announced: i64 = row.try_get("announced")?;
                Ok($crate::storage::RunRow {
                    id: row.try_get("id")?,
                    agent: row.try_get("agent")?,
                    parent_session: row.try_get("parent_session")?,
                    origin_route: serde_json::from_str(&route)
                        .map_err(|e| $crate::storage::StoreError::Corrupt(format!("run route: {e}")))?,
                    origin_message: row.try_get("origin_message")?,
                    depth: row.try_get("depth")?,
                    label: row.try_get("label")?,
                    task: row.try_get("task")?,
                    model: row.try_get("model")?,
                    mode: $crate::storage::states::parse_stored("run mode", &row.try_get::<String, _>("mode")?, $crate::storage::RunMode::parse)?,
                    state: $crate::storage::states::parse_stored("run state", &row.try_get::<String, _>("state")?, $crate::storage::RunState::parse)?,
                    result: row.try_get("result")?,
                    status_message: row.try_get("status_message")?,
                    announced: announced != 0,
                    created_at: row.try_get("created_at")?,
                    started_at: row.try_get("started_at")?,
                    ended_at: row.try_get("ended_at")?,
                    spec: row.try_get("spec")?,
                    step: row.try_get("step")?,
                    step_input: row.try_get("step_input")?,
                    starts: row.try_get("starts")?,
                })
            }

            fn decode_pairing(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::PairingRow> {
                use sqlx::Row;
                Ok($crate::storage::PairingRow {
                    channel: row.try_get("channel")?,
                    user_id: row.try_get("user_id")?,
                    user_name: row.try_get("user_name")?,
                    code: row.try_get("code")?,
                    state: $crate::storage::states::parse_stored("pairing state", &row.try_get::<String, _>("state")?, $crate::storage::PairingState::parse)?,
                    created_at: row.try_get("created_at")?,
                    expires_at: row.try_get("expires_at")?,
                })
            }

            /// Journal a message (unique per channel, chat and platform id): its id, or None
            /// when it is already there.
            async fn insert_journal<'c, E>(
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

            async fn insert_outbound<'c, E>(
                executor: E,
                session_key: &str,
                message: &$crate::storage::NewOutbound,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<i64>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                let route = serde_json::to_string(&message.route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO outbox (session_key, channel, chat_id, thread_id, route, kind, text, \
                     in_reply_to, edit_of, created_at, file) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) RETURNING id",
                )
                .bind(session_key)
                .bind(&message.route.channel)
                .bind(&message.route.chat_id)
                .bind(&message.route.thread_id)
                .bind(route)
                .bind(message.kind.as_str())
                .bind(&message.text)
                .bind(&message.in_reply_to)
                .bind(message.edit_of)
                .bind(now_ms)
                .bind(message.file.as_ref().map(|f| serde_json::to_string(f).expect("files serialise")))
                .fetch_one(executor)
                .await?;
                Ok(id)
            }
        }

        #[async_trait::async_trait]
        impl $crate::storage::Store for $store {
            async fn migrate(&self) -> $crate::storage::StoreResult<()> {
                // Each store migrates its own way (`sqlite_schema.rs`, `postgres.rs`).
                self.migrate_schema().await
            }

            async fn ping(&self) -> $crate::storage::StoreResult<()> {
                // A write, not a read: a database that can no longer write (a full disk) is
                // not ready, although it still answers reads.
                sqlx::query("INSERT INTO write_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at")
                    .bind($crate::clock::now_ms())
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }

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

            async fn journal_next(&self, session_key: &str) -> $crate::storage::StoreResult<Option<$crate::storage::JournalEntry>> {
                let row = sqlx::query(
                    "SELECT id, session_key, payload FROM inbound WHERE session_key = $1 AND state = 'pending' ORDER BY id LIMIT 1",
                )
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

            async fn journal_usage(&self, id: i64) -> $crate::storage::StoreResult<(i64, i64)> {
                let row: Option<(i64, i64)> = sqlx::query_as("SELECT tokens_in, tokens_out FROM inbound WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                Ok(row.unwrap_or((0, 0)))
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
        }

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

        #[async_trait::async_trait]
        impl $crate::storage::SessionStore for $store {
            async fn session_get_or_create(
                &self,
                key: &str,
                route: &ferroclaw_channel_core::ChatRoute,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<$crate::storage::SessionRow> {
                if let Some(row) = self.session_get(key).await? {
                    return Ok(row);
                }
                let route = serde_json::to_string(route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                sqlx::query(
                    "INSERT INTO sessions (key, route, created_at, updated_at) VALUES ($1,$2,$3,$3) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(key)
                .bind(route)
                .bind(now_ms)
                .execute(&self.write)
                .await?;
                let row = sqlx::query("SELECT * FROM sessions WHERE key = $1")
                    .bind(key)
                    .fetch_one(&self.write)
                    .await?;
                Self::decode_session(&row)
            }

            async fn session_get(&self, key: &str) -> $crate::storage::StoreResult<Option<$crate::storage::SessionRow>> {
                let row = sqlx::query("SELECT * FROM sessions WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_session).transpose()
            }

            async fn session_set_model(&self, key: &str, model: Option<&str>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET model = $2 WHERE key = $1")
                    .bind(key)
                    .bind(model)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_reset(&self, key: &str, now_ms: i64) -> $crate::storage::StoreResult<i64> {
                let epoch: i64 = sqlx::query_scalar(
                    "UPDATE sessions SET epoch = epoch + 1, summary = NULL, summary_upto = 0, plan = NULL, updated_at = $2 \
                     WHERE key = $1 RETURNING epoch",
                )
                .bind(key)
                .bind(now_ms)
                .fetch_all(&self.write) // see insert_journal: RETURNING writes read to the end
                .await?
                .first()
                .copied()
                .ok_or(sqlx::Error::RowNotFound)?;
                Ok(epoch)
            }

            async fn session_set_plan(&self, key: &str, plan: Option<&str>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET plan = $2 WHERE key = $1")
                    .bind(key)
                    .bind(plan)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_set_summary(&self, key: &str, summary: &str, upto: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE sessions SET summary = $2, summary_upto = $3 WHERE key = $1")
                    .bind(key)
                    .bind(summary)
                    .bind(upto)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn session_list(&self, key_prefix: Option<&str>, limit: i64, offset: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::SessionRow>> {
                // A prefix compare (not LIKE): channel names may hold `_` or `%`.
                let rows = sqlx::query(
                    "SELECT * FROM sessions WHERE $1 IS NULL OR substr(key, 1, length($1)) = $1 \
                     ORDER BY updated_at DESC, key LIMIT $2 OFFSET $3",
                )
                    .bind(key_prefix)
                    .bind(limit)
                    .bind(offset)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_session).collect()
            }

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
                if !turn.entries.is_empty() {
                    // One statement for all of the turn's transcript entries.
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO transcript (session_key, epoch, role, content, tool_calls, tool_call_id, model, \
                         tokens_in, tokens_out, created_at) ",
                    );
                    insert.push_values(&turn.entries, |mut row, entry| {
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
                    insert.build().execute(&mut *tx).await?;
                }
                let mut ids = Vec::with_capacity(turn.outbound.len());
                for message in &turn.outbound {
                    ids.push(Self::insert_outbound(&mut *tx, &turn.session_key, message, turn.now_ms).await?);
                }
                sqlx::query(
                    "UPDATE sessions SET tokens_in = tokens_in + $2, tokens_out = tokens_out + $3, \
                     last_model = COALESCE($4, last_model), updated_at = $5 WHERE key = $1",
                )
                .bind(&turn.session_key)
                .bind(turn.tokens_in)
                .bind(turn.tokens_out)
                .bind(&turn.last_model)
                .bind(turn.now_ms)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(ids)
            }
        }

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

            async fn outbox_pending(&self, channel: &str, limit: i64, now_ms: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.channel = $1 AND o.state = 'pending' \
                     AND ", $crate::storage::shared_sql::outbox_not_held_back!(), " ORDER BY o.id LIMIT $2"),
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
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.channel = $1 AND o.state = 'pending' \
                     AND o.chat_id = $4 AND o.thread_id IS NOT DISTINCT FROM $5 \
                     AND ", $crate::storage::shared_sql::outbox_not_held_back!(), " ORDER BY o.id LIMIT $2"),
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

            async fn outbox_mark_delivered(&self, delivered: &[(i64, Option<String>)], now_ms: i64) -> $crate::storage::StoreResult<()> {
                if delivered.is_empty() {
                    return Ok(());
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE outbox SET state = 'delivered', delivered_at = ");
                update.push_bind(now_ms);
                update.push(", attempts = attempts + 1, platform_message_id = CASE id");
                for (id, platform_id) in delivered {
                    update.push(" WHEN ").push_bind(*id).push(" THEN ").push_bind(platform_id.clone());
                }
                update.push(" ELSE platform_message_id END WHERE id IN (");
                let mut ids = update.separated(", ");
                for (id, _) in delivered {
                    ids.push_bind(*id);
                }
                update.push(")");
                update.build().execute(&self.write).await?;
                Ok(())
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

            async fn outbox_backlog(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.state = 'pending' ORDER BY o.id LIMIT $1"),
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

            async fn outbox_get(&self, id: i64) -> $crate::storage::StoreResult<Option<$crate::storage::OutboxEntry>> {
                let row = sqlx::query(concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.id = $1"))
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_outbox).transpose()
            }

            async fn outbox_last_id(&self, channel: &str) -> $crate::storage::StoreResult<i64> {
                let id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM outbox WHERE channel = $1")
                    .bind(channel)
                    .fetch_one(&self.read)
                    .await?;
                Ok(id.unwrap_or(0))
            }

            async fn outbox_after(&self, channel: &str, after: i64, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::OutboxEntry>> {
                let rows = sqlx::query(
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.channel = $1 AND o.id > $2 ORDER BY o.id LIMIT $3"),
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
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.channel = $1 AND o.chat_id = $2 AND o.in_reply_to = $3 ORDER BY o.id"),
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
                    concat!($crate::storage::shared_sql::outbox_select!(), "WHERE o.channel = $1 AND o.chat_id = $2 AND o.id > $3 ORDER BY o.id LIMIT $4"),
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

        #[async_trait::async_trait]
        impl $crate::storage::RunStore for $store {
            async fn run_insert(&self, run: &$crate::storage::RunRow) -> $crate::storage::StoreResult<()> {
                let route = serde_json::to_string(&run.origin_route)
                    .map_err(|e| $crate::storage::StoreError::Corrupt(e.to_string()))?;
                sqlx::query(
                    "INSERT INTO runs (id, parent_session, origin_route, origin_message, depth, label, task, model, mode, \
                     state, created_at, agent, spec, step, step_input, starts) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)",
                )
                .bind(&run.id)
                .bind(&run.parent_session)
                .bind(route)
                .bind(&run.origin_message)
                .bind(run.depth)
                .bind(&run.label)
                .bind(&run.task)
                .bind(&run.model)
                .bind(run.mode.as_str())
                .bind(run.state.as_str())
                .bind(run.created_at)
                .bind(&run.agent)
                .bind(&run.spec)
                .bind(run.step)
                .bind(&run.step_input)
                .bind(run.starts)
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn run_get(&self, id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::RunRow>> {
                let row = sqlx::query("SELECT * FROM runs WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
                row.as_ref().map(Self::decode_run).transpose()
            }

            async fn runs_of(&self, parent_session: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query("SELECT * FROM runs WHERE parent_session = $1 ORDER BY created_at, id")
                    .bind(parent_session)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_recent(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query("SELECT * FROM runs ORDER BY created_at DESC, id DESC LIMIT $1")
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_unannounced(&self, expired_at: Option<i64>) -> $crate::storage::StoreResult<Vec<$crate::storage::RunRow>> {
                let rows = sqlx::query(
                    "SELECT * FROM runs WHERE announced = 0 \
                     AND ($1 IS NULL OR lease_until IS NULL OR lease_until < $1) ORDER BY created_at, id",
                )
                .bind(expired_at)
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_run).collect()
            }

            async fn runs_lease(&self, ids: &[String], until_ms: i64) -> $crate::storage::StoreResult<()> {
                if ids.is_empty() {
                    return Ok(());
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE runs SET lease_until = ");
                update.push_bind(until_ms);
                update.push(" WHERE announced = 0 AND id IN (");
                let mut list = update.separated(", ");
                for id in ids {
                    list.push_bind(id);
                }
                update.push(")");
                update.build().execute(&self.write).await?;
                Ok(())
            }

            async fn run_claim(&self, id: &str, expired_at: Option<i64>, lease_until: Option<i64>) -> $crate::storage::StoreResult<Option<i64>> {
                // One UPDATE: of two processes claiming at once, the second finds the lease
                // the first set (PostgreSQL re-reads the row after the first commits).
                let starts: Option<i64> = sqlx::query_scalar(
                    "UPDATE runs SET starts = starts + 1, lease_until = $3 WHERE id = $1 AND announced = 0 \
                     AND ($2 IS NULL OR lease_until IS NULL OR lease_until < $2) RETURNING starts",
                )
                .bind(id)
                .bind(expired_at)
                .bind(lease_until)
                .fetch_optional(&self.write)
                .await?;
                Ok(starts)
            }

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
                let put = sqlx::query($crate::storage::shared_sql::run_mail_insert!())
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

            async fn run_set_state(&self, id: &str, state: $crate::storage::RunState, started_at: Option<i64>) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE runs SET state = $2, started_at = COALESCE($3, started_at) WHERE id = $1 AND announced = 0")
                    .bind(id)
                    .bind(state.as_str())
                    .bind(started_at)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn run_set_status_message(&self, id: &str, outbox_id: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("UPDATE runs SET status_message = $2 WHERE id = $1")
                    .bind(id)
                    .bind(outbox_id)
                    .execute(&self.write)
                    .await?;
                Ok(())
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
                    sqlx::query($crate::storage::shared_sql::run_mail_insert!())
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

        #[async_trait::async_trait]
        impl $crate::storage::EffectStore for $store {
            async fn tool_effect_get(&self, turn_key: &str, call_key: &str) -> $crate::storage::StoreResult<Option<String>> {
                Ok(sqlx::query_scalar("SELECT result FROM tool_effects WHERE turn_key = $1 AND call_key = $2")
                    .bind(turn_key)
                    .bind(call_key)
                    .fetch_optional(&self.read)
                    .await?)
            }

            async fn tool_effect_put(&self, turn_key: &str, call_key: &str, result: &str, now_ms: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("INSERT INTO tool_effects (turn_key, call_key, result, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                    .bind(turn_key)
                    .bind(call_key)
                    .bind(result)
                    .bind(now_ms)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn tool_effect_forget(&self, turn_key: &str, call_key: &str) -> $crate::storage::StoreResult<()> {
                sqlx::query("DELETE FROM tool_effects WHERE turn_key = $1 AND call_key = $2")
                    .bind(turn_key)
                    .bind(call_key)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }

        impl $store {
            fn decode_team_task(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::TeamTask> {
                use sqlx::Row;
                let corrupt = |what: &str, e: serde_json::Error| $crate::storage::StoreError::Corrupt(format!("team task {what}: {e}"));
                let blocked: String = row.try_get("blocked_by")?;
                let comments: String = row.try_get("comments")?;
                let origin: Option<String> = row.try_get("origin")?;
                Ok($crate::storage::TeamTask {
                    id: row.try_get("id")?,
                    team: row.try_get("team")?,
                    title: row.try_get("title")?,
                    description: row.try_get("description")?,
                    status: $crate::storage::states::parse_stored("team task status", &row.try_get::<String, _>("status")?, $crate::storage::TeamTaskStatus::parse)?,
                    assignee: row.try_get("assignee")?,
                    owner: row.try_get("owner")?,
                    blocked_by: serde_json::from_str(&blocked).map_err(|e| corrupt("blockers", e))?,
                    result: row.try_get("result")?,
                    comments: serde_json::from_str(&comments).map_err(|e| corrupt("comments", e))?,
                    created_by: row.try_get("created_by")?,
                    origin: origin.map(|o| serde_json::from_str(&o)).transpose().map_err(|e| corrupt("origin", e))?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                })
            }
        }

        impl $store {
            fn decode_job(row: &<$db as sqlx::Database>::Row) -> $crate::storage::StoreResult<$crate::storage::Job> {
                use sqlx::Row;
                use $crate::storage::states::parse_stored;
                let route: String = row.try_get("origin_route")?;
                let flag = |name: &str| -> $crate::storage::StoreResult<bool> { Ok(row.try_get::<i64, _>(name)? != 0) };
                Ok($crate::storage::Job {
                    id: row.try_get("id")?,
                    session_key: row.try_get("session_key")?,
                    agent: row.try_get("agent")?,
                    origin_route: serde_json::from_str(&route)
                        .map_err(|e| $crate::storage::StoreError::Corrupt(format!("job route: {e}")))?,
                    origin_message: row.try_get("origin_message")?,
                    kind: parse_stored("job kind", &row.try_get::<String, _>("kind")?, $crate::storage::JobKind::parse)?,
                    spec: row.try_get("spec")?,
                    timezone: row.try_get("timezone")?,
                    prompt: row.try_get("prompt")?,
                    in_origin: flag("in_origin")?,
                    heartbeat: flag("heartbeat")?,
                    missed: parse_stored("job missed policy", &row.try_get::<String, _>("missed")?, $crate::storage::MissedPolicy::parse)?,
                    state: parse_stored("job state", &row.try_get::<String, _>("state")?, $crate::storage::JobState::parse)?,
                    next_run: row.try_get("next_run")?,
                    runs: row.try_get("runs")?,
                    last_run: row.try_get("last_run")?,
                    chain: row.try_get("chain")?,
                    created_in: row.try_get("created_in")?,
                    created_at: row.try_get("created_at")?,
                })
            }
        }

        #[async_trait::async_trait]
        impl $crate::storage::JobStore for $store {
            async fn job_insert(&self, job: &$crate::storage::Job) -> $crate::storage::StoreResult<()> {
                let route = serde_json::to_string(&job.origin_route).expect("routes serialise");
                sqlx::query(
                    "INSERT INTO jobs (id, session_key, agent, origin_route, origin_message, kind, spec, timezone, prompt, \
                     in_origin, heartbeat, missed, state, next_run, runs, last_run, chain, created_in, created_at) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)",
                )
                .bind(&job.id)
                .bind(&job.session_key)
                .bind(&job.agent)
                .bind(route)
                .bind(&job.origin_message)
                .bind(job.kind.as_str())
                .bind(&job.spec)
                .bind(&job.timezone)
                .bind(&job.prompt)
                .bind(i64::from(job.in_origin))
                .bind(i64::from(job.heartbeat))
                .bind(job.missed.as_str())
                .bind(job.state.as_str())
                .bind(job.next_run)
                .bind(job.runs)
                .bind(job.last_run)
                .bind(job.chain)
                .bind(&job.created_in)
                .bind(job.created_at)
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn job_get(&self, id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::Job>> {
                let row = sqlx::query("SELECT * FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_job).transpose()
            }

            async fn jobs_of(&self, session_key: &str) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query("SELECT * FROM jobs WHERE session_key = $1 ORDER BY created_at DESC, id")
                    .bind(session_key)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_recent(&self, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query("SELECT * FROM jobs ORDER BY created_at DESC, id LIMIT $1")
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_live_count(&self, session_key: &str) -> $crate::storage::StoreResult<i64> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE session_key = $1 AND state = 'active'")
                    .bind(session_key)
                    .fetch_one(&self.read)
                    .await?)
            }

            async fn jobs_created_in(&self, message_id: &str) -> $crate::storage::StoreResult<i64> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE created_in = $1")
                    .bind(message_id)
                    .fetch_one(&self.read)
                    .await?)
            }

            async fn job_cancel(&self, session_key: &str, id: &str) -> $crate::storage::StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE jobs SET state = 'cancelled', next_run = NULL WHERE id = $1 AND session_key = $2 AND state = 'active'",
                )
                .bind(id)
                .bind(session_key)
                .execute(&self.write)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn jobs_due(&self, now_ms: i64, limit: i64) -> $crate::storage::StoreResult<Vec<$crate::storage::Job>> {
                let rows = sqlx::query(
                    "SELECT * FROM jobs WHERE state = 'active' AND next_run <= $1 ORDER BY next_run, id LIMIT $2",
                )
                .bind(now_ms)
                .bind(limit)
                // The writer (SQLite): an idle service's scheduler does not open a reader
                // connection (a thread and its cache) just to learn there is nothing due.
                .fetch_all(&self.write)
                .await?;
                rows.iter().map(Self::decode_job).collect()
            }

            async fn jobs_next_due(&self) -> $crate::storage::StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar("SELECT MIN(next_run) FROM jobs WHERE state = 'active'")
                    .fetch_one(&self.write)
                    .await?)
            }

            async fn job_turn_pending(&self, id: &str, session_key: &str) -> $crate::storage::StoreResult<bool> {
                // Job turns' ids are `job:<id>:<due>` (schedules::turn_message); ids are hex.
                let pending: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM inbound WHERE session_key = $1 AND state = 'pending' \
                     AND platform_id LIKE $2 LIMIT 1",
                )
                .bind(session_key)
                .bind(format!("job:{id}:%"))
                .fetch_optional(&self.write)
                .await?;
                Ok(pending.is_some())
            }

            async fn job_advance(
                &self,
                id: &str,
                due: i64,
                next: Option<i64>,
                turn: Option<(&ferroclaw_channel_core::InboundMessage, &str)>,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<(bool, Option<$crate::storage::JournalEntry>)> {
                let mut tx = self.write.begin().await?;
                let state = if next.is_some() { "active" } else { "done" };
                let fired = i64::from(turn.is_some());
                let moved = sqlx::query(
                    "UPDATE jobs SET next_run = $3, state = $4, runs = runs + $5, \
                     last_run = CASE WHEN $5 = 1 THEN $6 ELSE last_run END \
                     WHERE id = $1 AND state = 'active' AND next_run = $2",
                )
                .bind(id)
                .bind(due)
                .bind(next)
                .bind(state)
                .bind(fired)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                if moved.rows_affected() != 1 {
                    return Ok((false, None));
                }
                let mut entry = None;
                if let Some((message, session_key)) = turn {
                    let id = Self::insert_journal(&mut *tx, message, session_key, now_ms).await?;
                    entry = id.map(|id| $crate::storage::JournalEntry {
                        id,
                        session_key: session_key.to_string(),
                        message: message.clone(),
                        redo: false,
                    });
                }
                tx.commit().await?;
                Ok((true, entry))
            }
        }

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

pub(crate) use impl_store;
pub(crate) use outbox_not_held_back;
pub(crate) use outbox_select;
pub(crate) use run_mail_insert;
