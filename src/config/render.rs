//! The resolved configuration as `config check` prints it: TOML with every secret redacted.
//!
//! Secrets are never part of [`Config`] (only the names of their variables are), so the
//! rendering cannot leak them; the trailing comment block says which secrets are set.

use super::load::LoadedConfig;
use secrecy::SecretString;
use std::fmt::Write;

pub fn render_redacted(loaded: &LoadedConfig) -> String {
    let mut out = String::new();
    match &loaded.source {
        Some(path) => writeln!(
            out,
            "# resolved from {} and FERROCLAW__* variables",
            path.display()
        ),
        None => writeln!(
            out,
            "# built-in defaults (no config file) and FERROCLAW__* variables"
        ),
    }
    .ok();
    let mut shown = loaded.config.clone();
    shown.storage.url = redact_url_password(&shown.storage.url);
    out.push_str(
        &toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n")),
    );
    out.push_str("\n# secrets (values redacted)\n");
    let state = |s: Option<&SecretString>| {
        if s.is_some() {
            "set, [REDACTED]"
        } else {
            "not set"
        }
    };
    let config = &loaded.config;
    for (name, key) in &loaded.secrets.provider_keys {
        if let Some(var) = &config.providers[name].api_key_env {
            writeln!(
                out,
                "# providers.{name}.api_key_env = {var}: {}",
                state(key.as_ref())
            )
            .ok();
        }
    }
    if config.channels.telegram.enabled {
        let var = &config.channels.telegram.token_env;
        writeln!(
            out,
            "# channels.telegram.token_env = {var}: {}",
            state(loaded.secrets.telegram_token.as_ref())
        )
        .ok();
    }
    if config.channels.discord.enabled {
        let var = &config.channels.discord.token_env;
        writeln!(
            out,
            "# channels.discord.token_env = {var}: {}",
            state(loaded.secrets.discord_token.as_ref())
        )
        .ok();
    }
    for (name, hook) in &config.channels.webhook {
        let value = loaded.secrets.webhook_secrets.get(name);
        writeln!(
            out,
            "# channels.webhook.{name}.secret_env = {}: {}",
            hook.secret_env,
            state(value)
        )
        .ok();
    }
    if !config.server.admin_token_env.is_empty() {
        writeln!(
            out,
            "# server.admin_token_env = {}: {}",
            config.server.admin_token_env,
            state(loaded.secrets.admin_token.as_ref())
        )
        .ok();
    }
    for warning in &loaded.warnings {
        writeln!(out, "# warning: {warning}").ok();
    }
    out
}

/// `postgres://user:secret@host/db` → `postgres://user:REDACTED@host/db`.
pub fn redact_url_password(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("REDACTED"));
            url.to_string()
        }
        _ => raw.to_string(),
    }
}
