//! The generic signed webhook channel (SPEC section 5, Webhook).
//!
//! Owns the HTTP surface under `/v1/webhooks/NAME/...` (signature check, body validation,
//! answers), the signed callback delivery, and the conversation message list. It hands
//! inbound messages to an [`Inbox`] and reads bot messages from a [`MessageLog`]; it does
//! not know storage, sessions or the engine.

mod callback;
mod error;
mod events;
mod ingress;
mod signature;
mod state;

pub use callback::WebhookChannel;
pub use ferroclaw_channel_core::MessageLog;
pub use ingress::router;
pub use signature::{sign, verify};
pub use state::WebhookEndpoint;

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
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            secret_env: "FERROCLAW_WEBHOOK_SECRET".into(),
            callback_url: String::new(),
        }
    }
}

/// One endpoint as the factory takes it (the secret resolved by the service).
pub struct EndpointSettings {
    pub name: String,
    pub secret: secrecy::SecretString,
    /// Empty: no callbacks (clients read the list or the event stream).
    pub callback_url: String,
}

/// Every configured webhook endpoint, served by one set of routes.
pub struct Settings {
    pub endpoints: Vec<EndpointSettings>,
    pub max_body_bytes: usize,
    /// For signed callbacks.
    pub http: reqwest::Client,
}

/// The adapter factory: one channel per endpoint, and the routes once the inbox exists.
pub fn build(settings: Settings) -> ferroclaw_channel_core::Built {
    use std::sync::Arc;
    let channels = settings
        .endpoints
        .iter()
        .map(|e| {
            Arc::new(WebhookChannel::new(
                &e.name,
                e.secret.clone(),
                &e.callback_url,
                settings.http.clone(),
            )) as Arc<dyn ferroclaw_channel_core::Channel>
        })
        .collect();
    let endpoints = settings
        .endpoints
        .into_iter()
        .map(|e| (e.name, WebhookEndpoint { secret: e.secret }))
        .collect();
    ferroclaw_channel_core::Built {
        channels,
        access: Vec::new(),
        receiver: Box::new(Routes {
            endpoints,
            max_body_bytes: settings.max_body_bytes,
        }),
    }
}

/// The receiving side: the HTTP routes.
struct Routes {
    endpoints: std::collections::HashMap<String, WebhookEndpoint>,
    max_body_bytes: usize,
}

impl ferroclaw_channel_core::Receiver for Routes {
    fn start(
        self: Box<Self>,
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
                self.endpoints,
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
