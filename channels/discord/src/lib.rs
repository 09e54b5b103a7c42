//! The Discord channel (serenity): the gateway (reconnects and resumes by itself), DMs, guild
//! channels (answer only when mentioned or replied to), threads (each its own session,
//! answered in the thread), slash commands (deferred, answered by follow-up), streamed
//! replies by throttled edits.
//!
//! Owns every Discord type: `translate.rs` turns messages and commands into
//! [`InboundMessage`](ferroclaw_channel_core::InboundMessage)s, `channel.rs` delivers bot
//! messages, `gateway.rs` receives. Access control is not decided here: ferroclaw's ingress
//! applies it to every channel.

mod channel;
mod config;
mod errors;
mod gateway;
mod translate;

pub use channel::{DiscordChannel, LIMIT};
pub use config::{Config, DEFAULT_API_URL};
pub use translate::CHANNEL;

use ferroclaw_channel_core::{
    AccessRule, BuildError, Built, ChatCommand, PreviewLedger, Receiver, ReceiverContext, Receiving,
};
use secrecy::{ExposeSecret, SecretString};
use serenity::http::{Http, HttpBuilder};
use std::sync::Arc;
use std::time::Duration;

/// Total timeout of one REST call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the service resolves for the factory.
pub struct Context {
    pub token: SecretString,
    /// Chat commands to register as application commands.
    pub commands: Vec<ChatCommand>,
    /// Where streamed previews' ids outlive the process (none: in memory only).
    pub previews: Option<Arc<dyn PreviewLedger>>,
}

impl Config {
    /// The adapter from this section (`enabled` is the caller's to check). Nothing is
    /// contacted yet.
    pub fn build(&self, cx: Context) -> Result<Built, BuildError> {
        let api_url = self.api_url.trim_end_matches('/').to_string();
        match api_url.split_once("://") {
            Some(("http" | "https", host)) if !host.is_empty() => {}
            _ => {
                return Err(BuildError::new(
                    "channels.discord.api_url",
                    "must be an http:// or https:// URL",
                ));
            }
        }
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            // HTTP/1.1, as serenity is used and tested (the service's reqwest may speak HTTP/2).
            .http1_only()
            .build()
            .map_err(|e| {
                BuildError::new(
                    "channels.discord",
                    format!("cannot build the HTTP client: {e}"),
                )
            })?;
        let token = cx.token.expose_secret().to_string();
        let make_http = {
            let token = token.clone();
            move || -> Http {
                let builder = HttpBuilder::new(&token).client(client.clone());
                if api_url == DEFAULT_API_URL {
                    builder.build()
                } else {
                    // serenity's rate limiter builds discord.com URLs itself; a stand-in or
                    // proxy needs it off (the proxy does its own limiting).
                    builder
                        .proxy(api_url.clone())
                        .ratelimiter_disabled(true)
                        .build()
                }
            }
        };
        let http = Arc::new(make_http());
        let channel = Arc::new(DiscordChannel::new(
            http.clone(),
            token.clone(),
            Duration::from_millis(self.stream_edit_interval_ms),
            cx.previews,
            ferroclaw_channel_core::Liveness::new(
                Duration::from_secs(self.degraded_after_secs),
                Duration::from_secs(self.down_after_secs.max(self.degraded_after_secs)),
            ),
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
            receiver: Box::new(Gateway {
                channel,
                http,
                make_http: Arc::new(make_http),
                require_mention: self.require_mention_in_guilds,
                commands: cx.commands,
            }),
        })
    }
}

/// The receiving side, until it starts.
struct Gateway {
    channel: Arc<DiscordChannel>,
    http: Arc<Http>,
    make_http: Arc<dyn Fn() -> Http + Send + Sync>,
    require_mention: bool,
    commands: Vec<ChatCommand>,
}

impl Receiver for Gateway {
    /// One gateway session per bot token.
    fn exclusive(&self) -> bool {
        true
    }

    fn start(&self, cx: ReceiverContext) -> Receiving {
        let make_http = self.make_http.clone();
        let shared = Arc::new(gateway::Shared::new(
            cx.inbox,
            self.channel.clone(),
            self.http.clone(),
            Box::new(move || make_http()),
            self.require_mention,
            self.commands.clone(),
            cx.shutdown,
        ));
        Receiving {
            router: None,
            task: Some(Box::pin(gateway::run(shared))),
            description: vec!["discord (gateway)".into()],
        }
    }
}
