//! Every channel's health in one place (SPEC section 21): `/readyz?verbose`,
//! `GET /v1/admin/channels`, the status page, the metrics and the alerts all read it here.
//! A follower does not run the receivers of channels the leader receives for: their state
//! is the leader's, which it writes to the store every few seconds ([`ChannelStates::share`])
//! and followers show as reported. Knows channels and leadership; not how any adapter
//! measures.

use crate::app::ChannelMap;
use crate::coordination::Role;
use crate::storage::Store;
use ferroclaw_channel_core::{ChannelHealth, ChannelState};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the leader writes, and a follower reads, the led channels' health.
const SHARE_EVERY: Duration = Duration::from_secs(2);

/// What readiness needs to know of leadership: a follower does not run the receivers of
/// `led` channels (the leader does), so their connection is not its readiness.
#[derive(Clone)]
pub struct Readiness {
    pub role: tokio::sync::watch::Receiver<Role>,
    pub led: Vec<String>,
}

#[derive(Clone)]
pub struct ChannelStates {
    channels: ChannelMap,
    readiness: Readiness,
    /// On a follower: the leader's last report of the channels it leads, and when it was
    /// written (ms).
    reported: Arc<Mutex<HashMap<String, (ChannelHealth, i64)>>>,
}

impl ChannelStates {
    pub fn new(channels: ChannelMap, readiness: Readiness) -> Self {
        ChannelStates {
            channels,
            readiness,
            reported: Arc::default(),
        }
    }

    /// Until `stop`: the leader writes the health of the channels it leads to the store; a
    /// follower reads it back for [`ChannelStates::json`].
    pub async fn share(self, store: Arc<dyn Store>, stop: CancellationToken) {
        if self.readiness.led.is_empty() {
            return;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SHARE_EVERY) => {}
            }
            let leading = *self.readiness.role.borrow() == Role::Leader;
            if leading {
                let rows: Vec<(String, String)> = self
                    .snapshot()
                    .into_iter()
                    .filter(|(name, _)| self.readiness.led.contains(name))
                    .filter_map(|(name, health)| {
                        Some((name, serde_json::to_string(&health?).ok()?))
                    })
                    .collect();
                if let Err(err) = store
                    .channel_health_put(&rows, crate::clock::now_ms())
                    .await
                {
                    tracing::debug!(error = %err, "channel health not shared");
                }
            } else if let Ok(rows) = store.channel_health_all().await {
                let mut reported = self.reported.lock().expect("reported lock");
                reported.clear();
                for (name, health, at) in rows {
                    if let Ok(health) = serde_json::from_str(&health) {
                        reported.insert(name, (health, at));
                    }
                }
            }
        }
    }

    /// Each channel's health by name, in name order; None for a channel another process
    /// receives for.
    pub fn snapshot(&self) -> Vec<(String, Option<ChannelHealth>)> {
        let follower = *self.readiness.role.borrow() != Role::Leader;
        let mut all: Vec<(String, Option<ChannelHealth>)> = self
            .channels
            .values()
            .map(|channel| {
                let name = channel.name().to_string();
                let led = follower && self.readiness.led.contains(&name);
                let health = (!led).then(|| channel.health());
                (name, health)
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// `{"<name>": {"state": ..., "last_receive_age_secs": ..., ...}}`.
    pub fn json(&self) -> Value {
        let mut map = serde_json::Map::new();
        for (name, health) in self.snapshot() {
            let value = match health {
                Some(health) => serde_json::to_value(health).expect("health serialises"),
                None => self.reported_json(&name),
            };
            map.insert(name, value);
        }
        Value::Object(map)
    }

    /// A led channel on a follower: the leader's report, and how old it is.
    fn reported_json(&self, name: &str) -> Value {
        let reported = self.reported.lock().expect("reported lock");
        match reported.get(name) {
            Some((health, at)) => {
                let mut value = serde_json::to_value(health).expect("health serialises");
                value["received_by"] = json!("the leading process");
                value["reported_secs_ago"] =
                    json!(((crate::clock::now_ms() - at).max(0) / 1000) as u64);
                value
            }
            None => json!({"state": "up", "received_by": "the leading process"}),
        }
    }

    /// Set the channel gauges (at each scrape).
    pub fn export_metrics(&self) {
        for (name, health) in self.snapshot() {
            if let Some(health) = health {
                crate::metrics::channel_health(
                    &name,
                    health.state != ChannelState::Down,
                    health.last_receive_age_secs,
                );
            }
        }
    }
}

/// `ferroclaw status`: the channel table of the service at `base`, asked with the admin
/// token the config names.
pub async fn status_table(
    loaded: &crate::config::LoadedConfig,
    base: &str,
) -> anyhow::Result<String> {
    use secrecy::ExposeSecret;
    let token = loaded.secrets.admin_token.as_ref().ok_or_else(|| {
        anyhow::anyhow!("server.admin_token_env: set the admin token's variable to ask the service")
    })?;
    let url = format!("{}/v1/admin/channels", base.trim_end_matches('/'));
    let response = crate::http::shared()
        .get(&url)
        .bearer_auth(token.expose_secret())
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {}", e.without_url()))?;
    if !response.status().is_success() {
        anyhow::bail!("{url} answered {}", response.status());
    }
    let body: Value = response.json().await?;
    let mut out = format!(
        "{:<24} {:<9} {:>13}  {}\n",
        "CHANNEL", "STATE", "LAST RECEIVE", "DETAIL"
    );
    for (name, health) in body["channels"].as_object().into_iter().flatten() {
        let age = health["last_receive_age_secs"]
            .as_u64()
            .map_or("-".to_string(), |a| format!("{a} s ago"));
        out.push_str(&format!(
            "{:<24} {:<9} {:>13}  {}\n",
            name,
            health["state"].as_str().unwrap_or("?"),
            age,
            health["detail"].as_str().unwrap_or("")
        ));
    }
    Ok(out)
}
