//! `ferroclaw serve`: builds the enabled channels, the app and the HTTP server, runs until
//! SIGINT/SIGTERM, then stops taking input, finishes or checkpoints turns and flushes.

use crate::app::App;
use crate::config::LoadedConfig;
use crate::config::TelegramMode;
use crate::outbox::OutboxNotifier;
use crate::storage::{OutboxEntry, Store, StoreResult};
use crate::turn_watch::TurnWatch;
use anyhow::Context;
use async_trait::async_trait;
use ferroclaw_channel_core::{Channel, OutboundMessage};
use ferroclaw_channel_telegram::{Settings as TelegramSettings, Telegram};
use ferroclaw_channel_webhook::{MessageLog, WebhookChannel, WebhookEndpoint};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub async fn run(loaded: &LoadedConfig) -> anyhow::Result<()> {
    let config = &loaded.config;
    crate::http_server::raise_file_limit();
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let http = crate::http::shared();
    let mut channels: Vec<Arc<dyn Channel>> = Vec::new();
    for (name, hook) in &config.channels.webhook {
        let secret = loaded.secrets.webhook_secrets[name].clone();
        channels.push(Arc::new(WebhookChannel::new(
            name,
            secret,
            &hook.callback_url,
            http.clone(),
        )));
    }
    let telegram = telegram_from(loaded)?;
    if let Some(telegram) = &telegram {
        channels.push(telegram.channel());
    }
    let app = App::build(loaded, channels).await?;

    let mut router = crate::server::router(app.store.clone(), app.channels.clone());
    let endpoints: HashMap<String, WebhookEndpoint> = config
        .channels
        .webhook
        .keys()
        .map(|name| {
            (
                name.clone(),
                WebhookEndpoint {
                    secret: loaded.secrets.webhook_secrets[name].clone(),
                },
            )
        })
        .collect();
    for name in endpoints.keys() {
        tracing::info!(channel = %format!("webhook:{name}"), "channel enabled: POST /v1/webhooks/{name}/messages");
    }
    let stopping = CancellationToken::new();
    if !endpoints.is_empty() {
        router = router.merge(ferroclaw_channel_webhook::router(
            endpoints,
            app.ingress.clone(),
            Arc::new(OutboxLog {
                store: app.store.clone(),
                outbox: app.outbox.clone(),
                turns: app.turns.clone(),
            }),
            config.server.max_body_bytes,
            stopping.clone(),
        ));
    }

    let channel_tasks = TaskTracker::new();
    let channels_cancel = CancellationToken::new();
    if let Some(telegram) = telegram {
        telegram.set_inbox(app.ingress.clone());
        if let Some(webhook) = telegram.router() {
            router = router.merge(webhook);
        }
        let mode = match config.channels.telegram.mode {
            TelegramMode::Polling => "long polling",
            TelegramMode::Webhook => "webhook",
        };
        tracing::info!(channel = "telegram", "channel enabled: telegram ({mode})");
        channel_tasks.spawn(telegram.run(channels_cancel.child_token()));
    }

    let listener = tokio::net::TcpListener::bind(&config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {} (server.listen)", config.server.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening on http://{addr}");
    let recovered = app.recover().await?;
    if recovered > 0 {
        tracing::info!(recovered, "answering messages left from an earlier run");
    }

    let limits = crate::http_server::Limits {
        max_connections: config.server.max_connections,
        read_timeout: Duration::from_secs(config.server.header_timeout_secs),
        drain: Duration::from_secs(config.server.shutdown_grace_secs),
    };
    crate::http_server::serve(listener, router, limits, async move {
        shutdown_signal().await;
        // End long polls and event streams so the server can drain.
        stopping.cancel();
    })
    .await;
    channels_cancel.cancel();
    channel_tasks.close();
    channel_tasks.wait().await;
    tracing::info!("shutting down: finishing running turns");
    app.shutdown(Duration::from_secs(config.server.shutdown_grace_secs))
        .await;
    tracing::info!("stopped");
    Ok(())
}

/// The Telegram adapter, when `channels.telegram.enabled`.
fn telegram_from(loaded: &LoadedConfig) -> anyhow::Result<Option<Telegram>> {
    let cfg = &loaded.config.channels.telegram;
    if !cfg.enabled {
        return Ok(None);
    }
    let token = loaded
        .secrets
        .telegram_token
        .clone()
        .context("channels.telegram.token_env: the token variable is not set")?;
    let settings = TelegramSettings {
        token,
        api_url: cfg.api_url.clone(),
        mode: match cfg.mode {
            TelegramMode::Polling => ferroclaw_channel_telegram::Mode::Polling,
            TelegramMode::Webhook => ferroclaw_channel_telegram::Mode::Webhook {
                public_url: loaded.config.server.public_url.clone(),
            },
        },
        require_mention_in_groups: cfg.require_mention_in_groups,
        stream_edit_interval: Duration::from_millis(cfg.stream_edit_interval_ms),
        poll_timeout: Duration::from_secs(cfg.poll_timeout_secs),
        commands: crate::engine::COMMANDS
            .iter()
            .map(|(c, d)| (c.to_string(), d.to_string()))
            .collect(),
    };
    Telegram::new(settings)
        .map(Some)
        .map_err(|e| anyhow::anyhow!(e))
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

/// The webhook channel reads bot messages from the outbox and observes turns.
struct OutboxLog {
    store: Arc<dyn Store>,
    outbox: OutboxNotifier,
    turns: TurnWatch,
}

fn messages(rows: StoreResult<Vec<OutboxEntry>>) -> Result<Vec<OutboundMessage>, String> {
    rows.map(|rows| rows.into_iter().map(|r| r.message).collect())
        .map_err(|e| e.to_string())
}

#[async_trait]
impl MessageLog for OutboxLog {
    async fn conversation(
        &self,
        channel: &str,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, String> {
        messages(
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
    ) -> Result<Vec<OutboundMessage>, String> {
        messages(self.store.outbox_after(channel, after, limit).await)
    }

    async fn last_seq(&self, channel: &str) -> Result<i64, String> {
        self.store
            .outbox_last_id(channel)
            .await
            .map_err(|e| e.to_string())
    }

    async fn replies(
        &self,
        channel: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Vec<OutboundMessage>, String> {
        messages(
            self.store
                .outbox_replies(channel, conversation_id, message_id)
                .await,
        )
    }

    async fn wait_answered(&self, journal_id: i64, timeout: Duration) -> bool {
        self.turns.wait(&*self.store, journal_id, timeout).await
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.outbox.subscribe()
    }
}
