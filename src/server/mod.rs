//! The HTTP server's own routes: liveness (`/healthz`), readiness (`/readyz`, JSON naming what
//! is not ready) and Prometheus metrics (`/metrics`). Channels and the admin API mount their
//! own routes beside these.

pub mod accept;

pub use accept::{Limits, raise_file_limit, serve};

use crate::app::ChannelMap;
pub use crate::health::{ChannelStates, Readiness};
use crate::storage::Store;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ferroclaw_channel_core::ChannelState;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use std::sync::Arc;

#[derive(Clone)]
struct Health {
    store: Arc<dyn Store>,
    channels: ChannelMap,
    states: ChannelStates,
    metrics_token: Option<Arc<SecretString>>,
}

/// The service's own routes. `metrics_token`: the bearer `/metrics` asks for (the admin
/// token, when the service listens beyond loopback); None: open, as on loopback.
pub fn router(
    store: Arc<dyn Store>,
    channels: ChannelMap,
    states: ChannelStates,
    metrics_token: Option<SecretString>,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Health {
            store,
            channels,
            states,
            metrics_token: metrics_token.map(Arc::new),
        })
}

/// The Prometheus text format, with the outbox backlog read from storage now.
async fn metrics(State(health): State<Health>, headers: axum::http::HeaderMap) -> Response {
    if let Some(token) = &health.metrics_token {
        let given = ferroclaw_channel_core::auth::bearer(&headers).unwrap_or_default();
        if !ferroclaw_channel_core::auth::token_matches(given, token.expose_secret()) {
            let body = Json(json!({"error": "missing or wrong bearer token (the admin token)"}));
            return (StatusCode::UNAUTHORIZED, body).into_response();
        }
    }
    health.states.export_metrics();
    match health.store.outbox_backlog_counts().await {
        Ok(counts) => {
            // Channels with nothing waiting show 0, not their last non-zero value.
            for name in health.channels.keys() {
                let count = counts
                    .iter()
                    .find(|(c, _)| c == name)
                    .map_or(0, |(_, n)| *n);
                crate::metrics::outbox_backlog(name, count);
            }
        }
        Err(err) => tracing::warn!(error = %err, "metrics: could not read the outbox backlog"),
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        crate::metrics::render(),
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct ReadyQuery {
    verbose: Option<String>,
}

/// Ready when storage writes and no channel is down. `?verbose`: each channel's state and
/// figures (SPEC section 21) instead of one word.
async fn readyz(
    State(health): State<Health>,
    Query(query): Query<ReadyQuery>,
) -> (StatusCode, Json<Value>) {
    let storage = match health.store.ping().await {
        Ok(()) => "ok",
        Err(err) => {
            tracing::warn!(error = %err, "readiness: storage unreachable");
            "unreachable"
        }
    };
    let mut channels = serde_json::Map::new();
    let mut not_ready: Vec<String> = Vec::new();
    if storage != "ok" {
        not_ready.push("storage".into());
    }
    for (name, state) in health.states.snapshot() {
        let word = match &state {
            None => "led by another process",
            Some(h) if h.state == ChannelState::Down => {
                not_ready.push(name.clone());
                "not connected"
            }
            Some(_) => "connected",
        };
        channels.insert(name, json!(word));
    }
    let channels = if query.verbose.is_some() {
        health.states.json()
    } else {
        Value::Object(channels)
    };
    let status = if not_ready.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "ready": not_ready.is_empty(),
            "storage": storage,
            "channels": channels,
            "not_ready": not_ready,
        })),
    )
}
