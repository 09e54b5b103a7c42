//! Telling the operator: one alert to the first configured chat whose channel is not down
//! (and is not the one the alert is about), to the signed webhook and to the command. Knows
//! the targets; not when to tell.

use crate::config::AlertsConfig;
use crate::health::ChannelStates;
use crate::outbox::OutboxNotifier;
use crate::storage::{NewOutbound, Store};
use ferroclaw_channel_core::{ChannelState, ChatKind, ChatRoute, OutboundKind};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use std::time::Duration;

pub(super) struct Targets {
    pub config: AlertsConfig,
    pub states: ChannelStates,
    pub store: Arc<dyn Store>,
    pub outbox: OutboxNotifier,
    pub webhook_secret: Option<SecretString>,
}

impl Targets {
    /// Send one alert (`state`: "down" or "failing", or "resolved") about `key`.
    pub(super) async fn tell(&self, key: &str, state: &str, text: &str) {
        tracing::warn!(incident = key, state, "{text}");
        let about = super::conditions::channel_of(key);
        self.to_chat(about, text).await;
        let body = serde_json::json!({
            "kind": "alert", "key": key, "channel": about, "state": state, "text": text,
            "at": crate::clock::now_ms(),
        })
        .to_string();
        if !self.config.webhook_url.is_empty() {
            self.to_webhook(&body).await;
        }
        if !self.config.command.is_empty() {
            self.to_command(text, &body).await;
        }
    }

    /// The first configured chat whose channel is known, not down and not `about`.
    async fn to_chat(&self, about: Option<&str>, text: &str) {
        let snapshot = self.states.snapshot();
        for target in &self.config.chats {
            let Some((channel, chat)) = target.rsplit_once(':') else {
                continue;
            };
            let usable = snapshot.iter().any(|(name, health)| {
                name == channel
                    && Some(channel) != about
                    && health
                        .as_ref()
                        .is_none_or(|h| h.state != ChannelState::Down)
            });
            if !usable {
                continue;
            }
            let message = NewOutbound {
                route: ChatRoute {
                    channel: channel.to_string(),
                    kind: ChatKind::Group,
                    chat_id: chat.to_string(),
                    thread_id: None,
                },
                kind: OutboundKind::Status,
                text: text.to_string(),
                in_reply_to: None,
                edit_of: None,
                file: None,
                approval: None,
            };
            match crate::outbox::post(&*self.store, &self.outbox, "alerts", message).await {
                Ok(_) => return,
                Err(err) => {
                    tracing::warn!(error = %err, target, "alert not queued; trying the next chat")
                }
            }
        }
    }

    async fn to_webhook(&self, body: &str) {
        let timestamp = crate::clock::now_ms() / 1000;
        let mut request = crate::http::shared()
            .post(&self.config.webhook_url)
            .timeout(Duration::from_secs(10))
            .header("content-type", "application/json")
            .header("x-ferroclaw-timestamp", timestamp.to_string());
        if let Some(secret) = &self.webhook_secret {
            request = request.header(
                "x-ferroclaw-signature",
                ferroclaw_channel_webhook::sign(
                    secret.expose_secret().as_bytes(),
                    timestamp,
                    body.as_bytes(),
                ),
            );
        }
        match request.body(body.to_string()).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::warn!(status = %r.status(), "the alert webhook refused an alert"),
            Err(e) => tracing::warn!(error = %e.without_url(), "the alert webhook is unreachable"),
        }
    }

    async fn to_command(&self, text: &str, body: &str) {
        use tokio::io::AsyncWriteExt;
        let child = tokio::process::Command::new("sh")
            .args(["-c", &self.config.command])
            .env("FERROCLAW_ALERT", text)
            .stdin(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                tracing::warn!(error = %e, "the alert command could not start");
                return;
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(body.as_bytes()).await;
        }
        match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => tracing::warn!(%status, "the alert command failed"),
            _ => tracing::warn!("the alert command did not finish within 30 s"),
        }
    }
}
