//! What every signed webhook route does first (messages, approval decisions): read the body
//! within the size limit, then check its signature under the endpoint's scheme.

use crate::SignatureScheme;
use crate::error::{ApiError, err};
use crate::signature::{self, SignatureError};
use crate::state::{AppState, WebhookEndpoint};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use ferroclaw_channel_core::clock::now_secs;

/// The body of a request to endpoint `name` (413 over `max_body_bytes`), its signature
/// checked, and the signed `webhook-id` (see [`verify_signature`]).
pub(crate) async fn signed_body(
    state: &AppState,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Bytes, Option<String>), ApiError> {
    let endpoint = state.endpoint(name)?;
    let body = axum::body::to_bytes(body, state.max_body_bytes)
        .await
        .map_err(|_| {
            err(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body exceeds {} bytes", state.max_body_bytes),
            )
        })?;
    let signed_id = verify_signature(endpoint, headers, &body)?;
    Ok((body, signed_id))
}

/// Check a request's signature under the endpoint's scheme (401 naming what is wrong).
/// Returns the signed `webhook-id` under Standard Webhooks (it stands in for a missing
/// `message_id`).
pub(crate) fn verify_signature(
    endpoint: &WebhookEndpoint,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<String>, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let key = endpoint.signing.key();
    match endpoint.signing.scheme {
        SignatureScheme::Ferroclaw => {
            signature::verify(
                key,
                header("x-ferroclaw-timestamp"),
                header("x-ferroclaw-signature"),
                body,
                now_secs(),
            )
            .map_err(|e: SignatureError| err(StatusCode::UNAUTHORIZED, e.message()))?;
            Ok(None)
        }
        SignatureScheme::Standard => {
            crate::standard::verify(
                key,
                header("webhook-id"),
                header("webhook-timestamp"),
                header("webhook-signature"),
                body,
                now_secs(),
            )
            .map_err(|e| err(StatusCode::UNAUTHORIZED, e.message()))?;
            Ok(header("webhook-id").map(|id| id.trim().to_string()))
        }
    }
}
