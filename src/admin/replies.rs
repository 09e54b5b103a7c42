//! The admin API's error answers (JSON with an `error` field).

use crate::storage::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub(super) fn unavailable(err: StoreError) -> Response {
    tracing::warn!(error = %err, "admin: storage unavailable");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "storage unavailable"})),
    )
        .into_response()
}

pub(super) fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": format!("no such {what}")})),
    )
        .into_response()
}
