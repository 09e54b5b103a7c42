//! `ferroclaw serve`: builds the enabled channels, the app and the HTTP server, runs until
//! SIGINT/SIGTERM, then stops taking input, finishes or checkpoints turns and flushes.

use crate::app::App;
use crate::config::LoadedConfig;
use crate::lanes::TurnWatch;
use crate::outbox::OutboxNotifier;
use crate::storage::{OutboxEntry, Store, StoreResult};
use anyhow::Context;
use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, LogUnavailable, MessageLog, OutboundMessage, ReceiverContext,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Why `serve` must not start as configured: listening beyond loopback with no admin token
/// (SPEC section 18), unless `server.allow_public_unauthenticated` says the operator means it.
pub fn exposure_refusal(loaded: &LoadedConfig) -> Option<String> {
    let server = &loaded.config.server;
    if server.allow_public_unauthenticated
        || loaded.secrets.admin_token.is_some()
        || is_loopback(&server.listen)
    {
        return None;
    }
    Some(format!(
        "server.listen = \"{}\" is reachable beyond this machine and server.admin_token_env \
         ({}) names no token: set the token, listen on 127.0.0.1, or set \
         server.allow_public_unauthenticated = true if this is meant",
        server.listen, server.admin_token_env
    ))
}

/// Whether a listen address only accepts connections from this machine.
pub fn is_loopback(listen: &str) -> bool {
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        return addr.ip().is_loopback();
    }
    listen
        .rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

pub async fn run(loaded: &LoadedConfig) -> anyhow::Result<()> {
    let config = &loaded.config;
    crate::server::raise_file_limit();
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    // Every enabled channel, built in one loop; the service names no channel kind here.
    // The store first: the channels keep their streamed previews' ids in it.
    let store = App::open_store(config).await?;
    let previews = Arc::new(crate::previews::StoreLedger::new(store.clone()));
    let built = crate::channels::build_enabled(loaded, previews)?;
    let channels: Vec<Arc<dyn Channel>> = built
        .iter()
        .flat_map(|b| b.channels.iter().cloned())
        .collect();
    let access = built
        .iter()
        .flat_map(|b| b.access.iter().cloned())
        .collect();
    let app = App::with_store(loaded, store, channels, access)?;

    // Ends long polls, event streams and channel tasks once a stop is asked for.
    let stopping = CancellationToken::new();
    let channel_tasks = TaskTracker::new();
    // Several processes may share a PostgreSQL database: only the leader polls exclusive
    // channels and delivers (see `coordination`).
    let (role, competing) = crate::coordination::start(&config.storage.url, stopping.clone());
    channel_tasks.spawn(competing);
    // Channels whose receiving side only the leader runs (their readiness is its business).
    let led: Vec<String> = built
        .iter()
        .filter(|b| b.receiver.exclusive())
        .flat_map(|b| b.channels.iter().map(|c| c.name().to_string()))
        .collect();
    let states = crate::health::ChannelStates::new(
        app.channels.clone(),
        crate::health::Readiness {
            role: role.clone(),
            led,
        },
    );
    // Freed heap handed back after a burst (glibc keeps it otherwise), the model clients
    // the burst opened and the store's caches let go first.
    let store = app.store.clone();
    channel_tasks.spawn(crate::heap::run(
        stopping.clone(),
        Box::new(move || {
            let store = store.clone();
            Box::pin(async move {
                crate::http::release_idle_clients();
                store.release_memory().await
            })
        }),
    ));
    // Followers show the leader's view of the channels it receives for (only PostgreSQL
    // has followers: SQLite's one process needs no such writes).
    if crate::coordination::shared_database(&config.storage.url) {
        channel_tasks.spawn(states.clone().share(app.store.clone(), stopping.clone()));
    }
    let admin = loaded.secrets.admin_token.clone().map(|token| {
        crate::admin::Admin::new(
            app.store.clone(),
            app.lanes.clone(),
            app.subagents.clone(),
            app.skills.clone(),
            app.mcp.clone(),
            states.clone(),
            token,
        )
    });
    // Operator alerts: the leader watches channels, deliveries, the store, MCP servers,
    // approvals and budgets, and tells (SPEC section 21).
    if config.alerts.any_target() {
        let alerts = crate::alerts::Alerts::new(
            app.config.clone(),
            states.clone(),
            app.store.clone(),
            app.outbox.clone(),
            app.mcp.clone(),
            loaded.secrets.alerts_webhook.clone(),
        );
        channel_tasks.spawn(alerts.run(role.clone(), stopping.clone()));
    }
    // Beyond loopback the metrics are the operator's too: behind the admin token.
    let metrics_token = (!is_loopback(&config.server.listen))
        .then(|| loaded.secrets.admin_token.clone())
        .flatten();
    let mut router = crate::server::router(
        app.store.clone(),
        app.channels.clone(),
        states.clone(),
        metrics_token,
    )
    .merge(crate::admin::router(admin));
    let messages: Arc<dyn MessageLog> = Arc::new(OutboxLog {
        redactor: app.redactor.clone(),
        store: app.store.clone(),
        outbox: app.outbox.clone(),
        turns: app.turns.clone(),
    });
    let mut exclusive = Vec::new();
    for adapter in built {
        if adapter.receiver.exclusive() {
            exclusive.push(adapter.receiver);
            continue;
        }
        let receiving = adapter.receiver.start(ReceiverContext {
            inbox: app.ingress.clone(),
            messages: messages.clone(),
            shutdown: stopping.clone(),
        });
        for line in &receiving.description {
            tracing::info!("channel enabled: {line}");
        }
        if let Some(routes) = receiving.router {
            router = router.merge(routes);
        }
        if let Some(task) = receiving.task {
            channel_tasks.spawn(task);
        }
    }

    // The exclusive receivers run while this process leads (always on SQLite).
    channel_tasks.spawn(lead_exclusive(
        exclusive,
        role.clone(),
        ReceiverContext {
            inbox: app.ingress.clone(),
            messages: messages.clone(),
            shutdown: stopping.clone(),
        },
    ));

    let listener = tokio::net::TcpListener::bind(&config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {} (server.listen)", config.server.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening on http://{addr}");
    if let Some(preparing) = app.sandbox_preparation() {
        let stop = stopping.clone();
        channel_tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                () = preparing => {}
            }
        });
    }
    let recovered = app.recover().await?;
    if recovered > 0 {
        tracing::info!(recovered, "answering messages left from an earlier run");
    }

    let limits = crate::server::Limits {
        max_connections: config.server.max_connections,
        read_timeout: Duration::from_secs(config.server.header_timeout_secs),
        drain: Duration::from_secs(config.server.shutdown_grace_secs),
    };
    let stop = stopping.clone();
    crate::server::serve(listener, router, limits, async move {
        shutdown_signal().await;
        // End long polls, event streams and channel tasks so the server can drain.
        stop.cancel();
    })
    .await;
    stopping.cancel();
    channel_tasks.close();
    channel_tasks.wait().await;
    tracing::info!("shutting down: finishing running turns");
    app.shutdown(Duration::from_secs(config.server.shutdown_grace_secs))
        .await;
    tracing::info!("stopped");
    Ok(())
}

/// Run the exclusive receivers (Telegram polling, the Discord gateway) whenever this process
/// leads: started when it becomes the leader, stopped (and awaited) when it loses the lead,
/// started again when it leads again, until the service stops (`cx.shutdown`).
async fn lead_exclusive(
    receivers: Vec<Box<dyn ferroclaw_channel_core::Receiver>>,
    mut role: tokio::sync::watch::Receiver<crate::coordination::Role>,
    cx: ReceiverContext,
) {
    use crate::coordination::Role;
    let stop = cx.shutdown.clone();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            led = role.wait_for(|r| *r == Role::Leader) => if led.is_err() { return },
        }
        let leading = stop.child_token();
        let running = TaskTracker::new();
        for receiver in &receivers {
            let receiving = receiver.start(ReceiverContext {
                inbox: cx.inbox.clone(),
                messages: cx.messages.clone(),
                shutdown: leading.clone(),
            });
            for line in &receiving.description {
                tracing::info!("channel enabled: {line}");
            }
            if receiving.router.is_some() {
                tracing::error!("an exclusive receiver offered routes; they are not mounted");
            }
            if let Some(task) = receiving.task {
                running.spawn(task);
            }
        }
        running.close();
        let lost = tokio::select! {
            _ = stop.cancelled() => false,
            follows = role.wait_for(|r| *r != Role::Leader) => follows.is_ok(),
        };
        leading.cancel();
        running.wait().await;
        if !lost {
            return;
        }
        tracing::warn!("exclusive channels stopped: this process no longer leads");
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// The webhook channel reads bot messages from the outbox and observes turns. What it reads
/// leaves the service: it passes the leak scan.
struct OutboxLog {
    redactor: Arc<crate::redact::Redactor>,
    store: Arc<dyn Store>,
    outbox: OutboxNotifier,
    turns: TurnWatch,
}

impl OutboxLog {
    fn messages(
        &self,
        rows: StoreResult<Vec<OutboxEntry>>,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        rows.map(|rows| rows.into_iter().map(|r| self.clean(r.message)).collect())
            .map_err(|e| LogUnavailable(e.to_string()))
    }

    fn clean(&self, message: OutboundMessage) -> OutboundMessage {
        use crate::redact::{Sink, redact_message};
        match redact_message(&self.redactor, &message, Sink::Log) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(clean) => clean,
        }
    }
}

#[async_trait]
impl MessageLog for OutboxLog {
    async fn message(
        &self,
        channel: &str,
        seq: i64,
    ) -> Result<Option<OutboundMessage>, LogUnavailable> {
        let entry = self
            .store
            .outbox_get(seq)
            .await
            .map_err(|e| LogUnavailable(e.to_string()))?;
        Ok(entry
            .map(|e| self.clean(e.message))
            .filter(|m| m.route.channel == channel))
    }

    async fn conversation(
        &self,
        channel: &str,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        self.messages(
            self.store
                .outbox_conversation(channel, conversation_id, after, limit)
                .await,
        )
    }

    async fn after(
        &self,
        channel: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        self.messages(self.store.outbox_after(channel, after, limit).await)
    }

    async fn last_seq(&self, channel: &str) -> Result<i64, LogUnavailable> {
        self.store
            .outbox_last_id(channel)
            .await
            .map_err(|e| LogUnavailable(e.to_string()))
    }

    async fn replies(
        &self,
        channel: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        self.messages(
            self.store
                .outbox_replies(channel, conversation_id, message_id)
                .await,
        )
    }

    async fn wait_answered(&self, journal_id: i64, timeout: Duration) -> bool {
        self.turns.wait(&*self.store, journal_id, timeout).await
    }

    async fn turn_usage(&self, journal_id: i64) -> Result<(i64, i64), LogUnavailable> {
        self.store
            .journal_usage(journal_id)
            .await
            .map_err(|e| LogUnavailable(e.to_string()))
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.outbox.subscribe()
    }
}

#[cfg(test)]
mod exposure_tests {
    #[test]
    fn only_loopback_addresses_count_as_local() {
        for local in ["127.0.0.1:8787", "[::1]:0", "localhost:80", "LOCALHOST:1"] {
            assert!(super::is_loopback(local), "{local}");
        }
        for public in ["0.0.0.0:8787", "[::]:0", "10.0.0.2:80", "example.com:80"] {
            assert!(!super::is_loopback(public), "{public}");
        }
    }
}
