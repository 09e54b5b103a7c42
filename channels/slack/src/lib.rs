//! The Slack channel (SPEC section 23): Socket Mode or the Events API in, the Web API out.
//! DMs, channels (answered when the bot is mentioned) and threads (each its own session,
//! answered in the thread); replies in mrkdwn, streamed by throttled `chat.update`; files
//! both ways; slash commands; approval prompts as Block Kit buttons.
//!
//! Owns every Slack type: `translate.rs` turns payloads into
//! [`InboundMessage`](ferroclaw_channel_core::InboundMessage)s and decisions, `ingress.rs`
//! hands them to the service (acknowledging Slack only once they are journalled),
//! `socket.rs` and `events.rs` receive, `channel.rs` delivers through `api.rs`. The client
//! is reqwest plus tokio-tungstenite, the HTTP and websocket stack the service already
//! runs, rather than `slack-morphism`, whose hyper client and Socket Mode listener
//! (acknowledging on its own schedule) would bring a second stack and take the ack out of
//! our hands. Access control is not decided here: the service's ingress applies it.

mod api;
mod channel;
mod config;
mod events;
mod format;
mod ingress;
mod socket;
mod translate;

pub use channel::SlackChannel;
pub use config::{Config, DEFAULT_API_URL, Mode};
pub use format::{LIMIT, mrkdwn};
pub use translate::CHANNEL;

use ferroclaw_channel_core::{
    AccessRule, BuildError, Built, PreviewLedger, Receiver, ReceiverContext, Receiving,
};
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;

/// What the service resolves for the factory.
pub struct Context {
    pub bot_token: SecretString,
    /// Socket Mode's app-level token.
    pub app_token: Option<SecretString>,
    /// The Events API's signing secret.
    pub signing_secret: Option<SecretString>,
    /// Where streamed previews' ids outlive the process (none: in memory only).
    pub previews: Option<Arc<dyn PreviewLedger>>,
}

impl Config {
    /// The adapter from this section (`enabled` is the caller's to check). Nothing is
    /// contacted yet.
    pub fn build(&self, cx: Context) -> Result<Built, BuildError> {
        let api_url = self.api_url.trim_end_matches('/');
        match api_url.split_once("://") {
            Some(("http" | "https", host)) if !host.is_empty() => {}
            _ => {
                return Err(BuildError::new(
                    "channels.slack.api_url",
                    "must be an http:// or https:// URL",
                ));
            }
        }
        let receiving = match self.mode {
            Mode::Socket => Inlet::Socket(cx.app_token.ok_or_else(|| {
                BuildError::new(
                    "channels.slack.app_token_env",
                    "Socket Mode needs the app-level token (xapp-…) in this variable",
                )
            })?),
            Mode::Events => Inlet::Events(cx.signing_secret.ok_or_else(|| {
                BuildError::new(
                    "channels.slack.signing_secret_env",
                    "the Events API needs the signing secret in this variable",
                )
            })?),
        };
        let api = Arc::new(api::WebApi::new(api_url, cx.bot_token));
        let channel = Arc::new(SlackChannel::new(
            api.clone(),
            Duration::from_millis(self.stream_edit_interval_ms),
            cx.previews,
            // Socket Mode is pinged every interval: late after two, down after three.
            (self.mode == Mode::Socket).then(|| {
                let ping = Duration::from_secs(self.ping_interval_secs.max(1));
                ferroclaw_channel_core::Liveness::new(ping * 2, ping * 3)
            }),
        ));
        Ok(Built {
            channels: vec![channel.clone()],
            access: vec![(
                CHANNEL.to_string(),
                AccessRule {
                    mode: self.access,
                    allowed_users: self.allowed_users.clone(),
                },
            )],
            receiver: Box::new(SlackReceiver {
                api,
                channel,
                require_mention: self.require_mention,
                ping_every: Duration::from_secs(self.ping_interval_secs.max(1)),
                receiving,
            }),
        })
    }
}

/// How this receiver gets its payloads.
enum Inlet {
    Socket(SecretString),
    Events(SecretString),
}

struct SlackReceiver {
    api: Arc<api::WebApi>,
    channel: Arc<SlackChannel>,
    require_mention: bool,
    ping_every: Duration,
    receiving: Inlet,
}

impl Receiver for SlackReceiver {
    /// One Socket Mode consumer (the leader); the Events API is served by every process.
    fn exclusive(&self) -> bool {
        matches!(self.receiving, Inlet::Socket(_))
    }

    fn start(&self, cx: ReceiverContext) -> Receiving {
        let ingress = Arc::new(ingress::Ingress::new(
            cx.inbox,
            self.api.clone(),
            self.require_mention,
        ));
        match &self.receiving {
            Inlet::Socket(app_token) => {
                let socket = socket::SocketMode {
                    ingress,
                    channel: self.channel.clone(),
                    app_token: app_token.clone(),
                    shutdown: cx.shutdown,
                    ping_every: self.ping_every,
                };
                Receiving {
                    router: None,
                    task: Some(Box::pin(socket.run())),
                    description: vec!["slack (Socket Mode)".into()],
                }
            }
            Inlet::Events(secret) => {
                self.channel.set_ready(true);
                Receiving {
                    router: Some(events::routes(Arc::new(events::Events {
                        ingress,
                        signing_secret: secret.clone(),
                    }))),
                    task: None,
                    description: vec!["slack (Events API at /v1/slack/events)".into()],
                }
            }
        }
    }
}
