//! Error answers of the webhook routes: `{"error": "..."}` with a status; causes of 5xx are
//! logged, never shown to the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer: `{"error": "..."}` with a status.
pub(crate) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({"error": self.1}))).into_response()
    }
}

pub(crate) fn err(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError(status, message.into())
}

/// 503 for a failed read: the cause is logged, the client is told to retry.
pub(crate) fn unavailable(
    webhook: &str,
    what: &str,
    cause: ferroclaw_channel_core::LogUnavailable,
) -> ApiError {
    tracing::error!(%webhook, error = %cause, "could not read {what}");
    err(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} unavailable; retry later"),
    )
}
