//! Running one child: wait for a slot (FIFO), run its tool loop in its own session with its
//! own prompt, model and tools, take `steer` instructions, respect the timeout and `kill`,
//! then finish: announce once and tell the parent. Each step is recorded in the run's row
//! before it runs (so another process can resume it, `resume.rs`) and its side effects
//! under the step's key (so a resumed step does not repeat them).

use super::resume::Start;
use super::{LiveRun, Registry, RunProgress, RunSpec, texts};
use crate::engine::{Persona, TurnInput};
use crate::storage::{
    NewOutbound, RunFinish, RunFinished, RunRow, RunState, StoreError, TurnCommit,
};
use ferroclaw_channel_core::{ChatKind, ChatRoute, InboundMessage, OutboundKind, Sender};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

enum Outcome {
    Ended {
        state: RunState,
        result: String,
    },
    /// The service is stopping: leave the run unannounced (reported after restart).
    Shutdown,
}

#[tracing::instrument(name = "subagent", skip_all, fields(run_id = %spec.id, parent = %spec.origin.parent_session))]
pub(crate) async fn run(
    registry: Arc<Registry>,
    live: Arc<LiveRun>,
    spec: RunSpec,
    (steer, reports): (
        mpsc::UnboundedReceiver<String>,
        mpsc::UnboundedReceiver<String>,
    ),
    slots: Arc<Semaphore>,
) {
    let shutdown = registry.cancel.clone();
    // Which live-subagent gauge this run counts in.
    let gauge = std::sync::Mutex::new("queued");
    crate::metrics::subagents_live("queued", 1.0);
    let work = async {
        let _slot = slots
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        // A resumed run keeps the time it first started.
        let started = (spec.start == Start::New).then(crate::clock::now_ms);
        if let Err(e) = registry
            .store
            .run_set_state(&spec.id, RunState::Running, started)
            .await
        {
            tracing::warn!(run_id = %spec.id, error = %e, "could not mark the run running");
        }
        live.state.send_replace(RunState::Running);
        {
            let mut current = gauge.lock().expect("gauge lock");
            crate::metrics::subagents_live(*current, -1.0);
            *current = "running";
            crate::metrics::subagents_live("running", 1.0);
        }
        if let Err(e) = show(&registry, &spec, RunState::Running.word()).await {
            tracing::warn!(run_id = %spec.id, error = %e, "could not update the status message");
        }
        match tokio::time::timeout(
            spec.timeout,
            execute(&registry, &spec, (steer, reports), live.activity.clone()),
        )
        .await
        {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Ended {
                state: RunState::TimedOut,
                result: format!(
                    "Timed out after {} s without finishing.",
                    spec.timeout.as_secs()
                ),
            },
        }
    };
    let outcome = tokio::select! {
        _ = shutdown.cancelled() => Outcome::Shutdown,
        _ = live.cancel.cancelled() => Outcome::Ended { state: RunState::Killed, result: "Killed before it finished.".into() },
        outcome = work => outcome,
    };
    crate::metrics::subagents_live(*gauge.lock().expect("gauge lock"), -1.0);
    if let Outcome::Ended { state, .. } = &outcome {
        crate::metrics::subagent_ended(state.as_str());
    }
    // The run's container goes with it (its workspace stays).
    registry
        .engine
        .release_sandbox(&Registry::session_key(&spec.agent.id, &spec.id))
        .await;
    match outcome {
        Outcome::Shutdown => {
            tracing::info!(run_id = %spec.id, "subagent stopped by shutdown; it is reported after restart")
        }
        Outcome::Ended { state, result } => {
            // A `delegate` still waiting takes the outcome as its result: no announcement
            // and no parent turn.
            let to_waiter = live
                .waiter
                .compare_exchange(
                    super::WAITED,
                    super::HANDED,
                    std::sync::atomic::Ordering::AcqRel,
                    std::sync::atomic::Ordering::Acquire,
                )
                .is_ok();
            let run = Ending {
                to_waiter,
                id: &spec.id,
                label: &spec.label,
                parent_session: &spec.origin.parent_session,
                origin_route: &spec.origin.route,
                origin_message: spec.origin.message.as_deref(),
                depth: i64::from(spec.depth),
                status_message: spec.status_message,
            };
            let mut attempts = 0;
            while let Err(e) = finish(&registry, &run, state, result.clone()).await {
                attempts += 1;
                tracing::warn!(run_id = %spec.id, error = %e, attempts, "could not record the run's end");
                if attempts >= 5 {
                    break; // still unannounced: reported after restart
                }
                tokio::time::sleep(Duration::from_millis(200 * attempts)).await;
            }
            // Waiters read the outcome from the store: tell them only once it is there.
            live.state.send_replace(state);
            let event = json!({"event": "ended", "run_id": spec.id, "label": spec.label, "state": state.as_str()});
            tracing::info!(run_id = %spec.id, label = %spec.label, state = state.as_str(), "subagent ended");
            registry.hook.notify(&event).await;
        }
    }
    registry.forget(&spec.id);
}

/// The child's conversation: the task, then steer instructions, until done.
async fn execute(
    registry: &Arc<Registry>,
    spec: &RunSpec,
    (mut steer, mut reports): (
        mpsc::UnboundedReceiver<String>,
        mpsc::UnboundedReceiver<String>,
    ),
    activity: Arc<std::sync::Mutex<String>>,
) -> Outcome {
    let engine = registry.engine.clone();
    let key = Registry::session_key(&spec.agent.id, &spec.id);
    let route = ChatRoute {
        channel: "subagent".into(),
        kind: ChatKind::Conversation,
        chat_id: spec.id.clone(),
        thread_id: None,
    };
    let mut session = match registry
        .store
        .session_get_or_create(&key, &route, crate::clock::now_ms())
        .await
    {
        Ok(s) => s,
        Err(e) => {
            return Outcome::Ended {
                state: RunState::Failed,
                result: format!("could not open its session: {e}"),
            };
        }
    };
    let progress = Arc::new(RunProgress::new(
        registry.store.clone(),
        registry.outbox.clone(),
        spec.origin.clone(),
        spec.label.clone(),
        spec.status_message,
        activity,
    ));
    // Its own container (a sandboxed run always; any run when the sandbox is on).
    let exec = engine.exec_place(&key, spec.sandbox);
    let persona = Persona {
        agent: spec.agent.clone(),
        skills: engine.skills_of(&spec.agent.id),
        system: spec.system.clone(),
        tools: spec
            .tools
            .iter()
            .filter(|t| exec.is_some() || *t != "exec")
            .cloned()
            .collect(),
        exec,
        model: spec.model.clone(),
        depth: spec.depth,
        origin: Some((spec.origin.route.clone(), spec.origin.message.clone())),
        progress: Some(progress),
        // Its own children (below subagents.max_depth) are spawned through the same registry.
        spawner: Some(Arc::new(registry.clone())),
    };
    // The next step's input (None: between steps); whether that input is already in the
    // run's row, and whether the step is a redo (its recorded side effects are replayed).
    let (mut step, mut pending, mut recorded, mut redo) = match &spec.start {
        Start::New => (1, Some(spec.task.clone()), true, false),
        Start::Resumed {
            step,
            input: Some(input),
        } => (*step, Some(input.clone()), true, true),
        // The step had committed: take up after it, its reply being the result so far.
        Start::Resumed { step, input: None } => (*step + 1, None, false, false),
    };
    let mut reply = match pending {
        Some(_) => String::new(),
        None => last_reply(registry, &key, session.epoch).await,
    };
    let mut failed = false;
    loop {
        if let Some(input) = pending.take() {
            if !recorded && let Err(e) = registry.store.run_set_step(&spec.id, step, &input).await {
                tracing::warn!(run_id = %spec.id, error = %e, "could not record the run's step");
            }
            let message_id = format!("{}:{step}", spec.id);
            let effects = crate::storage::run_effects_key(&spec.id, step);
            let turn_input = TurnInput {
                route: &route,
                message_id: &message_id,
                effects: Some((&effects, redo)),
                sender: None,
                attachments: &[],
                images: &[],
                mention_names: &[],
            };
            let stop = CancellationToken::new();
            let (output, steered) = {
                let turn =
                    engine.run_child_turn(&turn_input, &mut session, &stop, &input, &persona);
                tokio::pin!(turn);
                tokio::select! {
                    output = &mut turn => (output, None),
                    Some(message) = steer.recv() => {
                        stop.cancel();
                        (turn.await, Some(message))
                    }
                }
            };
            let output = match output {
                Ok(output) => output,
                Err(e) => {
                    return Outcome::Ended {
                        state: RunState::Failed,
                        result: format!("storage failed: {e}"),
                    };
                }
            };
            (reply, failed) = output.final_text();
            let epoch = session.epoch;
            if let Err(e) = registry
                .store
                .commit_turn(&TurnCommit {
                    journal_id: None,
                    session_key: key.clone(),
                    epoch,
                    entries: output.entries,
                    outbound: Vec::new(),
                    tokens_in: output.tokens_in,
                    tokens_out: output.tokens_out,
                    last_model: output.model,
                    now_ms: crate::clock::now_ms(),
                    clear_effects: false,
                    run_step: Some((spec.id.clone(), step)),
                })
                .await
            {
                tracing::warn!(run_id = %spec.id, error = %e, "could not save the child's transcript");
            }
            step += 1;
            (recorded, redo) = (false, false);
            if let Some(message) = steered {
                pending = Some(format!(
                    "[New instruction from the parent agent; it replaces what you were doing] {message}"
                ));
                continue;
            }
        }
        // Between steps. Its own children report to it: each outcome is another step; it
        // waits for the ones still running before it ends.
        if let Ok(report) = reports.try_recv() {
            pending = Some(report);
            continue;
        }
        let waiting_for = registry.live_of(&key);
        if !spec.session_mode && waiting_for > 0 {
            let _ = show(
                registry,
                spec,
                &format!("waiting for {waiting_for} subagent(s) it started"),
            )
            .await;
            tokio::select! {
                Some(report) = reports.recv() => pending = Some(report),
                Some(message) = steer.recv() => {
                    pending = Some(format!("[New instruction from the parent agent] {message}"));
                }
            }
            continue;
        }
        if !spec.session_mode {
            return Outcome::Ended {
                state: if failed {
                    RunState::Failed
                } else {
                    RunState::Done
                },
                result: reply,
            };
        }
        // `session` mode: report and stay alive for the next instruction.
        let _ = show(
            registry,
            spec,
            &format!("waiting for instructions; last result: {}", short(&reply)),
        )
        .await;
        tokio::select! {
            Some(report) = reports.recv() => pending = Some(report),
            message = steer.recv() => match message {
                Some(message) => pending = Some(message),
                None => {
                    return Outcome::Ended {
                        state: RunState::Done,
                        result: reply,
                    };
                }
            },
        }
    }
}

/// The last thing a resumed run's committed steps said (its result so far).
async fn last_reply(registry: &Registry, key: &str, epoch: i64) -> String {
    match registry.store.transcript_recent(key, epoch, 0, 1).await {
        Ok(entries) => entries
            .into_iter()
            .find(|e| e.role == crate::storage::TranscriptRole::Assistant && !e.content.is_empty())
            .map(|e| e.content)
            .unwrap_or_else(|| "(no result before the restart)".into()),
        Err(e) => {
            tracing::warn!(error = %e, "could not read a resumed run's last reply");
            "(no result before the restart)".into()
        }
    }
}

/// Edit the run's status message to say `state`.
async fn show(registry: &Registry, spec: &RunSpec, state: &str) -> Result<i64, StoreError> {
    registry
        .post_status(
            &spec.origin,
            spec.status_message,
            texts::status(&spec.label, state),
        )
        .await
}

fn short(text: &str) -> String {
    let s: String = text.chars().take(120).collect();
    if s.len() < text.len() {
        format!("{s}…")
    } else {
        s
    }
}

/// What a run's end needs to know of the run (from its spec, or its stored row when a
/// restart reports it as interrupted).
pub(crate) struct Ending<'a> {
    /// The outcome goes to a waiting `delegate` call only.
    pub to_waiter: bool,
    pub id: &'a str,
    pub label: &'a str,
    pub parent_session: &'a str,
    pub origin_route: &'a ChatRoute,
    pub origin_message: Option<&'a str>,
    pub depth: i64,
    pub status_message: Option<i64>,
}

impl<'a> From<&'a RunRow> for Ending<'a> {
    fn from(row: &'a RunRow) -> Self {
        Ending {
            to_waiter: false,
            id: &row.id,
            label: &row.label,
            parent_session: &row.parent_session,
            origin_route: &row.origin_route,
            origin_message: row.origin_message.as_deref(),
            depth: row.depth,
            status_message: row.status_message,
        }
    }
}

/// Record a run's end with its announcement, status edit and parent message (once), and
/// queue the parent's turn.
pub(crate) async fn finish(
    registry: &Registry,
    row: &Ending<'_>,
    state: RunState,
    result: String,
) -> Result<(), StoreError> {
    let route = row.origin_route;
    let announcement = (!row.to_waiter).then(|| NewOutbound {
        route: route.clone(),
        kind: OutboundKind::Announce,
        text: texts::announcement(row.label, state, &result),
        in_reply_to: row.origin_message.map(str::to_string),
        edit_of: None,
        file: None,
    });
    let status_edit = row.status_message.map(|id| NewOutbound {
        route: route.clone(),
        kind: OutboundKind::Status,
        text: texts::status(row.label, state.word()),
        in_reply_to: row.origin_message.map(str::to_string),
        edit_of: Some(id),
        file: None,
    });
    // Only a user-facing session (not another subagent) gets a turn for the outcome.
    let parent_message = (row.depth <= 1 && !row.to_waiter).then(|| {
        (
            InboundMessage {
                route: route.clone(),
                sender: Sender {
                    id: format!("subagent:{}", row.id),
                    name: row.label.to_string(),
                },
                platform_message_id: format!("subagent:{}", row.id),
                text: texts::for_parent(row.label, row.id, state, &result),
                mentioned: true,
                reply_to: None,
                internal: true,
                attachments: Vec::new(),
                mention_names: Vec::new(),
            },
            row.parent_session.to_string(),
        )
    });
    let finish = RunFinish {
        run_id: row.id.to_string(),
        state,
        result,
        announcement,
        status_edit,
        parent_message,
        now_ms: crate::clock::now_ms(),
    };
    let report = (row.depth > 1 && !row.to_waiter)
        .then(|| texts::for_parent(row.label, row.id, state, &finish.result));
    if let RunFinished::Announced { parent_turn } = registry.store.run_finish(&finish).await? {
        registry.outbox.kick(&route.channel);
        if let Some(entry) = parent_turn {
            registry.start_parent_turn(entry);
        }
        // A subagent's own child: its outcome is also a step of that subagent, when it
        // still runs here.
        if let Some(report) = report
            && !registry.report_to_parent(row.parent_session, report)
        {
            tracing::debug!(
                run_id = row.id,
                "the spawning subagent has ended; its child's outcome is only announced"
            );
        }
    }
    Ok(())
}
