//! The one list of capabilities: each feature's component built from the config and the
//! services it needs, the core tools every agent can have, and the chat commands platforms
//! register. Adding a feature is its folder, one line here and its config section; the
//! engine names none of them.

use crate::component::{CommandInfo, Component};
use crate::config::Config;
use crate::outbox::OutboxNotifier;
use crate::policy::{Gate, Gates};
use crate::sandbox::Sandbox;
use crate::schedules::ScheduleHandle;
use crate::skills::SkillLibrary;
use crate::storage::Store;
use crate::teams::Teams;
use crate::tools::{
    ListFiles, MessageTool, ReadFile, SendFile, Tool, ToolRegistry, WebFetch, WriteFile,
};
use ferroclaw_channel_core::ChatCommand;
use std::sync::Arc;

/// What the features are built from (the composition root's services and registries).
pub struct Services {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub outbox: OutboxNotifier,
    /// The one address policy every fetch a message can cause goes through.
    pub egress: Arc<crate::egress::Guarded>,
    /// The leak scan (`send_file` refuses a file holding a secret).
    pub redactor: Arc<crate::redact::Redactor>,
    /// The MCP servers (their tools join the registry as they are found).
    pub mcp: Arc<crate::mcp::McpServers>,
    pub sandbox: Option<Arc<dyn Sandbox>>,
    pub skills: Arc<SkillLibrary>,
    pub teams: Arc<Teams>,
    pub schedules: ScheduleHandle,
    /// Tool calls waiting for a person (the ingress carries decisions to it).
    pub approvals: Arc<crate::approvals::Approvals>,
    /// Long-term memory (its embedder, when one is configured, holds a provider key).
    pub memory: Arc<crate::memory::Memory>,
}

/// The built features: their components, every tool (core and theirs) and the policy
/// gate their rules make.
pub struct Features {
    pub components: Vec<Arc<dyn Component>>,
    pub tools: Arc<ToolRegistry>,
    pub gate: Arc<dyn Gate>,
}

/// Build every feature once. Order is the order of their lines in `/status`.
pub fn build(services: &Services) -> Result<Features, String> {
    let store = &services.store;
    let components: Vec<Arc<dyn Component>> = vec![
        Arc::new(crate::sandbox::SandboxComponent::new(
            services.sandbox.clone(),
            &services.config,
        )),
        Arc::new(crate::schedules::SchedulesComponent::new(
            services.schedules.clone(),
            store.clone(),
        )),
        Arc::new(crate::subagents::SubagentsComponent),
        Arc::new(crate::teams::TeamsComponent::new(
            services.teams.clone(),
            store.clone(),
        )),
        Arc::new(crate::skills::SkillsComponent::new(services.skills.clone())),
        Arc::new(crate::plan::PlanComponent),
        Arc::new(crate::usage::UsageComponent::new(store.clone())),
        Arc::new(crate::approvals::ApprovalsComponent::new(
            services.approvals.clone(),
        )),
        Arc::new(crate::mcp::McpComponent::new(services.mcp.clone())),
        Arc::new(crate::memory::MemoryComponent::new(services.memory.clone())),
    ];
    // The rules around every call, in order: the first refusal wins.
    let in_process = services
        .config
        .providers
        .iter()
        .filter(|(_, p)| p.kind == crate::config::ProviderKind::Local)
        .map(|(name, _)| name.clone())
        .collect();
    let prices = Arc::new(crate::usage::Prices::new(
        services.config.prices.clone(),
        in_process,
    ));
    // Approvals first: a call that waits for a person and is denied costs nothing.
    let gate: Arc<dyn Gate> = Arc::new(Gates::new(vec![
        Arc::new(crate::approvals::ApprovalGate::new(
            services.approvals.clone(),
        )),
        Arc::new(crate::usage::CostGate::new(
            services.config.clone(),
            store.clone(),
            store.clone(),
            prices,
        )),
    ]));
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(ListFiles),
        Arc::new(WebFetch::new(services.egress.clone())),
        Arc::new(MessageTool::new(store.clone(), services.outbox.clone())),
        Arc::new(SendFile::new(
            store.clone(),
            services.outbox.clone(),
            services.redactor.clone(),
        )),
    ];
    for component in &components {
        tools.extend(component.tools());
    }
    let tools = ToolRegistry::new(tools);
    tools.check_unique()?;
    let tools = if services.mcp.is_empty() {
        tools
    } else {
        tools.with_source(services.mcp.clone())
    };
    Ok(Features {
        components,
        tools: Arc::new(tools),
        gate,
    })
}

/// The features' chat commands, in `/help` order (known before anything is built: the
/// platforms register them when their channels are built).
pub fn feature_commands() -> impl Iterator<Item = &'static CommandInfo> {
    [
        crate::subagents::COMMANDS,
        crate::teams::COMMANDS,
        crate::schedules::COMMANDS,
        crate::usage::COMMANDS,
        crate::approvals::COMMANDS,
        crate::memory::COMMANDS,
    ]
    .into_iter()
    .flatten()
}

/// Every command platforms register: the core ones, the features', `/help`.
pub fn chat_commands() -> Vec<ChatCommand> {
    crate::commands::registered(feature_commands())
        .into_iter()
        .map(|c| c.command)
        .collect()
}
