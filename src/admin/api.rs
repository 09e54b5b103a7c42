//! `/v1/admin/...`: JSON for operators and their tools.

use super::Admin;
use super::replies::{not_found, unavailable};
use crate::storage::{OutboxEntry, RunRow, SessionRow, StoreError};
use crate::subagents::Registry;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// Most rows one list answer holds.
const MAX_LIMIT: i64 = 200;
/// Transcript entries shown with one session.
const TRANSCRIPT: i64 = 200;
/// Levels of a run tree shown (subagents may spawn below `subagents.max_depth`).
const TREE_DEPTH: u32 = 8;

pub(super) fn routes() -> Router<Admin> {
    Router::new()
        .route("/v1/admin/sessions", get(sessions))
        .route("/v1/admin/sessions/{*key}", get(session))
        .route("/v1/admin/subagents", get(subagents))
        .route("/v1/admin/subagents/{id}", get(subagent))
        .route("/v1/admin/outbox", get(outbox))
        .route("/v1/admin/teams/{team}/tasks", get(team_tasks))
        .route("/v1/admin/jobs", get(jobs))
        .route("/v1/admin/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/admin/usage", get(super::usage::usage))
        .route("/v1/admin/approvals", get(super::approvals::approvals))
        .route(
            "/v1/admin/memory",
            get(super::memory::export).delete(super::memory::erase),
        )
        .route("/v1/admin/memory/link", post(super::memory::link))
        .route("/v1/admin/skills", get(skills))
        .route("/v1/admin/mcp", get(mcp))
        .route("/v1/admin/channels", get(channels))
        .route("/v1/admin/pairing", get(pairing))
        .route("/v1/admin/pairing/approve/{code}", post(approve))
        .route("/v1/admin/pairing/revoke/{user}", post(revoke))
}

/// `GET /v1/admin/channels`: each channel's state and figures (SPEC section 21).
async fn channels(State(admin): State<Admin>) -> Json<Value> {
    Json(json!({"channels": admin.channels.json()}))
}

#[derive(serde::Deserialize)]
pub(super) struct Page {
    channel: Option<String>,
    /// With `channel`: whose sessions (default `main`).
    agent: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

impl Page {
    fn limit(&self) -> i64 {
        self.limit.unwrap_or(50).clamp(1, MAX_LIMIT)
    }
}

/// An agent's sessions on a channel all start with this (SPEC section 3).
pub(super) fn channel_prefix(agent: &str, channel: &str) -> String {
    format!("agent:{agent}:{channel}:")
}

pub(super) fn session_json(s: &SessionRow, busy: bool) -> Value {
    json!({
        "key": s.key, "channel": s.route.channel, "chat_id": s.route.chat_id,
        "thread_id": s.route.thread_id, "model": s.model, "last_model": s.last_model,
        "tokens_in": s.tokens_in, "tokens_out": s.tokens_out, "updated_at": s.updated_at,
        "busy": busy,
    })
}

pub(super) fn run_json(r: &RunRow) -> Value {
    json!({
        "id": r.id, "parent_session": r.parent_session, "label": r.label, "task": r.task,
        "model": r.model, "depth": r.depth, "state": r.state.as_str(), "result": r.result,
        "announced": r.announced, "created_at": r.created_at, "started_at": r.started_at,
        "ended_at": r.ended_at, "session_key": Registry::session_key(&r.agent, &r.id),
    })
}

fn outbox_json(e: &OutboxEntry) -> Value {
    json!({
        "id": e.message.id, "channel": e.message.route.channel, "chat_id": e.message.route.chat_id,
        "thread_id": e.message.route.thread_id, "kind": e.message.kind.as_str(),
        "attempts": e.attempts, "next_attempt_at": e.next_attempt_at, "session_key": e.session_key,
    })
}

async fn sessions(State(admin): State<Admin>, Query(page): Query<Page>) -> Response {
    let agent = page.agent.as_deref().unwrap_or(crate::agents::MAIN);
    let prefix = page.channel.as_deref().map(|c| channel_prefix(agent, c));
    let rows = match admin
        .store
        .session_list(
            prefix.as_deref(),
            page.limit(),
            page.offset.unwrap_or(0).max(0),
        )
        .await
    {
        Ok(rows) => rows,
        Err(err) => return unavailable(err),
    };
    let busy = admin.lanes.busy();
    let sessions: Vec<Value> = rows
        .iter()
        .map(|s| session_json(s, busy.contains(&s.key)))
        .collect();
    Json(json!({"sessions": sessions, "limit": page.limit(), "offset": page.offset.unwrap_or(0)}))
        .into_response()
}

async fn session(State(admin): State<Admin>, Path(key): Path<String>) -> Response {
    let row = match admin.store.session_get(&key).await {
        Ok(Some(row)) => row,
        Ok(None) => return not_found("session"),
        Err(err) => return unavailable(err),
    };
    let transcript = match admin
        .store
        .transcript_recent(&key, row.epoch, 0, TRANSCRIPT)
        .await
    {
        Ok(entries) => entries,
        Err(err) => return unavailable(err),
    };
    let plan: Value = row
        .plan
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    let transcript: Vec<Value> = transcript
        .iter()
        .map(|e| {
            json!({"id": e.id, "role": e.role.as_str(), "content": e.content,
                "tool_calls": e.tool_calls.as_deref().and_then(|t| serde_json::from_str::<Value>(t).ok()),
                "model": e.model, "tokens_in": e.tokens_in, "tokens_out": e.tokens_out})
        })
        .collect();
    let busy = admin.lanes.busy().contains(&key);
    Json(json!({
        "session": session_json(&row, busy),
        "usage": {"tokens_in": row.tokens_in, "tokens_out": row.tokens_out, "last_model": row.last_model},
        "plan": plan,
        "transcript": transcript,
    }))
    .into_response()
}

async fn subagents(State(admin): State<Admin>, Query(page): Query<Page>) -> Response {
    match admin.store.runs_recent(page.limit()).await {
        Ok(runs) => {
            let live = admin.subagents.live_runs();
            let runs: Vec<Value> = runs
                .iter()
                .map(|r| {
                    let mut v = run_json(r);
                    if let Some(l) = live.iter().find(|l| l.id == r.id) {
                        v["activity"] = json!(l.activity);
                    }
                    v
                })
                .collect();
            Json(json!({"runs": runs})).into_response()
        }
        Err(err) => unavailable(err),
    }
}

/// A run and its descendants (children are runs whose parent session is the run's session).
async fn tree(admin: &Admin, run: &RunRow, depth: u32) -> Result<Value, StoreError> {
    let mut node = run_json(run);
    let mut children = Vec::new();
    if depth < TREE_DEPTH {
        for child in admin
            .store
            .runs_of(&Registry::session_key(&run.agent, &run.id))
            .await?
        {
            children.push(Box::pin(tree(admin, &child, depth + 1)).await?);
        }
    }
    node["children"] = Value::Array(children);
    Ok(node)
}

async fn subagent(State(admin): State<Admin>, Path(id): Path<String>) -> Response {
    let run = match admin.store.run_get(&id).await {
        Ok(Some(run)) => run,
        Ok(None) => return not_found("run"),
        Err(err) => return unavailable(err),
    };
    match tree(&admin, &run, 0).await {
        Ok(tree) => Json(json!({"run": tree})).into_response(),
        Err(err) => unavailable(err),
    }
}

async fn outbox(State(admin): State<Admin>, Query(page): Query<Page>) -> Response {
    let counts = match admin.store.outbox_backlog_counts().await {
        Ok(c) => c,
        Err(err) => return unavailable(err),
    };
    match admin.store.outbox_backlog(page.limit()).await {
        Ok(rows) => {
            let by_channel: serde_json::Map<String, Value> =
                counts.into_iter().map(|(c, n)| (c, json!(n))).collect();
            let messages: Vec<Value> = rows.iter().map(outbox_json).collect();
            Json(json!({"pending": by_channel, "messages": messages})).into_response()
        }
        Err(err) => unavailable(err),
    }
}

/// Scheduled jobs, newest first (every state).
async fn jobs(State(admin): State<Admin>, Query(page): Query<Page>) -> Response {
    match admin.store.jobs_recent(page.limit()).await {
        Ok(jobs) => {
            let jobs: Vec<Value> = jobs
                .iter()
                .map(|j| {
                    let mut v = crate::schedules::job_json(j);
                    v["session_key"] = json!(j.session_key);
                    v["next_run_ms"] = json!(j.next_run);
                    v["last_run_ms"] = json!(j.last_run);
                    v
                })
                .collect();
            Json(json!({"jobs": jobs})).into_response()
        }
        Err(err) => unavailable(err),
    }
}

/// A team's board: every task with its status, owner, blockers, result and comments.
async fn team_tasks(State(admin): State<Admin>, Path(team): Path<String>) -> Response {
    match admin.store.team_tasks(&team).await {
        Ok(tasks) => {
            let tasks: Vec<Value> = tasks.iter().map(crate::teams::task_json).collect();
            Json(json!({"team": team, "tasks": tasks})).into_response()
        }
        Err(err) => unavailable(err),
    }
}

async fn pairing(State(admin): State<Admin>) -> Response {
    match admin.store.pairing_list(crate::clock::now_ms()).await {
        Ok(rows) => {
            let rows: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({"channel": r.channel, "user_id": r.user_id, "user_name": r.user_name,
                        "code": r.code, "state": r.state.as_str(), "expires_at": r.expires_at})
                })
                .collect();
            Json(json!({"pairing": rows})).into_response()
        }
        Err(err) => unavailable(err),
    }
}

async fn approve(State(admin): State<Admin>, Path(code): Path<String>) -> Response {
    let code = code.trim().to_ascii_uppercase();
    match admin
        .store
        .pairing_approve(&code, crate::clock::now_ms())
        .await
    {
        Ok(Some(row)) => Json(
            json!({"approved": {"channel": row.channel, "user_id": row.user_id,
            "user_name": row.user_name}}),
        )
        .into_response(),
        Ok(None) => not_found("pending pairing code (codes expire after an hour)"),
        Err(err) => unavailable(err),
    }
}

/// An operator stops a job (a runaway one, say): cancelled like its owner's `/schedules
/// cancel`, and its queued turns are dropped when they come up.
async fn cancel_job(State(admin): State<Admin>, Path(id): Path<String>) -> Response {
    let job = match admin.store.job_get(&id).await {
        Ok(Some(job)) => job,
        Ok(None) => return not_found("job"),
        Err(err) => return unavailable(err),
    };
    match admin.store.job_cancel(&job.session_key, &id).await {
        Ok(true) => Json(json!({"cancelled": id})).into_response(),
        Ok(false) => not_found("active job"),
        Err(err) => unavailable(err),
    }
}

async fn revoke(State(admin): State<Admin>, Path(user): Path<String>) -> Response {
    match admin.store.pairing_revoke(&user).await {
        Ok(0) => not_found("approved or pending user"),
        Ok(n) => Json(json!({"revoked": user, "channels": n})).into_response(),
        Err(err) => unavailable(err),
    }
}

/// Each MCP server's state, last error, restarts and tools.
async fn mcp(State(admin): State<Admin>) -> Response {
    Json(json!({"servers": admin.mcp.statuses()})).into_response()
}

/// Each agent's skills with their content hashes at start and now (skills are read, never
/// executed; an operator sees when a file changed).
async fn skills(State(admin): State<Admin>) -> Response {
    let agents: serde_json::Map<String, Value> = admin
        .skills
        .menus()
        .map(|(agent, menu)| {
            let skills: Vec<Value> = menu
                .iter()
                .map(|skill| {
                    let now = skill.hash_now();
                    json!({"name": skill.name, "file": skill.file.display().to_string(),
                        "sha256": skill.sha256, "sha256_now": now,
                        "changed": now.as_deref() != Some(skill.sha256.as_str())})
                })
                .collect();
            (agent.to_string(), Value::Array(skills))
        })
        .collect();
    Json(json!({"agents": agents})).into_response()
}
