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
mod planning;
mod turn;

pub use commands::{COMMANDS, Command, HELP_TEXT};

use crate::config::Config;
use crate::outbox::OutboxNotifier;
use crate::plan::PlanTracker;
use crate::providers::{ChainError, ChatRequest, ChatResponse, FallbackChain, ModelRef};
use crate::storage::{
    JournalEntry, NewOutbound, NewTranscriptEntry, SessionRow, Store, StoreError, TurnCommit,
};
use crate::tools::{ToolContext, ToolRegistry};
use crate::turn_watch::TurnWatch;
use ferroclaw_channel_core::{Channel, ChatRoute, OutboundKind};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Channels by instance name, for streaming deltas.
pub type ChannelMap = HashMap<String, Arc<dyn Channel>>;

pub struct Engine {
    store: Arc<dyn Store>,
    chain: Arc<FallbackChain>,
    config: Arc<Config>,
    channels: ChannelMap,
    outbox: OutboxNotifier,
    tools: Arc<ToolRegistry>,
    tool_tokens: usize,
    turns: TurnWatch,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a turn produced before it is committed.
#[derive(Default)]
struct TurnOutput {
    entries: Vec<NewTranscriptEntry>,
    outbound: Vec<(OutboundKind, String)>,
    tokens_in: i64,
    tokens_out: i64,
    model: Option<String>,
}

impl TurnOutput {
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
        channels: ChannelMap,
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
            channels,
            outbox,
            tools,
            tool_tokens,
            turns,
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn outbox(&self) -> &OutboxNotifier {
        &self.outbox
    }

    /// Handle one journalled message to completion. `stop` ends the turn early (`/stop`): what
    /// finished so far is committed. On `Ok` the journal entry is answered and its replies are
    /// in the outbox; on `Err` nothing was committed and the entry stays pending.
    #[tracing::instrument(skip_all, fields(session = %entry.session_key, journal_id = entry.id))]
    pub async fn handle(
        &self,
        entry: &JournalEntry,
        stop: &CancellationToken,
    ) -> Result<(), TurnError> {
        let now = crate::clock::now_ms();
        let route = &entry.message.route;
        let mut session = self
            .store
            .session_get_or_create(&entry.session_key, route, now)
            .await?;
        let text = entry.message.text.trim();
        let tracker = Arc::new(PlanTracker::load(
            self.store.clone(),
            self.outbox.clone(),
            &session.key,
            session.plan.as_deref(),
            route.clone(),
            Some(entry.message.platform_message_id.clone()),
        ));
        let output = match Command::parse(text) {
            Some(Command::Plan(task)) if !task.is_empty() => {
                let turn = self.run_planned_turn(entry, &mut session, stop, &task, tracker);
                self.with_typing(route, turn).await?
            }
            Some(command) => self.run_command(command, &mut session).await?,
            None if text.chars().count() > self.config.agent.max_input_chars => TurnOutput::reply(
                OutboundKind::Error,
                format!(
                    "That message is too long ({} characters; the limit is {}). Please shorten it.",
                    text.chars().count(),
                    self.config.agent.max_input_chars
                ),
            ),
            None => {
                let turn = self.run_model_turn(
                    entry,
                    &mut session,
                    stop,
                    text,
                    tracker,
                    TurnOutput::default(),
                );
                self.with_typing(route, turn).await?
            }
        };
        let in_reply_to = Some(entry.message.platform_message_id.clone());
        let commit = TurnCommit {
            journal_id: Some(entry.id),
            session_key: entry.session_key.clone(),
            epoch: session.epoch,
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
        match self.store.commit_turn(&commit).await {
            Ok(_) => {}
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

    /// What tools may know of this turn.
    fn tool_context(
        &self,
        entry: &JournalEntry,
        session: &SessionRow,
        plan: Option<Arc<PlanTracker>>,
    ) -> ToolContext {
        ToolContext {
            session_key: session.key.clone(),
            route: entry.message.route.clone(),
            in_reply_to: Some(entry.message.platform_message_id.clone()),
            workspace: context::workspace_for(&self.config.agent.workspace, &session.key),
            store: self.store.clone(),
            outbox: self.outbox.clone(),
            plan,
        }
    }

    /// Run `work` while the channel shows a typing indicator, refreshed every 4 seconds.
    async fn with_typing<T>(
        &self,
        route: &ChatRoute,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        let Some(channel) = self.channels.get(&route.channel) else {
            return work.await;
        };
        let ticker = async {
            loop {
                channel.typing(route).await;
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
        let name = session.model.as_deref().unwrap_or(&self.config.agent.model);
        ModelRef::parse(name).expect("models are validated at config load and on /model")
    }

    /// Run the chain while forwarding deltas to the channel, in order, from this task.
    async fn complete_streaming(
        &self,
        model: &ModelRef,
        request: &ChatRequest,
        entry: &JournalEntry,
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        let Some(channel) = self.channels.get(&entry.message.route.channel).cloned() else {
            return self.chain.complete(model, request, &|_| {}).await;
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let sink = move |delta: &str| {
            let _ = tx.send(delta.to_string());
        };
        let route = &entry.message.route;
        let in_reply_to = &entry.message.platform_message_id;
        let forward = async {
            while let Some(delta) = rx.recv().await {
                channel.stream_delta(route, in_reply_to, &delta).await;
            }
        };
        let complete = async move {
            let result = self.chain.complete(model, request, &sink).await;
            drop(sink);
            result
        };
        let (result, ()) = tokio::join!(complete, forward);
        result
    }
}
