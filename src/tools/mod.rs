//! Tools given to the model (SPEC section 8): the [`Tool`] interface, the [`ToolRegistry`]
//! that validates arguments against each tool's JSON schema, and the core tools every agent
//! can have (the workspace files, `web_fetch`, `message`, `send_file`).
//!
//! A tool gets what it needs when it is built (a feature's tools live in the feature's
//! folder) and, per call, a [`ToolContext`]: the turn's identity plus the handles the turn
//! put in for it ([`TurnHandles`]). It returns text for the model. Errors are returned to the
//! model as the tool result; they never end a turn. Tools do not know channels or the
//! engine's loop, and this module names no feature.

mod effects;
mod files;
mod message;
mod send_file;
mod web_fetch;

pub use effects::{EffectLog, current_call};
pub use files::{ListFiles, ReadFile, WriteFile, confine};
pub use message::MessageTool;
pub use send_file::SendFile;
pub use web_fetch::WebFetch;

use crate::agents::AgentProfile;
use crate::providers::{ToolCall, ToolSpec};
use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// What a running tool may know about its call: the turn's identity, and the handles the
/// turn's persona and the components put in for their tools.
pub struct ToolContext {
    pub session_key: String,
    /// The chat its messages go to (a subagent's: the thread its parent was asked in).
    pub route: ChatRoute,
    pub in_reply_to: Option<String>,
    /// The session's own folder under its agent's workspace (created on first use).
    pub workspace: PathBuf,
    /// The agent the turn runs as.
    pub agent_id: String,
    /// Who sent the message answered (None for a subagent's step).
    pub sender: Option<String>,
    /// The scheduled job whose turn this is (from the journal's internal flag, never from a
    /// platform message id, which webhook and API clients choose).
    pub job: Option<String>,
    /// Side effects of this turn already carried out (a user's turn or a subagent's step;
    /// both are redone after a crash).
    pub effects: Option<EffectLog>,
    /// How long one tool call may run (`tools.timeout_secs`) unless the tool says otherwise.
    pub time_limit: std::time::Duration,
    /// Turn-scoped handles by type (the session's plan tracker, the spawn scope, where
    /// `exec` runs, a subagent's live status): what a tool needs that only the turn knows.
    pub handles: TurnHandles,
}

/// Values by type, put in by whoever prepares a turn and read by the tools that need them
/// (`http::Extensions`: the well-kept type map the HTTP stack uses for the same job).
#[derive(Default, Clone)]
pub struct TurnHandles(http::Extensions);

impl TurnHandles {
    pub fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(value);
    }
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get::<T>()
    }
}

/// Images tool results bring, for a model that can see: a turn handle the engine puts in
/// only when the turn's model sees images, and sends with the turn's next model call (never
/// stored). A tool without it says in words that an image came.
#[derive(Clone, Default)]
pub struct ToolImages(Arc<std::sync::Mutex<Vec<crate::providers::ImagePart>>>);

impl ToolImages {
    pub fn push(&self, image: crate::providers::ImagePart) {
        self.0.lock().expect("tool images lock").push(image);
    }

    /// The images brought since the last take.
    pub fn take(&self) -> Vec<crate::providers::ImagePart> {
        std::mem::take(&mut *self.0.lock().expect("tool images lock"))
    }
}

/// What decides whether a tool is offered to a persona (after its `tools` allowlist).
pub struct Offer<'a> {
    pub agent: &'a AgentProfile,
    /// It may spawn subagents (a spawner is there and `max_depth` allows).
    pub spawning: bool,
    /// Its `exec` has somewhere to run.
    pub exec: bool,
}

/// A call's arguments as the tool's own type. The registry has checked them against the
/// schema already; a mismatch still names the field.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError(format!("invalid arguments: {e}")))
}

/// What a tool call can do, for the approval policy (SPEC section 17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolClass {
    /// Reads the workspace or the session.
    Read,
    /// Changes the workspace or the session.
    Write,
    /// Runs a command.
    Exec,
    /// Sends data out of the service (a fetch, another chat).
    Egress,
    /// Starts other runs (subagents, team tasks, a plan).
    Spawn,
}

impl ToolClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::Write => "write",
            ToolClass::Exec => "exec",
            ToolClass::Egress => "egress",
            ToolClass::Spawn => "spawn",
        }
    }
}

/// One call's risk, as its tool sees it (the gate decides what follows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRisk {
    pub class: ToolClass,
    /// The host an egress call reaches ("always" choices are per host).
    pub target: Option<String>,
    /// Asks whatever the policy says, for this reason (`exec` on the host; a host the
    /// egress allowlist does not list).
    pub asks: Option<String>,
    /// Its result is untrusted content (a fetched page): reading it taints the turn.
    pub untrusted_result: bool,
}

impl ToolRisk {
    pub fn of(class: ToolClass) -> Self {
        ToolRisk {
            class,
            target: None,
            asks: None,
            untrusted_result: false,
        }
    }
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
    /// The name the model calls it by (a value: tools found at run time register too).
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON schema of the arguments object.
    fn schema(&self) -> Value;
    /// True for tools that only read (offered to planning calls).
    fn read_only(&self) -> bool {
        false
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError>;
    /// What a call with these arguments can do (its class, the host it reaches): read-only
    /// tools read, the others write, unless the tool says more.
    fn risk(&self, _args: &Value, _cx: &ToolContext) -> ToolRisk {
        ToolRisk::of(if self.read_only() {
            ToolClass::Read
        } else {
            ToolClass::Write
        })
    }
    /// How long a call with these arguments may run, when it is not the configured default
    /// (a call that waits for something for a time it names).
    fn time_limit(&self, _args: &Value) -> Option<std::time::Duration> {
        None
    }
    /// Whether it is offered (its agent's allowlist passed): a tool that needs what the
    /// persona lacks (somewhere to run, a spawner, skills, a team) says no.
    fn offered(&self, _offer: &Offer<'_>) -> bool {
        true
    }
    /// Why it is not offered now when that is worth telling a model that calls it anyway
    /// (an MCP server that is down); None: the plain "not available here".
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// Whether a subagent may have it (a plan or a schedule belongs to the person's session).
    fn for_children(&self) -> bool {
        true
    }
    /// Whether it acts in the workspace a sandbox container mounts: a sandboxed child gets it
    /// (within its agent's allowlist) even where its parent could not use it.
    fn in_container(&self) -> bool {
        false
    }
    /// Whether it makes or changes the session's plan (never offered inside a plan's step:
    /// planning does not recurse, and the runner records a step's progress).
    fn plans(&self) -> bool {
        false
    }
    /// Whether the engine carries it out itself: it plans the task and runs it as a `steps`
    /// plan, which needs the turn's model calls (`run` is not reached in a turn).
    fn runs_a_plan(&self) -> bool {
        false
    }
    /// Its spec as `agent` sees it, when that differs from `spec` (an argument narrowed to
    /// what the agent may choose); built once per agent at start.
    fn spec_for(&self, _agent: &AgentProfile, _spec: &ToolSpec) -> Option<ToolSpec> {
        None
    }
}

/// Tools that come and go while the service runs (an MCP server's, once it has answered).
pub trait ToolSource: Send + Sync {
    /// The tools there are now.
    fn current(&self) -> Arc<[Arc<DynamicTool>]>;
}

/// A tool found at run time, its spec and its argument validator (compiled when it was
/// found: a schema that does not compile is never offered).
pub struct DynamicTool {
    pub tool: Arc<dyn Tool>,
    pub spec: ToolSpec,
    validator: jsonschema::Validator,
}

impl DynamicTool {
    /// Err: its schema is not one the registry can check arguments against.
    pub fn new(tool: Arc<dyn Tool>) -> Result<Self, String> {
        let schema = tool.schema();
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        let spec = ToolSpec {
            name: tool.name().into(),
            description: tool.description().into(),
            parameters: schema.into(),
        };
        Ok(DynamicTool {
            tool,
            spec,
            validator,
        })
    }
}

pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    /// Tools found at run time (MCP servers'), after the built ones.
    source: Option<Arc<dyn ToolSource>>,
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
                parameters: t.schema().into(),
            })
            .collect();
        ToolRegistry {
            tools,
            source: None,
            validators,
            specs,
        }
    }

    /// The same registry with the tools `source` has at each moment.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// The run-time tools there are now (None without a source).
    fn dynamic(&self) -> Option<Arc<[Arc<DynamicTool>]>> {
        self.source.as_ref().map(|s| s.current())
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
        let mut specs: Vec<ToolSpec> = self
            .tools
            .iter()
            .zip(&self.specs)
            .filter(|(t, _)| keep(t.as_ref()))
            .map(|(_, spec)| spec.clone())
            .collect();
        if let Some(found) = self.dynamic() {
            specs.extend(
                found
                    .iter()
                    .filter(|d| keep(d.tool.as_ref()))
                    .map(|d| d.spec.clone()),
            );
        }
        specs
    }

    /// Every tool's name (the built ones, then those found at run time).
    pub fn names(&self) -> Vec<String> {
        self.all().iter().map(|t| t.name().to_string()).collect()
    }

    /// The built tools, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    /// Every tool there is now: the built ones, then those found at run time.
    pub fn all(&self) -> Vec<Arc<dyn Tool>> {
        let mut all = self.tools.clone();
        if let Some(found) = self.dynamic() {
            all.extend(found.iter().map(|d| d.tool.clone()));
        }
        all
    }

    /// The tool called `name` (a built one, or one found at run time).
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.iter().find(|t| t.name() == name) {
            return Some(tool.clone());
        }
        self.dynamic()?
            .iter()
            .find(|d| d.tool.name() == name)
            .map(|d| d.tool.clone())
    }

    /// Each tool's spec as `agent` sees it where it differs (see [`Tool::spec_for`]).
    pub fn specs_for(&self, agent: &AgentProfile) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .zip(&self.specs)
            .filter_map(|(tool, spec)| tool.spec_for(agent, spec))
            .collect()
    }

    /// No two tools share a name (a feature's or a server's tool would shadow another).
    pub fn check_unique(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for tool in &self.tools {
            if !seen.insert(tool.name()) {
                return Err(format!("two tools are named `{}`", tool.name()));
            }
        }
        Ok(())
    }

    /// Check a call before it runs: offered (the model may not use what it was not given), a
    /// registered tool, arguments that are JSON and match the tool's schema. `Err` is the
    /// `Error: ...` result for the model (counted). Then [`ToolRegistry::run`].
    pub fn prepare(&self, call: &ToolCall, offered: &[ToolSpec]) -> Result<Prepared, String> {
        let refused = |label: &str, text: String| {
            crate::metrics::tool_call(label, false);
            Err(format!("Error: {text}"))
        };
        let dynamic;
        let found: Option<(Arc<dyn Tool>, &jsonschema::Validator)> =
            match self.tools.iter().position(|t| t.name() == call.name) {
                Some(index) => Some((self.tools[index].clone(), self.validator(index))),
                None => {
                    dynamic = self.dynamic();
                    dynamic
                        .iter()
                        .flat_map(|found| found.iter())
                        .find(|d| *d.spec.name == *call.name)
                        .map(|d| (d.tool.clone(), &d.validator))
                }
            };
        // The metrics label: a registered tool's own name, never what the model made up.
        let label = found.as_ref().map_or("unknown", |(t, _)| t.name());
        if !offered.iter().any(|t| *t.name == *call.name) {
            if let Some(why) = found.as_ref().and_then(|(t, _)| t.unavailable()) {
                return refused(
                    label,
                    format!("tool `{}` is not available now: {why}", call.name),
                );
            }
            let names: Vec<&str> = offered.iter().map(|t| &*t.name).collect();
            return refused(
                label,
                format!(
                    "tool `{}` is not available here; available: {}",
                    call.name,
                    names.join(", ")
                ),
            );
        }
        let Some((tool, validator)) = &found else {
            let text = format!(
                "unknown tool `{}`; available: {}",
                call.name,
                self.names().join(", ")
            );
            return refused(label, text);
        };
        let args: Value = match serde_json::from_str(&call.arguments) {
            Ok(args) => args,
            Err(e) => return refused(label, format!("arguments are not valid JSON: {e}")),
        };
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
            return refused(label, format!("invalid arguments: {}", problems.join("; ")));
        }
        Ok(Prepared {
            tool: tool.clone(),
            args,
            key: None,
        })
    }

    /// Run a prepared call: a turn redone after a crash replays what this call already did;
    /// the call is bounded by its time limit. A failure is the `Error: ...` result.
    pub async fn run(&self, prepared: Prepared, cx: &ToolContext) -> String {
        let Prepared { tool, args, key } = prepared;
        tracing::debug!(tool = tool.name(), arguments = %args, "tool call");
        let result = Self::run_tool(tool.as_ref(), args, key, cx).await;
        crate::metrics::tool_call(tool.name(), result.is_ok());
        match result {
            Ok(text) => text,
            Err(err) => format!("Error: {err}"),
        }
    }

    async fn run_tool(
        tool: &dyn Tool,
        args: Value,
        key: Option<String>,
        cx: &ToolContext,
    ) -> Result<String, ToolError> {
        // A turn redone after a crash: an effect this call already had is not repeated.
        let effect = match (&cx.effects, tool.read_only()) {
            (Some(log), false) => {
                let key = key.unwrap_or_else(|| log.call_key(tool.name(), &args));
                if let Some(result) = log.recorded(&key).await {
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
            log.record(&key, text).await;
        }
        result
    }
}

/// A call that passed the registry's checks: its tool and its validated arguments.
pub struct Prepared {
    tool: Arc<dyn Tool>,
    /// The arguments, parsed and checked against the tool's schema.
    pub args: Value,
    /// Its key in the turn's effect log, once [`Prepared::identify`] took it.
    key: Option<String>,
}

impl Prepared {
    /// This call's identity across attempts of its turn (`<turn>/<tool>:<hash>:<n>`), when
    /// its turn records effects: a redone turn's same call has the same one.
    pub fn identify(&mut self, cx: &ToolContext) -> Option<String> {
        let log = cx.effects.as_ref()?;
        let key = log.call_key(self.tool.name(), &self.args);
        let id = log.call_id(&key).0;
        self.key = Some(key);
        Some(id)
    }

    /// What this call can do (see [`Tool::risk`]).
    pub fn risk(&self, cx: &ToolContext) -> ToolRisk {
        self.tool.risk(&self.args, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_tool_schema_compiles_into_a_validator() {
        let registry = ToolRegistry::new(vec![
            Arc::new(ReadFile),
            Arc::new(WriteFile),
            Arc::new(ListFiles),
            Arc::new(WebFetch::new(Arc::new(crate::egress::Guarded::new(
                false, "",
            )))),
        ]);
        for index in 0..registry.tools.len() {
            registry.validator(index);
        }
        assert!(registry.check_unique().is_ok());
    }
}
