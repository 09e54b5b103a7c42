//! The Telegram channel (teloxide): long polling or a webhook mounted on ferroclaw's HTTP
//! server, DMs, groups (answer only when mentioned or replied to) and forum topics.
//!
//! Owns every Telegram type: `translate.rs` turns messages into [`InboundMessage`]s,
//! `channel.rs` delivers bot messages, `ingress.rs` receives updates. Updates are handed to
//! the [`Inbox`] and only then acknowledged (the polling offset moves past an update, or the
//! webhook answers 200, after the journal has it), so a crash neither loses nor repeats one.
//! Access control is not decided here: ferroclaw's ingress applies it to every channel.

mod channel;
mod config;
mod format;
mod ingress;
mod translate;

pub use channel::TelegramChannel;
pub use config::{Config, ModeConfig};
pub use format::{LIMIT, to_html};
pub use ingress::WEBHOOK_PATH;
pub use translate::CHANNEL;

use ferroclaw_channel_core::{
    AccessRule, BuildError, Built, ChatCommand, PreviewLedger, Receiver, ReceiverContext, Receiving,
};
use secrecy::{ExposeSecret, SecretString};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use teloxide::Bot;

/// How updates arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    Polling,
    /// Telegram POSTs updates to `<public_url>/v1/telegram/webhook`.
    Webhook {
        public_url: String,
    },
}

/// The section resolved for use: durations, the token, the public URL and the commands.
#[derive(Clone)]
pub(crate) struct Settings {
    pub token: SecretString,
    pub api_url: String,
    pub mode: Mode,
    pub require_mention_in_groups: bool,
    pub stream_edit_interval: Duration,
    /// Long-poll timeout for getUpdates.
    pub poll_timeout: Duration,
    /// Chat commands to register with setMyCommands.
    pub commands: Vec<ChatCommand>,
    /// Who may talk to the bot.
    pub access: AccessRule,
    pub previews: Option<Arc<dyn PreviewLedger>>,
}

/// Total timeout of ordinary Bot API calls (teloxide's own default).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(17);
/// How much longer than the long-poll timeout a `getUpdates` request may take.
const POLL_MARGIN: Duration = Duration::from_secs(10);

/// teloxide's recommended client settings (connect timeout, `tcp_nodelay`) with our total
/// timeout.
fn client(timeout: Duration) -> Result<reqwest::Client, BuildError> {
    teloxide::net::default_reqwest_settings()
        .timeout(timeout)
        // HTTP/1.1, as teloxide is used and tested (the service's reqwest may speak HTTP/2).
        .http1_only()
        .build()
        .map_err(|e| {
            BuildError::new(
                "channels.telegram",
                format!("cannot build the HTTP client: {e}"),
            )
        })
}

/// What the service resolves for the factory: the token and service-wide values.
pub struct Context {
    pub token: SecretString,
    /// `server.public_url` (webhook mode).
    pub public_url: String,
    /// Chat commands to register with setMyCommands.
    pub commands: Vec<ChatCommand>,
    /// Where streamed previews' ids outlive the process (none: in memory only).
    pub previews: Option<Arc<dyn PreviewLedger>>,
}

impl Config {
    /// The adapter from this section (`enabled` is the caller's to check).
    pub fn build(&self, cx: Context) -> Result<Built, BuildError> {
        build(Settings {
            token: cx.token,
            api_url: self.api_url.clone(),
            mode: match self.mode {
                ModeConfig::Polling => Mode::Polling,
                ModeConfig::Webhook => Mode::Webhook {
                    public_url: cx.public_url,
                },
            },
            require_mention_in_groups: self.require_mention_in_groups,
            stream_edit_interval: Duration::from_millis(self.stream_edit_interval_ms),
            poll_timeout: Duration::from_secs(self.poll_timeout_secs),
            commands: cx.commands,
            previews: cx.previews,
            access: AccessRule {
                mode: self.access,
                allowed_users: self.allowed_users.clone(),
            },
        })
    }
}

/// The adapter factory: the bot's delivery channel now, its update source (long polling or
/// the webhook route) once the service's inbox exists. Nothing is contacted yet.
fn build(settings: Settings) -> Result<Built, BuildError> {
    let url = url::Url::parse(&settings.api_url)
        .map_err(|e| BuildError::new("channels.telegram.api_url", format!("not a URL: {e}")))?;
    let token = settings.token.expose_secret().to_string();
    let bot = Bot::with_client(token.clone(), client(REQUEST_TIMEOUT)?).set_api_url(url.clone());
    // A long poll is held open by Telegram for `poll_timeout`; its client must outlast it.
    let poll_timeout = settings.poll_timeout + POLL_MARGIN;
    let poll_bot = Bot::with_client(token.clone(), client(poll_timeout)?).set_api_url(url.clone());
    let poll_token = token.clone();
    // A receiver restarted after it went down gets a new client (new connections).
    let new_poll_bot: ingress::NewBot = Arc::new(move || {
        client(poll_timeout)
            .ok()
            .map(|c| Bot::with_client(poll_token.clone(), c).set_api_url(url.clone()))
    });
    // A poll returns at least every `poll_timeout`: late after that and 5 s more, down when
    // none completed for three of them (SPEC section 21).
    let liveness = (settings.mode == Mode::Polling).then(|| {
        ferroclaw_channel_core::Liveness::new(
            settings.poll_timeout + Duration::from_secs(5),
            (settings.poll_timeout * 3).max(Duration::from_secs(3)),
        )
    });
    let channel = Arc::new(TelegramChannel::new(
        bot.clone(),
        token.clone(),
        settings.stream_edit_interval,
        settings.previews.clone(),
        liveness,
    ));
    Ok(Built {
        channels: vec![channel.clone()],
        access: vec![(CHANNEL.to_string(), settings.access.clone())],
        receiver: Box::new(Updates {
            bot,
            poll_bot,
            new_poll_bot,
            webhook_secret: ingress::webhook_secret(&token),
            settings,
            channel,
        }),
    })
}

/// The receiving side, until it starts.
struct Updates {
    bot: Bot,
    poll_bot: Bot,
    new_poll_bot: ingress::NewBot,
    webhook_secret: String,
    settings: Settings,
    channel: Arc<TelegramChannel>,
}

impl Receiver for Updates {
    /// Long polling allows one consumer; a webhook is served by every process.
    fn exclusive(&self) -> bool {
        self.settings.mode == Mode::Polling
    }

    fn start(&self, cx: ReceiverContext) -> Receiving {
        let mode = match self.settings.mode {
            Mode::Polling => "long polling",
            Mode::Webhook { .. } => "webhook",
        };
        let webhook = matches!(self.settings.mode, Mode::Webhook { .. });
        let shared = Arc::new(ingress::Shared {
            bot: self.bot.clone(),
            poll_bot: self.poll_bot.clone(),
            new_poll_bot: self.new_poll_bot.clone(),
            inbox: cx.inbox,
            me: OnceLock::new(),
            webhook_secret: self.webhook_secret.clone(),
            settings: self.settings.clone(),
            channel: self.channel.clone(),
        });
        Receiving {
            router: webhook.then(|| ingress::router(shared.clone())),
            task: Some(Box::pin(ingress::run(shared, cx.shutdown))),
            description: vec![format!("telegram ({mode})")],
        }
    }
}
