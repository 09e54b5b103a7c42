//! Wiring: builds the store, providers, engine, lanes, ingress and delivery workers from a
//! loaded configuration and a set of channel adapters, and tears them down in order.
//! `serve` and `chat` share it, so both run the exact same message path.

use crate::config::{Config, LoadedConfig, ProviderKind};
use crate::engine::{Engine, EngineParts, LiveFeedback};
use crate::ingress::access::{Access, AccessPolicy};
use crate::ingress::{Admission, Ingress};
use crate::lanes::Lanes;
use crate::lanes::TurnHandler;
use crate::lanes::TurnWatch;
use crate::outbox::{DeliveryClaims, DeliveryWorker, OutboxNotifier};
use crate::providers::{
    AnthropicProvider, FallbackChain, KeyRing, ModelProvider, ModelRef, OpenAiProvider,
};
use crate::sandbox::{DockerSandbox, Sandbox};
use crate::spawn::Spawner;
use crate::storage::{self, Store};
use crate::subagents::Registry;
use anyhow::Context;
use async_trait::async_trait;
use ferroclaw_channel_core::{AccessRule, Channel, ChatRoute};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What `serve` and `chat` check the configuration against that is not its own: the time
/// zones the scheduler can use. Agents' tool allowlists are checked against the tools the
/// service builds, at start (`App::with_store`).
pub fn known() -> crate::config::Known {
    crate::config::Known {
        tools: None,
        time_zone: |name| crate::schedules::zone(name).is_ok(),
    }
}

/// What `config check` checks against: [`known`] and the names of the tools the features
/// register, read off the tools themselves (built over a throwaway in-memory store; nothing
/// is contacted).
pub fn known_for_check() -> crate::config::Known {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config = Arc::new(Config::default());
    let names = runtime.block_on(async {
        let store = storage::connect("sqlite::memory:")
            .await
            .expect("an in-memory SQLite database opens");
        let approvals = Arc::new(crate::approvals::Approvals::new(
            &config,
            store.clone(),
            OutboxNotifier::new([]),
            Vec::new(),
            None,
        ));
        let features = crate::features::build(&crate::features::Services {
            store: store.clone(),
            outbox: OutboxNotifier::new([]),
            approvals,
            egress: Arc::new(crate::egress::Guarded::new(false, "")),
            redactor: Arc::new(crate::redact::Redactor::none()),
            mcp: Arc::new(crate::mcp::McpServers::from_config(
                &config,
                &Default::default(),
                Arc::new(crate::redact::Redactor::none()),
            )),
            sandbox: None,
            skills: Arc::new(crate::skills::SkillLibrary::default()),
            teams: Arc::new(crate::teams::Teams::from_config(&config)),
            schedules: crate::schedules::ScheduleHandle::new(config.schedules.clone()),
            memory: Arc::new(crate::memory::Memory::new(
                store.clone(),
                config.memory.clone(),
                None,
            )),
            config: config.clone(),
        })
        .expect("the built-in tools have distinct names");
        features.tools.names()
    });
    crate::config::Known {
        tools: Some(names),
        ..known()
    }
}

/// Channels by instance name.
pub type ChannelMap = HashMap<String, Arc<dyn Channel>>;

/// Live feedback (streamed text, typing) through the channel a chat lives on.
struct ChannelFeedback(ChannelMap);

#[async_trait]
impl LiveFeedback for ChannelFeedback {
    fn live(&self, route: &ChatRoute) -> bool {
        self.0.contains_key(&route.channel)
    }
    async fn delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        if let Some(channel) = self.0.get(&route.channel) {
            channel.stream_delta(route, in_reply_to, delta).await;
        }
    }
    async fn typing(&self, route: &ChatRoute) {
        if let Some(channel) = self.0.get(&route.channel) {
            channel.typing(route).await;
        }
    }
    async fn fetch_file(
        &self,
        route: &ChatRoute,
        id: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, ferroclaw_channel_core::FetchError> {
        match self.0.get(&route.channel) {
            Some(channel) => channel.fetch_file(id, max_bytes).await,
            None => Err(ferroclaw_channel_core::FetchError::Failed(format!(
                "channel {} is not running here",
                route.channel
            ))),
        }
    }
}

pub struct App {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub ingress: Arc<Ingress>,
    pub lanes: Lanes,
    pub channels: ChannelMap,
    /// The leak scan every channel's sending passes (the message log's readers use it too).
    pub redactor: Arc<crate::redact::Redactor>,
    /// The MCP servers (their states for the admin API).
    pub mcp: Arc<crate::mcp::McpServers>,
    pub outbox: OutboxNotifier,
    pub turns: TurnWatch,
    pub subagents: Arc<Registry>,
    /// The skills loaded at start (the admin API shows their content hashes).
    pub skills: Arc<crate::skills::SkillLibrary>,
    workers: Vec<Arc<DeliveryWorker>>,
    worker_tracker: TaskTracker,
    workers_cancel: CancellationToken,
    sandbox: Arc<dyn Sandbox>,
}

impl App {
    /// Connect and migrate the store, then start one delivery worker per channel.
    pub async fn build(
        loaded: &LoadedConfig,
        channels: Vec<Arc<dyn Channel>>,
        access: Vec<(String, AccessRule)>,
    ) -> anyhow::Result<App> {
        let store = Self::open_store(&loaded.config).await?;
        Self::with_store(loaded, store, channels, access)
    }

    /// Connect to and migrate the store `storage.url` names.
    pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
        // A schema newer than this binary's: refused before anything opens it for writing.
        let state = storage::refuse_newer_schema(&config.storage.url).await?;
        // An older one: a SQLite file is copied beside itself before it is migrated.
        if let Some(storage::SchemaState {
            applied: Some(applied),
            known,
        }) = state
            && applied < known
            && config.storage.url.starts_with("sqlite:")
        {
            let kept = crate::backup::before_migration(&config.storage.url, applied)
                .await
                .context("the database could not be backed up before its migration")?;
            tracing::info!(backup = %kept.display(), from = applied, to = known, "database backed up before migrating it");
        }
        let store = storage::connect(&config.storage.url)
            .await
            .context("cannot open the database named by storage.url")?;
        store.migrate().await.context("database migration failed")?;
        Ok(store)
    }

    /// [`App::build`] with an already migrated store.
    pub fn with_store(
        loaded: &LoadedConfig,
        store: Arc<dyn Store>,
        channels: Vec<Arc<dyn Channel>>,
        access: Vec<(String, AccessRule)>,
    ) -> anyhow::Result<App> {
        let config = Arc::new(loaded.config.clone());
        let chain = Arc::new(build_chain(loaded)?);
        // Everything a channel sends passes the leak scan (every `*_env` value).
        let redactor = Arc::new(crate::redact::Redactor::new(&loaded.secrets.by_variable));
        let channels: Vec<Arc<dyn Channel>> = channels
            .into_iter()
            .map(|c| crate::redact::Redacting::wrap(c, &redactor))
            .collect();
        let channel_map: ChannelMap = channels
            .iter()
            .map(|c| (c.name().to_string(), c.clone()))
            .collect();
        let workers_cancel = CancellationToken::new();
        let worker_tracker = TaskTracker::new();
        // PostgreSQL may be shared by several processes (leases, signals, polling); SQLite is
        // one process.
        let postgres = config.storage.url.starts_with("postgres");
        let lease = Duration::from_secs(config.storage.lease_secs);
        // Several processes on one PostgreSQL database hear each other's `/stop` and outbox
        // wake-ups (what a heard signal does is wired below, once the lanes exist).
        let (heard_tx, mut heard_rx) = tokio::sync::mpsc::unbounded_channel();
        let signals = postgres.then(|| {
            let (signals, signalling) = crate::signals::start(
                &config.storage.url,
                workers_cancel.child_token(),
                move |signal| {
                    let _ = heard_tx.send(signal);
                },
            );
            worker_tracker.spawn(signalling);
            signals
        });
        let mut notifier = OutboxNotifier::new(channel_map.keys().map(String::as_str));
        if let Some(signals) = &signals {
            notifier = notifier.with_remote(signals.clone());
        }
        // A turn another process runs sends no in-process hint: `?wait=` re-reads the journal.
        let turns = if postgres {
            TurnWatch::polling(Duration::from_millis(200))
        } else {
            TurnWatch::default()
        };
        // One address policy (and one client) for every fetch a message can cause.
        let egress = Arc::new(crate::egress::Guarded::from_config(
            &config,
            redactor.clone(),
        ));
        // Connects on first use (or at start when enabled, see `prepare_sandbox`).
        let sandbox: Arc<dyn Sandbox> = Arc::new(DockerSandbox::new(
            crate::sandbox::docker::Settings::from_config(&config),
        ));
        // The registries features and personas share, then every feature (its tools,
        // commands, status lines), then who turns run as, over the same tools.
        let agents = Arc::new(crate::agents::Agents::from_config(&config));
        let skills = Arc::new(crate::skills::SkillLibrary::load(
            &config.skills.dir,
            &agents,
        ));
        let teams = Arc::new(crate::teams::Teams::from_config(&config));
        let schedules = crate::schedules::ScheduleHandle::new(config.schedules.clone());
        // Tool calls waiting for a person: the approvals gate asks, the ingress decides.
        let approvals = Arc::new(crate::approvals::Approvals::new(
            &config,
            store.clone(),
            notifier.clone(),
            loaded.secrets.all(),
            signals.clone(),
        ));
        // MCP servers: their supervisors start below (start-up never waits for them).
        let mcp = Arc::new(crate::mcp::McpServers::from_config(
            &config,
            &loaded.secrets,
            redactor.clone(),
        ));
        let features = crate::features::build(&crate::features::Services {
            approvals: approvals.clone(),
            config: config.clone(),
            store: store.clone(),
            outbox: notifier.clone(),
            egress: egress.clone(),
            redactor: redactor.clone(),
            mcp: mcp.clone(),
            sandbox: Some(sandbox.clone()),
            skills: skills.clone(),
            teams: teams.clone(),
            schedules: schedules.clone(),
            memory: Arc::new(crate::memory::Memory::new(
                store.clone(),
                config.memory.clone(),
                crate::memory::Embedder::from_config(&config, &loaded.secrets),
            )),
        })
        .map_err(|e| anyhow::anyhow!("tools: {e}"))?;
        let problems = crate::config::check_agent_tools(&config, &features.tools.names());
        if !problems.is_empty() {
            return Err(crate::config::ConfigError { problems }.into());
        }
        let personas = crate::policy::Personas::new(
            &config,
            crate::policy::PersonaParts {
                agents: agents.clone(),
                teams,
                tools: features.tools.clone(),
                chain: chain.clone(),
                sandbox: Some(sandbox.clone()),
            },
        );
        let engine = Arc::new(Engine::new(EngineParts {
            store: store.clone(),
            chain,
            config: config.clone(),
            feedback: Arc::new(ChannelFeedback(channel_map.clone())),
            outbox: notifier.clone(),
            tools: features.tools,
            egress,
            personas,
            components: features.components,
            // The features' rules around every call (cost control; approvals and egress
            // rules plug in beside it).
            gate: features.gate,
            transcriber: crate::media::Transcriber::new(
                &config.transcription,
                loaded.secrets.transcription_key.clone(),
            ),
        }));
        // Built in one pass: the registry runs children on the engine and hands the turns
        // their outcomes start to the lanes through a channel; the lanes' turn handler gives
        // every turn the registry as its spawner.
        let (parent_turns, mut parent_turns_rx) = tokio::sync::mpsc::unbounded_channel();
        // Scheduled jobs' turns go to the lanes the same way.
        let job_turns = parent_turns.clone();
        let subagents = Registry::new(
            store.clone(),
            notifier.clone(),
            config.subagents.clone(),
            engine.clone(),
            parent_turns,
            postgres.then_some(lease),
            signals.clone(),
        );
        let spawner: Arc<dyn Spawner> = Arc::new(subagents.clone());
        let handler = Arc::new(TurnHandler::new(
            engine,
            store.clone(),
            notifier.clone(),
            turns.clone(),
            Some(spawner),
            config.subagents.max_chained_turns,
        ));
        // Several processes may share a PostgreSQL database: sessions are then worked under
        // a lease (SQLite is one process: no lease is ever written).
        let owner = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        let leases = postgres.then(|| crate::lanes::Leases {
            store: store.clone(),
            owner: owner.clone(),
            ttl: lease,
        });
        // Built in order: who may talk (and `/stop`), then the lanes that ask it about
        // entries taken over from another process, then the ingress over both.
        let admission = Arc::new(Admission::new(
            store.clone(),
            handler.clone(),
            access_from(access),
            signals.clone(),
            approvals.clone(),
        ));
        let lanes = Lanes::new(
            handler.clone(),
            CancellationToken::new(),
            leases,
            admission.clone(),
        );
        let ingress = Arc::new(Ingress::new(
            store.clone(),
            lanes.clone(),
            admission.clone(),
            agents,
        ));
        {
            let (cancel, lanes, notifier, registry) = (
                workers_cancel.child_token(),
                lanes.clone(),
                notifier.clone(),
                subagents.clone(),
            );
            let approvals = approvals.clone();
            worker_tracker.spawn(async move {
                loop {
                    let signal = tokio::select! {
                        _ = cancel.cancelled() => return,
                        signal = heard_rx.recv() => match signal {
                            Some(signal) => signal,
                            None => return,
                        },
                    };
                    match signal {
                        crate::signals::Signal::Stop { session } => {
                            let (stopped, killed) = admission.stop_here(&session, &lanes);
                            if stopped || killed > 0 {
                                tracing::info!(session = %session, killed, "stopped on another process's /stop");
                            }
                        }
                        crate::signals::Signal::Kill { session, target } => {
                            let killed = registry.kill_here(&session, &target);
                            if killed > 0 {
                                tracing::info!(session = %session, killed, "killed subagents on another process's request");
                            }
                        }
                        crate::signals::Signal::Mail { run_id, steer } => {
                            let kind = if steer { crate::storage::MailKind::Steer } else { crate::storage::MailKind::Report };
                            if registry.wake_here(&run_id, kind) {
                                tracing::debug!(run_id = %run_id, "woke a subagent for its inbox on another process's word");
                            }
                        }
                        crate::signals::Signal::Outbox { channel } => notifier.kick_here(&channel),
                        crate::signals::Signal::Approval { id } => approvals.wake_here(&id),
                    }
                }
            });
        }
        let forward_cancel = workers_cancel.child_token();
        let forward_to = lanes.clone();
        worker_tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = forward_cancel.cancelled() => break,
                    entry = parent_turns_rx.recv() => match entry {
                        Some(entry) => forward_to.submit(entry),
                        None => break,
                    },
                }
            }
        });
        worker_tracker.spawn(
            crate::schedules::Scheduler::new(store.clone(), schedules, job_turns)
                .run(workers_cancel.child_token()),
        );
        mcp.start(&worker_tracker, workers_cancel.child_token());
        let mut workers = Vec::new();
        // Every process delivers; on PostgreSQL each conversation under a delivery lease
        // (see `outbox::delivery`). Other processes add messages there without always waking
        // this one, so an idle worker looks again every half second.
        let max_idle = if postgres {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(3600)
        };
        for channel in channels {
            let mut worker = DeliveryWorker::new(store.clone(), channel, &notifier);
            if postgres {
                worker = worker.with_claims(DeliveryClaims {
                    owner: owner.clone(),
                    ttl: lease,
                });
            }
            let worker = Arc::new(worker);
            worker_tracker.spawn(worker.clone().run(workers_cancel.child_token(), max_idle));
            workers.push(worker);
        }
        Ok(App {
            config,
            sandbox,
            store,
            ingress,
            lanes,
            channels: channel_map,
            redactor,
            mcp,
            outbox: notifier,
            turns,
            subagents,
            skills,
            workers,
            worker_tracker,
            workers_cancel,
        })
    }

    /// Resume the subagent runs an earlier run left unfinished, then queue the journal
    /// entries it left unanswered (for this app's channels).
    pub async fn recover(&self) -> anyhow::Result<usize> {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        // Runs first: a redone turn's `delegate` finds the run its first attempt started.
        self.subagents.recover(&names).await?;
        let pending = self.ingress.recover(&names).await?;
        self.subagents.keep_leases(names.clone());
        Ok(pending)
    }

    /// Wait until no turn is queued or running and no subagent is live (their announcements
    /// start parent turns, so this waits for those too).
    pub async fn wait_quiet(&self) {
        loop {
            self.lanes.wait_idle().await;
            if !self.subagents.any_live() {
                break;
            }
            self.subagents.wait_all().await;
        }
        self.lanes.wait_idle().await;
    }

    /// Deliver everything due now, on every channel.
    pub async fn flush_outbox(&self) {
        for worker in &self.workers {
            if let Err(err) = worker.pass().await {
                tracing::warn!(error = %err, "outbox flush failed");
            }
        }
    }

    /// With `sandbox.enabled`: connecting to Docker now (remove leftovers, check the image),
    /// so the first `exec` does not pay for it and an unusable engine is said at start. The
    /// caller runs it beside serving (start-up does not wait for Docker).
    pub fn sandbox_preparation(&self) -> Option<impl std::future::Future<Output = ()> + use<>> {
        let sandbox = self.sandbox.clone();
        self.config.sandbox.enabled.then_some(async move {
            sandbox.prepare().await;
        })
    }

    /// Finish running turns within `grace` (abort the rest), flush the outbox, stop workers.
    pub async fn shutdown(&self, grace: Duration) {
        self.lanes.shutdown(grace).await;
        self.subagents.shutdown().await;
        self.sandbox.release_all().await;
        self.workers_cancel.cancel();
        self.worker_tracker.close();
        if tokio::time::timeout(
            grace.max(Duration::from_secs(1)),
            self.worker_tracker.wait(),
        )
        .await
        .is_err()
        {
            tracing::warn!(
                "outbox flush did not finish in time; undelivered messages go out after restart"
            );
        }
    }
}

/// Access policies of the channels that have one (their adapters say so).
fn access_from(rules: Vec<(String, AccessRule)>) -> Access {
    Access::new(
        rules
            .into_iter()
            .map(|(channel, rule)| {
                let policy = AccessPolicy {
                    mode: rule.mode,
                    allowed_users: rule.allowed_users.into_iter().collect(),
                };
                (channel, policy)
            })
            .collect(),
    )
}

/// A `kind = "local"` provider, or why it cannot be used: a build without it, or a known
/// model that is not cached while fetching is forbidden (then it is skipped like a provider
/// without its key, and named only when no model is usable).
fn local_provider(
    config: &Config,
    name: &str,
    provider: &crate::config::ProviderConfig,
) -> Result<Arc<dyn ModelProvider>, String> {
    #[cfg(not(feature = "local-model"))]
    {
        let _ = (config, provider);
        Err(format!(
            "provider `{name}` is a local model, and this build has none (feature `local-model`)"
        ))
    }
    #[cfg(feature = "local-model")]
    {
        use crate::providers::{LocalProvider, ModelSource};
        let source = match &provider.model_path {
            Some(path) => ModelSource::File(path.into()),
            None => {
                // The chain's models at this provider must be known, and cached when offline.
                for id in config.model_ids_at(name) {
                    let Some(known) = crate::models::known(id) else {
                        return Err(format!(
                            "{name}/{id} is not a known model; set providers.{name}.model_path"
                        ));
                    };
                    if crate::models::offline() && crate::models::cached(known).is_none() {
                        return Err(format!(
                            "{name}/{id} is not in the model cache and FERROCLAW_OFFLINE forbids fetching it (run `ferroclaw model fetch {id}`)"
                        ));
                    }
                }
                ModelSource::Catalog
            }
        };
        Ok(Arc::new(LocalProvider::new(
            source,
            provider.threads,
            provider.context_tokens.unwrap_or(2048),
            provider.seed,
        )))
    }
}

/// Build providers for every configured provider with its key, then the chain.
pub fn build_chain(loaded: &LoadedConfig) -> anyhow::Result<FallbackChain> {
    let config = &loaded.config;
    let mut providers: HashMap<String, Arc<dyn ModelProvider>> = HashMap::new();
    let mut unusable = HashMap::new();
    let mut rings = HashMap::new();
    let cooldown = Duration::from_secs(config.fallback.cooldown_secs);
    for (name, provider) in &config.providers {
        if loaded.unusable_providers.contains(name) {
            let vars = provider.key_vars().join(" or ");
            unusable.insert(
                name.clone(),
                format!("provider `{name}` needs its API key in {vars}"),
            );
            continue;
        }
        if provider.kind == ProviderKind::Local {
            match local_provider(config, name, provider) {
                Ok(local) => {
                    providers.insert(name.clone(), local);
                }
                Err(why) => {
                    unusable.insert(name.clone(), why);
                }
            }
            continue;
        }
        // The client is built on the first call (not at start-up).
        let http = crate::http::Transport::for_provider(provider.base_url(), provider.http2);
        let one = |key: Option<secrecy::SecretString>| -> Arc<dyn ModelProvider> {
            match provider.kind {
                ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(
                    http.clone(),
                    provider.base_url(),
                    key,
                )),
                _ => Arc::new(OpenAiProvider::new(http.clone(), provider.base_url(), key)),
            }
        };
        let keys = loaded
            .secrets
            .provider_keys
            .get(name)
            .cloned()
            .unwrap_or_default();
        if keys.len() > 1 {
            // Auth profiles: one provider per key behind a key ring.
            let profiles = keys.into_iter().map(|k| one(Some(k))).collect();
            let ring = Arc::new(KeyRing::new(name, profiles, cooldown));
            rings.insert(name.clone(), ring.clone());
            providers.insert(name.clone(), ring);
        } else {
            providers.insert(name.clone(), one(keys.into_iter().next()));
        }
    }
    let fallbacks = config
        .agent
        .fallbacks
        .iter()
        .filter_map(|m| ModelRef::parse(m))
        .collect();
    Ok(FallbackChain::new(
        providers,
        unusable,
        fallbacks,
        config.fallback.retries_per_model,
        Duration::from_secs(config.fallback.cooldown_secs),
        Duration::from_secs(config.fallback.request_timeout_secs),
    )
    .with_max_concurrent(config.fallback.max_concurrent_requests)
    .with_key_rings(rings))
}
