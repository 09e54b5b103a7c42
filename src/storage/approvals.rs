//! Tool calls waiting for a person's decision, the "always" choices people made, and what
//! untrusted content a subagent run read (SPEC section 17).
//!
//! The traits and their rows, then their SQL, written once for both dialects (the macros below
//! expand the same bodies for SQLite and PostgreSQL). A request is opened with its prompt in
//! one transaction (so the prompt is delivered exactly once, by the outbox), found again by
//! its call's reference when a turn is redone, and decided by one conditional UPDATE (so two
//! presses, or two processes, have one effect) that also queues the prompt's edit and, for
//! "always", the remembered choice.

use super::*;
use async_trait::async_trait;

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    Expired,
    /// Its turn was stopped before anyone decided.
    Withdrawn,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalState::Pending,
            "approved" => ApprovalState::Approved,
            "denied" => ApprovalState::Denied,
            "expired" => ApprovalState::Expired,
            "withdrawn" => ApprovalState::Withdrawn,
            _ => return None,
        })
    }
}

/// A request to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApproval {
    pub id: String,
    /// The call's identity across attempts of its turn (`<turn>/<tool>:<hash>:<n>`).
    pub call_ref: String,
    pub session_key: String,
    pub route: ferroclaw_channel_core::ChatRoute,
    pub agent: String,
    /// `<channel>:<user>` of the person whose message led to the call.
    pub requester: Option<String>,
    pub tool: String,
    /// The host an egress call reaches ('' for other classes): "always" is per host.
    pub target: String,
    /// The arguments as shown (secrets masked, long values cut).
    pub arguments: String,
    pub reason: String,
    /// `<channel>:<user>` of everyone who may decide.
    pub deciders: Vec<String>,
    pub expires_at_ms: i64,
}

/// A stored request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRow {
    pub request: NewApproval,
    /// The outbox id of its prompt.
    pub prompt_id: Option<i64>,
    pub state: ApprovalState,
    pub always: bool,
    pub decided_by: Option<String>,
    pub created_at_ms: i64,
    pub decided_at_ms: Option<i64>,
}

/// A decision to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision<'a> {
    pub id: &'a str,
    /// `Approved`, `Denied` (before expiry), `Expired` (after) or `Withdrawn` (any time).
    pub state: ApprovalState,
    /// Remember it for the chat, tool and target.
    pub always: bool,
    pub by: &'a str,
    pub now_ms: i64,
    /// The prompt's edit saying who decided what.
    pub edit: Option<NewOutbound>,
}

/// An "always" choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRule {
    pub id: i64,
    pub channel: String,
    pub chat_id: String,
    pub tool: String,
    pub target: String,
    pub created_by: String,
    pub created_at_ms: i64,
}

#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Open `request` with its `prompt` queued, in one transaction — unless a request with
    /// the same `call_ref` exists (a redone turn): then that one, untouched. True when new.
    async fn approval_open(
        &self,
        request: &NewApproval,
        prompt: &NewOutbound,
        now_ms: i64,
    ) -> StoreResult<(ApprovalRow, bool)>;
    async fn approval_get(&self, id: &str) -> StoreResult<Option<ApprovalRow>>;
    /// Move a pending request to its decision (an approval or denial only before it
    /// expires, an expiry only after, a withdrawal any time), with its edit and remembered choice, in one
    /// transaction. False when it was not pending (or the time did not fit): nothing changed.
    async fn approval_decide(&self, decision: &ApprovalDecision<'_>) -> StoreResult<bool>;
    /// Requests still pending, oldest first.
    async fn approvals_pending(&self) -> StoreResult<Vec<ApprovalRow>>;
}

/// The "always" choices people made, per chat.
#[async_trait]
pub trait ApprovalRuleStore: Send + Sync {
    /// Whether an "always" choice covers `tool` (and `target`) in a chat.
    async fn approval_rule_find(
        &self,
        channel: &str,
        chat_id: &str,
        tool: &str,
        target: &str,
    ) -> StoreResult<bool>;
    /// The "always" choices of a chat (None: every chat's), oldest first.
    async fn approval_rules(&self, chat: Option<(&str, &str)>) -> StoreResult<Vec<ApprovalRule>>;
    /// Remove a chat's choice `id`; false when the chat has no such choice.
    async fn approval_rule_revoke(
        &self,
        channel: &str,
        chat_id: &str,
        id: i64,
    ) -> StoreResult<bool>;
}

/// What untrusted content a subagent run read.
#[async_trait]
pub trait TaintStore: Send + Sync {
    /// Record that run `run_id` read `source` (the first record stays).
    async fn run_taint_record(&self, run_id: &str, source: &str, now_ms: i64) -> StoreResult<()>;
    /// What run `run_id` read that cannot be trusted, if anything.
    async fn run_taint_of(&self, run_id: &str) -> StoreResult<Option<String>>;
}

const COLUMNS: &str = "id, call_ref, session_key, route, agent, requester, tool, target, arguments, reason, \
     deciders, prompt_id, state, always, decided_by, created_at, expires_at, decided_at";

macro_rules! decode {
    ($store:ty, $db:ty) => {
        impl $store {
            fn decode_approval(
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::storage::StoreResult<$crate::storage::ApprovalRow> {
                use sqlx::Row;
                let corrupt = |what: &str, e: serde_json::Error| {
                    $crate::storage::StoreError::Corrupt(format!("approval {what}: {e}"))
                };
                let route: String = row.try_get("route")?;
                let deciders: String = row.try_get("deciders")?;
                Ok($crate::storage::ApprovalRow {
                    request: $crate::storage::NewApproval {
                        id: row.try_get("id")?,
                        call_ref: row.try_get("call_ref")?,
                        session_key: row.try_get("session_key")?,
                        route: serde_json::from_str(&route).map_err(|e| corrupt("route", e))?,
                        agent: row.try_get("agent")?,
                        requester: row.try_get("requester")?,
                        tool: row.try_get("tool")?,
                        target: row.try_get("target")?,
                        arguments: row.try_get("arguments")?,
                        reason: row.try_get("reason")?,
                        deciders: serde_json::from_str(&deciders)
                            .map_err(|e| corrupt("deciders", e))?,
                        expires_at_ms: row.try_get("expires_at")?,
                    },
                    prompt_id: row.try_get("prompt_id")?,
                    state: $crate::storage::states::parse_stored(
                        "approval state",
                        &row.try_get::<String, _>("state")?,
                        $crate::storage::ApprovalState::parse,
                    )?,
                    always: row.try_get::<i64, _>("always")? != 0,
                    decided_by: row.try_get("decided_by")?,
                    created_at_ms: row.try_get("created_at")?,
                    decided_at_ms: row.try_get("decided_at")?,
                })
            }
        }
    };
}

macro_rules! requests {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::ApprovalStore for $store {
            async fn approval_open(
                &self,
                request: &$crate::storage::NewApproval,
                prompt: &$crate::storage::NewOutbound,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<($crate::storage::ApprovalRow, bool)> {
                let route = serde_json::to_string(&request.route).expect("routes serialise");
                let deciders = serde_json::to_string(&request.deciders).expect("strings serialise");
                let mut tx = self.write.begin().await?;
                let inserted = sqlx::query(
                    "INSERT INTO approvals (id, call_ref, session_key, channel, chat_id, route, agent, requester, \
                     tool, target, arguments, reason, deciders, created_at, expires_at) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15) ON CONFLICT (call_ref) DO NOTHING",
                )
                .bind(&request.id)
                .bind(&request.call_ref)
                .bind(&request.session_key)
                .bind(&request.route.channel)
                .bind(&request.route.chat_id)
                .bind(route)
                .bind(&request.agent)
                .bind(&request.requester)
                .bind(&request.tool)
                .bind(&request.target)
                .bind(&request.arguments)
                .bind(&request.reason)
                .bind(deciders)
                .bind(now_ms)
                .bind(request.expires_at_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if inserted {
                    let prompt_id = Self::insert_outbound(&mut *tx, &request.session_key, prompt, now_ms).await?;
                    sqlx::query("UPDATE approvals SET prompt_id = $1 WHERE id = $2")
                        .bind(prompt_id)
                        .bind(&request.id)
                        .execute(&mut *tx)
                        .await?;
                }
                let row = sqlx::query(&format!("SELECT {} FROM approvals WHERE call_ref = $1", $crate::storage::approvals::COLUMNS))
                    .bind(&request.call_ref)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((Self::decode_approval(&row)?, inserted))
            }

            async fn approval_get(&self, id: &str) -> $crate::storage::StoreResult<Option<$crate::storage::ApprovalRow>> {
                let row = sqlx::query(&format!("SELECT {} FROM approvals WHERE id = $1", $crate::storage::approvals::COLUMNS))
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?;
                row.as_ref().map(Self::decode_approval).transpose()
            }

            async fn approval_decide(&self, decision: &$crate::storage::ApprovalDecision<'_>) -> $crate::storage::StoreResult<bool> {
                // An approval or a denial counts only before the deadline, an expiry only after.
                let timing = match decision.state {
                    $crate::storage::ApprovalState::Expired => "expires_at <= $5",
                    $crate::storage::ApprovalState::Withdrawn => "TRUE",
                    _ => "expires_at > $5",
                };
                let mut tx = self.write.begin().await?;
                let changed = sqlx::query(&format!(
                    "UPDATE approvals SET state = $2, always = $3, decided_by = $4, decided_at = $5 \
                     WHERE id = $1 AND state = 'pending' AND {timing}"
                ))
                .bind(decision.id)
                .bind(decision.state.as_str())
                .bind(i64::from(decision.always))
                .bind(decision.by)
                .bind(decision.now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if !changed {
                    return Ok(false);
                }
                let row = sqlx::query(&format!("SELECT {} FROM approvals WHERE id = $1", $crate::storage::approvals::COLUMNS))
                    .bind(decision.id)
                    .fetch_one(&mut *tx)
                    .await?;
                let row = Self::decode_approval(&row)?;
                if decision.always {
                    sqlx::query(
                        "INSERT INTO approval_rules (channel, chat_id, tool, target, created_by, created_at) \
                         VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT DO NOTHING",
                    )
                    .bind(&row.request.route.channel)
                    .bind(&row.request.route.chat_id)
                    .bind(&row.request.tool)
                    .bind(&row.request.target)
                    .bind(decision.by)
                    .bind(decision.now_ms)
                    .execute(&mut *tx)
                    .await?;
                }
                if let Some(edit) = &decision.edit {
                    Self::insert_outbound(&mut *tx, &row.request.session_key, edit, decision.now_ms).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn approvals_pending(&self) -> $crate::storage::StoreResult<Vec<$crate::storage::ApprovalRow>> {
                let rows = sqlx::query(&format!(
                    "SELECT {} FROM approvals WHERE state = 'pending' ORDER BY created_at, id",
                    $crate::storage::approvals::COLUMNS
                ))
                .fetch_all(&self.read)
                .await?;
                rows.iter().map(Self::decode_approval).collect()
            }

        }
    };
}

macro_rules! rules {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::ApprovalRuleStore for $store {
            async fn approval_rule_find(&self, channel: &str, chat_id: &str, tool: &str, target: &str) -> $crate::storage::StoreResult<bool> {
                let found: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM approval_rules WHERE channel = $1 AND chat_id = $2 AND tool = $3 AND target = $4",
                )
                .bind(channel)
                .bind(chat_id)
                .bind(tool)
                .bind(target)
                .fetch_optional(&self.read)
                .await?;
                Ok(found.is_some())
            }

            async fn approval_rules(&self, chat: Option<(&str, &str)>) -> $crate::storage::StoreResult<Vec<$crate::storage::ApprovalRule>> {
                use sqlx::Row;
                let (channel, chat_id) = chat.unwrap_or(("", ""));
                let rows = sqlx::query(
                    "SELECT id, channel, chat_id, tool, target, created_by, created_at FROM approval_rules \
                     WHERE ($1 = '' OR (channel = $1 AND chat_id = $2)) ORDER BY id",
                )
                .bind(channel)
                .bind(chat_id)
                .fetch_all(&self.read)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok($crate::storage::ApprovalRule {
                            id: r.try_get("id")?,
                            channel: r.try_get("channel")?,
                            chat_id: r.try_get("chat_id")?,
                            tool: r.try_get("tool")?,
                            target: r.try_get("target")?,
                            created_by: r.try_get("created_by")?,
                            created_at_ms: r.try_get("created_at")?,
                        })
                    })
                    .collect()
            }

            async fn approval_rule_revoke(&self, channel: &str, chat_id: &str, id: i64) -> $crate::storage::StoreResult<bool> {
                let done = sqlx::query("DELETE FROM approval_rules WHERE id = $1 AND channel = $2 AND chat_id = $3")
                    .bind(id)
                    .bind(channel)
                    .bind(chat_id)
                    .execute(&self.write)
                    .await?
                    .rows_affected();
                Ok(done == 1)
            }
        }
    };
}

macro_rules! taint {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::TaintStore for $store {
            async fn run_taint_record(&self, run_id: &str, source: &str, now_ms: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query("INSERT INTO run_taint (run_id, source, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
                    .bind(run_id)
                    .bind(source)
                    .bind(now_ms)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }

            async fn run_taint_of(&self, run_id: &str) -> $crate::storage::StoreResult<Option<String>> {
                Ok(sqlx::query_scalar("SELECT source FROM run_taint WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.read)
                    .await?)
            }
        }
    };
}

taint!(super::SqliteStore);
taint!(super::PostgresStore);
decode!(super::SqliteStore, sqlx::Sqlite);
decode!(super::PostgresStore, sqlx::Postgres);
requests!(super::SqliteStore, sqlx::Sqlite);
requests!(super::PostgresStore, sqlx::Postgres);
rules!(super::SqliteStore, sqlx::Sqlite);
rules!(super::PostgresStore, sqlx::Postgres);
