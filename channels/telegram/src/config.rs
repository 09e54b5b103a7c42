//! `[channels.telegram]` as written in config.toml, with every default. The service reads
//! it, checks it and hands it to [`crate::build`] with the resolved token.

use ferroclaw_channel_core::AccessMode;
use serde::{Deserialize, Serialize};

/// How updates arrive (`mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeConfig {
    Polling,
    Webhook,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub enabled: bool,
    pub token_env: String,
    pub api_url: String,
    pub mode: ModeConfig,
    pub access: AccessMode,
    #[serde(deserialize_with = "ferroclaw_channel_core::user_ids")]
    pub allowed_users: Vec<String>,
    pub require_mention_in_groups: bool,
    pub stream_edit_interval_ms: u64,
    /// How long one `getUpdates` long poll is held open by Telegram when idle.
    pub poll_timeout_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            mode: ModeConfig::Polling,
            access: AccessMode::Pairing,
            allowed_users: Vec::new(),
            require_mention_in_groups: true,
            stream_edit_interval_ms: 1000,
            poll_timeout_secs: 25,
        }
    }
}
