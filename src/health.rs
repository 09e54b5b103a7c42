//! Every channel's health in one place (SPEC section 21): `/readyz?verbose`,
//! `GET /v1/admin/channels`, the status page, the metrics and the alerts all read it here.
//! A follower does not run the receivers of channels the leader receives for: their state
//! is the leader's to report. Knows channels and leadership; not how any adapter measures.

use crate::app::ChannelMap;
use crate::coordination::Role;
use ferroclaw_channel_core::{ChannelHealth, ChannelState};
use serde_json::{Value, json};

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
}

impl ChannelStates {
    pub fn new(channels: ChannelMap, readiness: Readiness) -> Self {
        ChannelStates {
            channels,
            readiness,
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
                None => json!({"state": "up", "received_by": "the leading process"}),
            };
            map.insert(name, value);
        }
        Value::Object(map)
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
