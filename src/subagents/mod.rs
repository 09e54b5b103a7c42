//! Subagents (SPEC section 7): `sessions_spawn` children that run their own tool loop in
//! their own session and whose outcome is announced in the chat and thread the request came
//! from, exactly once.
//!
//! [`Registry`] owns every child task (a `TaskTracker`, a cancellation token per run), the
//! limits (`max_depth`, `max_children`, `max_concurrent` as a FIFO semaphore so queued runs
//! start in order, `run_timeout_secs`) and the run rows in the store. `runner.rs` runs one
//! child; its end is written in ONE transaction: run outcome + announcement + status edit +
//! the internal message that starts a parent turn (`Store::run_finish`). It knows no channel.

mod component;
mod hook;
mod progress;
mod resume;
mod runner;
mod texts;
mod tools;

pub use component::{COMMANDS, SubagentsComponent};
pub use hook::Hook;
pub use progress::RunProgress;
pub use resume::MAX_RUN_STARTS;
pub use tools::{Delegate, SessionsSpawn, SubagentsTool};

use crate::config::SubagentsConfig;
use crate::engine::Engine;
use crate::outbox::OutboxNotifier;
use crate::providers::ModelRef;
use crate::spawn::{RunReport, RunSummary, SpawnError, SpawnRequest, SpawnScope, Spawned, Spawner};
use crate::storage::{JournalEntry, MailKind, RunMode, RunRow, RunState, Store, StoreError};
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use serde_json::json;
use sha2::Digest;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a child runs with, fixed at spawn.
pub(crate) struct RunSpec {
    pub id: String,
    /// The agent it runs as (its workspace, fallbacks, links and skills).
    pub agent: Arc<crate::agents::AgentProfile>,
    pub label: String,
    pub task: String,
    pub system: String,
    pub model: ModelRef,
    pub tools: Vec<String>,
    pub session_mode: bool,
    /// `exec` and the file tools run in the run's own container.
    pub sandbox: bool,
    pub timeout: Duration,
    pub depth: u32,
    pub origin: RunOrigin,
    pub status_message: Option<i64>,
    /// A new run, or one a restart or another process resumes.
    pub start: Start,
    /// The person the tree works for (see `SpawnScope::requester`).
    pub requester: Option<String>,
    /// What it does for its parent (how its calls are accounted).
    pub work: crate::spawn::RunWork,
}

/// How a run's task starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Just spawned: step 1 is the task.
    New,
    /// Taken over after a stop, at `step`: redone with `input` when that step had not
    /// committed, else taken up after it.
    Resumed { step: i64, input: Option<String> },
}

/// Where a run belongs: the session that spawned it and the chat thread its status message
/// and outcome are posted in.
#[derive(Clone)]
pub(crate) struct RunOrigin {
    pub parent_session: String,
    pub route: ferroclaw_channel_core::ChatRoute,
    pub message: Option<String>,
}

/// A live run as the registry tracks it.
pub(crate) struct LiveRun {
    pub id: String,
    /// The agent it runs as (its session key is `agent:<agent>:subagent:<id>`).
    pub agent: String,
    /// A waiting `delegate` call: [`WAITED`] while its caller waits, [`HANDED`] once the
    /// run's end gave the outcome to that caller, [`DETACHED`] otherwise.
    pub waiter: AtomicU8,
    pub parent_session: String,
    pub label: String,
    pub state: watch::Sender<RunState>,
    pub cancel: CancellationToken,
    /// Wakes its task for what was put in its inbox (`run_inbox`: steer instructions, its
    /// own children's outcomes); a steer also interrupts the step it is on.
    pub mail: mpsc::UnboundedSender<MailKind>,
    /// What it is doing now (the tools of its current step), for the status page.
    pub activity: Arc<Mutex<String>>,
}

/// What names a run (from a spawn request, or a stored row being resumed).
pub(crate) struct RunRef<'a> {
    pub id: &'a str,
    pub agent: &'a str,
    pub parent_session: &'a str,
    pub label: &'a str,
}

/// The receiving end of a live run's inbox wake-ups (its task reads it).
pub(crate) type RunInputs = mpsc::UnboundedReceiver<MailKind>;

impl LiveRun {
    /// A queued run with `waiter` set, and the channels its task reads.
    pub(crate) fn new(run: RunRef<'_>, waiter: u8) -> (Arc<Self>, RunInputs) {
        let (mail_tx, mail_rx) = mpsc::unbounded_channel();
        let live = Arc::new(LiveRun {
            id: run.id.to_string(),
            agent: run.agent.to_string(),
            waiter: AtomicU8::new(waiter),
            parent_session: run.parent_session.to_string(),
            label: run.label.to_string(),
            state: watch::channel(RunState::Queued).0,
            cancel: CancellationToken::new(),
            mail: mail_tx,
            activity: Arc::new(Mutex::new(String::new())),
        });
        (live, mail_rx)
    }
}

/// `LiveRun::waiter`: nobody waits; the outcome is announced and starts a parent turn.
pub(crate) const DETACHED: u8 = 0;
/// `LiveRun::waiter`: a `delegate` call waits for the outcome.
pub(crate) const WAITED: u8 = 1;
/// `LiveRun::waiter`: the run ended while its caller waited; the caller takes the outcome.
pub(crate) const HANDED: u8 = 2;

/// A live run as the status page shows it.
#[derive(Debug, Clone)]
pub struct LiveRunView {
    pub id: String,
    pub agent: String,
    pub parent_session: String,
    pub label: String,
    pub state: RunState,
    pub activity: String,
}

pub struct Registry {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) outbox: OutboxNotifier,
    pub(crate) config: SubagentsConfig,
    pub(crate) hook: Hook,
    /// Runs each child's turns.
    pub(crate) engine: Arc<Engine>,
    /// Where the internal message that starts a parent's turn goes (the lanes, through the
    /// composition root).
    parent_turns: mpsc::UnboundedSender<JournalEntry>,
    live: Mutex<HashMap<String, Arc<LiveRun>>>,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
    /// Shutdown: runs stop where they are, unannounced.
    pub(crate) cancel: CancellationToken,
    /// Several processes on one database: live runs are leased for this long.
    lease: Option<Duration>,
    /// Several processes: kills and steers for children running elsewhere.
    signals: Option<crate::signals::Signals>,
}

impl Registry {
    pub fn new(
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        config: SubagentsConfig,
        engine: Arc<Engine>,
        parent_turns: mpsc::UnboundedSender<JournalEntry>,
        lease: Option<Duration>,
        signals: Option<crate::signals::Signals>,
    ) -> Arc<Self> {
        Arc::new(Registry {
            hook: Hook::new(&config.hook, Duration::from_secs(config.hook_timeout_secs)),
            slots: Arc::new(Semaphore::new(config.max_concurrent.max(1) as usize)),
            store,
            outbox,
            config,
            engine,
            parent_turns,
            live: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
            lease,
            signals,
        })
    }

    /// Leased mode: keep this process's live runs leased, and take over the runs of
    /// `channels` whose lease expired (their process died), every third of a lease.
    pub fn keep_leases(self: &Arc<Self>, channels: Vec<String>) {
        let Some(lease) = self.lease else { return };
        let registry = self.clone();
        self.tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = registry.cancel.cancelled() => return,
                    _ = tokio::time::sleep(lease / 3) => {}
                }
                let ids: Vec<String> = registry
                    .live
                    .lock()
                    .expect("registry lock")
                    .keys()
                    .cloned()
                    .collect();
                let until = crate::clock::now_ms() + lease.as_millis() as i64;
                if let Err(err) = registry.store.runs_lease(&ids, until).await {
                    tracing::warn!(error = %err, "could not renew subagent run leases");
                }
                if let Err(err) = registry.recover(&channels).await {
                    tracing::warn!(error = %err, "could not take over expired subagent runs");
                }
            }
        });
    }

    /// Start the parent's turn for a child's outcome.
    pub(crate) fn start_parent_turn(&self, entry: JournalEntry) {
        if self.parent_turns.send(entry).is_err() {
            tracing::debug!("lanes closed; the parent's turn runs after restart");
        }
    }

    /// Session key of a run of `agent`.
    pub fn session_key(agent: &str, run_id: &str) -> String {
        crate::spawn::subagent_session_key(agent, run_id)
    }

    fn live_of(&self, parent_session: &str) -> usize {
        self.live
            .lock()
            .expect("registry lock")
            .values()
            .filter(|r| r.parent_session == parent_session)
            .count()
    }

    /// Start a child (see [`Spawner::spawn`]).
    async fn start(
        self: &Arc<Self>,
        scope: &SpawnScope,
        request: SpawnRequest,
    ) -> Result<Spawned, SpawnError> {
        // A call's run id is derived from the call, so a redone call finds its run.
        let id = match &request.call {
            Some(call) => {
                let digest = sha2::Sha256::digest(call.as_bytes());
                let id = hex::encode(&digest[..8]);
                if request.redo
                    && let Some(found) = self
                        .started_before(&id, &scope.parent_session, request.waited)
                        .await?
                {
                    return Ok(found);
                }
                id
            }
            None => uuid::Uuid::new_v4().simple().to_string()[..10].to_string(),
        };
        let max_depth = self.config.max_depth;
        let per_turn = self.config.max_spawns_per_turn;
        if scope
            .spawned_this_turn
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            >= per_turn
        {
            return Err(SpawnError::Refused(format!(
                "refused: this turn already spawned {per_turn} subagents (subagents.max_spawns_per_turn)"
            )));
        }
        if scope.depth >= max_depth {
            return Err(SpawnError::Refused(format!(
                "refused: this agent is at depth {} and subagents.max_depth is {max_depth}",
                scope.depth
            )));
        }
        // Each run counts toward what the message behind it may start.
        let scope_facts = crate::policy::CallScope {
            session_key: &scope.parent_session,
            agent: &scope.agent.id,
            sender: None,
            route: &scope.origin,
            origin_message: scope.origin_message.as_deref(),
            origin_fresh: false,
        };
        self.engine
            .admit_run(scope_facts, crate::policy::RunKind::Subagent)
            .await
            .map_err(SpawnError::Refused)?;
        // Who the child runs as: one resolver for user turns and children alike.
        let own = scope.agent.id.as_str();
        let crate::policy::ChildChoice {
            agent,
            model,
            tools,
            system,
            depth,
        } = self
            .engine
            .personas()
            .child(scope, &request)
            .map_err(SpawnError::Refused)?;
        let label = request
            .label
            .clone()
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| format!("subagent {}", &id[..4]));
        // Reserve the child's place before anything awaits: calls that arrive together must
        // not all pass the `max_children` check.
        let (live, inputs) = LiveRun::new(
            RunRef {
                id: &id,
                agent: &agent.id,
                parent_session: &scope.parent_session,
                label: &label,
            },
            if request.waited { WAITED } else { DETACHED },
        );
        {
            let mut runs = self.live.lock().expect("registry lock");
            let siblings = runs
                .values()
                .filter(|r| r.parent_session == scope.parent_session)
                .count();
            if siblings >= self.config.max_children as usize {
                return Err(SpawnError::Refused(format!(
                    "refused: this session already has {siblings} live subagents (subagents.max_children = {}); \
                     wait for one to finish or kill one",
                    self.config.max_children
                )));
            }
            runs.insert(id.clone(), live.clone());
        }
        let reserved = reserve(self, &id);
        let event = json!({"event": "before_spawn", "parent_session": scope.parent_session, "depth": depth,
            "agent": agent.id, "parent_agent": own, "label": label, "task": request.task, "model": model.to_string(), "tools": tools,
            "sandbox": request.sandbox});
        self.hook.allow(&event).await.map_err(SpawnError::Refused)?;

        let timeout = Duration::from_secs(
            request
                .timeout_secs
                .unwrap_or(self.config.run_timeout_secs)
                .max(1),
        );
        let stored_spec = resume::StoredSpec {
            system: system.clone(),
            tools: tools.clone(),
            sandbox: request.sandbox,
            timeout_secs: timeout.as_secs(),
            requester: scope.requester.clone(),
            work: request.work,
        };
        let now = crate::clock::now_ms();
        let row = RunRow {
            id: id.clone(),
            agent: agent.id.clone(),
            parent_session: scope.parent_session.clone(),
            origin_route: scope.origin.clone(),
            origin_message: scope.origin_message.clone(),
            depth: depth as i64,
            label: label.clone(),
            task: request.task.clone(),
            model: model.to_string(),
            mode: if request.session_mode {
                RunMode::Session
            } else {
                RunMode::Run
            },
            state: RunState::Queued,
            result: None,
            status_message: None,
            announced: false,
            created_at: now,
            started_at: None,
            ended_at: None,
            spec: Some(stored_spec.to_json()),
            step: 1,
            step_input: Some(request.task.clone()),
            starts: 1,
        };
        let stored = |e: StoreError| SpawnError::Store(e.to_string());
        self.store.run_insert(&row).await.map_err(stored)?;
        if let Some(lease) = self.lease {
            let until = crate::clock::now_ms() + lease.as_millis() as i64;
            self.store
                .runs_lease(std::slice::from_ref(&id), until)
                .await
                .map_err(stored)?;
        }
        let origin = RunOrigin {
            parent_session: scope.parent_session.clone(),
            route: scope.origin.clone(),
            message: scope.origin_message.clone(),
        };
        let status_message = self
            .post_status(
                &origin,
                None,
                texts::status(&label, RunState::Queued.word()),
            )
            .await
            .map_err(stored)?;
        self.store
            .run_set_status_message(&id, status_message)
            .await
            .map_err(stored)?;

        reserved.keep();
        let spec = RunSpec {
            id: id.clone(),
            label: label.clone(),
            task: request.task,
            system,
            agent: agent.clone(),
            model,
            tools,
            session_mode: request.session_mode,
            sandbox: request.sandbox,
            timeout,
            depth,
            origin,
            status_message: Some(status_message),
            start: Start::New,
            requester: scope.requester.clone(),
            work: request.work,
        };
        tracing::info!(run_id = %id, label = %label, agent = %agent.id, depth, parent = %scope.parent_session, "subagent spawned");
        self.launch(live, spec, inputs);
        let hook = self.hook.clone();
        let spawned = json!({"event": "spawned", "run_id": id, "label": label, "parent_session": scope.parent_session});
        if hook.configured() {
            self.tracker
                .spawn(async move { hook.notify(&spawned).await });
        }
        Ok(Spawned {
            session_key: Self::session_key(&agent.id, &id),
            run_id: id,
            status: "accepted",
        })
    }

    /// A spawn call of a redone turn: the run its earlier attempt started (same call, same
    /// id), live here or stored. A waiting `delegate` waits for it again.
    async fn started_before(
        &self,
        id: &str,
        parent_session: &str,
        waited: bool,
    ) -> Result<Option<Spawned>, SpawnError> {
        let live = self.live.lock().expect("registry lock").get(id).cloned();
        let agent = match live {
            Some(run) if run.parent_session == parent_session => {
                if waited {
                    let _ = run.waiter.compare_exchange(
                        DETACHED,
                        WAITED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
                run.agent.clone()
            }
            Some(_) => return Err(SpawnError::Store(format!("run id {id} is taken"))),
            None => match self.store.run_get(id).await {
                Ok(Some(row)) if row.parent_session == parent_session => row.agent,
                Ok(Some(_)) => return Err(SpawnError::Store(format!("run id {id} is taken"))),
                Ok(None) => return Ok(None),
                Err(e) => return Err(SpawnError::Store(e.to_string())),
            },
        };
        tracing::info!(run_id = %id, "a redone spawn call finds the run it started before");
        Ok(Some(Spawned {
            session_key: Self::session_key(&agent, id),
            run_id: id.to_string(),
            status: "accepted",
        }))
    }

    /// Run a registered child's task (new or resumed) under the registry's tracker.
    fn launch(self: &Arc<Self>, live: Arc<LiveRun>, spec: RunSpec, inputs: RunInputs) {
        let run_id = spec.id.clone();
        let slot = runner::Slot::ask(self.slots.clone());
        let run = runner::run(self.clone(), live, spec, inputs, slot);
        let registry = self.clone();
        self.tracker.spawn(async move {
            // A bug in one child must not leave it "live" forever; its row stays unannounced
            // and is resumed (or, past its starts, reported as interrupted) on the next start.
            if futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run))
                .await
                .is_err()
            {
                tracing::error!(run_id = %run_id, "subagent task panicked");
                registry.forget(&run_id);
            }
        });
    }

    /// A run's status message in the thread it was asked in.
    pub(crate) fn status_card(&self, origin: &RunOrigin) -> crate::outbox::StatusCard {
        crate::outbox::StatusCard::new(
            self.store.clone(),
            self.outbox.clone(),
            &origin.parent_session,
            origin.route.clone(),
            origin.message.clone(),
            OutboundKind::Status,
        )
    }

    /// Show a run's status: posted (`shown` None) or an edit of it. Returns the card's id.
    pub(crate) async fn post_status(
        &self,
        origin: &RunOrigin,
        shown: Option<i64>,
        text: String,
    ) -> Result<i64, StoreError> {
        self.status_card(origin).show(shown, text).await
    }

    /// Wake run `run_id` for what was put in its inbox: here when it runs in this process,
    /// else (several processes) wherever it runs. A run that hears nothing still finds its
    /// inbox when it next looks (it looks every [`runner::MAIL_POLL`] while it waits).
    pub(crate) fn wake(&self, run_id: &str, kind: MailKind) {
        if !self.wake_here(run_id, kind)
            && let Some(signals) = &self.signals
        {
            signals.send(crate::signals::Signal::Mail {
                run_id: run_id.to_string(),
                steer: kind == MailKind::Steer,
            });
        }
    }

    /// Wake run `run_id` when it runs in this process; false otherwise.
    pub fn wake_here(&self, run_id: &str, kind: MailKind) -> bool {
        let live = self.live.lock().expect("registry lock");
        live.get(run_id).is_some_and(|r| r.mail.send(kind).is_ok())
    }

    /// Children of a session that have not ended (in any process).
    pub(crate) async fn unended_children(&self, parent_session: &str) -> usize {
        match self.store.runs_of(parent_session).await {
            Ok(runs) => runs.iter().filter(|r| !r.announced).count(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read a session's children; counting this process's");
                self.live_of(parent_session)
            }
        }
    }

    pub(crate) fn forget(&self, run_id: &str) {
        self.live.lock().expect("registry lock").remove(run_id);
    }
}

/// Leaves a run detached (announced when it ends) once its `delegate` caller stops waiting.
struct DetachOnDrop(Arc<LiveRun>);

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        let _ =
            self.0
                .waiter
                .compare_exchange(WAITED, DETACHED, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Removes a reserved run from the registry unless `keep` is called (a refused spawn).
struct Reservation<'a> {
    registry: &'a Registry,
    id: String,
    keep: bool,
}

fn reserve<'a>(registry: &'a Registry, id: &str) -> Reservation<'a> {
    Reservation {
        registry,
        id: id.to_string(),
        keep: false,
    }
}

impl Reservation<'_> {
    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.keep {
            self.registry.forget(&self.id);
        }
    }
}

impl Registry {
    fn find(&self, parent_session: &str, target: &str) -> Vec<Arc<LiveRun>> {
        self.live
            .lock()
            .expect("registry lock")
            .values()
            .filter(|r| {
                r.parent_session == parent_session
                    && (target == "all" || r.id == target || r.label == target)
            })
            .cloned()
            .collect()
    }

    /// Stop every run without announcing it (a restart resumes them) and wait for their
    /// tasks (shutdown).
    pub async fn shutdown(&self) {
        self.tracker.close();
        self.cancel.cancel();
        self.tracker.wait().await;
    }

    /// Kill this process's children of a session matching `target`; how many.
    pub fn kill_here(&self, parent_session: &str, target: &str) -> usize {
        let runs = self.find(parent_session, target);
        for run in &runs {
            run.cancel.cancel();
        }
        runs.len()
    }

    /// Every live run (queued or running), oldest first by id order of the map.
    pub fn live_runs(&self) -> Vec<LiveRunView> {
        let runs = self.live.lock().expect("registry lock");
        let mut views: Vec<LiveRunView> = runs
            .values()
            .map(|r| LiveRunView {
                id: r.id.clone(),
                agent: r.agent.clone(),
                parent_session: r.parent_session.clone(),
                label: r.label.clone(),
                state: *r.state.borrow(),
                activity: r.activity.lock().expect("activity lock").clone(),
            })
            .collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        views
    }

    /// Whether `runs` contains live ones (used by `chat` to wait at end of input).
    pub fn any_live(&self) -> bool {
        !self.live.lock().expect("registry lock").is_empty()
    }

    /// Resolve when no run is live.
    pub async fn wait_all(&self) {
        while self.any_live() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The registry as turns see it (`Arc` because a spawned child's task holds the registry).
#[async_trait]
impl Spawner for Arc<Registry> {
    async fn spawn(
        &self,
        scope: &SpawnScope,
        request: SpawnRequest,
    ) -> Result<Spawned, SpawnError> {
        self.start(scope, request).await
    }

    fn kill(&self, parent_session: &str, target: &str) -> usize {
        if let Some(signals) = &self.signals {
            signals.send(crate::signals::Signal::Kill {
                session: parent_session.to_string(),
                target: target.to_string(),
            });
        }
        self.kill_here(parent_session, target)
    }

    /// Put `message` in the inbox of a session's unended child matching `target` (in any
    /// process) and wake it: it interrupts the step it is on and takes the message next.
    /// Kept in the store first, so a kill -9 before the child takes it does not lose it.
    async fn steer(
        &self,
        parent_session: &str,
        target: &str,
        message: &str,
    ) -> Result<(), SpawnError> {
        let run_id = match self.find(parent_session, target).first() {
            Some(run) => run.id.clone(),
            None => self
                .store
                .runs_of(parent_session)
                .await
                .map_err(|e| SpawnError::Store(e.to_string()))?
                .into_iter()
                .find(|r| !r.announced && (r.id == target || r.label == target))
                .map(|r| r.id)
                .ok_or_else(|| {
                    SpawnError::NotFound(format!("no live subagent `{target}` in this session"))
                })?,
        };
        let put = self
            .store
            .run_mail_put(&run_id, MailKind::Steer, message, crate::clock::now_ms())
            .await
            .map_err(|e| SpawnError::Store(e.to_string()))?;
        if !put {
            return Err(SpawnError::NotFound(
                "that subagent has already ended".into(),
            ));
        }
        self.wake(&run_id, MailKind::Steer);
        Ok(())
    }

    fn spans_processes(&self) -> bool {
        self.signals.is_some()
    }

    async fn wait(
        &self,
        parent_session: &str,
        target: &str,
        timeout: Duration,
    ) -> Result<RunReport, SpawnError> {
        if let Some(run) = self.find(parent_session, target).first() {
            // A caller that stops waiting (its turn was stopped) leaves the run detached.
            let _detach = DetachOnDrop(run.clone());
            let mut rx = run.state.subscribe();
            let ended = matches!(
                tokio::time::timeout(timeout, rx.wait_for(|s| s.is_final())).await,
                Ok(Ok(_))
            );
            // A waiting `delegate` whose time is up: the run goes on detached (announced when
            // it ends), unless its end already handed the outcome over; then that is read.
            let handed = !ended
                && run
                    .waiter
                    .compare_exchange(WAITED, DETACHED, Ordering::AcqRel, Ordering::Acquire)
                    .is_err_and(|now| now == HANDED);
            if handed {
                let _ = rx.wait_for(|s| s.is_final()).await;
            }
            if !ended && !handed {
                let status = rx.borrow().as_str().to_string();
                return Ok(RunReport {
                    run_id: run.id.clone(),
                    label: None,
                    status,
                    result: None,
                    note: Some("still running after the wait"),
                });
            }
        }
        let rows = self
            .store
            .runs_of(parent_session)
            .await
            .map_err(|e| SpawnError::Store(e.to_string()))?;
        let row = rows
            .iter()
            .find(|r| r.id == target || r.label == target)
            .ok_or_else(|| {
                SpawnError::NotFound(format!("no subagent `{target}` in this session"))
            })?;
        Ok(RunReport {
            run_id: row.id.clone(),
            label: Some(row.label.clone()),
            status: row.state.as_str().to_string(),
            result: row.result.clone(),
            note: None,
        })
    }

    async fn list(&self, parent_session: &str) -> Result<Vec<RunSummary>, SpawnError> {
        let rows = self
            .store
            .runs_of(parent_session)
            .await
            .map_err(|e| SpawnError::Store(e.to_string()))?;
        let now = crate::clock::now_ms();
        Ok(rows
            .iter()
            .map(|r| RunSummary {
                id: r.id.clone(),
                label: r.label.clone(),
                status: r.state.as_str().to_string(),
                runtime_secs: r
                    .started_at
                    .map(|s| (r.ended_at.unwrap_or(now) - s) / 1000)
                    .unwrap_or(0),
                model: r.model.clone(),
            })
            .collect())
    }

    fn live_children(&self, parent_session: &str) -> usize {
        self.live_of(parent_session)
    }
}
