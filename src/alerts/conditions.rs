//! What can be wrong, looked at on each tick of the alert loop: channels down, deliveries
//! failing, the store not writable, an MCP server down, approvals waiting too long, a
//! service-wide budget that refused a call, messages given up after repeated crashes. Each condition has a key (its incident's), whether it fails
//! now (in words), and how long it must fail before someone is told. Knows where to look;
//! not who is told or how often.

use crate::config::{AlertsConfig, Config};
use crate::health::ChannelStates;
use crate::mcp::McpServers;
use crate::storage::Store;
use ferroclaw_channel_core::ChannelState;
use std::sync::Arc;
use std::time::Duration;

/// Ticks between the looks that cost a query (deliveries, approvals, budgets).
pub(super) const QUERY_EVERY: u64 = 5;

/// A condition failing now.
#[derive(Debug, Clone)]
pub(super) struct Failing {
    /// "telegram is down (no long poll completed for 3 s)".
    pub text: String,
    /// How long it must fail before the alert.
    pub after: Duration,
}

/// Where to look.
pub(super) struct Sources {
    pub config: Arc<Config>,
    pub states: ChannelStates,
    pub store: Arc<dyn Store>,
    pub mcp: Arc<McpServers>,
}

/// The channel a key is about (an alert about it does not go through it).
pub(super) fn channel_of(key: &str) -> Option<&str> {
    key.strip_prefix("channel:")
        .or_else(|| key.strip_prefix("deliveries:"))
}

/// What "resolved" says for a key.
pub(super) fn resolved_words(key: &str) -> String {
    if let Some(c) = key.strip_prefix("channel:") {
        format!("{c} is up again")
    } else if let Some(c) = key.strip_prefix("deliveries:") {
        format!("deliveries to {c} go through again")
    } else if let Some(id) = key.strip_prefix("mcp:") {
        format!("MCP server {id} is up again")
    } else if let Some(b) = key.strip_prefix("budget:") {
        format!("budget {b} has room again")
    } else if key == "store" {
        "the store takes writes again".to_string()
    } else if key == "approvals" {
        "no approval is waiting too long".to_string()
    } else if key == "given_up" {
        "no message was given up in the last hour".to_string()
    } else {
        format!("{key} is fine again")
    }
}

impl Sources {
    fn alerts(&self) -> &AlertsConfig {
        &self.config.alerts
    }

    /// Every condition looked at on tick `tick`, failing or not: conditions not looked at
    /// this tick are left out (their incidents stay as they are).
    pub(super) async fn look(&self, tick: u64) -> Vec<(String, Option<Failing>)> {
        let mut all = self.channels();
        all.extend(self.mcp_servers());
        if tick.is_multiple_of(QUERY_EVERY) {
            all.push(("store".into(), self.store_writes().await));
            all.extend(self.deliveries().await);
            if let Some(approvals) = self.approvals().await {
                all.push(approvals);
            }
            all.extend(self.budgets().await);
            if let Some(given_up) = self.given_up().await {
                all.push(given_up);
            }
        }
        all
    }

    /// Messages given up in the last hour after their turn killed the process again and
    /// again (each was answered with an apology; someone should look at why).
    async fn given_up(&self) -> Option<(String, Option<Failing>)> {
        let since = crate::clock::now_ms() - 3_600_000;
        let sessions = self.store.journal_given_up_since(since).await.ok()?;
        let failing = sessions.first().map(|latest| Failing {
            text: format!(
                "turns failing: {} message(s) given up in the last hour after their turn stopped the service {} times (the latest in {latest})",
                sessions.len(),
                crate::storage::MAX_TURN_ATTEMPTS
            ),
            after: Duration::ZERO,
        });
        Some(("given_up".into(), failing))
    }

    fn channels(&self) -> Vec<(String, Option<Failing>)> {
        let after = Duration::from_secs(self.alerts().channel_down_secs);
        self.states
            .snapshot()
            .into_iter()
            .filter_map(|(name, health)| {
                // A channel another process receives for: that process tells.
                let health = health?;
                let failing = (health.state == ChannelState::Down).then(|| {
                    let why = match (&health.detail, health.last_receive_age_secs) {
                        (Some(detail), _) => detail.clone(),
                        (None, Some(age)) => format!("nothing received for {age} s"),
                        (None, None) => "not connected".to_string(),
                    };
                    Failing {
                        text: format!("{name} is down ({why})"),
                        after,
                    }
                });
                Some((format!("channel:{name}"), failing))
            })
            .collect()
    }

    fn mcp_servers(&self) -> Vec<(String, Option<Failing>)> {
        let after = Duration::from_secs(self.alerts().channel_down_secs);
        self.mcp
            .statuses()
            .into_iter()
            .map(|s| {
                let failing = matches!(s.state, crate::mcp::State::Down).then(|| Failing {
                    text: format!(
                        "MCP server {} is down ({})",
                        s.id,
                        s.last_error.as_deref().unwrap_or("no answer")
                    ),
                    after,
                });
                (format!("mcp:{}", s.id), failing)
            })
            .collect()
    }

    async fn store_writes(&self) -> Option<Failing> {
        let err = self.store.ping().await.err()?;
        Some(Failing {
            text: format!("the store is failing: not writable ({err})"),
            after: Duration::from_secs(self.alerts().store_down_secs),
        })
    }

    /// Per channel: its oldest undelivered message, failing when it was tried and refused.
    async fn deliveries(&self) -> Vec<(String, Option<Failing>)> {
        let after = Duration::from_secs(self.alerts().delivery_pending_secs);
        let Ok(backlog) = self.store.outbox_backlog(500).await else {
            return Vec::new();
        };
        let mut oldest: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for entry in &backlog {
            oldest
                .entry(entry.message.route.channel.clone())
                .or_insert((entry.message.id, entry.attempts));
        }
        self.states
            .snapshot()
            .into_iter()
            .map(|(name, _)| {
                let failing = oldest
                    .get(&name)
                    .filter(|(_, attempts)| *attempts > 0)
                    .map(|(id, attempts)| Failing {
                        text: format!(
                            "deliveries to {name} are failing (message {id} tried {attempts} times, {} waiting)",
                            backlog
                                .iter()
                                .filter(|e| e.message.route.channel == name)
                                .count()
                        ),
                        after,
                    });
                (format!("deliveries:{name}"), failing)
            })
            .collect()
    }

    async fn approvals(&self) -> Option<(String, Option<Failing>)> {
        let limit = self.alerts().approval_waiting_secs;
        let pending = self.store.approvals_pending().await.ok()?;
        let now = crate::clock::now_ms();
        let late: Vec<_> = pending
            .iter()
            .filter(|a| now - a.created_at_ms >= (limit * 1000) as i64)
            .collect();
        let failing = late.first().map(|oldest| Failing {
            text: format!(
                "approvals failing: {} approval(s) waiting over {limit} s (the oldest: {} in {}:{})",
                late.len(),
                oldest.request.tool,
                oldest.request.route.channel,
                oldest.request.route.chat_id
            ),
            after: Duration::ZERO,
        });
        Some(("approvals".into(), failing))
    }

    /// The service-wide caps (not one person's: that person is told in the chat).
    async fn budgets(&self) -> Vec<(String, Option<Failing>)> {
        let b = &self.config.budgets;
        let now = crate::clock::now_ms();
        let day = crate::clock::utc_day(now);
        let month = day[..7].to_string();
        let caps = [
            (
                "total",
                "daily",
                "budgets.total_daily_usd",
                b.total_daily_usd,
                &day,
            ),
            (
                "total",
                "monthly",
                "budgets.total_monthly_usd",
                b.total_monthly_usd,
                &month,
            ),
            (
                "background",
                "daily",
                "budgets.background_daily_usd",
                b.background_daily_usd,
                &day,
            ),
        ];
        let mut all = Vec::new();
        for (budget, span, key, cap, period) in caps {
            if cap <= 0.0 {
                continue;
            }
            let (Ok(spent), Ok(refused)) = (
                self.store.budget_spent(budget, period).await,
                self.store.budget_refused_at(budget, period).await,
            ) else {
                continue;
            };
            // Tripped: it refused a call this period (calls are refused before the last
            // cent, so a cap can trip well short of it).
            let failing = refused.map(|_| Failing {
                text: format!(
                    "budget failing: {key} tripped, {} of {} spent in {period}; calls that do not fit are refused until it resets",
                    crate::usage::dollars(spent),
                    crate::usage::dollars(cap)
                ),
                after: Duration::ZERO,
            });
            all.push((format!("budget:{budget}:{span}"), failing));
        }
        all
    }
}
