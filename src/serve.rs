//! `ferroclaw serve`: builds the enabled channels, the app and the HTTP server, runs until
//! SIGINT/SIGTERM, then stops taking input, finishes or checkpoints turns and flushes.

use crate::app::App;
use crate::config::LoadedConfig;
use crate::storage::Store;
use anyhow::Context;
use async_trait::async_trait;
use ferroclaw_channel_core::{Channel, OutboundMessage};
use ferroclaw_channel_webhook::{MessageLog, WebhookChannel, WebhookEndpoint};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub async fn run(loaded: &LoadedConfig) -> anyhow::Result<()> {
    let config = &loaded.config;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let http = reqwest::Client::new();
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
    if !endpoints.is_empty() {
        router = router.merge(ferroclaw_channel_webhook::router(
            endpoints,
            app.ingress.clone(),
            Arc::new(OutboxLog(app.store.clone())),
            config.server.max_body_bytes,
        ));
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

    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("HTTP server failed")?;
    tracing::info!("shutting down: finishing running turns");
    app.shutdown(Duration::from_secs(config.server.shutdown_grace_secs))
        .await;
    tracing::info!("stopped");
    Ok(())
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

/// The webhook channel reads conversation messages from the outbox.
struct OutboxLog(Arc<dyn Store>);

#[async_trait]
impl MessageLog for OutboxLog {
    async fn conversation(
        &self,
        channel: &str,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<OutboundMessage>, String> {
        self.0
            .outbox_conversation(channel, conversation_id, after, limit)
            .await
            .map(|rows| rows.into_iter().map(|r| r.message).collect())
            .map_err(|e| e.to_string())
    }
}
