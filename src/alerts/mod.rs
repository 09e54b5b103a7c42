//! Operator alerts (SPEC section 21): a condition failing long enough (a channel down for
//! `alerts.channel_down_secs`, deliveries failing for `delivery_pending_secs`, the store not
//! writable for `store_down_secs`, an MCP server down, an approval waiting over
//! `approval_waiting_secs`, a service-wide budget spent) is an incident; its one alert goes
//! to the targets (`targets.rs`) and one "resolved" follows when it ends. Incidents live in
//! the store, so only the leading process tells and each alert is sent once across restarts
//! and leader changes; only the store's own incident is kept in memory (it cannot be
//! written). Knows conditions and incidents; not how a channel measures itself.

mod conditions;
mod targets;

use crate::config::Config;
use crate::coordination::Role;
use crate::health::ChannelStates;
use crate::mcp::McpServers;
use crate::outbox::OutboxNotifier;
use crate::storage::{Incident, Store};
use conditions::{Failing, Sources};
use secrecy::SecretString;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use targets::Targets;
use tokio_util::sync::CancellationToken;

/// How often conditions are looked at.
const TICK: Duration = Duration::from_secs(1);

pub struct Alerts {
    sources: Sources,
    targets: Targets,
}

/// What the loop knows of the open incidents (refreshed from the store).
type Open = HashMap<String, Incident>;

impl Alerts {
    pub fn new(
        config: Arc<Config>,
        states: ChannelStates,
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        mcp: Arc<McpServers>,
        webhook_secret: Option<SecretString>,
    ) -> Self {
        Alerts {
            targets: Targets {
                config: config.alerts.clone(),
                states: states.clone(),
                store: store.clone(),
                outbox,
                webhook_secret,
            },
            sources: Sources {
                config,
                states,
                store,
                mcp,
            },
        }
    }

    /// Watch until `stop`; tell only while this process leads.
    pub async fn run(self, role: tokio::sync::watch::Receiver<Role>, stop: CancellationToken) {
        let mut open: Option<Open> = None;
        let mut tick: u64 = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(TICK) => {}
            }
            tick += 1;
            if *role.borrow() != Role::Leader {
                open = None;
                continue;
            }
            // What another leader opened (or told) before: read when leading starts and now
            // and then.
            if open.is_none() || tick.is_multiple_of(conditions::QUERY_EVERY) {
                match self.sources.store.incidents().await {
                    Ok(rows) => {
                        let store_incident = open.as_ref().and_then(|o| o.get("store").copied());
                        let mut rows: Open = rows.into_iter().collect();
                        if let Some(incident) = store_incident {
                            rows.insert("store".into(), incident);
                        }
                        open = Some(rows);
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "alerts: incidents not readable");
                        open.get_or_insert_with(HashMap::new);
                    }
                }
            }
            let open = open.as_mut().expect("set above");
            for (key, failing) in self.sources.look(tick).await {
                match failing {
                    Some(failing) => self.failing(open, &key, failing).await,
                    None => self.fine(open, &key).await,
                }
            }
        }
    }

    async fn failing(&self, open: &mut Open, key: &str, failing: Failing) {
        let now = crate::clock::now_ms();
        let in_memory = key == "store";
        let incident = match open.get(key) {
            Some(incident) => *incident,
            None if in_memory => Incident {
                since_ms: now,
                alerted_ms: None,
            },
            None => match self.sources.store.incident_open(key, now).await {
                Ok(incident) => incident,
                Err(err) => {
                    tracing::debug!(error = %err, key, "alerts: incident not stored");
                    return;
                }
            },
        };
        open.insert(key.to_string(), incident);
        let lasted = Duration::from_millis((now - incident.since_ms).max(0) as u64);
        if incident.alerted_ms.is_some() || lasted < failing.after {
            return;
        }
        let claimed = in_memory
            || self
                .sources
                .store
                .incident_claim_alert(key, now)
                .await
                .unwrap_or(false);
        open.insert(
            key.to_string(),
            Incident {
                alerted_ms: Some(now),
                ..incident
            },
        );
        if claimed {
            let state = if key.starts_with("channel:") || key.starts_with("mcp:") {
                "down"
            } else {
                "failing"
            };
            let text = format!("🔴 {} — for {} s", failing.text, lasted.as_secs());
            self.targets.tell(key, state, &text).await;
        }
    }

    async fn fine(&self, open: &mut Open, key: &str) {
        let Some(known) = open.remove(key) else {
            return;
        };
        let ended = if key == "store" {
            Some(known)
        } else {
            match self.sources.store.incident_close(key).await {
                Ok(ended) => ended,
                Err(err) => {
                    // Closed on a later tick.
                    tracing::debug!(error = %err, key, "alerts: incident not closed");
                    open.insert(key.to_string(), known);
                    return;
                }
            }
        };
        if let Some(Incident {
            since_ms,
            alerted_ms: Some(_),
        }) = ended
        {
            let lasted = (crate::clock::now_ms() - since_ms).max(0) / 1000;
            let text = format!(
                "✅ resolved: {} (after {lasted} s)",
                conditions::resolved_words(key)
            );
            self.targets.tell(key, "resolved", &text).await;
        }
    }
}
