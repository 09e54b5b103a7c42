//! The agent engine: runs one turn (a chat command, `/plan`, or the tool loop) for a message
//! and returns what it produced; `crate::lanes` commits it.
//!
//! A turn reads the session and a bounded window of its transcript and runs the tool loop
//! (`turn.rs`: model → tool calls → results → model, through the fallback chain). It knows
//! no journal row and commits nothing itself (the caller commits transcript entries, bot
//! messages and the answered-mark in one transaction). It never does channel I/O other than
//! streaming deltas and typing (`LiveFeedback`): replies leave through the outbox.

mod calls;
mod commands;
mod compact;
mod context;
mod feedback;
#[cfg(test)]
mod gate_tests;
mod media;
mod planning;
mod steps;
mod turn;

pub use context::workspace_for;
pub use feedback::LiveFeedback;

use crate::agents::Agents;
use crate::commands::Command;
use crate::component::{Component, TurnScope};
use crate::config::Config;
use crate::outbox::OutboxNotifier;
use crate::plan::PlanTracker;
pub use crate::policy::Persona;
use crate::policy::{Gate, Personas};
use crate::providers::{ChainError, ChatRequest, ChatResponse, FallbackChain, ModelRef, ToolSpec};
use crate::spawn::Spawner;
use crate::storage::{NewTranscriptEntry, SessionRow, Store, StoreError};
use crate::tools::{ToolContext, ToolRegistry};
use ferroclaw_channel_core::{ChatRoute, OutboundKind};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub struct Engine {
    store: Arc<dyn Store>,
    chain: Arc<FallbackChain>,
    config: Arc<Config>,
    feedback: Arc<dyn LiveFeedback>,
    outbox: OutboxNotifier,
    tools: Arc<ToolRegistry>,
    tool_tokens: usize,
    /// Who a turn runs as (agents, skills, teams, tool offer, sandbox).
    personas: Personas,
    /// The policy every tool call and model call passes.
    gate: Arc<dyn Gate>,
    /// The features: their commands, `/status` lines, prompt sections and turn handles.
    components: Vec<Arc<dyn Component>>,
    /// Which component answers each feature command.
    feature_commands: std::collections::HashMap<&'static str, usize>,
    /// `/help`, built once from the core and the features' commands.
    help: String,
    /// Each agent's tool specs where they differ from the registry's (`Tool::spec_for`),
    /// built once, not per turn.
    agent_specs: std::collections::HashMap<String, Vec<ToolSpec>>,
    /// The lists of specs turns are offered, one of each held for all (`crate::interned`).
    offered: crate::interned::Interned<ToolSpec>,
    transcriber: crate::media::Transcriber,
    /// Attachment URLs are fetched under the service's one address policy, the one
    /// `web_fetch` uses (`crate::egress`).
    attachment_fetch: Arc<crate::egress::Guarded>,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `/plan <args>` asks for.
enum PlanRequest<'a> {
    /// `continue`, `skip` or `stop` for a `steps` plan waiting on a failed step.
    Decision(steps::Decision),
    /// A task, in the mode `--steps` / `--tracker` names (else the configured one).
    Task(crate::plan::PlanMode, &'a str),
}

fn plan_request(args: &str, default: crate::plan::PlanMode) -> PlanRequest<'_> {
    use crate::plan::PlanMode;
    if let Some(decision) = steps::Decision::parse(args) {
        return PlanRequest::Decision(decision);
    }
    if let Some(task) = args.strip_prefix("--steps") {
        return PlanRequest::Task(PlanMode::Steps, task.trim());
    }
    if let Some(task) = args.strip_prefix("--tracker") {
        return PlanRequest::Task(PlanMode::Tracker, task.trim());
    }
    PlanRequest::Task(default, args)
}

/// What a model turn works from: the chat it answers in, the message it answers, and where
/// its side effects are recorded (a user's journal entry, a subagent's step). Not a journal
/// row: a subagent's turns have none.
#[derive(Clone, Copy)]
pub struct TurnInput<'a> {
    pub route: &'a ChatRoute,
    /// The platform id of the message answered (streamed previews and replies refer to it).
    pub message_id: &'a str,
    /// The key the turn's side effects are recorded under (`storage::effects_key`,
    /// `storage::run_effects_key`) and whether this is a redo that replays them.
    pub effects: Option<(&'a str, bool)>,
    /// Who sent the message answered (a person's id; None for a subagent's step).
    pub sender: Option<&'a str>,
    /// Files that came with the message (fetched and read before the model is called).
    pub attachments: &'a [ferroclaw_channel_core::Attachment],
    /// Images the first model call of the turn shows (set by the media step).
    pub images: &'a [crate::providers::ImagePart],
    /// Answer only when a transcript names the bot by one of these (a group voice note).
    pub mention_names: &'a [String],
    /// The scheduled job this turn runs for: set from the journal entry's internal flag
    /// (`schedules::job_of_message`), never from an id a client can choose.
    pub job: Option<&'a str>,
    /// The job is a heartbeat (its calls are accounted as such).
    pub heartbeat: bool,
    /// The turn's work runs for a tool (`plan_and_execute`'s plan): background work.
    pub for_tool: bool,
    /// The subagent run whose outcome this (internal) message reports.
    pub reports_run: Option<&'a str>,
}

/// What a turn produced before it is committed.
#[derive(Default)]
pub struct TurnOutput {
    pub entries: Vec<NewTranscriptEntry>,
    pub outbound: Vec<(OutboundKind, String)>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub model: Option<String>,
}

impl TurnOutput {
    /// The turn's last message and whether it was an error ("(stopped)" when it has none).
    pub(crate) fn final_text(&self) -> (String, bool) {
        match self.outbound.last() {
            Some((OutboundKind::Error, text)) => (text.clone(), true),
            Some((_, text)) => (text.clone(), false),
            None => ("(stopped)".into(), false),
        }
    }

    fn reply(kind: OutboundKind, text: impl Into<String>) -> Self {
        TurnOutput {
            outbound: vec![(kind, text.into())],
            ..Default::default()
        }
    }
}

/// What the engine is built from (the composition root fills it once).
pub struct EngineParts {
    pub store: Arc<dyn Store>,
    pub chain: Arc<FallbackChain>,
    pub config: Arc<Config>,
    pub feedback: Arc<dyn LiveFeedback>,
    pub outbox: OutboxNotifier,
    pub tools: Arc<ToolRegistry>,
    /// Attachment URLs are fetched under the service's one address policy.
    pub egress: Arc<crate::egress::Guarded>,
    /// Who turns run as (built over the same tool registry).
    pub personas: Personas,
    /// The features, in `/status` order (`crate::features`).
    pub components: Vec<Arc<dyn Component>>,
    /// The policy around every tool call and model call (`policy::AllowAll` for none).
    pub gate: Arc<dyn Gate>,
    /// Transcription of voice notes.
    pub transcriber: crate::media::Transcriber,
}

/// The turn as the components see it.
fn turn_scope<'a>(
    input: &TurnInput<'a>,
    session: &'a SessionRow,
    persona: &'a Persona,
) -> TurnScope<'a> {
    TurnScope {
        session_key: &session.key,
        route: input.route,
        message_id: input.message_id,
        persona,
        sender: input.sender,
        attachments: input.attachments.len(),
        reports_run: input.reports_run,
    }
}

impl Engine {
    pub fn new(parts: EngineParts) -> Self {
        let EngineParts {
            store,
            chain,
            config,
            feedback,
            outbox,
            tools,
            egress,
            personas,
            components,
            gate,
            transcriber,
        } = parts;
        let tool_tokens = tools
            .specs()
            .iter()
            .map(|t| (t.name.len() + t.description.len() + t.parameters.text().len()) / 4)
            .sum();
        let agent_specs = personas
            .agents()
            .all()
            .map(|agent| (agent.id.clone(), tools.specs_for(agent)))
            .collect();
        let mut feature_commands = std::collections::HashMap::new();
        for (i, component) in components.iter().enumerate() {
            for info in component.commands() {
                feature_commands.entry(info.command.name).or_insert(i);
            }
        }
        let help = crate::commands::help_text(&crate::commands::registered(
            components.iter().flat_map(|c| c.commands()),
        ));
        Engine {
            store,
            chain,
            config,
            feedback,
            outbox,
            tools,
            tool_tokens,
            personas,
            gate,
            components,
            feature_commands,
            help,
            agent_specs,
            offered: Default::default(),
            transcriber,
            attachment_fetch: egress,
        }
    }

    /// Who turns run as: the one persona resolver, for user turns and subagents alike.
    pub fn personas(&self) -> &Personas {
        &self.personas
    }

    /// Remove `owner`'s container, if it has one.
    pub(crate) async fn release_sandbox(&self, owner: &str) {
        if let Some(sandbox) = self.personas.sandbox() {
            sandbox.release(owner).await;
        }
    }

    /// The configured agents (bindings route messages to them).
    pub fn agents(&self) -> &Arc<Agents> {
        self.personas.agents()
    }

    /// The user's agent for a session.
    fn user_persona(&self, session: &SessionRow, spawner: Option<&Arc<dyn Spawner>>) -> Persona {
        self.personas
            .user(&session.key, self.session_model(session), spawner)
    }

    /// The tool specs offered to `persona`, each as its agent sees it (`Tool::spec_for`).
    pub(crate) fn offered_tools(&self, persona: &Persona) -> Arc<[ToolSpec]> {
        let own = self.agent_specs.get(&persona.agent.id);
        let mut specs = self.tools.specs_named(&persona.tools);
        for spec in &mut specs {
            if let Some(narrowed) = own.and_then(|o| o.iter().find(|n| n.name == spec.name)) {
                *spec = narrowed.clone();
            }
        }
        self.offered.share(specs, ToolSpec::shares)
    }

    /// The system prompt of a call: the persona's, the features' sections (a skill menu),
    /// then `extra` (the Active Plan, or planning instructions).
    pub(crate) fn system_prompt(&self, persona: &Persona, extra: Option<&str>) -> String {
        let mut system = persona.system.to_string();
        let sections = self
            .components
            .iter()
            .filter_map(|c| c.prompt_section(persona));
        for section in sections.chain(extra.map(str::to_string)) {
            system.push_str("\n\n");
            system.push_str(&section);
        }
        system
    }

    /// One turn of a subagent (no plan, its own persona). The caller commits the output.
    pub(crate) async fn run_child_turn(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        stop: &CancellationToken,
        text: &str,
        persona: &Persona,
    ) -> Result<TurnOutput, TurnError> {
        let tracker = Arc::new(PlanTracker::load(
            self.store.clone(),
            self.outbox.clone(),
            &session.key,
            None,
            input.route.clone(),
            None,
        ));
        self.run_model_turn(
            input,
            session,
            stop,
            text,
            tracker,
            TurnOutput::default(),
            persona,
        )
        .await
    }

    /// Run one turn for `text` (a chat command, `/plan`, or the tool loop) and return what it
    /// produced; the caller commits it. `stop` ends it early (`/stop`): what finished so far
    /// is returned. Knows no journal row.
    pub async fn run_turn(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        text: &str,
        stop: &CancellationToken,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> Result<TurnOutput, TurnError> {
        let output = self.answer(input, session, text, stop, spawner).await;
        // Whatever the gate kept for this message's own turn may go (a later attempt is a
        // redo, counted as such).
        self.gate
            .turn_ended(&self.message_scope(input, &session.key));
        output
    }

    /// The person's message a turn answers, as the gate sees it before and after the turn.
    fn message_scope<'a>(
        &'a self,
        input: &TurnInput<'a>,
        session_key: &'a str,
    ) -> crate::policy::CallScope<'a> {
        crate::policy::CallScope {
            session_key,
            agent: &self.agents().of_session(session_key).id,
            sender: input.sender,
            route: input.route,
            origin_message: Some(input.message_id),
            origin_fresh: false,
        }
    }

    /// [`Engine::run_turn`]'s work: the command, the plan or the tool loop.
    async fn answer(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        text: &str,
        stop: &CancellationToken,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> Result<TurnOutput, TurnError> {
        let route = input.route;
        let tracker = Arc::new(PlanTracker::load(
            self.store.clone(),
            self.outbox.clone(),
            &session.key,
            session.plan.as_deref(),
            route.clone(),
            Some(input.message_id.to_string()),
        ));
        let too_long = text.chars().count() > self.config.agent.max_input_chars;
        let command = Command::parse(text);
        // A person's message for the model (not a chat command) passes the gate first: one
        // over a rate limit is answered with the line saying when to try again.
        let for_model = match &command {
            None => true,
            Some(Command::Plan(task)) => !task.is_empty(),
            Some(_) => false,
        };
        // A subagent's report works for the person but is not a message of theirs.
        if for_model
            && input.job.is_none()
            && input.reports_run.is_none()
            && input.sender.is_some()
            && let Err(why) = self
                .admit_turn(self.message_scope(input, &session.key))
                .await
        {
            return Ok(TurnOutput::reply(OutboundKind::Error, why));
        }
        Ok(match command {
            // The limit holds for `/plan <task>` as for any text the model would read.
            Some(Command::Plan(task)) if !task.is_empty() && too_long => self.too_long(text),
            Some(Command::Plan(task)) if !task.is_empty() => {
                let persona = self.user_persona(session, spawner);
                match plan_request(&task, self.config.agent.plan_mode) {
                    // The rare turns are boxed: a turn's future (held by every in-flight turn)
                    // is then sized for the plain tool loop, not for planning or media.
                    PlanRequest::Decision(decision) => {
                        let turn =
                            self.plan_decision(decision, input, session, stop, &tracker, &persona);
                        self.with_typing(route, Box::pin(turn)).await?
                    }
                    PlanRequest::Task(_, "") => TurnOutput::reply(
                        OutboundKind::Error,
                        "Usage: /plan [--steps|--tracker] <task>",
                    ),
                    PlanRequest::Task(mode, task) => {
                        let turn = self
                            .run_planned_turn(input, session, stop, task, tracker, &persona, mode);
                        self.with_typing(route, Box::pin(turn)).await?
                    }
                }
            }
            Some(command) => {
                Box::pin(self.run_command(command, session, spawner, input.sender)).await?
            }
            None if too_long => self.too_long(text),
            None if !input.attachments.is_empty() => {
                let persona = self.user_persona(session, spawner);
                let turn = self.run_media_turn(input, session, stop, text, tracker, &persona);
                Box::pin(turn).await?
            }
            None => {
                let persona = self.user_persona(session, spawner);
                let turn = self.run_model_turn(
                    input,
                    session,
                    stop,
                    text,
                    tracker,
                    TurnOutput::default(),
                    &persona,
                );
                // Pinned here, so the turn is held once (an async fn's by-value argument is
                // kept beside the copy it awaits: 6 KB more for every turn in flight).
                tokio::pin!(turn);
                self.with_typing(route, turn).await?
            }
        })
    }

    /// A message with files: the media step, then the tool loop with what it prepared.
    async fn run_media_turn(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        stop: &CancellationToken,
        text: &str,
        tracker: Arc<PlanTracker>,
        persona: &Persona,
    ) -> Result<TurnOutput, TurnError> {
        let prepared = match self.prepare_media(input, session, persona).await {
            Ok(prepared) => prepared,
            // A group voice note not addressed to the bot is not answered at all.
            Err(_) if !input.mention_names.is_empty() => return Ok(TurnOutput::default()),
            Err(refusal) => return Ok(TurnOutput::reply(OutboundKind::Error, refusal)),
        };
        if !input.mention_names.is_empty() && !prepared.names_any(input.mention_names) {
            tracing::info!("group voice note does not name the bot; not answered");
            return Ok(TurnOutput::default());
        }
        let text = prepared.text_with(text);
        let input = TurnInput {
            images: &prepared.images,
            ..*input
        };
        let turn = self.run_model_turn(
            &input,
            session,
            stop,
            &text,
            tracker,
            TurnOutput::default(),
            persona,
        );
        tokio::pin!(turn);
        self.with_typing(input.route, turn).await
    }

    /// A tool that runs a plan (`plan_and_execute`, `Tool::runs_a_plan`): plan `task`
    /// (read-only) and run it as a `steps` plan in bounded
    /// loops; the result is the final answer (or the question after a step failed twice).
    pub(crate) async fn plan_tool(
        &self,
        arguments: &str,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        tracker: &PlanTracker,
        persona: &Persona,
    ) -> (String, (i64, i64)) {
        let task = serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v["task"].as_str().map(str::trim).map(str::to_string))
            .filter(|t| !t.is_empty());
        let Some(task) = task else {
            return (
                "Error: invalid arguments: field `task` must be a non-empty string".into(),
                (0, 0),
            );
        };
        // The plan runs for the tool: its calls are background work.
        let input = &TurnInput {
            for_tool: true,
            ..*input
        };
        let mut planned = TurnOutput::default();
        let Some((goal, steps)) = self
            .plan_task(input, session, stop, &task, persona, &mut planned)
            .await
        else {
            return ("stopped".into(), (planned.tokens_in, planned.tokens_out));
        };
        if let Err(e) = tracker
            .create(goal, steps, crate::plan::PlanMode::Steps)
            .await
        {
            return (format!("Error: could not store the plan: {e}"), (0, 0));
        }
        match self.run_steps(input, session, stop, tracker, persona).await {
            Ok(outcome) => (
                outcome.text,
                (
                    planned.tokens_in + outcome.tokens_in,
                    planned.tokens_out + outcome.tokens_out,
                ),
            ),
            Err(e) => (format!("Error: {e}"), (0, 0)),
        }
    }

    fn too_long(&self, text: &str) -> TurnOutput {
        TurnOutput::reply(
            OutboundKind::Error,
            format!(
                "That message is too long ({} characters; the limit is {}). Please shorten it.",
                text.chars().count(),
                self.config.agent.max_input_chars
            ),
        )
    }

    /// What the components recall for `text` in this turn (memories), as one section.
    pub(super) async fn recall(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        persona: &Persona,
        text: &str,
    ) -> Option<String> {
        let turn = turn_scope(input, session, persona);
        let mut sections = Vec::new();
        for component in &self.components {
            sections.extend(component.recall(&turn, text).await);
        }
        (!sections.is_empty()).then(|| sections.join("\n\n"))
    }

    /// What tools may know of this turn: its identity, and the handles the features (and
    /// the session's plan tracker) put in for their tools.
    fn tool_context(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        plan: Option<Arc<PlanTracker>>,
        persona: &Persona,
    ) -> ToolContext {
        let mut handles = crate::tools::TurnHandles::default();
        if let Some(tracker) = plan {
            handles.insert(tracker);
        }
        if self.sees_images(&persona.model) {
            handles.insert(crate::tools::ToolImages::default());
        }
        let turn = turn_scope(input, session, persona);
        for component in &self.components {
            component.prepare_turn(&turn, &mut handles);
        }
        // A subagent's "current chat" is the thread its parent was asked in.
        let (route, in_reply_to) = persona
            .origin
            .clone()
            .unwrap_or_else(|| (input.route.clone(), Some(input.message_id.to_string())));
        ToolContext {
            session_key: session.key.clone(),
            route,
            in_reply_to,
            workspace: context::workspace_for(&persona.agent.workspace, &session.key),
            agent_id: persona.agent.id.clone(),
            sender: input.sender.map(str::to_string),
            job: input.job.map(str::to_string),
            effects: input
                .effects
                .map(|(key, redo)| crate::tools::EffectLog::new(self.store.clone(), key, redo)),
            time_limit: std::time::Duration::from_secs(self.config.tools.timeout_secs),
            handles,
        }
    }

    /// Run `work` while the channel shows a typing indicator, refreshed every 4 seconds.
    /// `work` is pinned by the caller (`Pin<&mut _>` or `Pin<Box<_>>`): a turn moved in by
    /// value would be stored twice in this future.
    async fn with_typing<T>(
        &self,
        route: &ChatRoute,
        work: impl std::future::Future<Output = T> + Unpin,
    ) -> T {
        if !self.feedback.live(route) {
            return work.await;
        }
        let ticker = async {
            loop {
                self.feedback.typing(route).await;
                tokio::time::sleep(std::time::Duration::from_secs(4)).await;
            }
        };
        tokio::select! {
            out = work => out,
            never = ticker => never,
        }
    }

    /// Estimated tokens the tool definitions add to every call.
    fn tool_tokens(&self) -> usize {
        self.tool_tokens
    }

    fn session_model(&self, session: &SessionRow) -> ModelRef {
        match session.model.as_deref() {
            Some(name) => {
                ModelRef::parse(name).expect("models are validated at config load and on /model")
            }
            None => self.agents().of_session(&session.key).model.clone(),
        }
    }

    /// Run the chain while forwarding deltas to the channel, in order, from this task.
    async fn complete_streaming(
        &self,
        call: calls::ModelCall<'_>,
        request: &ChatRequest,
        input: &TurnInput<'_>,
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        let route = input.route;
        // A job's turn is not streamed: a heartbeat's silent answer must never show.
        if !self.feedback.live(route) || input.job.is_some() {
            return self.call_model(call, request, &|_| {}).await;
        }
        // Text not yet shown, taken whole by the forwarder (deltas that arrive while the
        // chat is being updated are shown together): a string and a wake-up per turn, where
        // a channel allocated a 32-slot block for each of thousands of waiting turns.
        let pending = std::sync::Mutex::new(String::new());
        let wake = tokio::sync::Notify::new();
        let done = std::sync::atomic::AtomicBool::new(false);
        let take = || std::mem::take(&mut *pending.lock().expect("pending deltas lock"));
        let sink = |delta: &str| {
            pending.lock().expect("pending deltas lock").push_str(delta);
            wake.notify_one();
        };
        let in_reply_to = input.message_id;
        let forward = async {
            loop {
                wake.notified().await;
                // Read before taking: text pushed before the end is in this take.
                let finished = done.load(std::sync::atomic::Ordering::Acquire);
                let text = take();
                if !text.is_empty() {
                    self.feedback.delta(route, in_reply_to, &text).await;
                }
                if finished {
                    break;
                }
            }
        };
        let complete = async {
            let result = self.call_model(call, request, &sink).await;
            done.store(true, std::sync::atomic::Ordering::Release);
            wake.notify_one();
            result
        };
        let (result, ()) = tokio::join!(complete, forward);
        result
    }
}
