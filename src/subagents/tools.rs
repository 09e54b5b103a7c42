//! `sessions_spawn` and `subagents` (SPEC section 7): thin adapters from tool arguments to
//! the turn's [`Spawner`](crate::spawn::Spawner).

use crate::agents::AgentProfile;
use crate::providers::ToolSpec;
use crate::spawn::{SpawnHandle, SpawnRequest};
use crate::tools::{Offer, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::time::Duration;

fn scope(cx: &ToolContext) -> Result<&SpawnHandle, ToolError> {
    cx.handles
        .get::<SpawnHandle>()
        .ok_or_else(|| ToolError::new("subagents are not available here"))
}

/// `spec` with `agent_id` narrowed to the agents `agent` may run (itself too for a spawn;
/// absent from `sessions_spawn` without links), so a capability not granted is never
/// advertised.
fn narrowed(agent: &AgentProfile, spec: &ToolSpec, itself: bool) -> ToolSpec {
    let links = &agent.may_delegate;
    let choices: Vec<&String> = if itself {
        std::iter::once(&agent.id).chain(links).collect()
    } else {
        links.iter().collect()
    };
    let mut parameters = (*spec.parameters).clone();
    if let Some(properties) = parameters["properties"].as_object_mut() {
        if itself && links.is_empty() {
            properties.remove("agent_id");
        } else {
            properties.insert(
                "agent_id".into(),
                json!({"type": "string", "enum": choices,
                    "description": "the agent that does the task"}),
            );
        }
    }
    ToolSpec {
        parameters: parameters.into(),
        ..spec.clone()
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("plain data serialises")
}

/// `sessions_spawn` arguments (the schema below is their contract).
#[derive(serde::Deserialize)]
struct SpawnArgs {
    task: String,
    label: Option<String>,
    system_prompt: Option<String>,
    model: Option<String>,
    tools: Option<Vec<String>>,
    mode: Option<String>,
    sandbox: Option<bool>,
    timeout_secs: Option<u64>,
    agent_id: Option<String>,
}

/// `subagents` arguments: what to do, to which child.
#[derive(serde::Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
enum ManageArgs {
    List,
    Kill {
        target: String,
    },
    Steer {
        target: String,
        message: String,
    },
    Wait {
        target: String,
        #[serde(default = "default_wait")]
        timeout_secs: u64,
    },
}

fn default_wait() -> u64 {
    60
}

pub struct SessionsSpawn;

#[async_trait]
impl Tool for SessionsSpawn {
    fn name(&self) -> &str {
        "sessions_spawn"
    }
    fn risk(&self, _args: &Value, _cx: &crate::tools::ToolContext) -> crate::tools::ToolRisk {
        crate::tools::ToolRisk::of(crate::tools::ToolClass::Spawn)
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        offer.spawning
    }
    fn spec_for(&self, agent: &AgentProfile, spec: &ToolSpec) -> Option<ToolSpec> {
        Some(narrowed(agent, spec, true))
    }
    fn description(&self) -> &str {
        "Start a subagent that works on a task in its own session and returns at once. Its outcome is \
         announced in this chat and reported back to you when it ends. It does not see this conversation: \
         put everything it needs in `task`."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1},
                "label": {"type": "string"},
                "system_prompt": {"type": "string"},
                "model": {"type": "string", "description": "<provider>/<model>; default: yours"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "allowlist; default: all of yours"},
                "mode": {"type": "string", "enum": ["run", "session"]},
                "sandbox": {"type": "boolean", "description": "run its exec and file tools in its own container"},
                "timeout_secs": {"type": "integer", "minimum": 1},
                // Offered (with the linked agents as its values) only to agents with
                // `may_delegate` links; see `narrowed`.
                "agent_id": {"type": "string", "description": "run the child as this agent (its prompt, model, tools, skills)"}
            },
            "required": ["task"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let scope = scope(cx)?;
        let args: SpawnArgs = crate::tools::typed(args)?;
        let (call, redo) = call_of();
        let request = SpawnRequest {
            task: args.task,
            label: args.label,
            system_prompt: args.system_prompt,
            model: args.model,
            tools: args.tools,
            session_mode: args.mode.as_deref() == Some("session"),
            sandbox: args.sandbox.unwrap_or(false),
            timeout_secs: args.timeout_secs,
            agent_id: args.agent_id,
            waited: false,
            team: None,
            work: crate::spawn::RunWork::Subagent,
            call,
            redo,
        };
        let accepted = scope
            .spawner
            .spawn(&scope.scope, request)
            .await
            .map_err(|e| ToolError(e.to_string()))?;
        Ok(to_json(&accepted))
    }
}

/// The asking tool call's identity and whether its turn is redone (`SpawnRequest::call`).
fn call_of() -> (Option<String>, bool) {
    match crate::tools::current_call() {
        Some((call, redo)) => (Some(call), redo),
        None => (None, false),
    }
}

/// `delegate` arguments.
#[derive(serde::Deserialize)]
struct DelegateArgs {
    agent_id: String,
    task: String,
    label: Option<String>,
    #[serde(default = "yes")]
    wait: bool,
    #[serde(default = "default_delegate_wait")]
    timeout_secs: u64,
}

fn yes() -> bool {
    true
}

fn default_delegate_wait() -> u64 {
    300
}

/// `delegate` (GoClaw's delegate mode): hand a task to a linked agent. Offered only to agents
/// with `may_delegate` links (the engine narrows `agent_id` to them). The delegation is a run
/// in the registry like any subagent (limits, `/subagents`, kill, one outcome).
pub struct Delegate;

#[async_trait]
impl Tool for Delegate {
    fn name(&self) -> &str {
        "delegate"
    }
    fn risk(&self, _args: &Value, _cx: &crate::tools::ToolContext) -> crate::tools::ToolRisk {
        crate::tools::ToolRisk::of(crate::tools::ToolClass::Spawn)
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        offer.spawning && !offer.agent.may_delegate.is_empty()
    }
    fn spec_for(&self, agent: &AgentProfile, spec: &ToolSpec) -> Option<ToolSpec> {
        Some(narrowed(agent, spec, false))
    }
    fn description(&self) -> &str {
        "Hand a task to another agent you are linked to. With wait (default) you get its result here          (if it takes longer than timeout_secs it goes on detached and is announced when done); without          wait it runs detached like a subagent and its outcome is announced and reported to you. It does          not see this conversation: put everything it needs in `task`."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string"},
                "task": {"type": "string", "minLength": 1},
                "label": {"type": "string"},
                "wait": {"type": "boolean"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            },
            "required": ["agent_id", "task"],
            "additionalProperties": false
        })
    }
    fn time_limit(&self, args: &Value) -> Option<Duration> {
        (args["wait"] != false).then(|| {
            Duration::from_secs(
                args["timeout_secs"]
                    .as_u64()
                    .unwrap_or_else(default_delegate_wait)
                    + 5,
            )
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let handle = scope(cx)?;
        let args: DelegateArgs = crate::tools::typed(args)?;
        let failed = |e: crate::spawn::SpawnError| ToolError(e.to_string());
        let (call, redo) = call_of();
        let request = SpawnRequest {
            task: args.task,
            label: args
                .label
                .or_else(|| Some(format!("{} (delegated)", args.agent_id))),
            agent_id: Some(args.agent_id),
            waited: args.wait,
            work: crate::spawn::RunWork::Delegate,
            call,
            redo,
            ..SpawnRequest::default()
        };
        let accepted = handle
            .spawner
            .spawn(&handle.scope, request)
            .await
            .map_err(failed)?;
        if !args.wait {
            return Ok(to_json(&accepted));
        }
        let report = handle
            .spawner
            .wait(
                &handle.scope.parent_session,
                &accepted.run_id,
                Duration::from_secs(args.timeout_secs),
            )
            .await
            .map_err(failed)?;
        Ok(to_json(&report))
    }
}

pub struct SubagentsTool;

#[async_trait]
impl Tool for SubagentsTool {
    fn name(&self) -> &str {
        "subagents"
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        offer.spawning
    }
    fn description(&self) -> &str {
        "Manage this session's subagents: list; kill (target = run id, label or all); steer (target, message: \
         interrupt its current step and continue with a new instruction); wait (target, timeout_secs)."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "kill", "steer", "wait"]},
                "target": {"type": "string"},
                "message": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    fn time_limit(&self, args: &Value) -> Option<Duration> {
        // `wait` waits as long as it was asked to, and a little more to report.
        (args["action"] == "wait")
            .then(|| Duration::from_secs(args["timeout_secs"].as_u64().unwrap_or(60) + 5))
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let handle = scope(cx)?;
        let registry = &handle.spawner;
        let session = &handle.scope.parent_session;
        let failed = |e: crate::spawn::SpawnError| ToolError(e.to_string());
        match crate::tools::typed(args)? {
            ManageArgs::List => Ok(to_json(&registry.list(session).await.map_err(failed)?)),
            ManageArgs::Kill { target } => {
                let n = registry.kill(session, &target);
                Ok(format!("killed {n} subagent(s)"))
            }
            ManageArgs::Steer { target, message } => {
                registry
                    .steer(session, &target, &message)
                    .await
                    .map_err(failed)?;
                Ok("steered".into())
            }
            ManageArgs::Wait {
                target,
                timeout_secs,
            } => {
                let timeout = Duration::from_secs(timeout_secs);
                Ok(to_json(
                    &registry
                        .wait(session, &target, timeout)
                        .await
                        .map_err(failed)?,
                ))
            }
        }
    }
}
