//! The one list of channel kinds: each enabled channel's settings are read from the config
//! and handed to its crate's factory. Adding a channel is its crate, its config section and
//! one line here; nothing else in the service names a channel kind.
//!
//! The terminal channel is not here: `ferroclaw chat` builds it itself.

use crate::config::{ChannelsConfig, LoadedConfig};
use ferroclaw_channel_core::{Built, PreviewLedger};
use std::sync::Arc;

/// Build every enabled channel (nothing is contacted yet). Streaming channels keep their
/// previews' ids in `previews`.
pub fn build_enabled(
    loaded: &LoadedConfig,
    previews: Arc<dyn PreviewLedger>,
) -> anyhow::Result<Vec<Built>> {
    let mut built = Vec::new();
    built.extend(webhook(loaded)?);
    built.extend(telegram(loaded, previews.clone())?);
    built.extend(discord(loaded, previews.clone())?);
    built.extend(slack(loaded, previews)?);
    built.extend(openai(loaded));
    Ok(built)
}

/// The OpenAI-compatible endpoint, when its token variable is set.
fn openai(loaded: &LoadedConfig) -> Option<Built> {
    let token = loaded.secrets.api_token.clone()?;
    Some(ferroclaw_channel_openai::build(
        ferroclaw_channel_openai::Settings {
            token,
            agents: loaded.config.api.agents.clone(),
            max_body_bytes: loaded.config.server.max_body_bytes,
            max_input_chars: loaded.config.agent.max_input_chars,
        },
    ))
}

fn webhook(loaded: &LoadedConfig) -> anyhow::Result<Option<Built>> {
    let config = &loaded.config;
    if config.channels.webhook.is_empty() {
        return Ok(None);
    }
    let endpoints = config
        .channels
        .webhook
        .iter()
        .map(|(name, hook)| ferroclaw_channel_webhook::EndpointSettings {
            name: name.clone(),
            secret: loaded
                .secrets
                .channel(&ChannelsConfig::webhook_secret(name))
                .expect("checked at config load"),
            callback_url: hook.callback_url.clone(),
            signature: hook.signature,
        })
        .collect();
    Ok(Some(ferroclaw_channel_webhook::build(
        ferroclaw_channel_webhook::Settings {
            endpoints,
            max_body_bytes: config.server.max_body_bytes,
            // The shared client, built when the first callback is sent.
            http: crate::http::shared,
        },
    )?))
}

fn telegram(
    loaded: &LoadedConfig,
    previews: Arc<dyn PreviewLedger>,
) -> anyhow::Result<Option<Built>> {
    let cfg = &loaded.config.channels.telegram;
    if !cfg.enabled {
        return Ok(None);
    }
    let cx = ferroclaw_channel_telegram::Context {
        token: token(loaded, ChannelsConfig::TELEGRAM_TOKEN)?,
        public_url: loaded.config.server.public_url.clone(),
        commands: crate::features::chat_commands(),
        previews: Some(previews),
    };
    Ok(Some(cfg.build(cx)?))
}

fn discord(
    loaded: &LoadedConfig,
    previews: Arc<dyn PreviewLedger>,
) -> anyhow::Result<Option<Built>> {
    let cfg = &loaded.config.channels.discord;
    if !cfg.enabled {
        return Ok(None);
    }
    let cx = ferroclaw_channel_discord::Context {
        token: token(loaded, ChannelsConfig::DISCORD_TOKEN)?,
        commands: crate::features::chat_commands(),
        previews: Some(previews),
    };
    Ok(Some(cfg.build(cx)?))
}

fn slack(loaded: &LoadedConfig, previews: Arc<dyn PreviewLedger>) -> anyhow::Result<Option<Built>> {
    let cfg = &loaded.config.channels.slack;
    if !cfg.enabled {
        return Ok(None);
    }
    let cx = ferroclaw_channel_slack::Context {
        bot_token: token(loaded, ChannelsConfig::SLACK_BOT_TOKEN)?,
        app_token: loaded.secrets.channel(ChannelsConfig::SLACK_APP_TOKEN),
        signing_secret: loaded.secrets.channel(ChannelsConfig::SLACK_SIGNING_SECRET),
        previews: Some(previews),
    };
    Ok(Some(cfg.build(cx)?))
}

/// A channel's secret, resolved at config load (checked there; named here if missing).
fn token(loaded: &LoadedConfig, key: &str) -> anyhow::Result<secrecy::SecretString> {
    loaded
        .secrets
        .channel(key)
        .ok_or_else(|| anyhow::anyhow!("{key}: the token variable is not set"))
}
