//! Tools given to the model (SPEC section 8): the [`Tool`] interface, the [`ToolRegistry`]
//! that validates arguments against each tool's JSON schema, and the built-in tools.
//!
//! A tool gets a [`ToolContext`] (session, route, workspace folder, a way to post messages)
//! and returns text for the model. Errors are returned to the model as the tool result; they
//! never end a turn. Tools do not know channels or the engine's loop.

mod effects;
mod exec;
mod files;
mod message;
mod plan_tool;
mod schedule_tool;
mod send_file;
mod skill_tool;
mod subagent_tools;
mod team_tools;
mod web_fetch;

pub use effects::{EffectLog, current_call};
pub use exec::{ExecPlace, ExecTool};
pub use files::{ListFiles, ReadFile, WriteFile, confine};
pub use message::MessageTool;
pub use plan_tool::{PlanAndExecute, PlanTool};
pub use schedule_tool::ScheduleTool;
pub use send_file::SendFile;
pub use skill_tool::ReadSkill;
pub use subagent_tools::{Delegate, SessionsSpawn, SubagentsTool};
pub use team_tools::{TeamMessageTool, TeamTasks};
pub use web_fetch::WebFetch;

use crate::outbox::OutboxNotifier;
use crate::providers::{ToolCall, ToolSpec};
use crate::storage::Store;
use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// What a running tool may know about its call.
pub struct ToolContext {
    pub session_key: String,
    pub route: ChatRoute,
    pub in_reply_to: Option<String>,
    /// The session's own folder under `agent.workspace` (created on first use).
    pub workspace: PathBuf,
    pub store: Arc<dyn Store>,
    pub outbox: OutboxNotifier,
    /// The session's plan tracker (None where plans are not offered).
    pub plan: Option<Arc<crate::plan::PlanTracker>>,
    /// Subagents and where this turn's children belong (None where spawning is off).
    pub spawn: Option<crate::spawn::SpawnHandle>,
    /// Side effects of this turn already carried out (a user's turn or a subagent's step;
    /// both are redone after a crash).
    pub effects: Option<EffectLog>,
    /// How long one tool call may run (`tools.timeout_secs`) unless the tool says otherwise.
    pub time_limit: std::time::Duration,
    /// Where `exec` runs (None: it is not offered).
    pub exec: Option<ExecPlace>,
    /// A subagent's live status (hears tool output as it arrives).
    pub progress: Option<Arc<dyn crate::spawn::StepObserver>>,
    /// The agent's skill menu (`read_skill` reads from it).
    pub skills: Arc<[crate::skills::Skill]>,
    /// The agent the turn runs as.
    pub agent_id: String,
    /// Who sent the message answered (None for a subagent's step).
    pub sender: Option<String>,
    /// The scheduled job whose turn this is (from the journal's internal flag, never from a
    /// platform message id, which webhook and API clients choose).
    pub job: Option<String>,
    /// Scheduling limits and the scheduler's wake-up.
    pub schedules: crate::schedules::ScheduleHandle,
    /// The teams it is a member of (`team_tasks`, `team_message`).
    pub teams: Arc<[Arc<crate::teams::Team>]>,
}

/// A call's arguments as the tool's own type. The registry has checked them against the
/// schema already; a mismatch still names the field.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError(format!("invalid arguments: {e}")))
}

/// A tool failure, shown to the model as the result.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        ToolError(message.into())
    }
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &'static str;
    /// JSON schema of the arguments object.
    fn schema(&self) -> Value;
    /// True for tools that only read (offered to planning calls).
    fn read_only(&self) -> bool {
        false
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError>;
    /// How long a call with these arguments may run, when it is not the configured default
    /// (a call that waits for something for a time it names).
    fn time_limit(&self, _args: &Value) -> Option<std::time::Duration> {
        None
    }
}

/// The built-in tools (`exec` always among them; each agent is offered it only where it
/// can run).
fn builtin_tools(
    egress: Arc<crate::egress::Guarded>,
    exec_max: std::time::Duration,
) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(ListFiles),
        Arc::new(WebFetch::new(egress)),
        Arc::new(MessageTool),
        Arc::new(PlanTool),
        Arc::new(SessionsSpawn),
        Arc::new(SubagentsTool),
        Arc::new(ExecTool::new(exec_max)),
        Arc::new(ReadSkill),
        Arc::new(Delegate),
        Arc::new(PlanAndExecute),
        Arc::new(TeamTasks),
        Arc::new(TeamMessageTool),
        Arc::new(ScheduleTool),
        Arc::new(SendFile),
    ]
}

/// The names of the built-in tools, read off the tools themselves (what `config check`
/// validates an agent's `tools` allowlist against before anything is built).
pub fn builtin_names() -> Vec<String> {
    let egress = Arc::new(crate::egress::Guarded::new(false, ""));
    builtin_tools(egress, std::time::Duration::from_secs(1))
        .iter()
        .map(|t| t.name().to_string())
        .collect()
}

pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    /// Each tool's argument validator, compiled on the tool's first call (compiling all of
    /// them at start cost about half a megabyte and the start-up time of the schema engine).
    validators: Vec<OnceLock<jsonschema::Validator>>,
    /// Each tool's spec, built once (a turn clones names and shares the schemas).
    specs: Vec<ToolSpec>,
}

impl ToolRegistry {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let validators = tools.iter().map(|_| OnceLock::new()).collect();
        let specs = tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().into(),
                description: t.description().into(),
                parameters: Arc::new(t.schema()),
            })
            .collect();
        ToolRegistry {
            tools,
            validators,
            specs,
        }
    }

    /// The built-in tools for this configuration. `exec` is always registered; each agent is
    /// offered it only where it can run.
    pub fn builtin(egress: Arc<crate::egress::Guarded>, exec_max: std::time::Duration) -> Self {
        Self::new(builtin_tools(egress, exec_max))
    }

    /// The argument validator of tool `index`, compiled on first use.
    fn validator(&self, index: usize) -> &jsonschema::Validator {
        self.validators[index].get_or_init(|| {
            jsonschema::validator_for(&self.specs[index].parameters)
                .expect("built-in tool schemas are valid (checked by a unit test)")
        })
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.specs_where(|_| true)
    }

    /// Specs of the named tools, in registry order.
    pub fn specs_named(&self, names: &[String]) -> Vec<ToolSpec> {
        self.specs_where(|t| names.iter().any(|n| n == t.name()))
    }

    /// Specs of the read-only tools (offered to planning calls).
    pub fn read_only_specs(&self) -> Vec<ToolSpec> {
        self.specs_where(|t| t.read_only())
    }

    fn specs_where(&self, keep: impl Fn(&dyn Tool) -> bool) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .zip(&self.specs)
            .filter(|(t, _)| keep(t.as_ref()))
            .map(|(_, spec)| spec.clone())
            .collect()
    }

    /// Every registered tool's name, in registry order.
    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// Run one call; every failure becomes an `Error: ...` result for the model. A call of a
    /// tool not in `offered` is refused (the model may not use what it was not given).
    pub async fn call(&self, call: &ToolCall, cx: &ToolContext, offered: &[ToolSpec]) -> String {
        // The metrics label: a registered tool's own name, never what the model made up.
        let label = self
            .tools
            .iter()
            .map(|t| t.name())
            .find(|n| *n == call.name)
            .unwrap_or("unknown")
            .to_string();
        if !offered.iter().any(|t| *t.name == *call.name) {
            crate::metrics::tool_call(&label, false);
            let names: Vec<&str> = offered.iter().map(|t| &*t.name).collect();
            return format!(
                "Error: tool `{}` is not available here; available: {}",
                call.name,
                names.join(", ")
            );
        }
        let result = self.try_call(call, cx).await;
        crate::metrics::tool_call(&label, result.is_ok());
        tracing::debug!(tool = %label, arguments = %call.arguments, "tool call");
        match result {
            Ok(text) => text,
            Err(err) => format!("Error: {err}"),
        }
    }

    async fn try_call(&self, call: &ToolCall, cx: &ToolContext) -> Result<String, ToolError> {
        let (index, tool) = self
            .tools
            .iter()
            .enumerate()
            .find(|(_, t)| t.name() == call.name)
            .ok_or_else(|| {
                ToolError(format!(
                    "unknown tool `{}`; available: {}",
                    call.name,
                    self.names().join(", ")
                ))
            })?;
        let args: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| ToolError(format!("arguments are not valid JSON: {e}")))?;
        let validator = self.validator(index);
        let problems: Vec<String> = validator
            .iter_errors(&args)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("field `{}`: {e}", path.trim_start_matches('/'))
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(ToolError(format!(
                "invalid arguments: {}",
                problems.join("; ")
            )));
        }
        // A turn redone after a crash: an effect this call already had is not repeated.
        let effect = match (&cx.effects, tool.read_only()) {
            (Some(log), false) => {
                let key = log.call_key(tool.name(), &args);
                if let Some(result) = log.recorded(&*cx.store, &key).await {
                    tracing::info!(
                        tool = tool.name(),
                        "tool call already done before a restart; replaying its result"
                    );
                    return Ok(result);
                }
                Some((log, key))
            }
            _ => None,
        };
        let limit = tool.time_limit(&args).unwrap_or(cx.time_limit);
        // The call's identity (its turn and place in it) is known to the tool while it runs,
        // for effects a tool makes idempotent itself (`effects::current_call`).
        let run = tool.run(args, cx);
        let run = async {
            match &effect {
                Some((log, key)) => effects::CALL.scope(log.call_id(key), run).await,
                None => run.await,
            }
        };
        let result = match tokio::time::timeout(limit, run).await {
            Ok(result) => result,
            Err(_) => Err(ToolError(format!(
                "`{}` did not finish within {} s and was stopped",
                tool.name(),
                limit.as_secs()
            ))),
        };
        if let (Some((log, key)), Ok(text)) = (effect, &result) {
            log.record(&*cx.store, &key, text).await;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_names_are_the_registrys_and_unique() {
        let registry = super::ToolRegistry::builtin(
            std::sync::Arc::new(crate::egress::Guarded::new(false, "")),
            std::time::Duration::from_secs(1),
        );
        let names = super::builtin_names();
        assert_eq!(registry.names(), names);
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "a tool name registered twice");
        assert!(names.iter().any(|n| n == "exec") && names.len() >= 16);
    }

    #[test]
    fn every_tool_schema_compiles_into_a_validator() {
        let registry = super::ToolRegistry::builtin(
            std::sync::Arc::new(crate::egress::Guarded::new(false, "")),
            std::time::Duration::from_secs(1),
        );
        for index in 0..registry.tools.len() {
            registry.validator(index);
        }
    }
}
