//! `GET /v1/admin/approvals`: tool calls waiting for a person, and every chat's remembered
//! "always" choices.

use super::Admin;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub(super) async fn approvals(State(admin): State<Admin>) -> Response {
    let pending = match admin.store.approvals_pending().await {
        Ok(rows) => rows,
        Err(e) => return super::replies::unavailable(e),
    };
    let remembered = match admin.store.approval_rules(None).await {
        Ok(rules) => rules,
        Err(e) => return super::replies::unavailable(e),
    };
    let pending: Vec<_> = pending
        .iter()
        .map(|row| {
            let r = &row.request;
            json!({"id": r.id, "session_key": r.session_key, "channel": r.route.channel,
                "chat_id": r.route.chat_id, "agent": r.agent, "requester": r.requester,
                "tool": r.tool, "target": r.target, "arguments": r.arguments,
                "reason": r.reason, "deciders": r.deciders,
                "created_at_ms": row.created_at_ms, "expires_at_ms": r.expires_at_ms})
        })
        .collect();
    let remembered: Vec<_> = remembered
        .iter()
        .map(|rule| {
            json!({"id": rule.id, "channel": rule.channel, "chat_id": rule.chat_id,
                "tool": rule.tool, "target": rule.target, "created_by": rule.created_by,
                "created_at_ms": rule.created_at_ms})
        })
        .collect();
    Json(json!({"pending": pending, "remembered": remembered})).into_response()
}
