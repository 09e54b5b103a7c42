//! Errors in OpenAI's shape: `{"error": {"message", "type", "code"}}` with the usual status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: Option<&'static str>,
}

impl ApiError {
    /// 400 `invalid_request_error` (the message names the field).
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
        }
    }

    pub(crate) fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Incorrect or missing API key (Authorization: Bearer <token>).".into(),
            kind: "invalid_request_error",
            code: Some("invalid_api_key"),
        }
    }

    pub(crate) fn unknown_model(model: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{model}` does not exist; use `ferroclaw` or `ferroclaw:<agent id>` (GET /v1/models lists them)."
            ),
            kind: "invalid_request_error",
            code: Some("model_not_found"),
        }
    }

    pub(crate) fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("The request body exceeds {limit} bytes."),
            kind: "invalid_request_error",
            code: None,
        }
    }

    /// The turn failed (every model failed, or it was stopped): the chat's error text.
    pub(crate) fn upstream(message: String) -> Self {
        ApiError {
            status: StatusCode::BAD_GATEWAY,
            message,
            kind: "api_error",
            code: Some("upstream_error"),
        }
    }

    pub(crate) fn timeout() -> Self {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            message:
                "The answer was not ready in time; send the same X-Request-Id again to wait for it."
                    .into(),
            kind: "api_error",
            code: Some("timeout"),
        }
    }

    /// Storage could not take or read the message; the cause is logged, not shown.
    pub(crate) fn unavailable() -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "The service cannot take requests right now; retry later.".into(),
            kind: "api_error",
            code: Some("unavailable"),
        }
    }

    /// The JSON error object (also sent as an SSE event when a stream fails).
    pub(crate) fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
