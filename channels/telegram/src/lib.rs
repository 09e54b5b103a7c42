//! The Telegram channel (teloxide): long polling or a webhook mounted on ferroclaw's HTTP
//! server, DMs, groups (answer only when mentioned or replied to) and forum topics.
//!
//! Owns every Telegram type: `translate.rs` turns messages into [`InboundMessage`]s,
//! `channel.rs` delivers bot messages, `ingress.rs` receives updates. Updates are handed to
//! the [`Inbox`] and only then acknowledged (the polling offset moves past an update, or the
//! webhook answers 200, after the journal has it), so a crash neither loses nor repeats one.
//! Access control is not decided here: ferroclaw's ingress applies it to every channel.

mod backoff;
mod channel;
mod format;
mod ingress;
mod translate;

pub use channel::TelegramChannel;
pub use format::{LIMIT, split, to_html};
pub use ingress::WEBHOOK_PATH;
pub use translate::CHANNEL;

use ferroclaw_channel_core::Inbox;
use secrecy::{ExposeSecret, SecretString};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use teloxide::Bot;

/// How updates arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Polling,
    /// Telegram POSTs updates to `<public_url>/v1/telegram/webhook`.
    Webhook {
        public_url: String,
    },
}

pub struct Settings {
    pub token: SecretString,
    pub api_url: String,
    pub mode: Mode,
    pub require_mention_in_groups: bool,
    pub stream_edit_interval: Duration,
    /// Long-poll timeout for getUpdates.
    pub poll_timeout: Duration,
    /// Chat commands to register with setMyCommands: (command, description).
    pub commands: Vec<(String, String)>,
}

/// Total timeout of ordinary Bot API calls (teloxide's own default).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(17);
/// How much longer than the long-poll timeout a `getUpdates` request may take.
const POLL_MARGIN: Duration = Duration::from_secs(10);

/// teloxide's recommended client settings (connect timeout, `tcp_nodelay`) with our total
/// timeout.
fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    teloxide::net::default_reqwest_settings()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build the Telegram HTTP client: {e}"))
}

/// One Telegram bot: its delivery channel and its update source.
pub struct Telegram {
    channel: Arc<TelegramChannel>,
    shared: Arc<ingress::Shared>,
}

impl Telegram {
    /// Build the bot client; nothing is contacted yet.
    pub fn new(settings: Settings) -> Result<Self, String> {
        let url = url::Url::parse(&settings.api_url)
            .map_err(|e| format!("channels.telegram.api_url is not a URL: {e}"))?;
        let token = settings.token.expose_secret().to_string();
        let bot =
            Bot::with_client(token.clone(), client(REQUEST_TIMEOUT)?).set_api_url(url.clone());
        // A long poll is held open by Telegram for `poll_timeout`; its client must outlast it.
        let poll_bot =
            Bot::with_client(token.clone(), client(settings.poll_timeout + POLL_MARGIN)?)
                .set_api_url(url);
        let channel = Arc::new(TelegramChannel::new(
            bot.clone(),
            token.clone(),
            settings.stream_edit_interval,
        ));
        let shared = Arc::new(ingress::Shared {
            bot,
            poll_bot,
            inbox: OnceLock::new(),
            me: OnceLock::new(),
            webhook_secret: ingress::webhook_secret(&token),
            settings,
            channel: channel.clone(),
        });
        Ok(Telegram { channel, shared })
    }

    pub fn channel(&self) -> Arc<TelegramChannel> {
        self.channel.clone()
    }

    /// Where updates go. Must be set before [`Telegram::run`] or the router is used.
    pub fn set_inbox(&self, inbox: Arc<dyn Inbox>) {
        let _ = self.shared.inbox.set(inbox);
    }

    /// The webhook route to merge into the service's router (webhook mode only).
    pub fn router(&self) -> Option<axum::Router> {
        matches!(self.shared.settings.mode, Mode::Webhook { .. })
            .then(|| ingress::router(self.shared.clone()))
    }

    /// Connect (getMe, setMyCommands, webhook or polling) and receive updates until cancelled.
    pub async fn run(self, cancel: tokio_util::sync::CancellationToken) {
        ingress::run(self.shared, cancel).await
    }
}
