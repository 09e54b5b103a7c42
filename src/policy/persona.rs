//! Who a turn runs as, resolved in one place for a person's turn and for a subagent alike:
//! the agent, its prompt, model, the tools it is offered, where its `exec` runs, and how
//! deep it is.
//!
//! Owns the rules of the offer (an agent's `tools` allowlist, less what each tool says the
//! persona cannot use: `Tool::offered`) and of a spawn's choices (which agent, which model,
//! which tools a child may have). Knows agents, the registered tools, the sandbox contract
//! (`crate::exec`) and team membership (through [`Teammates`]); names no tool and no
//! feature; not the tool loop, not storage, not the subagent registry.

use crate::agents::{AgentProfile, Agents};
use crate::config::Config;
use crate::exec::{Availability, ExecPlace, Sandbox};
use crate::providers::{FallbackChain, ModelRef};
use crate::spawn::{SpawnRequest, SpawnScope, Spawner, StepObserver};
use crate::tools::{Offer, ToolRegistry};
use ferroclaw_channel_core::ChatRoute;
use std::sync::Arc;

/// Who the agent is in a turn: the user's agent (depth 0) or a subagent.
pub struct Persona {
    /// The configured agent it runs as (fallbacks, workspace, links).
    pub agent: Arc<AgentProfile>,
    /// Shared with the agent's profile and the turn's spawn scope (thousands of turns in
    /// flight each hold a persona).
    pub system: Arc<str>,
    /// Tool names offered (shared with the turn's spawn scope).
    pub tools: Arc<[String]>,
    pub model: ModelRef,
    pub depth: u32,
    /// For subagents: the chat/thread (and message) their own children announce into.
    pub origin: Option<(ChatRoute, Option<String>)>,
    /// For subagents: what the run does for its parent (how its calls are accounted).
    pub work: Option<crate::spawn::RunWork>,
    /// For subagents: hears the tools of each step (their status message shows them).
    pub progress: Option<Arc<dyn StepObserver>>,
    /// Where this agent's own `sessions_spawn` children go (None: it may not spawn).
    pub spawner: Option<Arc<dyn Spawner>>,
    /// Where its `exec` runs (None: `exec` is not offered).
    pub exec: Option<ExecPlace>,
}

/// What a spawn request resolves to, before the run exists.
pub struct ChildChoice {
    pub agent: Arc<AgentProfile>,
    pub model: ModelRef,
    pub tools: Vec<String>,
    pub system: String,
    pub depth: u32,
}

/// A subagent run as stored: what its persona is rebuilt from (on start and on resume).
pub struct RunPersona<'a> {
    pub agent: &'a Arc<AgentProfile>,
    pub system: &'a str,
    pub tools: &'a [String],
    pub model: &'a ModelRef,
    pub depth: u32,
    /// The run's own session key (its container is named by it).
    pub session_key: &'a str,
    pub sandboxed: bool,
    pub origin: (ChatRoute, Option<String>),
    pub work: crate::spawn::RunWork,
    pub progress: Arc<dyn StepObserver>,
    pub spawner: Arc<dyn Spawner>,
}

/// The one persona resolver (built once in the engine from the config).
pub struct Personas {
    agents: Arc<Agents>,
    teams: Arc<dyn Teammates>,
    /// Every registered tool (what each one needs decides whether it is offered).
    tools: Arc<ToolRegistry>,
    chain: Arc<FallbackChain>,
    /// Containers for `exec` (None: no sandbox can be had).
    sandbox: Option<Arc<dyn Sandbox>>,
    sandbox_on: bool,
    host_exec: bool,
    max_depth: u32,
    /// `subagents.models`: models any spawn may name.
    spawn_models: Vec<String>,
    /// The lists of tool names people's turns are offered, one of each held for all.
    offers: crate::interned::Interned<String>,
}

/// Whether an agent is a member of a team (a team task's run needs no `may_delegate` link).
pub trait Teammates: Send + Sync {
    fn in_team(&self, agent: &str, team: &str) -> bool;
}

/// What the resolver is built from (the composition root's shared registries).
pub struct PersonaParts {
    pub agents: Arc<Agents>,
    pub teams: Arc<dyn Teammates>,
    pub tools: Arc<ToolRegistry>,
    pub chain: Arc<FallbackChain>,
    pub sandbox: Option<Arc<dyn Sandbox>>,
}

impl Personas {
    pub fn new(config: &Config, parts: PersonaParts) -> Self {
        let PersonaParts {
            agents,
            teams,
            tools,
            chain,
            sandbox,
        } = parts;
        Personas {
            teams,
            agents,
            tools,
            chain,
            sandbox,
            sandbox_on: config.sandbox.enabled,
            host_exec: config.tools.host_exec,
            max_depth: config.subagents.max_depth,
            spawn_models: config.subagents.models.clone(),
            offers: Default::default(),
        }
    }

    /// The configured agents (bindings route messages to them).
    pub fn agents(&self) -> &Arc<Agents> {
        &self.agents
    }

    /// True when `model` names a configured provider.
    pub fn knows_model(&self, model: &ModelRef) -> bool {
        self.chain.knows(model)
    }

    /// The sandbox, configured or not (to release containers).
    pub fn sandbox(&self) -> Option<&Arc<dyn Sandbox>> {
        self.sandbox.as_ref()
    }

    /// The sandbox, when one is configured and not known to be unavailable.
    pub fn usable_sandbox(&self) -> Option<&Arc<dyn Sandbox>> {
        self.sandbox
            .as_ref()
            .filter(|s| !matches!(s.availability(), Availability::Unavailable(_)))
    }

    /// Where an agent's `exec` runs: in `owner`'s container when the sandbox is on (or the
    /// agent is a sandboxed subagent), on the host when `tools.host_exec`, else nowhere.
    pub fn exec_place(&self, owner: &str, sandboxed: bool) -> Option<ExecPlace> {
        if self.sandbox_on || sandboxed {
            return self.usable_sandbox().map(|sandbox| ExecPlace::Sandbox {
                sandbox: sandbox.clone(),
                owner: owner.to_string(),
            });
        }
        self.host_exec.then_some(ExecPlace::Host)
    }

    /// The tools an agent is offered: its allowlist, less what a tool says it cannot use
    /// (`Tool::offered`: spawning without a spawner or at `max_depth`, `delegate` without
    /// links, `read_skill` without skills, team tools outside a team, `exec` with nowhere to
    /// run).
    fn offer(&self, agent: &AgentProfile, spawning: bool, exec: bool) -> Vec<String> {
        let offer = Offer {
            agent,
            spawning,
            exec,
        };
        self.tools
            .all()
            .iter()
            .filter(|t| agent.allows_tool(t.name()) && t.offered(&offer))
            .map(|t| t.name().to_string())
            .collect()
    }

    /// A person's turn in `session_key`, answered by `model` (the session's choice or its
    /// agent's). It may spawn when a spawner is given and `max_depth` allows.
    pub fn user(
        &self,
        session_key: &str,
        model: ModelRef,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> Persona {
        let spawning = self.max_depth > 0 && spawner.is_some();
        let exec = self.exec_place(session_key, false);
        let agent = self.agents.of_session(session_key).clone();
        Persona {
            tools: self
                .offers
                .share(self.offer(&agent, spawning, exec.is_some()), String::eq),
            system: agent.system_prompt.clone(),
            exec,
            model,
            depth: 0,
            origin: None,
            work: None,
            progress: None,
            spawner: spawner.filter(|_| spawning).cloned(),
            agent,
        }
    }

    /// What a spawn asked for by `scope` may run as: the agent (the spawner's own, a linked
    /// one, or a teammate), the model (the agent's, the parent's, or `subagents.models`), the
    /// tools (another agent's own; else the parent's; a sandboxed child gets its container's
    /// tools). A refusal names the field.
    pub fn child(&self, scope: &SpawnScope, request: &SpawnRequest) -> Result<ChildChoice, String> {
        let own = scope.agent.id.as_str();
        let target = request.agent_id.as_deref().unwrap_or(own);
        let agent = self.agents.get(target).cloned().ok_or_else(|| {
            format!(
                "field `agent_id`: there is no agent `{target}` (configured: {})",
                self.agents.ids().join(", ")
            )
        })?;
        let teammate = request
            .team
            .as_deref()
            .is_some_and(|team| self.teams.in_team(target, team));
        if !scope.agent.may_run(target) && !teammate {
            let links = &scope.agent.may_delegate;
            return Err(format!(
                "field `agent_id`: agent `{own}` may not run `{target}`; it may run {}",
                if links.is_empty() {
                    "only itself (no may_delegate links)".to_string()
                } else {
                    format!("itself and {}", links.join(", "))
                }
            ));
        }
        let other_agent = target != own;
        let model = match &request.model {
            Some(name) => {
                let model = ModelRef::parse(name)
                    .ok_or_else(|| format!("field `model`: `{name}` is not <provider>/<model>"))?;
                if !self.knows_model(&model) {
                    return Err(format!(
                        "field `model`: unknown provider `{}`",
                        model.provider
                    ));
                }
                // The agent's own models, the parent's, or the operator's list: a spawn is
                // no way round the model an operator chose (or pays for).
                let allowed = model == agent.model
                    || model == scope.parent_model
                    || agent.fallbacks.contains(&model)
                    || self.spawn_models.iter().any(|m| *m == model.to_string());
                if !allowed {
                    return Err(format!(
                        "field `model`: `{name}` is not one agent `{target}` may use (its model, its fallbacks, or subagents.models)"
                    ));
                }
                model
            }
            None if other_agent => agent.model.clone(),
            None => scope.parent_model.clone(),
        };
        // Another agent works with its own tools (least privilege: not the caller's).
        let available: Vec<String> = if other_agent {
            self.offer(&agent, true, true)
        } else {
            scope.parent_tools.to_vec()
        };
        let mut tools: Vec<String> = match &request.tools {
            Some(list) => {
                if let Some(unknown) = list.iter().find(|t| !available.contains(t)) {
                    return Err(format!(
                        "field `tools`: `{unknown}` is not a tool agent `{target}` has"
                    ));
                }
                list.clone()
            }
            None => available,
        };
        if request.sandbox {
            if self.usable_sandbox().is_none() {
                return Err(
                    "field `sandbox`: no sandbox can be had here (no Docker engine or no image)"
                        .into(),
                );
            }
            // A sandboxed child gets exec and the file tools even when its parent cannot
            // run them — but only those the agent's `tools` allowlist grants.
            for tool in self.tools.iter().filter(|t| t.in_container()) {
                let name = tool.name();
                if agent.allows_tool(name) && !tools.iter().any(|t| t == name) {
                    tools.push(name.to_string());
                }
            }
        }
        let depth = scope.depth + 1;
        // What a child may not have (a plan, a schedule), and spawning at `max_depth`.
        let offer = Offer {
            agent: &agent,
            spawning: depth < self.max_depth,
            exec: true,
        };
        tools.retain(|t| {
            self.tools
                .get(t)
                .is_some_and(|tool| tool.for_children() && tool.offered(&offer))
        });
        let system = request.system_prompt.clone().unwrap_or_else(|| {
            if other_agent {
                agent.system_prompt.to_string()
            } else {
                scope.parent_system.to_string()
            }
        });
        Ok(ChildChoice {
            agent,
            model,
            tools,
            system,
            depth,
        })
    }

    /// A subagent run's persona, from what its row keeps (a new run and a resumed one alike).
    pub fn run(&self, run: RunPersona<'_>) -> Persona {
        // Its own container (a sandboxed run always; any run when the sandbox is on).
        let exec = self.exec_place(run.session_key, run.sandboxed);
        // What it was given, less what cannot work here now (`exec` with nowhere to run).
        let offer = Offer {
            agent: run.agent,
            spawning: true,
            exec: exec.is_some(),
        };
        let tools = run
            .tools
            .iter()
            .filter(|t| self.tools.get(t).is_some_and(|tool| tool.offered(&offer)))
            .cloned()
            .collect();
        Persona {
            agent: run.agent.clone(),
            system: run.system.into(),
            tools,
            exec,
            model: run.model.clone(),
            depth: run.depth,
            origin: Some(run.origin),
            work: Some(run.work),
            progress: Some(run.progress),
            spawner: Some(run.spawner),
        }
    }
}
