//! The HTTP server: health and readiness, plus the routes channels mount (webhooks).
//! `router()` is testable without a socket; `serve()` runs it until the shutdown future.

use crate::app::ChannelMap;
use crate::storage::Store;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::sync::Arc;

#[derive(Clone)]
struct Health {
    store: Arc<dyn Store>,
    channels: ChannelMap,
}

pub fn router(store: Arc<dyn Store>, channels: ChannelMap) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Health { store, channels })
}

async fn readyz(State(health): State<Health>) -> (StatusCode, String) {
    if let Err(err) = health.store.ping().await {
        tracing::warn!(error = %err, "readiness: storage unreachable");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "storage unreachable".into(),
        );
    }
    let waiting: Vec<&str> = health
        .channels
        .values()
        .filter(|c| !c.is_ready())
        .map(|c| c.name())
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ready".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("channels not connected: {}", waiting.join(", ")),
        )
    }
}
