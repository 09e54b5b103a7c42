//! The agent engine: turns one journalled inbound message into a committed turn.
//!
//! A turn reads the session and a bounded window of its transcript, runs the tool loop
//! (`turn.rs`: model → tool calls → results → model, through the fallback chain), and commits
//! the transcript entries, the bot messages and the journal's "answered" mark in ONE
//! transaction. It never does channel I/O other than streaming deltas: replies leave through
//! the outbox (`crate::outbox`).

mod commands;
mod compact;
mod context;
mod feedback;
mod planning;
mod turn;

pub use commands::{COMMANDS, Command, HELP_TEXT};
pub use context::workspace_for;
pub use feedback::LiveFeedback;

use crate::config::Config;
use crate::outbox::OutboxNotifier;
use crate::plan::PlanTracker;
use crate::providers::{ChainError, ChatRequest, ChatResponse, FallbackChain, ModelRef};
use crate::spawn::{SpawnHandle, SpawnScope, Spawner, StepObserver};
use crate::storage::{
    JournalEntry, NewOutbound, NewTranscriptEntry, SessionRow, Store, StoreError, TurnCommit,
};
use crate::tools::{ToolContext, ToolRegistry};
use crate::turn_watch::TurnWatch;
use ferroclaw_channel_core::{ChatRoute, OutboundKind};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A journal entry whose turn was started this many times, each time ending with the
/// process, is given up (answered with an error) instead of being started again.
pub const MAX_TURN_ATTEMPTS: i64 = 3;

/// Who the agent is in a turn: the user's agent (depth 0) or a subagent.
pub struct Persona {
    pub system: String,
    /// Tool names offered.
    pub tools: Vec<String>,
    pub model: ModelRef,
    pub depth: u32,
    /// For subagents: the chat/thread (and message) their own children announce into.
    pub origin: Option<(ChatRoute, Option<String>)>,
    /// For subagents: hears the tools of each step (their status message shows them).
    pub progress: Option<Arc<dyn StepObserver>>,
    /// Where this agent's own `sessions_spawn` children go (None: it may not spawn).
    pub spawner: Option<Arc<dyn Spawner>>,
}

/// Internal turns run in a row per session since the user last wrote. Sessions without a
/// chain have no entry.
#[derive(Default)]
struct ChainGuard {
    chained: std::sync::Mutex<HashMap<String, u32>>,
}

impl ChainGuard {
    /// Count one more internal turn; false when it must not run.
    fn step(&self, session_key: &str, max: u32) -> bool {
        let mut chained = self.chained.lock().expect("chain lock");
        let n = chained.entry(session_key.to_string()).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    fn reset(&self, session_key: &str) {
        let mut chained = self.chained.lock().expect("chain lock");
        if !chained.is_empty() {
            chained.remove(session_key);
        }
    }

    fn stop(&self, session_key: &str) {
        self.chained
            .lock()
            .expect("chain lock")
            .insert(session_key.to_string(), u32::MAX);
    }
}

pub struct Engine {
    store: Arc<dyn Store>,
    chain: Arc<FallbackChain>,
    config: Arc<Config>,
    feedback: Arc<dyn LiveFeedback>,
    outbox: OutboxNotifier,
    tools: Arc<ToolRegistry>,
    tool_tokens: usize,
    turns: TurnWatch,
    chains: ChainGuard,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a model turn works from: the chat it answers in and the message it answers, and
/// for a user's turn the journal entry (id, redo) whose side effects are recorded. Not a
/// journal row: a subagent's turns have none.
pub struct TurnInput<'a> {
    pub route: &'a ChatRoute,
    /// The platform id of the message answered (streamed previews and replies refer to it).
    pub message_id: &'a str,
    pub journal: Option<(i64, bool)>,
}

/// What a turn produced before it is committed.
#[derive(Default)]
pub(crate) struct TurnOutput {
    pub(crate) entries: Vec<NewTranscriptEntry>,
    pub(crate) outbound: Vec<(OutboundKind, String)>,
    pub(crate) tokens_in: i64,
    pub(crate) tokens_out: i64,
    pub(crate) model: Option<String>,
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

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        chain: Arc<FallbackChain>,
        config: Arc<Config>,
        feedback: Arc<dyn LiveFeedback>,
        outbox: OutboxNotifier,
        tools: Arc<ToolRegistry>,
        turns: TurnWatch,
    ) -> Self {
        let tool_tokens = tools
            .specs()
            .iter()
            .map(|t| (t.name.len() + t.description.len() + t.parameters.to_string().len()) / 4)
            .sum();
        Engine {
            store,
            chain,
            config,
            feedback,
            outbox,
            tools,
            tool_tokens,
            turns,
            chains: ChainGuard::default(),
        }
    }

    /// End the session's chain of internal turns (`/stop`): outcomes still arriving are
    /// announced, but no longer start turns, until the user writes again.
    pub fn stop_chain(&self, session_key: &str) {
        self.chains.stop(session_key);
    }

    /// True when `model` names a configured provider.
    pub fn knows_model(&self, model: &ModelRef) -> bool {
        self.chain.knows(model)
    }

    /// The user's agent for a session.
    fn user_persona(&self, session: &SessionRow, spawner: Option<&Arc<dyn Spawner>>) -> Persona {
        let spawning = self.config.subagents.max_depth > 0 && spawner.is_some();
        Persona {
            system: self.config.agent.system_prompt.clone(),
            tools: self
                .tools
                .names()
                .into_iter()
                .filter(|n| spawning || (*n != "sessions_spawn" && *n != "subagents"))
                .map(str::to_string)
                .collect(),
            model: self.session_model(session),
            depth: 0,
            origin: None,
            progress: None,
            spawner: spawner.filter(|_| spawning).cloned(),
        }
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

    /// Handle one journalled message to completion. `stop` ends the turn early (`/stop`): what
    /// finished so far is committed. On `Ok` the journal entry is answered and its replies are
    /// in the outbox; on `Err` nothing was committed and the entry stays pending.
    #[tracing::instrument(skip_all, fields(session = %entry.session_key, journal_id = entry.id))]
    pub async fn handle(
        &self,
        entry: &JournalEntry,
        stop: &CancellationToken,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> Result<(), TurnError> {
        // A subagent's outcome starts an internal turn, which may spawn again: such chains
        // are capped, and `/stop` ends them.
        if entry.message.internal {
            if !self
                .chains
                .step(&entry.session_key, self.config.subagents.max_chained_turns)
            {
                tracing::info!(session = %entry.session_key, "chained internal turn not run (stopped or subagents.max_chained_turns reached)");
                return Ok(self.answer(entry, None).await?);
            }
        } else {
            self.chains.reset(&entry.session_key);
        }
        let now = crate::clock::now_ms();
        let route = &entry.message.route;
        let mut session = self
            .store
            .session_get_or_create(&entry.session_key, route, now)
            .await?;
        let text = entry.message.text.trim();
        let input = TurnInput {
            route,
            message_id: &entry.message.platform_message_id,
            journal: Some((entry.id, entry.redo)),
        };
        let tracker = Arc::new(PlanTracker::load(
            self.store.clone(),
            self.outbox.clone(),
            &session.key,
            session.plan.as_deref(),
            route.clone(),
            Some(entry.message.platform_message_id.clone()),
        ));
        let too_long = text.chars().count() > self.config.agent.max_input_chars;
        let output = match Command::parse(text) {
            // The limit holds for `/plan <task>` as for any text the model would read.
            Some(Command::Plan(task)) if !task.is_empty() && too_long => self.too_long(text),
            Some(Command::Plan(task)) if !task.is_empty() => {
                let persona = self.user_persona(&session, spawner);
                let turn =
                    self.run_planned_turn(&input, &mut session, stop, &task, tracker, &persona);
                self.with_typing(route, turn).await?
            }
            Some(command) => self.run_command(command, &mut session, spawner).await?,
            None if too_long => self.too_long(text),
            None => {
                let persona = self.user_persona(&session, spawner);
                let turn = self.run_model_turn(
                    &input,
                    &mut session,
                    stop,
                    text,
                    tracker,
                    TurnOutput::default(),
                    &persona,
                );
                self.with_typing(route, turn).await?
            }
        };
        let in_reply_to = Some(entry.message.platform_message_id.clone());
        let called_tools = output.entries.iter().any(|e| e.tool_calls.is_some());
        let commit = TurnCommit {
            journal_id: Some(entry.id),
            session_key: entry.session_key.clone(),
            epoch: session.epoch,
            clear_effects: entry.redo || called_tools,
            entries: output.entries,
            outbound: output
                .outbound
                .into_iter()
                .map(|(kind, text)| NewOutbound {
                    route: route.clone(),
                    kind,
                    text,
                    in_reply_to: in_reply_to.clone(),
                    edit_of: None,
                })
                .collect(),
            tokens_in: output.tokens_in,
            tokens_out: output.tokens_out,
            last_model: output.model,
            now_ms: crate::clock::now_ms(),
        };
        match self.commit_durably(&commit).await {
            Ok(()) => {}
            // Another attempt already answered it: the earlier answer stands, this one is dropped.
            Err(StoreError::AlreadyAnswered(id)) => {
                tracing::warn!(
                    journal_id = id,
                    "turn already answered; dropping duplicate result"
                );
            }
            Err(err) => return Err(err.into()),
        }
        self.outbox.kick(&route.channel);
        self.turns.answered(entry.id);
        Ok(())
    }

    /// Commit a finished turn, waiting out a database that cannot write (a full disk, a
    /// restarting server) instead of throwing the turn's work away: the lane holds its
    /// place, so order is kept, and the commit lands as soon as writes work again. Only
    /// `AlreadyAnswered` and corrupt data end it early.
    async fn commit_durably(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let mut wait = std::time::Duration::from_millis(100);
        for attempt in 1u64.. {
            match self.store.commit_turn(commit).await {
                Ok(_) => return Ok(()),
                Err(err @ (StoreError::AlreadyAnswered(_) | StoreError::Corrupt(_))) => {
                    return Err(err);
                }
                Err(err) => {
                    if attempt == 1 || attempt.is_multiple_of(20) {
                        tracing::warn!(journal_id = ?commit.journal_id, attempt, error = %err, "could not commit a turn; retrying until the database takes writes");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_secs(5));
                }
            }
        }
        unreachable!("the loop only ends by returning")
    }

    /// Count a redo of the turn of `entry` (found unfinished on start); returns the redos so
    /// far, this one included. The first start is not counted (no write), so `n` redos mean
    /// `n` earlier starts that never finished (see the lane).
    pub async fn begin_attempt(&self, entry: &JournalEntry) -> Result<i64, StoreError> {
        self.store.journal_begin_attempt(entry.id).await
    }

    /// Answer a journal entry whose turn was started `MAX_TURN_ATTEMPTS` times without
    /// finishing (each start ended with the process dying).
    pub async fn answer_given_up(&self, entry: &JournalEntry) -> Result<(), StoreError> {
        let text = "⚠️ This message could not be processed: handling it stopped the service several times, so it was given up. Please rephrase or try again later.";
        self.answer(entry, Some((OutboundKind::Error, text.into())))
            .await
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

    /// What tools may know of this turn.
    fn tool_context(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        plan: Option<Arc<PlanTracker>>,
        persona: Option<&Persona>,
    ) -> ToolContext {
        let spawn = persona.and_then(|persona| {
            let spawner = persona.spawner.clone()?;
            let (origin, origin_message) = persona
                .origin
                .clone()
                .unwrap_or_else(|| (input.route.clone(), Some(input.message_id.to_string())));
            Some(SpawnHandle {
                spawner,
                scope: Arc::new(SpawnScope {
                    parent_session: session.key.clone(),
                    origin,
                    origin_message,
                    depth: persona.depth,
                    parent_model: persona.model.clone(),
                    parent_system: persona.system.clone(),
                    parent_tools: persona.tools.clone(),
                    spawned_this_turn: Default::default(),
                }),
            })
        });
        // A subagent's "current chat" is the thread its parent was asked in.
        let (route, in_reply_to) = persona
            .and_then(|p| p.origin.clone())
            .unwrap_or_else(|| (input.route.clone(), Some(input.message_id.to_string())));
        ToolContext {
            spawn,
            session_key: session.key.clone(),
            route,
            in_reply_to,
            workspace: context::workspace_for(&self.config.agent.workspace, &session.key),
            store: self.store.clone(),
            outbox: self.outbox.clone(),
            plan,
            // Only a user's turn is redone after a crash (a subagent's turn is not journalled).
            effects: input
                .journal
                .filter(|_| persona.is_none_or(|p| p.depth == 0))
                .map(|(id, redo)| crate::tools::EffectLog::for_journal_entry(id, redo)),
            time_limit: std::time::Duration::from_secs(self.config.tools.timeout_secs),
        }
    }

    /// Run `work` while the channel shows a typing indicator, refreshed every 4 seconds.
    async fn with_typing<T>(
        &self,
        route: &ChatRoute,
        work: impl std::future::Future<Output = T>,
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

    /// Answer a journal entry without a model turn (`/stop`, access refusals, a crashed
    /// turn): mark it answered with at most one reply, in one commit.
    pub async fn answer(
        &self,
        entry: &JournalEntry,
        reply: Option<(OutboundKind, String)>,
    ) -> Result<(), StoreError> {
        let route = &entry.message.route;
        let epoch = self
            .store
            .session_get(&entry.session_key)
            .await?
            .map(|s| s.epoch)
            .unwrap_or(0);
        let commit = TurnCommit {
            journal_id: Some(entry.id),
            session_key: entry.session_key.clone(),
            epoch,
            entries: Vec::new(),
            outbound: reply
                .into_iter()
                .map(|(kind, text)| NewOutbound {
                    route: route.clone(),
                    kind,
                    text,
                    in_reply_to: Some(entry.message.platform_message_id.clone()),
                    edit_of: None,
                })
                .collect(),
            tokens_in: 0,
            tokens_out: 0,
            last_model: None,
            now_ms: crate::clock::now_ms(),
            clear_effects: entry.redo,
        };
        match self.commit_durably(&commit).await {
            Ok(()) | Err(StoreError::AlreadyAnswered(_)) => {}
            Err(err) => return Err(err),
        }
        self.outbox.kick(&route.channel);
        self.turns.answered(entry.id);
        Ok(())
    }

    /// Answer a journal entry whose turn crashed, with an error reply.
    pub async fn answer_failed(&self, entry: &JournalEntry) -> Result<(), StoreError> {
        let text = "⚠️ Something went wrong while handling this message; it was not processed. Please try again.";
        self.answer(entry, Some((OutboundKind::Error, text.into())))
            .await
    }

    fn session_model(&self, session: &SessionRow) -> ModelRef {
        let name = session.model.as_deref().unwrap_or(&self.config.agent.model);
        ModelRef::parse(name).expect("models are validated at config load and on /model")
    }

    /// Run the chain while forwarding deltas to the channel, in order, from this task.
    async fn complete_streaming(
        &self,
        model: &ModelRef,
        request: &ChatRequest,
        input: &TurnInput<'_>,
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        let route = input.route;
        if !self.feedback.live(route) {
            return self.chain.complete_from(model, request, &|_| {}).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let sink = move |delta: &str| {
            let _ = tx.send(delta.to_string());
        };
        let in_reply_to = input.message_id;
        let forward = async {
            while let Some(delta) = rx.recv().await {
                self.feedback.delta(route, in_reply_to, &delta).await;
            }
        };
        let complete = async move {
            let result = self.chain.complete_from(model, request, &sink).await;
            drop(sink);
            result
        };
        let (result, ()) = tokio::join!(complete, forward);
        result
    }
}
