//! Running one child: wait for a slot (FIFO), run its tool loop in its own session with its
//! own prompt, model and tools, take `steer` instructions, respect the timeout and `kill`,
//! then finish: announce once and tell the parent. Each step is recorded in the run's row
//! before it runs (so another process can resume it, `resume.rs`) and its side effects
//! under the step's key (so a resumed step does not repeat them).

use super::{LiveRun, Registry, RunInputs, RunOrigin, RunProgress, RunSpec, Start, texts};
use crate::engine::TurnInput;
use crate::policy::RunPersona;
use crate::storage::{
    MailKind, NewOutbound, RunFinish, RunFinished, RunState, StoreError, TurnCommit,
};
use ferroclaw_channel_core::{ChatKind, ChatRoute, InboundMessage, OutboundKind, Sender};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// A child's place in the queue for a slot, taken when it is launched.
pub(crate) enum Slot {
    Taken(OwnedSemaphorePermit),
    Queued(Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>),
}

impl Slot {
    /// Ask for one of `slots` now, in the caller's order: the semaphore queues a waiter
    /// when it is first polled, so polling here (not when the child's task first runs,
    /// which under load may be in any order) makes children start in the order they were
    /// launched.
    pub(crate) fn ask(slots: Arc<Semaphore>) -> Slot {
        let mut acquire = Box::pin(slots.acquire_owned());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match acquire.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(permit) => {
                Slot::Taken(permit.expect("the semaphore is never closed"))
            }
            // Polled again by the child's task, the waiter takes that task's waker.
            std::task::Poll::Pending => Slot::Queued(acquire),
        }
    }

    async fn take(self) -> OwnedSemaphorePermit {
        match self {
            Slot::Taken(permit) => permit,
            Slot::Queued(acquire) => acquire.await.expect("the semaphore is never closed"),
        }
    }
}

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
    mail: RunInputs,
    slot: Slot,
) {
    let shutdown = registry.cancel.clone();
    // Which live-subagent gauge this run counts in.
    let gauge = std::sync::Mutex::new("queued");
    crate::metrics::subagents_live("queued", 1.0);
    let work = async {
        let _slot = slot.take().await;
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
            execute(&registry, &spec, mail, live.activity.clone()),
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
                requester: spec.requester.clone(),
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

/// How often a run that waits looks in its inbox without a wake-up (one lost with a
/// process's connection to the database, or never sent because the sender crashed).
pub(crate) const MAIL_POLL: Duration = Duration::from_secs(5);

/// The child's conversation: the task, then what its inbox brings (steer instructions, its
/// own children's outcomes), until done.
async fn execute(
    registry: &Arc<Registry>,
    spec: &RunSpec,
    mut mail: RunInputs,
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
        registry.status_card(&spec.origin),
        spec.label.clone(),
        spec.status_message,
        activity,
    ));
    let persona = engine.personas().run(RunPersona {
        agent: &spec.agent,
        system: &spec.system,
        tools: &spec.tools,
        model: &spec.model,
        depth: spec.depth,
        session_key: &key,
        sandboxed: spec.sandbox,
        origin: (spec.origin.route.clone(), spec.origin.message.clone()),
        work: spec.work,
        progress,
        // Its own children (below subagents.max_depth) are spawned through the same registry.
        spawner: Arc::new(registry.clone()),
    });
    // The next step's input (None: between steps; it is in the run's row already), and
    // whether the step is a redo (its recorded side effects are replayed).
    let (mut step, mut pending, mut redo) = match &spec.start {
        Start::New => (1, Some(spec.task.clone()), false),
        Start::Resumed {
            step,
            input: Some(input),
        } => (*step, Some(input.clone()), true),
        // The step had committed: take up after it, its reply being the result so far.
        Start::Resumed { step, input: None } => (*step + 1, None, false),
    };
    // The last step was cut short by a steer; the status last shown while waiting.
    let (mut interrupted, mut shown) = (false, None::<String>);
    let mut reply = match pending {
        Some(_) => String::new(),
        None => last_reply(registry, &key, session.epoch).await,
    };
    let mut failed = false;
    loop {
        if let Some(input) = pending.take() {
            let message_id = format!("{}:{step}", spec.id);
            let effects = crate::storage::run_effects_key(&spec.id, step);
            let turn_input = TurnInput {
                route: &route,
                message_id: &message_id,
                effects: Some((&effects, redo)),
                // The person the tree works for: their caps count its calls, and in a DM
                // they decide its approvals.
                sender: spec.requester.as_deref(),
                attachments: &[],
                images: &[],
                mention_names: &[],
                job: None,
                heartbeat: false,
                for_tool: false,
                reports_run: None,
            };
            let stop = CancellationToken::new();
            let output = {
                let turn =
                    engine.run_child_turn(&turn_input, &mut session, &stop, &input, &persona);
                tokio::pin!(turn);
                loop {
                    tokio::select! {
                        output = &mut turn => break output,
                        // A steer cuts the step short (its message is the next step); a
                        // child's outcome waits for the step's end.
                        Some(kind) = mail.recv(), if !stop.is_cancelled() => {
                            if kind == MailKind::Steer
                                && matches!(registry.store.run_mail_next(&spec.id).await, Ok(Some(_)))
                            {
                                stop.cancel();
                                interrupted = true;
                            }
                        }
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
            redo = false;
        }
        // Between steps: what its inbox holds, oldest first, each another step (its own
        // children's outcomes, steer instructions). Children still running are counted
        // first: one ending meanwhile has its outcome in the inbox by then.
        let waiting_for = registry.unended_children(&key).await;
        if let Some(input) = take_mail(registry, spec, step, interrupted).await {
            (pending, interrupted) = (Some(input), false);
            continue;
        }
        interrupted = false;
        if !spec.session_mode && waiting_for > 0 {
            let status = format!("waiting for {waiting_for} subagent(s) it started");
            show_changed(registry, spec, &mut shown, status).await;
            wait_for_mail(&mut mail).await;
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
        let status = format!("waiting for instructions; last result: {}", short(&reply));
        show_changed(registry, spec, &mut shown, status).await;
        wait_for_mail(&mut mail).await;
    }
}

/// Take the oldest item of the run's inbox as step `step`'s input (moved into the run's row
/// in one transaction, so it is neither lost nor taken twice); None when there is none.
async fn take_mail(
    registry: &Registry,
    spec: &RunSpec,
    step: i64,
    interrupted: bool,
) -> Option<String> {
    let store = &registry.store;
    loop {
        let mail = match store.run_mail_next(&spec.id).await {
            Ok(mail) => mail?,
            Err(e) => {
                tracing::warn!(run_id = %spec.id, error = %e, "could not read the run's inbox");
                return None;
            }
        };
        let input = match mail.kind {
            MailKind::Report => mail.text,
            MailKind::Steer if interrupted => format!(
                "[New instruction from the parent agent; it replaces what you were doing] {}",
                mail.text
            ),
            MailKind::Steer if spec.session_mode => mail.text,
            MailKind::Steer => format!("[New instruction from the parent agent] {}", mail.text),
        };
        match store
            .run_set_step(&spec.id, step, &input, Some(mail.id))
            .await
        {
            Ok(true) => return Some(input),
            Ok(false) => continue, // taken meanwhile: read the next
            Err(e) => {
                tracing::warn!(run_id = %spec.id, error = %e, "could not take the run's inbox");
                return None;
            }
        }
    }
}

/// Show `status` unless it is what was shown last (a waiting run looks again every
/// [`MAIL_POLL`]; its status message is edited only when the status changes).
async fn show_changed(
    registry: &Registry,
    spec: &RunSpec,
    shown: &mut Option<String>,
    status: String,
) {
    if shown.as_ref() != Some(&status) {
        let _ = show(registry, spec, &status).await;
        *shown = Some(status);
    }
}

/// Wait for a wake-up of the run's inbox, or [`MAIL_POLL`] (then it looks anyway).
async fn wait_for_mail(mail: &mut RunInputs) {
    tokio::select! {
        _ = mail.recv() => {}
        _ = tokio::time::sleep(MAIL_POLL) => {}
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
    /// The person the tree works for: the parent's turn on the outcome works for them too.
    pub requester: Option<String>,
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
        approval: None,
    });
    // The status card's last edit, committed with the outcome.
    let card = registry.status_card(&RunOrigin {
        parent_session: row.parent_session.to_string(),
        route: route.clone(),
        message: row.origin_message.map(str::to_string),
    });
    let status_edit = row
        .status_message
        .map(|id| card.edit(id, texts::status(row.label, state.word())));
    // Only a user-facing session (not another subagent) gets a turn for the outcome.
    let parent_message = (row.depth <= 1 && !row.to_waiter).then(|| {
        (
            InboundMessage {
                route: route.clone(),
                // The turn on the outcome works for the person the tree works for (their
                // caps, their approvals in a DM); it is no message of theirs (no rate limit).
                sender: Sender {
                    id: row
                        .requester
                        .clone()
                        .unwrap_or_else(|| format!("subagent:{}", row.id)),
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
    // A subagent's own child: its outcome is also a step of that subagent (put in its
    // inbox in the same transaction, when it has not ended).
    let report = (row.depth > 1 && !row.to_waiter)
        .then(|| crate::spawn::run_of_session(row.parent_session))
        .flatten()
        .map(|parent| {
            (
                parent.to_string(),
                texts::for_parent(row.label, row.id, state, &result),
            )
        });
    let finish = RunFinish {
        run_id: row.id.to_string(),
        state,
        result,
        announcement,
        status_edit,
        parent_message,
        report,
        now_ms: crate::clock::now_ms(),
    };
    if let RunFinished::Announced { parent_turn } = registry.store.run_finish(&finish).await? {
        registry.outbox.kick(&route.channel);
        if let Some(entry) = parent_turn {
            registry.start_parent_turn(entry);
        }
        if let Some((parent, _)) = &finish.report {
            registry.wake(parent, MailKind::Report);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn children_get_slots_in_the_order_they_were_launched() {
        let slots = Arc::new(Semaphore::new(0));
        let first = Slot::ask(slots.clone());
        let second = Slot::ask(slots.clone());
        // The second child's task waits first; the free slot still goes to the first.
        let second = tokio::spawn(second.take());
        tokio::task::yield_now().await;
        slots.add_permits(1);
        let permit = tokio::time::timeout(Duration::from_secs(5), first.take())
            .await
            .expect("the first child got the slot");
        assert!(!second.is_finished());
        drop(permit);
        let _next = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second child got it next")
            .unwrap();
    }
}
