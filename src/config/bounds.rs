//! The ranges and shapes a configuration's values must have so that `serve` can use them:
//! every number within a range that no later arithmetic overflows (durations added to
//! clocks, megabytes turned into bytes), sandbox limits that really limit, and URLs and
//! secrets that parse the way the service will parse them. `config check` runs this, so it
//! refuses what `serve` would refuse, naming the key.
//!
//! Owns only the checks; the loader (`load.rs`) collects the problems.

use super::schema::Config;
use serde_json::Value;

/// A key and what is wrong with its value.
pub type Found = (String, String);

const YEAR_SECS: u64 = 366 * 86_400;
const TIB: u64 = 1 << 40;

/// Numbers by their key's suffix: durations, sizes and counts with ceilings that keep every
/// use of them (`Instant + Duration`, `mb * 1024 * 1024`, semaphores) from overflowing.
fn ceiling(key: &str) -> Option<(u64, &'static str)> {
    let last = key.rsplit('.').next().unwrap_or(key);
    if last.ends_with("_secs") {
        Some((YEAR_SECS, "a year"))
    } else if last.ends_with("_ms") {
        Some((3_600_000, "an hour"))
    } else if last.ends_with("_bytes") {
        Some((TIB, "1 TiB"))
    } else if last.ends_with("_mb") {
        Some((1 << 20, "1 TiB"))
    } else if last.starts_with("max_") || last.ends_with("_limit") || last.starts_with("retries") {
        Some((1_000_000_000, "1,000,000,000"))
    } else {
        None
    }
}

fn walk(prefix: &str, value: &Value, found: &mut Vec<Found>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                walk(&path, value, found);
            }
        }
        Value::Number(n) => {
            if let Some((max, words)) = ceiling(prefix) {
                let too_big = match n.as_u64() {
                    Some(v) => v > max,
                    None => n.as_i64().is_none() && n.as_f64().is_none_or(|f| f > max as f64),
                };
                if too_big {
                    found.push((
                        prefix.to_string(),
                        format!("{n} is too large (at most {words})"),
                    ));
                }
            }
        }
        _ => {}
    }
}

/// `url` as an http(s) URL with a host.
fn http_url(url: &str) -> Result<(), String> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "`{url}` must be an http:// or https:// URL with a host (not {}:)",
            u.scheme()
        )),
        Err(e) => Err(format!("`{url}` is not a URL: {e}")),
    }
}

/// Everything out of range or malformed in `config`.
pub fn check(config: &Config) -> Vec<Found> {
    let mut found = Vec::new();
    match serde_json::to_value(config) {
        Ok(tree) => walk("", &tree, &mut found),
        Err(e) => found.push((
            "<root>".into(),
            format!("the configuration cannot be read back: {e}"),
        )),
    }
    let mut problem = |key: &str, message: String| found.push((key.to_string(), message));

    let sandbox = &config.sandbox;
    if !(sandbox.cpus.is_finite() && sandbox.cpus > 0.0 && sandbox.cpus <= 1024.0) {
        problem(
            "sandbox.cpus",
            format!("{} must be a number above 0 and at most 1024", sandbox.cpus),
        );
    }
    if sandbox.pids_limit < 1 {
        problem(
            "sandbox.pids_limit",
            "must be at least 1 (0 or less would mean no limit)".into(),
        );
    }
    if sandbox.memory_mb < 6 {
        problem(
            "sandbox.memory_mb",
            "must be at least 6 (Docker's minimum; 0 would mean no limit)".into(),
        );
    }
    if config.media.pdf_memory_mb < 64 {
        problem("media.pdf_memory_mb", "must be at least 64".into());
    }
    if config.media.pdf_timeout_secs == 0 {
        problem("media.pdf_timeout_secs", "must be at least 1".into());
    }
    if config.schedules.max_turns_per_minute == 0 {
        problem(
            "schedules.max_turns_per_minute",
            "must be at least 1".into(),
        );
    }
    if config.schedules.min_interval_secs == 0 {
        problem("schedules.min_interval_secs", "must be at least 1".into());
    }
    if config.fallback.request_timeout_secs == 0 {
        problem("fallback.request_timeout_secs", "must be at least 1".into());
    }

    cost(config, &mut problem);
    for (key, text) in config.approvals.problems("approvals") {
        problem(&key, text);
    }
    for (key, text) in config.egress.problems() {
        problem(&key, text);
    }
    for (key, text) in config.mcp.problems() {
        problem(&key, text);
    }
    let mut mcp_lists: Vec<(String, &Vec<String>)> = Vec::new();
    if let Some(list) = &config.agent.mcp {
        mcp_lists.push(("agent.mcp".into(), list));
    }
    for (id, agent) in &config.agents {
        if let Some(list) = &agent.mcp {
            mcp_lists.push((format!("agents.{id}.mcp"), list));
        }
    }
    for (key, list) in mcp_lists {
        for (i, server) in list.iter().enumerate() {
            if !config.mcp.servers.contains_key(server) {
                problem(
                    &format!("{key}[{i}]"),
                    format!("no MCP server `{server}` is configured (mcp.servers.{server})"),
                );
            }
        }
    }
    // An agent's own keys over the (valid) built-in defaults: each problem is reported once,
    // under the key that has it.
    for (id, agent) in &config.agents {
        if let Some(own) = &agent.approvals {
            let alone = crate::config::ApprovalsConfig::default().with(Some(own));
            for (key, text) in alone.problems(&format!("agents.{id}.approvals")) {
                problem(&key, text);
            }
        }
    }

    let url = &config.storage.url;
    let parsed = if url.starts_with("sqlite:") {
        let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() {
            Err("names no database file (e.g. sqlite://ferroclaw.db)".to_string())
        } else {
            url.parse::<sqlx::sqlite::SqliteConnectOptions>()
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        url.parse::<sqlx::postgres::PgConnectOptions>()
            .map(|_| ())
            .map_err(|e| e.to_string())
    } else {
        Ok(()) // the loader names the scheme
    };
    if let Err(why) = parsed {
        problem(
            "storage.url",
            format!("is not a usable database URL: {why}"),
        );
    }

    let channels = &config.channels;
    if channels.telegram.enabled
        && let Err(why) = http_url(&channels.telegram.api_url)
    {
        problem("channels.telegram.api_url", why);
    }
    if channels.discord.enabled
        && let Err(why) = http_url(&channels.discord.api_url)
    {
        problem("channels.discord.api_url", why);
    }
    for (name, hook) in &channels.webhook {
        if !hook.callback_url.is_empty()
            && let Err(why) = http_url(&hook.callback_url)
        {
            problem(&format!("channels.webhook.{name}.callback_url"), why);
        }
    }
    if !config.transcription.base_url.is_empty()
        && let Err(why) = http_url(&config.transcription.base_url)
    {
        problem("transcription.base_url", why);
    }
    if !config.server.public_url.is_empty()
        && let Err(why) = http_url(&config.server.public_url)
    {
        problem("server.public_url", why);
    }
    for (name, provider) in &config.providers {
        if let Some(base) = &provider.base_url
            && let Err(why) = http_url(base)
        {
            problem(&format!("providers.{name}.base_url"), why);
        }
    }
    found
}

/// Prices and caps: finite, not negative; price keys name a model; exempt entries a person.
fn cost(config: &Config, problem: &mut impl FnMut(&str, String)) {
    let mut amount = |key: &str, value: f64| {
        if !(value.is_finite() && value >= 0.0) {
            problem(
                key,
                format!("{value} must be a number of US dollars, 0 or more"),
            );
        }
    };
    for (model, price) in &config.prices {
        let key = |field: &str| format!("prices.\"{model}\".{field}");
        amount(&key("input_per_mtok"), price.input_per_mtok);
        amount(&key("output_per_mtok"), price.output_per_mtok);
        if let Some(p) = price.cached_input_per_mtok {
            amount(&key("cached_input_per_mtok"), p);
        }
        if let Some(p) = price.cache_write_per_mtok {
            amount(&key("cache_write_per_mtok"), p);
        }
    }
    for (name, cap) in config.budgets.caps() {
        amount(&format!("budgets.{name}"), cap);
    }
    for (id, agent) in &config.agents {
        if let Some(cap) = agent.daily_usd {
            amount(&format!("agents.{id}.daily_usd"), cap);
        }
    }
    for model in config.prices.keys() {
        let named = model
            .split_once('/')
            .is_some_and(|(provider, name)| !provider.is_empty() && !name.is_empty());
        if !named {
            problem(
                &format!("prices.\"{model}\""),
                "must name a model as `<provider>/<model>`".into(),
            );
        }
    }
    for (i, who) in config.limits.exempt.iter().enumerate() {
        if !who
            .split_once(':')
            .is_some_and(|(c, u)| !c.is_empty() && !u.is_empty())
        {
            problem(
                &format!("limits.exempt[{i}]"),
                format!("`{who}` must be `<channel>:<user id>`"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(config: &Config) -> Vec<String> {
        check(config).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn the_defaults_pass() {
        assert_eq!(check(&Config::default()), Vec::<Found>::new());
    }

    #[test]
    fn values_that_would_overflow_or_unlimit_are_named() {
        let mut config = Config::default();
        config.server.max_connections = 1 << 62;
        config.server.header_timeout_secs = 1 << 61;
        config.fallback.cooldown_secs = u64::MAX;
        config.fallback.max_concurrent_requests = 1 << 62;
        config.sandbox.cpus = f64::NAN;
        config.sandbox.pids_limit = 0;
        config.sandbox.memory_mb = 0;
        config.storage.url = "sqlite:".into();
        config.budgets.user_daily_usd = -1.0;
        config.prices.insert(
            "gpt-4o".into(),
            crate::config::PriceConfig {
                output_per_mtok: f64::INFINITY,
                ..Default::default()
            },
        );
        config.limits.exempt = vec!["alice".into()];
        let found = keys(&config);
        for key in [
            "server.max_connections",
            "server.header_timeout_secs",
            "fallback.cooldown_secs",
            "fallback.max_concurrent_requests",
            "sandbox.cpus",
            "sandbox.pids_limit",
            "sandbox.memory_mb",
            "storage.url",
            "budgets.user_daily_usd",
            "prices.\"gpt-4o\"",
            "prices.\"gpt-4o\".output_per_mtok",
            "limits.exempt[0]",
        ] {
            assert!(found.iter().any(|k| k == key), "{key} not in {found:?}");
        }
    }
}
