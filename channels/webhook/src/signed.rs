//! The signature check every signed webhook route makes (messages, approval decisions),
//! under the endpoint's scheme.

use crate::SignatureScheme;
use crate::error::{ApiError, err};
use crate::signature::{self, SignatureError};
use crate::state::WebhookEndpoint;
use axum::http::{HeaderMap, StatusCode};
use ferroclaw_channel_core::clock::now_secs;

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
