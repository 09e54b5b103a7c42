//! Loading: file → environment overlay → typed tree → validation → resolved secrets.

use super::schema::{Config, TelegramMode};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// One configuration problem, always naming the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Everything wrong with a configuration, one [`Problem`] per line.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "config error: {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Secrets read from the environment variables that `*_env` keys name.
#[derive(Default)]
pub struct Secrets {
    /// Provider name → its API keys that are set, in configured order (empty: none
    /// configured, the provider is called without one, or none set: it is unusable).
    pub provider_keys: BTreeMap<String, Vec<SecretString>>,
    /// Key variables of providers that are not set (for `config show`).
    pub unset_key_vars: std::collections::BTreeSet<String>,
    /// Channel secrets by the config key naming their variable
    /// (`channels.telegram.token_env`, `channels.webhook.NAME.secret_env`).
    pub channels: BTreeMap<String, SecretString>,
    pub admin_token: Option<SecretString>,
    /// The transcription service's key (`transcription.api_key_env`).
    pub transcription_key: Option<SecretString>,
    /// The alert webhook's signing secret (`alerts.webhook_secret_env`).
    pub alerts_webhook: Option<SecretString>,
    /// The OpenAI-compatible endpoint's bearer token (`api.token_env`); None: not served.
    pub api_token: Option<SecretString>,
    /// MCP servers' secrets by the key naming their variable
    /// (`mcp.servers.ID.secret_env.NAME`, `mcp.servers.ID.headers_env.Header`).
    pub mcp: BTreeMap<String, SecretString>,
    /// Every value read, by the variable that held it (the leak scanner's list: a redaction
    /// names the variable, never the value).
    pub by_variable: BTreeMap<String, SecretString>,
}

impl Secrets {
    /// Every secret value that is set (to keep them out of what is shown or sent): each
    /// value read, whichever key named its variable.
    pub fn all(&self) -> Vec<SecretString> {
        self.by_variable.values().cloned().collect()
    }

    /// The secret named by config key `key` (see `ChannelsConfig::secret_refs`).
    pub fn channel(&self, key: &str) -> Option<SecretString> {
        self.channels.get(key).cloned()
    }
}

/// A validated configuration with its secrets resolved.
pub struct LoadedConfig {
    pub config: Config,
    pub secrets: Secrets,
    /// The file the configuration came from (None: built-in defaults).
    pub source: Option<PathBuf>,
    /// Provider names whose key variable is unset; they are skipped at startup.
    pub unusable_providers: Vec<String>,
    /// Non-fatal remarks for the operator (one line each).
    pub warnings: Vec<String>,
}

/// What the configuration is checked against that is not its own: the names of the tools
/// the service builds and the time zones it can use (the composition root passes them,
/// `app::known`; config knows no tool and no time zone database).
#[derive(Debug, Clone)]
pub struct Known {
    /// Every tool an agent's `tools` allowlist may name (None: checked later, against the
    /// tools the service builds).
    pub tools: Option<Vec<String>>,
    /// Whether a name is a time zone the scheduler can use.
    pub time_zone: fn(&str) -> bool,
}

/// Load the configuration. `explicit` is true when the user named the file with `-c`; a
/// missing default `./config.toml` means built-in defaults, a missing named file is an error.
pub fn load(path: &Path, explicit: bool, known: &Known) -> Result<LoadedConfig, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    load_with(path, explicit, &env, known)
}

/// [`load`] with an injectable environment (the overlay always reads the process env).
pub fn load_with(
    path: &Path,
    explicit: bool,
    env: &dyn Fn(&str) -> Option<String>,
    known: &Known,
) -> Result<LoadedConfig, ConfigError> {
    let mut figment = Figment::new();
    let source = if path.exists() {
        if let Err(err) = std::fs::read_to_string(path) {
            return Err(single(
                "-c",
                format!("cannot read {}: {err}", path.display()),
            ));
        }
        figment = figment.merge(Toml::file_exact(path));
        Some(path.to_path_buf())
    } else if explicit {
        return Err(single("-c", format!("{} does not exist", path.display())));
    } else {
        None
    };
    figment = figment.merge(Env::prefixed("FERROCLAW__").split("__"));

    // The layers merged into one plain tree first, then the typed tree read from that: read
    // through figment's own deserializer, every configuration type cost ~1 MB of code
    // (each struct's visitor instantiated with figment's path-tracking and "magic" value
    // handling); read from a JSON tree, a tenth of that. Where a problem came from (the file
    // or a variable) is still figment's to say.
    let tree: serde_json::Value = figment.extract().map_err(|err| ConfigError {
        problems: err.into_iter().map(figment_problem).collect(),
    })?;
    let mut config: Config = serde_path_to_error::deserialize(tree).map_err(|err| ConfigError {
        problems: vec![typed_problem(&figment, err)],
    })?;
    // The embedded local model is always there (a `[providers.local]` of one's own wins).
    config
        .providers
        .entry("local".into())
        .or_insert_with(crate::config::schema::ProviderConfig::builtin_local);

    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let secrets = validate(&config, env, known, &mut problems, &mut warnings);
    if !problems.is_empty() {
        return Err(ConfigError { problems });
    }
    let unusable_providers = secrets
        .provider_keys
        .iter()
        .filter(|(name, keys)| keys.is_empty() && !config.providers[*name].key_vars().is_empty())
        .map(|(name, _)| name.clone())
        .collect();
    Ok(LoadedConfig {
        config,
        secrets,
        source,
        unusable_providers,
        warnings,
    })
}

fn single(key: &str, message: String) -> ConfigError {
    ConfigError {
        problems: vec![Problem {
            key: key.into(),
            message,
        }],
    }
}

/// A value of the merged tree that does not fit the typed tree: named by its key, with the
/// layer it came from (figment keeps which layer gave each key).
fn typed_problem(figment: &Figment, err: serde_path_to_error::Error<serde_json::Error>) -> Problem {
    let mut path: Vec<String> = err
        .path()
        .iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
            _ => None,
        })
        .collect();
    let text = err.into_inner().to_string();
    // serde's own wording for the two a user most often meets; the rest as serde says it.
    let quoted = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    let message = if let Some(field) = quoted("unknown field `") {
        if path.last() != Some(&field) {
            path.push(field);
        }
        "unknown key".to_string()
    } else if let Some(field) = quoted("missing field `") {
        path.push(field);
        "missing required key".to_string()
    } else {
        text
    };
    // The key's own layer, else the nearest enclosing key's (a missing key has none).
    let layer = (1..=path.len())
        .rev()
        .find_map(|n| figment.find_metadata(&path[..n].join(".")));
    problem_at(&path, message, layer)
}

/// What figment could not merge (a file that is not TOML, a variable that does not parse).
fn figment_problem(err: figment::Error) -> Problem {
    problem_at(&err.path, err.kind.to_string(), err.metadata.as_ref())
}

fn problem_at(path: &[String], message: String, layer: Option<&figment::Metadata>) -> Problem {
    let key = if path.is_empty() {
        "<root>".into()
    } else {
        path.join(".")
    };
    let origin = layer
        .map(|m| format!(" (from {})", m.name))
        .unwrap_or_default();
    Problem {
        key,
        message: format!("{message}{origin}"),
    }
}

/// Agents' `tools` allowlists against the names of the tools the service registers: a
/// name no tool has is a problem naming the key (`config check` and `serve` alike).
pub fn check_agent_tools(config: &Config, names: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    // An MCP server's tools are known once it answers: `<server>__<tool>` names pass here.
    let from_mcp = |tool: &str| {
        tool.split_once("__")
            .is_some_and(|(server, _)| config.mcp.servers.contains_key(server))
    };
    for (id, agent) in &config.agents {
        for (i, tool) in agent.tools.iter().flatten().enumerate() {
            if !names.contains(tool) && !from_mcp(tool) {
                problems.push(Problem {
                    key: format!("agents.{id}.tools[{i}]"),
                    message: format!("unknown tool `{tool}` (tools: {})", names.join(", ")),
                });
            }
        }
    }
    problems
}

fn validate(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    known: &Known,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<String>,
) -> Secrets {
    let mut problem = |key: &str, message: String| {
        problems.push(Problem {
            key: key.into(),
            message,
        })
    };
    let read = std::cell::RefCell::new(BTreeMap::new());
    let secret = |name: &str| {
        let value = env(name).filter(|v| !v.is_empty()).map(SecretString::from);
        if let Some(value) = &value {
            read.borrow_mut().insert(name.to_string(), value.clone());
        }
        value
    };

    if config
        .server
        .listen
        .parse::<std::net::SocketAddr>()
        .is_err()
    {
        problem(
            "server.listen",
            format!(
                "`{}` is not an address like 127.0.0.1:8787",
                config.server.listen
            ),
        );
    }
    if config.server.max_connections == 0 {
        problem("server.max_connections", "must be at least 1".into());
    }
    if config.server.header_timeout_secs == 0 {
        problem("server.header_timeout_secs", "must be at least 1".into());
    }
    if config.server.max_body_bytes == 0 {
        problem("server.max_body_bytes", "must be greater than 0".into());
    }
    let url = &config.storage.url;
    if !(url.starts_with("sqlite:")
        || url.starts_with("postgres://")
        || url.starts_with("postgresql://"))
    {
        problem(
            "storage.url",
            "must start with sqlite:, postgres:// or postgresql://".into(),
        );
    }

    for (key, message) in config.alerts.problems() {
        problem(&key, message);
    }
    if config.alerts.channel_down_secs == 0 {
        problem("alerts.channel_down_secs", "must be at least 1".into());
    }
    let mut check_model = |key: &str, model: &str| match model.split_once('/') {
        Some((provider, id)) if !id.is_empty() => {
            if !config.providers.contains_key(provider) {
                problem(
                    key,
                    format!(
                        "unknown provider `{provider}` (configured: {})",
                        provider_list(config)
                    ),
                );
            }
        }
        _ => problem(
            key,
            format!("`{model}` is not of the form <provider>/<model id>"),
        ),
    };
    check_model("agent.model", &config.agent.model);
    for (i, model) in config.agent.fallbacks.iter().enumerate() {
        check_model(&format!("agent.fallbacks[{i}]"), model);
    }
    if !config.media.vision_model.is_empty() {
        check_model("media.vision_model", &config.media.vision_model);
    }
    if !config.memory.embedding_model.is_empty() {
        check_model("memory.embedding_model", &config.memory.embedding_model);
    }
    for (id, agent) in &config.agents {
        if let Some(model) = &agent.model {
            check_model(&format!("agents.{id}.model"), model);
        }
        for (i, model) in agent.fallbacks.iter().flatten().enumerate() {
            check_model(&format!("agents.{id}.fallbacks[{i}]"), model);
        }
    }
    for (id, agent) in &config.agents {
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            problem(
                &format!("agents.{id}"),
                "agent ids may hold only letters, digits, '-' and '_'".into(),
            );
        }
        for (i, link) in agent.may_delegate.iter().enumerate() {
            if !known_agent(config, link) {
                problem(
                    &format!("agents.{id}.may_delegate[{i}]"),
                    format!("unknown agent `{link}` ({})", agent_list(config)),
                );
            }
        }
    }
    if let Some(tools) = &known.tools {
        for p in check_agent_tools(config, tools) {
            problem(&p.key, p.message);
        }
    }
    for (id, team) in &config.teams {
        if !known_agent(config, &team.lead) {
            problem(
                &format!("teams.{id}.lead"),
                format!("unknown agent `{}` ({})", team.lead, agent_list(config)),
            );
        }
        for (i, member) in team.members.iter().enumerate() {
            if !known_agent(config, member) {
                problem(
                    &format!("teams.{id}.members[{i}]"),
                    format!("unknown agent `{member}` ({})", agent_list(config)),
                );
            }
        }
    }
    if !(known.time_zone)(&config.schedules.timezone) {
        problem(
            "schedules.timezone",
            format!("`{}` is not an IANA time zone", config.schedules.timezone),
        );
    }
    for (user, zone) in &config.schedules.user_timezones {
        if !(known.time_zone)(zone) {
            problem(
                &format!("schedules.user_timezones.\"{user}\""),
                format!("`{zone}` is not an IANA time zone"),
            );
        }
    }
    if config.api.agents.is_empty() {
        problem("api.agents", "list at least one agent to serve".into());
    }
    for (i, agent) in config.api.agents.iter().enumerate() {
        if !known_agent(config, agent) {
            problem(
                &format!("api.agents[{i}]"),
                format!("unknown agent `{agent}` ({})", agent_list(config)),
            );
        }
    }
    let channels = channel_names(config);
    for (i, binding) in config.bindings.iter().enumerate() {
        if !known_agent(config, &binding.agent) {
            problem(
                &format!("bindings[{i}].agent"),
                format!("unknown agent `{}` ({})", binding.agent, agent_list(config)),
            );
        }
        if let Some(channel) = &binding.channel
            && !channels.contains(channel)
        {
            problem(
                &format!("bindings[{i}].channel"),
                format!(
                    "unknown or disabled channel `{channel}` (channels: {})",
                    channels.join(", ")
                ),
            );
        }
        if binding.channel.is_none() && binding.chat.is_none() && binding.thread.is_none() {
            problem(
                &format!("bindings[{i}]"),
                "give at least one of channel, chat, thread".into(),
            );
        }
    }
    if config.agent.max_iterations == 0 {
        problem("agent.max_iterations", "must be at least 1".into());
    }
    if config.agent.max_context_tokens < 1000 {
        problem("agent.max_context_tokens", "must be at least 1000".into());
    }
    if config.subagents.max_concurrent == 0 {
        problem("subagents.max_concurrent", "must be at least 1".into());
    }
    if !(1..=600).contains(&config.channels.telegram.poll_timeout_secs) {
        problem(
            "channels.telegram.poll_timeout_secs",
            "must be between 1 and 600".into(),
        );
    }
    if !(2..=600).contains(&config.storage.lease_secs) {
        problem("storage.lease_secs", "must be between 2 and 600".into());
    }
    for (key, message) in super::bounds::check(config) {
        problem(&key, message);
    }

    for (name, provider) in &config.providers {
        if let Some(path) = &provider.model_path
            && !std::path::Path::new(path).is_file()
        {
            problem(
                &format!("providers.{name}.model_path"),
                format!("no model file at {path}"),
            );
        }
    }

    let mut secrets = Secrets::default();
    for (name, provider) in &config.providers {
        let vars = provider.key_vars();
        let mut keys: Vec<SecretString> = Vec::new();
        let mut missing: Vec<&str> = Vec::new();
        for var in &vars {
            match secret(var) {
                Some(key) => keys.push(key),
                None => missing.push(var),
            }
        }
        if !vars.is_empty() && keys.is_empty() {
            let key = if provider.api_key_env.is_some() {
                "api_key_env"
            } else {
                "api_key_envs"
            };
            warnings.push(format!(
                "provider `{name}` skipped: environment variable {} (providers.{name}.{key}) is not set",
                missing.join(", ")
            ));
        } else if !missing.is_empty() {
            warnings.push(format!(
                "provider `{name}`: key variable {} is not set; using the other {} key(s)",
                missing.join(", "),
                keys.len()
            ));
        }
        secrets
            .unset_key_vars
            .extend(missing.iter().map(|v| v.to_string()));
        secrets.provider_keys.insert(name.clone(), keys);
    }

    // The secrets the enabled channels need; a problem naming the key when one is missing.
    for needed in config.channels.secret_refs() {
        match secret(&needed.var) {
            Some(value) => {
                secrets.channels.insert(needed.key, value);
            }
            None => problem(
                &needed.key,
                format!("environment variable {} is not set", needed.var),
            ),
        }
    }
    let telegram = &config.channels.telegram;
    if telegram.enabled
        && telegram.mode == TelegramMode::Webhook
        && config.server.public_url.is_empty()
    {
        problem(
            "server.public_url",
            "must be set when channels.telegram.mode = \"webhook\"".into(),
        );
    }
    for (name, hook) in &config.channels.webhook {
        if hook.signature == ferroclaw_channel_webhook::SignatureScheme::Standard
            && let Some(value) = secret(&hook.secret_env)
            && let Err(why) = ferroclaw_channel_webhook::standard::key_of(
                secrecy::ExposeSecret::expose_secret(&value),
            )
        {
            problem(&format!("channels.webhook.{name}.secret_env"), why.into());
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            problem(
                &format!("channels.webhook.{name}"),
                "webhook names may hold only letters, digits, '-' and '_'".into(),
            );
        }
    }
    if !config.server.admin_token_env.is_empty() {
        secrets.admin_token = secret(&config.server.admin_token_env);
    }
    if !config.api.token_env.is_empty() {
        secrets.api_token = secret(&config.api.token_env);
    }
    if !config.transcription.api_key_env.is_empty() {
        secrets.transcription_key = secret(&config.transcription.api_key_env);
    }
    if !config.alerts.webhook_secret_env.is_empty() {
        secrets.alerts_webhook = secret(&config.alerts.webhook_secret_env);
        if secrets.alerts_webhook.is_none() {
            problem(
                "alerts.webhook_secret_env",
                format!(
                    "environment variable {} is not set",
                    config.alerts.webhook_secret_env
                ),
            );
        }
    }
    for (key, var) in config.mcp.secret_vars() {
        match secret(&var) {
            Some(value) => {
                secrets.mcp.insert(key, value);
            }
            None => problem(&key, format!("environment variable {var} is not set")),
        }
    }
    secrets.by_variable = read.into_inner();
    secrets
}

fn known_agent(config: &Config, id: &str) -> bool {
    id == super::MAIN_AGENT || config.agents.contains_key(id)
}

fn agent_list(config: &Config) -> String {
    let mut ids = vec![super::MAIN_AGENT];
    ids.extend(
        config
            .agents
            .keys()
            .map(String::as_str)
            .filter(|id| *id != super::MAIN_AGENT),
    );
    format!("agents: {}", ids.join(", "))
}

/// The channel instance names messages can come from with this config.
fn channel_names(config: &Config) -> Vec<String> {
    let mut names = vec!["cli".to_string(), "api".to_string()];
    if config.channels.telegram.enabled {
        names.push("telegram".into());
    }
    if config.channels.discord.enabled {
        names.push("discord".into());
    }
    if config.channels.slack.enabled {
        names.push("slack".into());
    }
    names.extend(
        config
            .channels
            .webhook
            .keys()
            .map(|n| format!("webhook:{n}")),
    );
    names
}

fn provider_list(config: &Config) -> String {
    let names: Vec<&str> = config.providers.keys().map(String::as_str).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
