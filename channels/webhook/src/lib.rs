//! The generic signed webhook channel (SPEC section 5, Webhook).
//!
//! Owns the HTTP surface under `/v1/webhooks/NAME/...` (signature check, body validation,
//! answers), the signed callback delivery, and the conversation message list. It hands
//! inbound messages to an [`Inbox`] and reads bot messages from a [`MessageLog`]; it does
//! not know storage, sessions or the engine.

mod approvals;
mod bearer;
mod callback;
mod error;
mod events;
mod ingress;
mod signature;
mod signed;
pub mod standard;
mod state;

pub use callback::WebhookChannel;
pub use ferroclaw_channel_core::MessageLog;
pub use ingress::router;
pub use signature::{sign, verify};
pub use state::{Signing, WebhookEndpoint};

/// Channel instance name for webhook `name` (`webhook:NAME`).
pub fn channel_name(name: &str) -> String {
    format!("webhook:{name}")
}

/// `[channels.webhook.NAME]` as written in config.toml, with its defaults (the endpoint is
/// enabled by being there).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointConfig {
    pub secret_env: String,
    pub callback_url: String,
    /// How requests and callbacks are signed.
    pub signature: SignatureScheme,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            secret_env: "FERROCLAW_WEBHOOK_SECRET".into(),
            callback_url: String::new(),
            signature: SignatureScheme::Ferroclaw,
        }
    }
}

/// `signature = "ferroclaw"` (default: `X-Ferroclaw-Timestamp` and `X-Ferroclaw-Signature`)
/// or `"standard"` (Standard Webhooks, with a `whsec_` secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureScheme {
    Ferroclaw,
    Standard,
}

/// One endpoint as the factory takes it (the secret resolved by the service).
pub struct EndpointSettings {
    pub name: String,
    pub secret: secrecy::SecretString,
    /// Empty: no callbacks (clients read the list or the event stream).
    pub callback_url: String,
    pub signature: SignatureScheme,
}

/// Every configured webhook endpoint, served by one set of routes.
pub struct Settings {
    pub endpoints: Vec<EndpointSettings>,
    pub max_body_bytes: usize,
    /// For signed callbacks: where the client comes from, asked when a callback is sent (a
    /// service that never sends one never builds it).
    pub http: fn() -> reqwest::Client,
}

/// The adapter factory: one channel per endpoint, and the routes once the inbox exists.
/// Refuses a Standard Webhooks endpoint whose secret is not a `whsec_` secret.
pub fn build(
    settings: Settings,
) -> Result<ferroclaw_channel_core::Built, ferroclaw_channel_core::BuildError> {
    use std::sync::Arc;
    let mut channels: Vec<Arc<dyn ferroclaw_channel_core::Channel>> = Vec::new();
    let mut endpoints = std::collections::HashMap::new();
    for e in settings.endpoints {
        let signing = Signing::new(e.signature, &e.secret).map_err(|m| {
            ferroclaw_channel_core::BuildError::new(
                format!("channels.webhook.{}.secret_env", e.name),
                m,
            )
        })?;
        channels.push(Arc::new(WebhookChannel::new(
            &e.name,
            signing.clone(),
            &e.callback_url,
            settings.http,
        )));
        endpoints.insert(
            e.name,
            WebhookEndpoint {
                secret: e.secret,
                signing,
            },
        );
    }
    Ok(ferroclaw_channel_core::Built {
        channels,
        access: Vec::new(),
        receiver: Box::new(Routes {
            endpoints,
            max_body_bytes: settings.max_body_bytes,
        }),
    })
}

/// The receiving side: the HTTP routes.
struct Routes {
    endpoints: std::collections::HashMap<String, WebhookEndpoint>,
    max_body_bytes: usize,
}

impl ferroclaw_channel_core::Receiver for Routes {
    fn start(
        &self,
        cx: ferroclaw_channel_core::ReceiverContext,
    ) -> ferroclaw_channel_core::Receiving {
        let mut names: Vec<&String> = self.endpoints.keys().collect();
        names.sort();
        let description = names
            .iter()
            .map(|n| format!("{} (POST /v1/webhooks/{n}/messages)", channel_name(n)))
            .collect();
        ferroclaw_channel_core::Receiving {
            router: Some(router(
                self.endpoints.clone(),
                cx.inbox,
                cx.messages,
                self.max_body_bytes,
                cx.shutdown,
            )),
            task: None,
            description,
        }
    }
}
