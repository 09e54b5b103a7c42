//! The Events API: Slack POSTs signed requests — events to `/v1/slack/events` (JSON, with
//! the `url_verification` handshake), slash commands to `/v1/slack/commands` and button
//! presses to `/v1/slack/interactive` (both form-encoded). Every request must carry a `v0`
//! signature (HMAC-SHA256 of `v0:<timestamp>:<body>` with the signing secret) made within
//! 5 minutes; anything else is a 401. A request is answered 200 once its payload is
//! journalled, 503 when it could not be (Slack retries; a retry is journalled once).

use crate::ingress::{Ingress, PayloadKind};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;
use std::sync::Arc;

/// How old a signed request may be.
const WINDOW_SECS: i64 = 300;

pub struct Events {
    pub ingress: Arc<Ingress>,
    pub signing_secret: SecretString,
}

pub fn routes(events: Arc<Events>) -> Router {
    Router::new()
        .route("/v1/slack/events", post(event))
        .route("/v1/slack/commands", post(command))
        .route("/v1/slack/interactive", post(interactive))
        .with_state(events)
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({"error": why}))).into_response()
}

impl Events {
    /// Err: why an unsigned, wrongly signed or stale request is refused (a 401).
    fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), &'static str> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(timestamp), Some(given)) = (
            header("x-slack-request-timestamp"),
            header("x-slack-signature"),
        ) else {
            return Err("X-Slack-Signature and X-Slack-Request-Timestamp are required");
        };
        let now = ferroclaw_channel_core::clock::now_ms() / 1000;
        match timestamp.parse::<i64>() {
            Ok(at) if (now - at).abs() <= WINDOW_SECS => {}
            _ => {
                return Err("X-Slack-Request-Timestamp is not within 5 minutes of now");
            }
        }
        let mut mac =
            Hmac::<Sha256>::new_from_slice(self.signing_secret.expose_secret().as_bytes())
                .expect("HMAC takes any key");
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        let valid = given
            .strip_prefix("v0=")
            .and_then(|h| hex::decode(h).ok())
            .is_some_and(|sig| mac.verify_slice(&sig).is_ok());
        if valid {
            Ok(())
        } else {
            Err("X-Slack-Signature does not match")
        }
    }

    async fn hand_over(&self, kind: PayloadKind, payload: &Value) -> Response {
        match self.ingress.handle(kind, payload).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(why) => {
                tracing::warn!(error = %why, "Slack request not journalled; Slack will retry");
                refuse(StatusCode::SERVICE_UNAVAILABLE, "not stored, retry later")
            }
        }
    }
}

async fn event(State(events): State<Arc<Events>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(why) = events.verify(&headers, &body) {
        return refuse(StatusCode::UNAUTHORIZED, why);
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    match payload["type"].as_str() {
        Some("url_verification") => match payload["challenge"].as_str() {
            Some(challenge) => axum::Json(json!({"challenge": challenge})).into_response(),
            None => refuse(StatusCode::BAD_REQUEST, "field `challenge` is missing"),
        },
        Some("event_callback") if payload["event"].is_object() => {
            events.hand_over(PayloadKind::Event, &payload).await
        }
        Some("event_callback") => refuse(StatusCode::BAD_REQUEST, "field `event` is missing"),
        _ => refuse(
            StatusCode::BAD_REQUEST,
            "field `type` must be url_verification or event_callback",
        ),
    }
}

/// Form fields as a JSON object (the shape Socket Mode gives the same payloads).
fn form(body: &[u8]) -> Option<Value> {
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
    Some(Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    ))
}

async fn command(State(events): State<Arc<Events>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(why) = events.verify(&headers, &body) {
        return refuse(StatusCode::UNAUTHORIZED, why);
    }
    match form(&body) {
        Some(payload) => events.hand_over(PayloadKind::SlashCommand, &payload).await,
        None => refuse(StatusCode::BAD_REQUEST, "the body is not form-encoded"),
    }
}

async fn interactive(
    State(events): State<Arc<Events>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(why) = events.verify(&headers, &body) {
        return refuse(StatusCode::UNAUTHORIZED, why);
    }
    let payload = form(&body)
        .and_then(|f| f["payload"].as_str().map(str::to_string))
        .and_then(|p| serde_json::from_str::<Value>(&p).ok());
    match payload {
        Some(payload) => events.hand_over(PayloadKind::Interactive, &payload).await,
        None => refuse(StatusCode::BAD_REQUEST, "field `payload` must hold JSON"),
    }
}
