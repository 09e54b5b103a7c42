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
    for (name, provider) in &config.providers {
        for var in provider.key_vars() {
            let set = !loaded.secrets.unset_key_vars.contains(var);
            let key = if provider.api_key_env.as_deref() == Some(var) {
                "api_key_env"
            } else {
                "api_key_envs"
            };
            writeln!(
                out,
                "# providers.{name}.{key} = {var}: {}",
                if set { "set, [REDACTED]" } else { "not set" }
            )
            .ok();
        }
    }
    for needed in config.channels.secret_refs() {
        writeln!(
            out,
            "# {} = {}: {}",
            needed.key,
            needed.var,
            state(loaded.secrets.channels.get(&needed.key))
        )
        .ok();
    }
    let tokens = [
        (
            "server.admin_token_env",
            &config.server.admin_token_env,
            &loaded.secrets.admin_token,
        ),
        (
            "api.token_env",
            &config.api.token_env,
            &loaded.secrets.api_token,
        ),
    ];
    for (key, var, token) in tokens {
        if !var.is_empty() {
            writeln!(out, "# {key} = {var}: {}", state(token.as_ref())).ok();
        }
    }
    for warning in &loaded.warnings {
        writeln!(out, "# warning: {warning}").ok();
    }
    out
}

/// `postgres://user:secret@host/db` → `postgres://user:REDACTED@host/db`; also a password
/// given as `?password=` (or `sslpassword=`), and one holding unescaped `@`, `/` or `?`
/// (the credentials end at the last `@`; when in doubt, more is hidden, never less).
pub fn redact_url_password(raw: &str) -> String {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return raw.to_string();
    };
    let (credentials, after) = match rest.rfind('@') {
        Some(at) => {
            let creds = &rest[..at];
            let shown = match creds.split_once(':') {
                Some((user, _)) => format!("{user}:REDACTED@"),
                None if creds.contains(['/', '?']) => "REDACTED@".to_string(),
                None => format!("{creds}@"),
            };
            (shown, &rest[at + 1..])
        }
        None => (String::new(), rest),
    };
    let after = match after.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _))
                        if key.eq_ignore_ascii_case("password")
                            || key.eq_ignore_ascii_case("sslpassword") =>
                    {
                        format!("{key}=REDACTED")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => after.to_string(),
    };
    format!("{scheme}://{credentials}{after}")
}

#[cfg(test)]
mod tests {
    use super::redact_url_password;

    #[test]
    fn database_passwords_are_hidden_however_they_are_written() {
        let cases = [
            ("postgres://u:s3cret@h/db", "postgres://u:REDACTED@h/db"),
            (
                "postgres://u@h/db?password=s3cret",
                "postgres://u@h/db?password=REDACTED",
            ),
            (
                "postgres://h/db?sslmode=require&PASSWORD=s3cret",
                "postgres://h/db?sslmode=require&PASSWORD=REDACTED",
            ),
            (
                "postgres://u:p@ss/w?rd@h:5432/db",
                "postgres://u:REDACTED@h:5432/db",
            ),
            ("sqlite://ferroclaw.db", "sqlite://ferroclaw.db"),
        ];
        for (raw, shown) in cases {
            let out = redact_url_password(raw);
            assert_eq!(out, shown);
            assert!(!out.contains("s3cret") && !out.contains("ss/w"), "{out}");
        }
    }
}
