//! `ferroclaw doctor`: a deployment's own configuration checked against what goes wrong in
//! the field (SPEC section 18). Reads the loaded config, its file and the environment; prints
//! one line per finding — `HIGH|MEDIUM|LOW <key or area>: <what> — <fix>` — and the caller
//! exits 1 when any is HIGH. `config check` stays the syntax check; this is the judgement.
//!
//! `examine` knows the config, the environment and the files it names; `live.rs` then asks
//! the database (read only: its schema version) and, when the sandbox is on, the Docker
//! engine (is the image there). Starts nothing, writes nothing.

mod live;

pub use live::examine_live;

use crate::config::{AccessMode, LoadedConfig, ProviderKind};
use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Low,
    Medium,
    High,
}

impl Severity {
    fn word(self) -> &'static str {
        match self {
            Severity::Low => "LOW",
            Severity::Medium => "MEDIUM",
            Severity::High => "HIGH",
        }
    }
}

/// One finding: how bad, where, what, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub key: String,
    pub what: String,
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} — {}",
            self.severity.word(),
            self.key,
            self.what,
            self.fix
        )
    }
}

/// Every finding for `loaded`, most severe first.
pub fn examine(loaded: &LoadedConfig) -> Vec<Finding> {
    let mut found = Findings::default();
    let mut add =
        |severity, key: &str, what: String, fix: &str| found.add(severity, key, what, fix);
    let config = &loaded.config;
    let server = &config.server;

    // Reachable beyond this machine.
    if !crate::serve::is_loopback(&server.listen) {
        if loaded.secrets.admin_token.is_none() {
            add(
                Severity::High,
                "server.listen",
                format!(
                    "{} is reachable beyond this machine and no admin token is set ({})",
                    server.listen, server.admin_token_env
                ),
                "set the admin token, or listen on 127.0.0.1 behind a proxy",
            );
        }
        if !server.public_url.starts_with("https://") {
            add(
                Severity::Medium,
                "server.public_url",
                "the service listens beyond loopback and no https address is in front of it".into(),
                "put a TLS-terminating proxy in front and set server.public_url = \"https://…\"",
            );
        }
    }

    // What the model may do on this machine, and who may talk to it.
    if config.tools.host_exec {
        add(
            Severity::Medium,
            "tools.host_exec",
            "the model can run commands on this machine (every call asks for approval)".into(),
            "use the Docker sandbox (sandbox.enabled = true) and set tools.host_exec = false",
        );
    }
    let channels = &config.channels;
    for (key, enabled, access) in [
        (
            "channels.telegram.access",
            channels.telegram.enabled,
            channels.telegram.access,
        ),
        (
            "channels.discord.access",
            channels.discord.enabled,
            channels.discord.access,
        ),
    ] {
        if enabled && access == AccessMode::Open {
            add(
                Severity::Medium,
                key,
                "anyone who finds the bot can talk to it (and spend its budget)".into(),
                "use access = \"pairing\" or \"allowlist\"",
            );
        }
    }
    let approvals = &config.approvals;
    let asks = config.tools.host_exec || !approvals.tools.is_empty();
    if asks && approvals.approvers.is_empty() {
        add(
            Severity::Low,
            "approvals.approvers",
            "calls ask for approval, and in a group no one may give it".into(),
            "list who may decide: approvers = [\"telegram:<your id>\"]",
        );
    }

    // Secrets where they do not belong.
    if let Ok(tree) = serde_json::to_value(config) {
        let mut keys = Vec::new();
        secret_like_env_values("", &tree, &mut keys);
        for key in keys {
            add(
                Severity::High,
                &key,
                "holds what looks like a secret value, not the name of a variable".into(),
                "put the secret in an environment variable and name that variable here",
            );
        }
    }
    let file_text = loaded
        .source
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    if let Ok(url) = url::Url::parse(&config.storage.url)
        && let Some(password) = url.password()
        && file_text.contains(password)
    {
        add(
            Severity::High,
            "storage.url",
            "the database password is written in the config file".into(),
            "pass the URL in the environment: FERROCLAW__STORAGE__URL",
        );
    }

    // Files others can read.
    if let Some(source) = &loaded.source
        && readable_by_others(source)
    {
        add(
            Severity::Medium,
            "config file",
            format!("{} can be read by other users", source.display()),
            "chmod 600 it",
        );
    }
    if let Some(path) = config.storage.url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        let base = loaded
            .source
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let file = if Path::new(path).is_absolute() {
            Path::new(path).to_path_buf()
        } else {
            base.join(path)
        };
        if readable_by_others(&file) {
            add(
                Severity::Medium,
                "storage.url",
                format!(
                    "the database {} (conversations, usage) can be read by other users",
                    file.display()
                ),
                "chmod 600 it (and its -wal and -shm files)",
            );
        }
    }

    // What a sandboxed command can reach.
    let sandbox = &config.sandbox;
    if sandbox.enabled && sandbox.network == "host" {
        add(
            Severity::High,
            "sandbox.network",
            "\"host\" gives sandboxed commands this machine's network: every local service, \
             the admin API, a Docker API listening on TCP"
                .into(),
            "use \"none\" (or \"bridge\" when commands need the internet)",
        );
    } else if sandbox.enabled
        && sandbox.network != "none"
        && sandbox.docker_host.starts_with("tcp://")
    {
        add(
            Severity::High,
            "sandbox.docker_host",
            format!(
                "the Docker API at {} is on the network sandboxed commands can reach: \
                 one request from a container starts a privileged one",
                sandbox.docker_host
            ),
            "use the unix socket, or sandbox.network = \"none\"",
        );
    }

    // Secrets too short to be safe, or to be found by the leak scan.
    for (variable, value) in &loaded.secrets.by_variable {
        let length = secrecy::ExposeSecret::expose_secret(value).chars().count();
        if length < crate::redact::MIN_SECRET_LEN {
            add(
                Severity::Medium,
                variable,
                format!(
                    "its value is {length} characters: guessable, and too short for the leak scan to look for"
                ),
                "use a long random value (e.g. `openssl rand -hex 32`)",
            );
        }
    }
    for (name, hook) in &config.channels.webhook {
        let short = loaded
            .secrets
            .channel(&format!("channels.webhook.{name}.secret_env"))
            .is_some_and(|s| {
                let length = secrecy::ExposeSecret::expose_secret(&s).chars().count();
                (crate::redact::MIN_SECRET_LEN..16).contains(&length)
            });
        if short {
            add(
                Severity::Medium,
                &format!("channels.webhook.{name}.secret_env"),
                format!(
                    "the signing secret in {} is shorter than 16 characters: signatures can be forged by guessing it",
                    hook.secret_env
                ),
                "use 32 random bytes (e.g. `openssl rand -hex 32`)",
            );
        }
    }

    // A local model that cannot be fetched.
    if crate::models::offline() {
        for (name, provider) in &config.providers {
            if provider.kind != ProviderKind::Local || provider.model_path.is_some() {
                continue;
            }
            for id in config.model_ids_at(name) {
                let missing = crate::models::known(id)
                    .is_some_and(|known| crate::models::cached(known).is_none());
                if missing {
                    add(
                        Severity::Medium,
                        &format!("providers.{name}"),
                        format!(
                            "{name}/{id} is not in the model cache and FERROCLAW_OFFLINE forbids fetching it"
                        ),
                        &format!("run `ferroclaw model fetch {id}` where the network is reachable"),
                    );
                }
            }
        }
    }
    found.sorted()
}

/// Findings as they are made, then most severe first.
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, severity: Severity, key: &str, what: String, fix: &str) {
        self.0.push(Finding {
            severity,
            key: key.to_string(),
            what,
            fix: fix.to_string(),
        });
    }

    fn sorted(mut self) -> Vec<Finding> {
        self.0.sort_by_key(|f| std::cmp::Reverse(f.severity));
        self.0
    }
}

/// Keys ending in `_env` whose value cannot be a variable name (`sk-…`, a token pasted in).
fn secret_like_env_values(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    let serde_json::Value::Object(map) = value else {
        return;
    };
    for (key, child) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match child {
            serde_json::Value::String(s) if key.ends_with("_env") && !is_variable_name(s) => {
                out.push(path);
            }
            serde_json::Value::Object(_) => secret_like_env_values(&path, child, out),
            _ => {}
        }
    }
}

/// A POSIX environment variable name (empty: unset, fine).
fn is_variable_name(s: &str) -> bool {
    s.is_empty()
        || (s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit()))
}

/// Whether others than the owner and group may read the file (mode o+r).
fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn variable_names_pass_and_pasted_secrets_do_not() {
        for name in ["OPENAI_API_KEY", "", "FC_TG_TOKEN", "x1"] {
            assert!(super::is_variable_name(name), "{name}");
        }
        for value in ["sk-live-abc", "123456:ABC-def", "1TOKEN", "a b"] {
            assert!(!super::is_variable_name(value), "{value}");
        }
    }
}
