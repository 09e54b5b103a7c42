//! The shape of `config.toml`, with every default. Unknown keys are rejected.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a plan is carried out (`agent.plan_mode`, or `/plan --steps` / `/plan --tracker`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanMode {
    /// One tool loop with the Active Plan in every system prompt.
    #[default]
    Tracker,
    /// Each step its own bounded loop with a fresh context (`crate::engine` `steps.rs`).
    Steps,
}

/// The id of the default agent, the `[agent]` section.
pub const MAIN_AGENT: &str = "main";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub agent: AgentConfig,
    #[serde(default = "default_providers")]
    pub providers: BTreeMap<String, ProviderConfig>,
    pub fallback: FallbackConfig,
    pub subagents: SubagentsConfig,
    pub sandbox: SandboxConfig,
    pub tools: ToolsConfig,
    pub channels: ChannelsConfig,
    pub api: ApiConfig,
    /// `[agents.ID]`: more agents beside `main` (whose defaults are `[agent]`).
    pub agents: BTreeMap<String, AgentDef>,
    /// `[[bindings]]`: which agent answers which channel, chat or thread.
    pub bindings: Vec<Binding>,
    pub skills: SkillsConfig,
    /// `[teams.ID]`: agents sharing a task board and an inbox.
    pub teams: BTreeMap<String, TeamConfig>,
    pub schedules: SchedulesConfig,
    pub media: MediaConfig,
    pub transcription: TranscriptionConfig,
    /// `[prices."<provider>/<model>"]`: what a model's tokens cost.
    pub prices: BTreeMap<String, super::cost::PriceConfig>,
    pub budgets: super::cost::BudgetsConfig,
    pub limits: super::cost::LimitsConfig,
    pub approvals: super::approvals::ApprovalsConfig,
    pub egress: super::egress::EgressConfig,
    pub mcp: super::mcp::McpConfig,
    pub memory: super::memory::MemoryConfig,
    pub alerts: super::alerts::AlertsConfig,
}

/// `[media]`: files that come with messages.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// The largest file taken (bytes).
    pub max_file_bytes: u64,
    /// The most bytes of files one message may bring.
    pub max_message_bytes: u64,
    /// MIME type prefixes taken (`image/`, `application/pdf`); empty: every type.
    pub allowed_types: Vec<String>,
    /// `<provider>/<model>` that describes images for a model that cannot see (empty: none;
    /// the model is then told an image arrived and where it is).
    pub vision_model: String,
    /// Characters of a document's text the model is given.
    pub max_excerpt_chars: usize,
    /// How long extracting a PDF's text may take (the reader is killed then).
    pub pdf_timeout_secs: u64,
    /// The address space the PDF reader's process may use (MB).
    pub pdf_memory_mb: u64,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            max_file_bytes: 20 * 1024 * 1024,
            max_message_bytes: 40 * 1024 * 1024,
            allowed_types: Vec::new(),
            vision_model: String::new(),
            max_excerpt_chars: 4_000,
            pdf_timeout_secs: 10,
            pdf_memory_mb: 512,
        }
    }
}

/// `[transcription]`: voice notes and audio to text through an OpenAI-compatible
/// `/audio/transcriptions` endpoint (OpenAI, Groq, a local whisper.cpp server).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranscriptionConfig {
    /// Empty: no transcription (a voice note is answered with a line saying so).
    pub base_url: String,
    pub api_key_env: String,
    pub model: String,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        TranscriptionConfig {
            base_url: String::new(),
            api_key_env: String::new(),
            model: "whisper-1".into(),
        }
    }
}

/// `[schedules]`: reminders and recurring jobs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulesConfig {
    /// The default time zone (IANA name).
    pub timezone: String,
    /// Per-user zones: `"<channel>:<user id>" = "<zone>"`.
    pub user_timezones: BTreeMap<String, String>,
    /// Active jobs one session may have.
    pub max_per_session: u32,
    /// Jobs one turn started by a job may create.
    pub max_per_job_turn: u32,
    /// How many job turns in a row may lead to a new job (a job that schedules itself
    /// forever stops here).
    pub max_chain: u32,
    /// A run found later than this was missed (the service was down): `missed` decides.
    pub missed_after_secs: u64,
    /// The shortest time between two runs of a recurring job.
    pub min_interval_secs: u64,
    /// Job turns this process starts per minute, all jobs together; runs beyond are skipped.
    pub max_turns_per_minute: u32,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            timezone: "UTC".into(),
            user_timezones: BTreeMap::new(),
            max_per_session: 20,
            max_per_job_turn: 1,
            max_chain: 3,
            missed_after_secs: 60,
            min_interval_secs: 60,
            max_turns_per_minute: 30,
        }
    }
}

/// `[teams.ID]`: a lead and its members (agent ids; the lead is a member too).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamConfig {
    pub lead: String,
    #[serde(default)]
    pub members: Vec<String>,
}

/// `[agents.ID]`: one configured agent. Unset keys take `[agent]`'s value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentDef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Tool allowlist (unset: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Skill filter by name (unset: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// MCP servers whose tools it is offered (unset: `[agent]`'s, else every server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<String>>,
    /// Agent ids this agent may spawn or delegate to (itself always).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub may_delegate: Vec<String>,
    /// This agent's daily spending cap in USD (overrides `budgets.agent_daily_usd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<f64>,
    /// This agent's approval rules (unset keys: `[approvals]`'s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<super::approvals::ApprovalsOverride>,
}

/// `[[bindings]]`: messages matching every given key go to `agent`; the most specific
/// binding wins (thread over chat over channel).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub agent: String,
    /// Channel instance name (`telegram`, `discord`, `webhook:NAME`, `cli`, `api`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

/// `[skills]`: the shared skills folder (each agent's workspace `skills/` adds its own).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsConfig {
    pub dir: String,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        SkillsConfig {
            dir: "./skills".into(),
        }
    }
}

/// `[api]`: the OpenAI-compatible endpoint (served only when the token variable is set).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// The variable holding the bearer token of `/v1/chat/completions` and `/v1/models`.
    pub token_env: String,
    /// The agents the endpoint serves (`ferroclaw:<id>`; the first is `ferroclaw`). An agent
    /// bound to one chat only is not served unless it is listed here.
    pub agents: Vec<String>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            token_env: "FERROCLAW_API_TOKEN".into(),
            agents: vec![MAIN_AGENT.to_string()],
        }
    }
}

impl Config {
    /// The model ids at `provider` that some agent's model or fallbacks name
    /// (`<provider>/<id>`), `[agent]`'s first.
    pub fn model_ids_at(&self, provider: &str) -> Vec<&str> {
        let prefix = format!("{provider}/");
        let agents = self.agents.values();
        std::iter::once(&self.agent.model)
            .chain(&self.agent.fallbacks)
            .chain(agents.clone().filter_map(|a| a.model.as_ref()))
            .chain(agents.flat_map(|a| a.fallbacks.iter().flatten()))
            .filter_map(|m| m.strip_prefix(&prefix))
            .collect()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            agent: AgentConfig::default(),
            providers: default_providers(),
            fallback: FallbackConfig::default(),
            subagents: SubagentsConfig::default(),
            sandbox: SandboxConfig::default(),
            tools: ToolsConfig::default(),
            channels: ChannelsConfig::default(),
            api: ApiConfig::default(),
            agents: BTreeMap::new(),
            bindings: Vec::new(),
            skills: SkillsConfig::default(),
            teams: BTreeMap::new(),
            schedules: SchedulesConfig::default(),
            media: MediaConfig::default(),
            transcription: TranscriptionConfig::default(),
            prices: BTreeMap::new(),
            budgets: Default::default(),
            limits: Default::default(),
            approvals: Default::default(),
            egress: Default::default(),
            mcp: Default::default(),
            memory: Default::default(),
            alerts: Default::default(),
        }
    }
}

fn default_providers() -> BTreeMap<String, ProviderConfig> {
    let mut providers = BTreeMap::new();
    providers.insert(
        "openai".to_string(),
        ProviderConfig {
            kind: ProviderKind::Openai,
            base_url: Some("https://api.openai.com/v1".into()),
            api_key_env: Some("OPENAI_API_KEY".into()),
            ..ProviderConfig::builtin_local()
        },
    );
    providers.insert(
        "anthropic".to_string(),
        ProviderConfig {
            kind: ProviderKind::Anthropic,
            base_url: Some("https://api.anthropic.com".into()),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
            ..ProviderConfig::builtin_local()
        },
    );
    providers
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub public_url: String,
    pub admin_token_env: String,
    pub shutdown_grace_secs: u64,
    pub max_body_bytes: usize,
    /// Client connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time a client has to send a request header, and the longest pause in a body.
    pub header_timeout_secs: u64,
    /// Serve on a non-loopback address with no admin token (the admin API then does not
    /// exist, but nothing else guards the service): only when the operator says so.
    pub allow_public_unauthenticated: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8787".into(),
            public_url: String::new(),
            admin_token_env: "FERROCLAW_ADMIN_TOKEN".into(),
            shutdown_grace_secs: 20,
            max_body_bytes: 262_144,
            max_connections: 1024,
            header_timeout_secs: 10,
            allow_public_unauthenticated: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub url: String,
    /// PostgreSQL shared by several processes: how long a session's lease lasts without
    /// renewal (a dead process's sessions are taken over after this).
    pub lease_secs: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            url: "sqlite://ferroclaw.db".into(),
            lease_secs: 10,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    pub system_prompt: String,
    pub model: String,
    pub fallbacks: Vec<String>,
    pub max_iterations: u32,
    pub max_context_tokens: u32,
    pub workspace: String,
    pub max_input_chars: usize,
    /// How `/plan` carries out a plan: `tracker` or `steps`.
    pub plan_mode: PlanMode,
    /// `steps` plans: model calls one step may make.
    pub max_step_iterations: u32,
    /// MCP servers whose tools it is offered (unset: every server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<String>>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            system_prompt: "You are a helpful assistant.".into(),
            model: "openai/gpt-4.1-mini".into(),
            // The chain ends with the embedded local model: with no API key set, it answers.
            fallbacks: vec!["local/smollm2-135m".into()],
            max_iterations: 24,
            max_context_tokens: 100_000,
            workspace: "./workspace".into(),
            max_input_chars: 32_000,
            plan_mode: PlanMode::Tracker,
            max_step_iterations: 8,
            mcp: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Openai,
    Anthropic,
    /// A GGUF model run in-process (`model_path`, or a known model by id from the cache).
    Local,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    #[serde(default = "default_provider_kind")]
    pub kind: ProviderKind,
    /// Defaults by kind: OpenAI's or Anthropic's public endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The variable holding the API key. Unset: the provider is called without a key
    /// (Ollama, llama.cpp, vLLM on loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// More keys of the same provider (auth profiles): a rate-limited, exhausted or refused
    /// key cools down and the next is used; a session sticks to a healthy key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_key_envs: Vec<String>,
    /// `kind = "local"`: the GGUF file (unset: the model id names a known model, fetched
    /// into the cache on first use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// `kind = "local"`: CPU threads (default: half the cores, at most 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// `kind = "local"`: the context window in tokens (default 2048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    /// `kind = "local"`: a fixed sampling seed, so the same prompt gets the same answer
    /// (reproducible runs, tests); unset, every answer draws a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    /// Its models see images (image parts are sent to them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vision: bool,
    /// HTTP/2 to it: concurrent calls are streams on a few connections (another opened per
    /// 100 calls, `http::STREAMS_PER_CONNECTION`) instead of a connection each. Unset: over
    /// `https` HTTP/2 where the server offers it by ALPN (every hosted provider does), over
    /// plain `http` HTTP/1.1. `true`: HTTP/2 always (over plain `http` the server must take
    /// it directly, h2c). `false`: HTTP/1.1 always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<bool>,
}

impl ProviderConfig {
    /// The built-in `local` provider: known models from the cache.
    pub fn builtin_local() -> Self {
        ProviderConfig {
            kind: ProviderKind::Local,
            base_url: None,
            api_key_env: None,
            api_key_envs: Vec::new(),
            model_path: None,
            threads: None,
            context_tokens: None,
            seed: None,
            vision: false,
            http2: None,
        }
    }
}

fn default_provider_kind() -> ProviderKind {
    ProviderKind::Openai
}

impl ProviderConfig {
    /// Every variable naming a key of this provider, `api_key_env` first.
    pub fn key_vars(&self) -> Vec<&str> {
        self.api_key_env
            .iter()
            .chain(&self.api_key_envs)
            .map(String::as_str)
            .collect()
    }

    pub fn base_url(&self) -> &str {
        match (&self.base_url, self.kind) {
            (Some(url), _) => url,
            (None, ProviderKind::Openai) => "https://api.openai.com/v1",
            (None, ProviderKind::Anthropic) => "https://api.anthropic.com",
            (None, ProviderKind::Local) => "",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FallbackConfig {
    pub retries_per_model: u32,
    pub cooldown_secs: u64,
    pub request_timeout_secs: u64,
    /// Model calls in flight at once, all sessions and subagents together (0: no limit).
    pub max_concurrent_requests: usize,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            retries_per_model: 2,
            cooldown_secs: 60,
            request_timeout_secs: 120,
            max_concurrent_requests: 32,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentsConfig {
    pub max_depth: u32,
    pub max_children: u32,
    pub max_concurrent: u32,
    /// Subagents one turn may spawn.
    pub max_spawns_per_turn: u32,
    /// Turns started by subagent outcomes, in a row, before the user writes again.
    pub max_chained_turns: u32,
    pub run_timeout_secs: u64,
    /// Runs before every spawn and hears spawned/ended events: an http(s) URL (POSTed JSON)
    /// or a command (JSON on stdin). Empty: no hook.
    pub hook: String,
    /// A hook that does not answer within this refuses the spawn.
    pub hook_timeout_secs: u64,
    /// Models (`<provider>/<model>`) a spawn may choose besides the agent's own model and
    /// fallbacks and the parent's current model (empty: only those).
    pub models: Vec<String>,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            max_depth: 3,
            max_children: 5,
            max_concurrent: 8,
            max_spawns_per_turn: 8,
            max_chained_turns: 10,
            run_timeout_secs: 600,
            hook: String::new(),
            hook_timeout_secs: 5,
            models: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub enabled: bool,
    pub image: String,
    pub network: String,
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids_limit: i64,
    pub timeout_secs: u64,
    pub docker_host: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: false,
            image: "debian:bookworm-slim".into(),
            network: "none".into(),
            memory_mb: 512,
            cpus: 1.0,
            pids_limit: 100,
            timeout_secs: 600,
            docker_host: String::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    pub host_exec: bool,
    pub web_fetch_allow_private: bool,
    /// How long one tool call may run before it is stopped (its result says so).
    pub timeout_secs: u64,
    /// An explicit proxy for `web_fetch` (the system proxy variables are never used).
    pub web_fetch_proxy: String,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            host_exec: false,
            web_fetch_allow_private: false,
            timeout_secs: 120,
            web_fetch_proxy: String::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelsConfig {
    pub telegram: TelegramConfig,
    pub discord: DiscordConfig,
    pub slack: SlackConfig,
    pub webhook: BTreeMap<String, WebhookConfig>,
}

/// A secret an enabled channel needs: the config key naming its variable, and the variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub key: String,
    pub var: String,
}

impl ChannelsConfig {
    /// The config key naming the Telegram token's variable (where its secret is kept).
    pub const TELEGRAM_TOKEN: &'static str = "channels.telegram.token_env";
    /// The config key naming the Discord token's variable.
    pub const DISCORD_TOKEN: &'static str = "channels.discord.token_env";
    /// The config keys naming Slack's bot token, app-level token and signing secret.
    pub const SLACK_BOT_TOKEN: &'static str = "channels.slack.bot_token_env";
    pub const SLACK_APP_TOKEN: &'static str = "channels.slack.app_token_env";
    pub const SLACK_SIGNING_SECRET: &'static str = "channels.slack.signing_secret_env";

    /// The config key naming webhook `name`'s secret variable.
    pub fn webhook_secret(name: &str) -> String {
        format!("channels.webhook.{name}.secret_env")
    }

    /// Every secret the enabled channels need (the one place a channel lists its secrets).
    pub fn secret_refs(&self) -> Vec<SecretRef> {
        let mut refs = Vec::new();
        let mut need = |key: String, var: &str| {
            refs.push(SecretRef {
                key,
                var: var.to_string(),
            })
        };
        if self.telegram.enabled {
            need(Self::TELEGRAM_TOKEN.into(), &self.telegram.token_env);
        }
        if self.discord.enabled {
            need(Self::DISCORD_TOKEN.into(), &self.discord.token_env);
        }
        if self.slack.enabled {
            need(Self::SLACK_BOT_TOKEN.into(), &self.slack.bot_token_env);
            match self.slack.mode {
                SlackMode::Socket => need(Self::SLACK_APP_TOKEN.into(), &self.slack.app_token_env),
                SlackMode::Events => need(
                    Self::SLACK_SIGNING_SECRET.into(),
                    &self.slack.signing_secret_env,
                ),
            }
        }
        for (name, hook) in &self.webhook {
            need(Self::webhook_secret(name), &hook.secret_env);
        }
        refs
    }
}

pub use ferroclaw_channel_core::AccessMode;

pub use ferroclaw_channel_telegram::{Config as TelegramConfig, ModeConfig as TelegramMode};

pub use ferroclaw_channel_discord::Config as DiscordConfig;
pub use ferroclaw_channel_slack::{Config as SlackConfig, Mode as SlackMode};
pub use ferroclaw_channel_webhook::EndpointConfig as WebhookConfig;
