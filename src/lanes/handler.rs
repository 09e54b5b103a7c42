//! The lane's handler: a journalled message in, an answered journal entry out. It counts
//! redone attempts, caps chains of turns started by subagent outcomes, asks the engine for
//! the turn (`Engine::run_turn`, which knows no journal row) and commits the result —
//! transcript, replies and the answered-mark in one transaction, waiting out a database
//! that cannot write. Entries answered without a turn (`/stop`, refusals, crashed or
//! given-up turns) are committed here too.

use super::TurnWatch;
use crate::engine::{Engine, TurnError, TurnInput, TurnOutput};
use crate::outbox::OutboxNotifier;
use crate::spawn::Spawner;
use crate::storage::{JournalEntry, NewOutbound, Store, StoreError, TurnCommit};
use ferroclaw_channel_core::OutboundKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use crate::storage::MAX_TURN_ATTEMPTS;

pub struct TurnHandler {
    engine: Arc<Engine>,
    store: Arc<dyn Store>,
    outbox: OutboxNotifier,
    turns: TurnWatch,
    /// Handed to every turn (None: subagents are off).
    spawner: Option<Arc<dyn Spawner>>,
    max_chained_turns: u32,
    chains: ChainGuard,
}

impl TurnHandler {
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        turns: TurnWatch,
        spawner: Option<Arc<dyn Spawner>>,
        max_chained_turns: u32,
    ) -> Self {
        TurnHandler {
            engine,
            store,
            outbox,
            turns,
            spawner,
            max_chained_turns,
            chains: ChainGuard::default(),
        }
    }

    /// Handle one journalled message to completion. `stop` ends the turn early (`/stop`): what
    /// finished so far is committed. On `Ok` the journal entry is answered and its replies are
    /// in the outbox; on `Err` nothing was committed and the entry stays pending.
    #[tracing::instrument(skip_all, fields(channel = %entry.message.route.channel, session = %entry.session_key, journal_id = entry.id))]
    pub async fn handle(
        &self,
        entry: &JournalEntry,
        stop: &CancellationToken,
    ) -> Result<(), TurnError> {
        let job = crate::schedules::job_of_message(&entry.message);
        let mut heartbeat = false;
        // A cancelled job's queued turns are dropped (answered with nothing).
        if let Some(job) = job {
            let row = self.store.job_get(job).await?;
            heartbeat = row.as_ref().is_some_and(|job| job.heartbeat);
            let cancelled = row.is_none_or(|job| job.state == crate::storage::JobState::Cancelled);
            if cancelled {
                tracing::info!(job, "the job was cancelled; its queued turn is dropped");
                crate::metrics::job_run("dropped_cancelled");
                return Ok(self.answer(entry, None).await?);
            }
        }
        // A subagent's outcome starts an internal turn, which may spawn again: such chains
        // are capped, and `/stop` ends them.
        // A job's turn is not a chain step (jobs have their own limits).
        if entry.message.internal && job.is_none() {
            if !self.chains.step(&entry.session_key, self.max_chained_turns) {
                tracing::info!(session = %entry.session_key, "chained internal turn not run (stopped or subagents.max_chained_turns reached)");
                return Ok(self.answer(entry, None).await?);
            }
        } else {
            self.chains.reset(&entry.session_key);
        }
        let route = &entry.message.route;
        let started = std::time::Instant::now();
        let mut session = self
            .store
            .session_get_or_create(&entry.session_key, route, crate::clock::now_ms())
            .await?;
        let effects = crate::storage::effects_key(entry.id);
        let input = TurnInput {
            route,
            message_id: &entry.message.platform_message_id,
            effects: Some((&effects, entry.redo)),
            sender: Some(&entry.message.sender.id),
            attachments: &entry.message.attachments,
            images: &[],
            mention_names: &entry.message.mention_names,
            job,
            heartbeat,
            for_tool: false,
            // Only the service writes internal entries (a client's message id is its own).
            reports_run: entry
                .message
                .internal
                .then(|| entry.message.platform_message_id.strip_prefix("subagent:"))
                .flatten(),
        };
        let output: TurnOutput = self
            .engine
            .run_turn(
                &input,
                &mut session,
                entry.message.text.trim(),
                stop,
                self.spawner.as_ref(),
            )
            .await?;
        let in_reply_to = Some(entry.message.platform_message_id.clone());
        let called_tools = output.entries.iter().any(|e| e.tool_calls.is_some());
        let outcome = if output
            .outbound
            .iter()
            .any(|(k, _)| *k == OutboundKind::Error)
        {
            "error"
        } else {
            "answered"
        };
        let summary = (output.model.clone(), output.tokens_in, output.tokens_out);
        let commit = TurnCommit {
            journal_id: Some(entry.id),
            session_key: entry.session_key.clone(),
            epoch: session.epoch,
            clear_effects: entry.redo || called_tools,
            run_step: None,
            entries: output.entries,
            outbound: output
                .outbound
                .into_iter()
                // A job's turn answering only the silence sentinel posts nothing.
                .filter(|(kind, text)| {
                    !(crate::schedules::is_job_message(&entry.message)
                        && *kind == OutboundKind::Reply
                        && text.trim() == crate::schedules::SILENT)
                })
                .map(|(kind, text)| NewOutbound {
                    route: route.clone(),
                    kind,
                    text,
                    in_reply_to: in_reply_to.clone(),
                    edit_of: None,
                    file: None,
                    approval: None,
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
        let took = started.elapsed();
        crate::metrics::turn(outcome, took);
        // The one line per turn an operator reads (the message itself only at DEBUG).
        tracing::info!(
            model = summary.0.as_deref().unwrap_or("-"),
            tokens_in = summary.1,
            tokens_out = summary.2,
            duration_ms = took.as_millis() as u64,
            outcome,
            "turn"
        );
        tracing::debug!(text = %entry.message.text, "turn input");
        Ok(())
    }

    /// End the session's chain of internal turns (`/stop`): outcomes still arriving are
    /// announced, but no longer start turns, until the user writes again.
    pub fn stop_chain(&self, session_key: &str) {
        self.chains.stop(session_key);
    }

    /// Kill every live subagent of the session (`/stop`); returns how many.
    pub fn kill_subagents(&self, session_key: &str) -> usize {
        self.spawner
            .as_ref()
            .map_or(0, |s| s.kill(session_key, "all"))
    }

    /// Commit a finished turn, waiting out a database that cannot write (a full disk, a
    /// restarting server) instead of throwing the turn's work away: the lane holds its
    /// place, so order is kept, and the commit lands as soon as writes work again. Only
    /// `AlreadyAnswered` and corrupt data end it early.
    async fn commit_durably(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let mut wait = Duration::from_millis(100);
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
                    wait = (wait * 2).min(Duration::from_secs(5));
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
        crate::metrics::turn("given_up", Duration::ZERO);
        self.answer(entry, Some((OutboundKind::Error, text.into())))
            .await
    }

    /// Answer a journal entry whose turn crashed, with an error reply.
    pub async fn answer_failed(&self, entry: &JournalEntry) -> Result<(), StoreError> {
        let text = "⚠️ Something went wrong while handling this message; it was not processed. Please try again.";
        crate::metrics::turn("failed", Duration::ZERO);
        self.answer(entry, Some((OutboundKind::Error, text.into())))
            .await
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
                    file: None,
                    approval: None,
                })
                .collect(),
            tokens_in: 0,
            tokens_out: 0,
            last_model: None,
            now_ms: crate::clock::now_ms(),
            clear_effects: entry.redo,
            run_step: None,
        };
        match self.commit_durably(&commit).await {
            Ok(()) | Err(StoreError::AlreadyAnswered(_)) => {}
            Err(err) => return Err(err),
        }
        self.outbox.kick(&route.channel);
        self.turns.answered(entry.id);
        Ok(())
    }
}

/// Internal turns run in a row per session since the user last wrote. Sessions without a
/// chain have no entry.
#[derive(Default)]
struct ChainGuard {
    chained: Mutex<HashMap<String, u32>>,
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
