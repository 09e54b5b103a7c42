//! `POST /v1/webhooks/NAME/messages` and `GET /v1/webhooks/NAME/conversations/ID/messages`.

use crate::bearer::check_bearer;
use crate::error::{ApiError, err, unavailable};
use crate::state::{AppState, MAX_WAIT_SECS, WebhookEndpoint};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferroclaw_channel_core::MessageLog;
use ferroclaw_channel_core::{
    Accepted, Attachment, AttachmentKind, AttachmentSource, ChatKind, ChatRoute, InboundMessage,
    Inbox, Sender,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The webhook routes, to merge into the service's router.
pub fn router(
    endpoints: HashMap<String, WebhookEndpoint>,
    inbox: Arc<dyn Inbox>,
    log: Arc<dyn MessageLog>,
    max_body_bytes: usize,
    shutdown: CancellationToken,
) -> Router {
    let state = Arc::new(AppState {
        endpoints,
        inbox,
        log,
        max_body_bytes,
        shutdown,
    });
    Router::new()
        .route("/v1/webhooks/{name}/messages", post(post_message))
        .route(
            "/v1/webhooks/{name}/conversations/{conversation}/messages",
            get(list_messages),
        )
        .route("/v1/webhooks/{name}/events", get(crate::events::events))
        .route("/v1/webhooks/{name}/files/{id}", get(download_file))
        .route(
            "/v1/webhooks/{name}/approvals/{id}",
            post(crate::approvals::decide),
        )
        .with_state(state)
}

#[derive(serde::Deserialize)]
struct PostQuery {
    wait: Option<String>,
}

async fn post_message(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    query: Result<Query<PostQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (body, signed_id) = crate::signed::signed_body(&state, &name, &headers, body).await?;

    let wait = match query.map(|q| q.0.wait) {
        Ok(None) => None,
        Ok(Some(w)) => Some(
            w.parse::<u64>()
                .map_err(|_| {
                    err(
                        StatusCode::BAD_REQUEST,
                        "query parameter `wait` must be a number of seconds",
                    )
                })?
                .min(MAX_WAIT_SECS),
        ),
        Err(_) => return Err(err(StatusCode::BAD_REQUEST, "malformed query string")),
    };
    let message = parse_body(&name, &body, signed_id.as_deref())
        .map_err(|m| err(StatusCode::BAD_REQUEST, m))?;
    let message_id = message.platform_message_id.clone();
    let conversation_id = message.route.chat_id.clone();
    let accepted = state.inbox.accept(message).await.map_err(|e| {
        tracing::error!(webhook = %name, error = %e, "could not journal webhook message");
        err(
            StatusCode::SERVICE_UNAVAILABLE,
            "the message could not be stored; retry later",
        )
    })?;
    let (status, word) = match &accepted {
        Accepted::New { .. } => (StatusCode::ACCEPTED, "accepted"),
        Accepted::Duplicate { .. } => (StatusCode::OK, "duplicate"),
    };
    if let (
        Some(seconds),
        Accepted::New {
            journal_id,
            session_key,
        },
    ) = (wait, &accepted)
    {
        let answered = tokio::select! {
            answered = state.log.wait_answered(*journal_id, Duration::from_secs(seconds)) => answered,
            _ = state.shutdown.cancelled() => false,
        };
        if answered {
            let replies = state
                .log
                .replies(&crate::channel_name(&name), &conversation_id, &message_id)
                .await
                .map_err(|e| unavailable(&name, "replies", e))?;
            let replies: Vec<Value> = replies
                .iter()
                // The same shape as the conversation list (files as `attachments`).
                .map(|m| crate::callback::payload(m, true))
                .collect();
            return Ok((
                StatusCode::OK,
                axum::Json(json!({
                    "status": "done",
                    "message_id": message_id,
                    "session_key": session_key,
                    "replies": replies,
                })),
            )
                .into_response());
        }
    }
    Ok((
        status,
        axum::Json(json!({
            "status": word,
            "message_id": message_id,
            "session_key": accepted.session_key(),
        })),
    )
        .into_response())
}

/// Validate the JSON body; the error names the offending field. `default_id` (a signed
/// `webhook-id`) is the message id when the body has none.
pub(crate) fn parse_body(
    name: &str,
    body: &[u8],
    default_id: Option<&str>,
) -> Result<InboundMessage, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
    let object = value.as_object().ok_or("body must be a JSON object")?;
    let string = |field: &str| -> Result<String, String> {
        match object.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(format!("field `{field}` must not be empty")),
            Some(_) => Err(format!("field `{field}` must be a string")),
            None => Err(format!("missing field `{field}`")),
        }
    };
    let conversation_id = string("conversation_id")?;
    let message_id = match (object.get("message_id"), default_id) {
        (None, Some(id)) => id.to_string(),
        _ => string("message_id")?,
    };
    let text = match object.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("field `text` must be a string".into()),
        None => return Err("missing field `text`".into()),
    };
    let thread_id = match object.get("thread_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err("field `thread_id` must be a non-empty string or null".into()),
    };
    let sender = match object.get("sender") {
        Some(Value::Object(sender)) => {
            let id = match sender.get("id") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(_) => return Err("field `sender.id` must be a non-empty string".into()),
                None => return Err("missing field `sender.id`".into()),
            };
            let name = match sender.get("name") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err("field `sender.name` must be a string".into()),
            };
            Sender { id, name }
        }
        Some(_) => return Err("field `sender` must be an object".into()),
        None => return Err("missing field `sender`".into()),
    };
    let attachments = match object.get("attachments") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, a)| attachment(i, a))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("field `attachments` must be a list".into()),
    };
    Ok(InboundMessage {
        route: ChatRoute {
            channel: crate::channel_name(name),
            kind: ChatKind::Conversation,
            chat_id: conversation_id,
            thread_id,
        },
        sender,
        platform_message_id: message_id,
        text,
        mentioned: true,
        reply_to: None,
        internal: false,
        attachments,
        mention_names: Vec::new(),
    })
}

/// One `attachments[i]`: `{kind?, name?, mime?, url | base64 (alias: content)}`.
fn attachment(i: usize, value: &Value) -> Result<Attachment, String> {
    let field = |f: &str| format!("attachments[{i}].{f}");
    let object = value
        .as_object()
        .ok_or_else(|| format!("field `attachments[{i}]` must be an object"))?;
    let text = |f: &str| -> Result<Option<String>, String> {
        match object.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(format!("field `{}` must be a non-empty string", field(f))),
        }
    };
    // SPEC §15 names the inline form `base64`; `content` is kept as its alias.
    let inline = match (text("base64")?, text("content")?) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "field `attachments[{i}]`: give `base64` or its alias `content`, not both"
            ));
        }
        (base64, content) => base64.or(content),
    };
    let source = match (text("url")?, inline) {
        (Some(url), None) if url.starts_with("http://") || url.starts_with("https://") => {
            AttachmentSource::Url { url }
        }
        (Some(_), None) => return Err(format!("field `{}` must be an http(s) URL", field("url"))),
        (None, Some(base64)) => AttachmentSource::Inline { base64 },
        _ => {
            return Err(format!(
                "field `attachments[{i}]` needs exactly one of `url` and `base64`"
            ));
        }
    };
    let mime = text("mime")?;
    let kind = match text("kind")?.as_deref() {
        Some("image") => AttachmentKind::Image,
        Some("voice") => AttachmentKind::Voice,
        Some("audio") => AttachmentKind::Audio,
        Some("document") => AttachmentKind::Document,
        Some(other) => {
            return Err(format!(
                "field `{}`: `{other}` is not image, document, voice or audio",
                field("kind")
            ));
        }
        None => match mime.as_deref() {
            Some(m) if m.starts_with("image/") => AttachmentKind::Image,
            Some(m) if m.starts_with("audio/") => AttachmentKind::Audio,
            _ => AttachmentKind::Document,
        },
    };
    // Unnamed: the URL's last path segment.
    let name = text("name")?.unwrap_or_else(|| match &source {
        AttachmentSource::Url { url } => url
            .split(['?', '#'])
            .next()
            .and_then(|u| u.rsplit('/').next())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    });
    Ok(Attachment {
        kind,
        name,
        mime,
        size: None,
        source,
    })
}

#[derive(serde::Deserialize)]
struct ListQuery {
    after: Option<i64>,
    limit: Option<i64>,
}

async fn list_messages(
    State(state): State<Arc<AppState>>,
    Path((name, conversation)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let endpoint = state.endpoint(&name)?;
    check_bearer(&headers, &endpoint.secret)?;
    let messages = state
        .log
        .conversation(
            &crate::channel_name(&name),
            &conversation,
            query.after.unwrap_or(0),
            query.limit.unwrap_or(100).clamp(1, 1000),
        )
        .await
        .map_err(|e| unavailable(&name, "messages", e))?;
    let list: Vec<Value> = messages
        .iter()
        .map(|m| crate::callback::payload(m, true))
        .collect();
    Ok(axum::Json(json!({"messages": list})).into_response())
}

/// A file a bot message carries (`send_file`), for the endpoint's bearer only.
async fn download_file(
    State(state): State<Arc<AppState>>,
    Path((name, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let endpoint = state.endpoint(&name)?;
    check_bearer(&headers, &endpoint.secret)?;
    let not_found = || err(StatusCode::NOT_FOUND, "no such file");
    let message = state
        .log
        .message(&crate::channel_name(&name), id)
        .await
        .map_err(|e| unavailable(&name, "files", e))?
        .ok_or_else(not_found)?;
    let file = message.file.ok_or_else(not_found)?;
    // Streamed from the file, never read whole into memory.
    let opened = tokio::fs::File::open(&file.path)
        .await
        .map_err(|_| not_found())?;
    let size = opened.metadata().await.map_err(|_| not_found())?.len();
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(opened));
    let disposition = format!(
        "attachment; filename=\"{}\"",
        file.name.replace(['"', '\\', '\r', '\n'], "_")
    );
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, file.mime),
            (axum::http::header::CONTENT_DISPOSITION, disposition),
            (axum::http::header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_name_the_field() {
        let cases = [
            (r#"{"#, "malformed JSON"),
            (r#"[]"#, "JSON object"),
            (
                r#"{"message_id":"m","sender":{"id":"u"},"text":"hi"}"#,
                "`conversation_id`",
            ),
            (
                r#"{"conversation_id":"c","sender":{"id":"u"},"text":"hi"}"#,
                "`message_id`",
            ),
            (
                r#"{"conversation_id":"c","message_id":"m","text":"hi"}"#,
                "`sender`",
            ),
            (
                r#"{"conversation_id":"c","message_id":"m","sender":{},"text":"hi"}"#,
                "`sender.id`",
            ),
            (
                r#"{"conversation_id":"c","message_id":"m","sender":{"id":"u"}}"#,
                "`text`",
            ),
            (
                r#"{"conversation_id":1,"message_id":"m","sender":{"id":"u"},"text":"x"}"#,
                "`conversation_id`",
            ),
            (
                r#"{"conversation_id":"c","message_id":"m","sender":{"id":"u"},"text":"x","thread_id":5}"#,
                "`thread_id`",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_body("w", body.as_bytes(), None).unwrap_err();
            assert!(err.contains(expected), "{body} gave {err}");
        }
        let ok = parse_body(
            "w",
            br#"{"conversation_id":"c-42","thread_id":"t","message_id":"m-1","sender":{"id":"u-7","name":"Alice"},"text":"hello"}"#,
            None,
        )
        .unwrap();
        assert_eq!(ok.route.session_key(), "agent:main:webhook:w:c-42:thread:t");
        assert_eq!(ok.sender.name, "Alice");
    }
}
