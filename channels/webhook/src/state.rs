//! What the webhook routes share: the configured endpoints, the inbox, the bot-message log
//! (`MessageLog`, implemented by the service over its outbox) and the shutdown signal.

use crate::SignatureScheme;
use crate::error::{ApiError, err};
use axum::http::StatusCode;
use ferroclaw_channel_core::{Inbox, MessageLog};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One configured webhook name.
#[derive(Clone)]
pub struct WebhookEndpoint {
    /// Also the bearer token of the list and event routes.
    pub secret: SecretString,
    pub signing: Signing,
}

impl WebhookEndpoint {
    /// An endpoint signing under `scheme` (fails on a Standard Webhooks secret that is not
    /// `whsec_` + base64).
    pub fn new(secret: SecretString, scheme: SignatureScheme) -> Result<Self, &'static str> {
        let signing = Signing::new(scheme, &secret)?;
        Ok(WebhookEndpoint { secret, signing })
    }
}

/// How an endpoint's requests and callbacks are signed, with the HMAC key.
#[derive(Clone)]
pub struct Signing {
    pub scheme: SignatureScheme,
    key: SecretSlice<u8>,
}

impl Signing {
    /// The key of `secret` under `scheme` (a Standard Webhooks secret is base64-decoded).
    pub fn new(scheme: SignatureScheme, secret: &SecretString) -> Result<Self, &'static str> {
        let key = match scheme {
            SignatureScheme::Ferroclaw => secret.expose_secret().as_bytes().to_vec(),
            SignatureScheme::Standard => crate::standard::key_of(secret.expose_secret())?,
        };
        Ok(Signing {
            scheme,
            key: key.into(),
        })
    }

    pub fn key(&self) -> &[u8] {
        self.key.expose_secret()
    }
}

/// The longest `?wait=` honoured.
pub const MAX_WAIT_SECS: u64 = 120;

pub(crate) struct AppState {
    pub(crate) endpoints: HashMap<String, WebhookEndpoint>,
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) log: Arc<dyn MessageLog>,
    pub(crate) max_body_bytes: usize,
    /// Ends waits and event streams when the service shuts down.
    pub(crate) shutdown: CancellationToken,
}

impl AppState {
    /// The configured endpoint `name`, or 404.
    pub(crate) fn endpoint(&self, name: &str) -> Result<&WebhookEndpoint, ApiError> {
        self.endpoints
            .get(name)
            .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("unknown webhook `{name}`")))
    }
}
