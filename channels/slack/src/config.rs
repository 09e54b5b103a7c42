//! `[channels.slack]` as written in config.toml, with every default (SPEC section 23). The
//! service reads it, checks it and hands it to [`Config::build`](crate::Config::build) with
//! the resolved secrets.

use ferroclaw_channel_core::AccessMode;
use serde::{Deserialize, Serialize};

/// Slack's Web API base; any other value is a stand-in or a proxy.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// How events reach the service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A websocket the service opens with the app-level token (no public URL needed).
    #[default]
    Socket,
    /// Slack POSTs signed requests to `/v1/slack/events` (and `/commands`, `/interactive`).
    Events,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub enabled: bool,
    pub mode: Mode,
    pub bot_token_env: String,
    /// Socket Mode's app-level token (`xapp-…`).
    pub app_token_env: String,
    /// The Events API's signing secret.
    pub signing_secret_env: String,
    pub api_url: String,
    /// In channels, answer only messages that mention the bot.
    pub require_mention: bool,
    pub access: AccessMode,
    /// Slack user ids (`U…`).
    #[serde(deserialize_with = "ferroclaw_channel_core::user_ids")]
    pub allowed_users: Vec<String>,
    /// At most one `chat.update` of a streamed reply per interval (Slack's tier 3 allows
    /// about one a second per channel).
    pub stream_edit_interval_ms: u64,
    /// Socket Mode: the connection is pinged this often; silent for two pings it is
    /// degraded, for three down (and replaced by a new connection).
    pub ping_interval_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            mode: Mode::Socket,
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            api_url: DEFAULT_API_URL.into(),
            require_mention: true,
            access: AccessMode::Pairing,
            allowed_users: Vec::new(),
            stream_edit_interval_ms: 1000,
            ping_interval_secs: 10,
        }
    }
}
