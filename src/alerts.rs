//! Operator alerts (SPEC section 21): a channel down for `alerts.channel_down_secs` is an
//! incident; its one alert goes to the first chat of `alerts.chats` whose channel is up (an
//! alert never waits on the channel that is down), to `alerts.webhook_url` (signed like
//! webhook callbacks) and to `alerts.command`; one "resolved" follows when the channel is up
//! again. Only the leading process tells, so several instances send each alert once. Knows
//! channel health and the outbox; not how a channel measures itself.

use crate::config::AlertsConfig;
use crate::coordination::Role;
use crate::health::ChannelStates;
use crate::outbox::OutboxNotifier;
use crate::storage::{NewOutbound, Store};
use ferroclaw_channel_core::{ChannelHealth, ChannelState, ChatKind, ChatRoute, OutboundKind};
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often health is looked at.
const TICK: Duration = Duration::from_secs(1);

pub struct Alerts {
    pub config: AlertsConfig,
    pub states: ChannelStates,
    pub store: Arc<dyn Store>,
    pub outbox: OutboxNotifier,
    pub webhook_secret: Option<SecretString>,
}

/// A channel that is down, since when, and whether it was told.
struct Incident {
    since: Instant,
    alerted: bool,
}

impl Alerts {
    /// Watch until `stop`; tell only while this process leads.
    pub async fn run(self, role: tokio::sync::watch::Receiver<Role>, stop: CancellationToken) {
        let down_after = Duration::from_secs(self.config.channel_down_secs);
        let mut open: HashMap<String, Incident> = HashMap::new();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(TICK) => {}
            }
            if *role.borrow() != Role::Leader {
                open.clear();
                continue;
            }
            let snapshot = self.states.snapshot();
            for (name, health) in &snapshot {
                let Some(health) = health else { continue };
                if health.state == ChannelState::Down {
                    let incident = open.entry(name.clone()).or_insert(Incident {
                        since: Instant::now(),
                        alerted: false,
                    });
                    if !incident.alerted && incident.since.elapsed() >= down_after {
                        incident.alerted = true;
                        let text = down_text(name, health, incident.since.elapsed());
                        self.tell(&snapshot, name, "down", &text).await;
                    }
                } else if let Some(incident) = open.remove(name)
                    && incident.alerted
                {
                    let text = format!(
                        "✅ resolved: {name} is {} again (down for {} s)",
                        health.state.as_str(),
                        incident.since.elapsed().as_secs()
                    );
                    self.tell(&snapshot, name, "resolved", &text).await;
                }
            }
        }
    }

    /// Send one alert about `about` to every kind of target configured.
    async fn tell(
        &self,
        snapshot: &[(String, Option<ChannelHealth>)],
        about: &str,
        state: &str,
        text: &str,
    ) {
        tracing::warn!(channel = about, state, "{text}");
        self.to_chat(snapshot, about, text).await;
        let body = serde_json::json!({
            "kind": "alert", "channel": about, "state": state, "text": text,
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

    /// The first configured chat whose channel is known and not down.
    async fn to_chat(&self, snapshot: &[(String, Option<ChannelHealth>)], about: &str, text: &str) {
        for target in &self.config.chats {
            let Some((channel, chat)) = target.rsplit_once(':') else {
                continue;
            };
            let usable = snapshot.iter().any(|(name, health)| {
                name == channel
                    && channel != about
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

fn down_text(name: &str, health: &ChannelHealth, down_for: Duration) -> String {
    let why = match (&health.detail, health.last_receive_age_secs) {
        (Some(detail), _) => detail.clone(),
        (None, Some(age)) => format!("nothing received for {age} s"),
        (None, None) => "not connected".to_string(),
    };
    format!("🔴 {name} is down ({why}) for {} s", down_for.as_secs())
}
