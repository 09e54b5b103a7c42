//! `[channels.discord]` as written in config.toml, with every default. The service reads it,
//! checks it and hands it to [`Config::build`](crate::Config::build) with the resolved token.

use ferroclaw_channel_core::AccessMode;
use serde::{Deserialize, Serialize};

/// Discord's own REST base; any other value is a stand-in or proxy (rate limiter off).
pub const DEFAULT_API_URL: &str = "https://discord.com";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub enabled: bool,
    pub token_env: String,
    /// REST base; the gateway URL is discovered from it.
    pub api_url: String,
    pub access: AccessMode,
    #[serde(deserialize_with = "ferroclaw_channel_core::user_ids")]
    pub allowed_users: Vec<String>,
    pub require_mention_in_guilds: bool,
    pub stream_edit_interval_ms: u64,
    /// No heartbeat acknowledged (or no connection) this long: `degraded`.
    pub degraded_after_secs: u64,
    /// ... and this long: `down`, and the gateway client is started again.
    pub down_after_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: DEFAULT_API_URL.into(),
            access: AccessMode::Pairing,
            allowed_users: Vec::new(),
            require_mention_in_guilds: true,
            stream_edit_interval_ms: 1000,
            degraded_after_secs: 15,
            // Discord's heartbeat interval is 41.25 s: two of them missed is down.
            down_after_secs: 90,
        }
    }
}
