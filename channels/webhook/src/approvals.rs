//! `POST /v1/webhooks/NAME/approvals/ID`: a client's decision on a tool call waiting for
//! approval, signed like its messages. JSON `{"decision": "approve"|"always"|"deny", "user":
//! "<sender id>"}` → 200 with the recorded decision, 403 when that user may not decide it,
//! 404 unknown (or asked on another channel), 409 already decided, 410 expired.

use crate::error::{ApiError, err};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use ferroclaw_channel_core::{Decision, DecisionOutcome, DecisionRequest, Sender};
use serde_json::{Value, json};
use std::sync::Arc;

pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (body, signed_id) = crate::signed::signed_body(&state, &name, &headers, body).await?;
    let (decision, user) = parse(&body).map_err(|m| err(StatusCode::BAD_REQUEST, m))?;
    let request = DecisionRequest {
        channel: crate::channel_name(&name),
        approval_id: id.clone(),
        decision,
        sender: Sender {
            id: user.clone(),
            name: String::new(),
        },
        // A retried call (same signed id, or the same user and decision) is one entry.
        platform_id: signed_id.map_or_else(
            || format!("approval:{id}:{user}:{}", decision.as_str()),
            |signed| format!("approval:{signed}"),
        ),
    };
    let outcome = state.inbox.decide(request).await.map_err(|e| {
        tracing::error!(webhook = %name, error = %e, "could not record an approval decision");
        err(
            StatusCode::SERVICE_UNAVAILABLE,
            "the decision could not be stored; retry later",
        )
    })?;
    let (status, body) = match &outcome {
        DecisionOutcome::Recorded { decision, by } => (
            StatusCode::OK,
            json!({"id": id, "status": "recorded", "decision": decision.as_str(), "by": by}),
        ),
        DecisionOutcome::AlreadyDecided { decision, by } => (
            StatusCode::CONFLICT,
            json!({"id": id, "error": outcome.words(), "decision": decision.as_str(), "by": by}),
        ),
        DecisionOutcome::NotFound => (
            StatusCode::NOT_FOUND,
            json!({"error": format!("no approval request `{id}` on this webhook")}),
        ),
        DecisionOutcome::Expired => (
            StatusCode::GONE,
            json!({"id": id, "error": outcome.words()}),
        ),
        DecisionOutcome::NotAllowed => (
            StatusCode::FORBIDDEN,
            json!({"id": id, "error": format!("user `{user}` may not decide this request")}),
        ),
    };
    Ok((status, axum::Json(body)).into_response())
}

/// The decision and the deciding user; the error names the field.
fn parse(body: &[u8]) -> Result<(Decision, String), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
    let decision = match value.get("decision") {
        Some(Value::String(s)) => Decision::parse(s).ok_or_else(|| {
            format!("field `decision` must be \"approve\", \"always\" or \"deny\", not \"{s}\"")
        })?,
        Some(_) => return Err("field `decision` must be a string".into()),
        None => return Err("missing field `decision`".into()),
    };
    let user = match value.get("user") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(_) => return Err("field `user` must be a non-empty string".into()),
        None => return Err("missing field `user`".into()),
    };
    Ok((decision, user))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_malformed_decision_names_the_field() {
        assert!(super::parse(b"{}").unwrap_err().contains("`decision`"));
        assert!(
            super::parse(br#"{"decision":"maybe","user":"u"}"#)
                .unwrap_err()
                .contains("`decision`")
        );
        assert!(
            super::parse(br#"{"decision":"deny"}"#)
                .unwrap_err()
                .contains("`user`")
        );
        assert!(super::parse(br#"{"decision":"always","user":"u"}"#).is_ok());
    }
}
