//! The bearer check of the endpoint's read routes (conversation list, files, event stream),
//! shared by the ingress routes and the event stream.

use crate::error::{ApiError, err};
use axum::http::{HeaderMap, StatusCode};
use ferroclaw_channel_core::auth;
use secrecy::{ExposeSecret, SecretString};

/// The request's bearer token is the endpoint's secret (compared in constant time).
pub(crate) fn check_bearer(headers: &HeaderMap, secret: &SecretString) -> Result<(), ApiError> {
    let given = auth::bearer(headers).unwrap_or("");
    if auth::token_matches(given, secret.expose_secret()) {
        Ok(())
    } else {
        Err(err(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token",
        ))
    }
}
