//! The cost gate: counts a message's reach, holds a model call's worst case against the
//! caps before it is made, records what it used and cost after, and keeps people within
//! their message rate.

use super::budgets::{self, Holds};
use super::prices::Prices;
use super::reach::{Counted, Reach};
use super::writer::{Stored, UsageWriter};
use crate::config::Config;
use crate::policy::{CallScope, Gate, ModelCallFacts, ModelOutcome, RunFacts, RunKind, Verdict};
use crate::storage::{LimitStore, NewUsage, RateCheck, UsageStore};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub struct CostGate {
    config: Arc<Config>,
    store: Arc<dyn UsageStore>,
    /// Rate windows and one message's reach, shared by the processes on the database.
    limits: Arc<dyn LimitStore>,
    /// Rows of calls with nothing to settle, stored in groups.
    writer: UsageWriter,
    prices: Arc<Prices>,
    /// Any cap configured: calls reserve before they are made.
    budgets_on: bool,
    reach: Reach,
    /// Reservations of calls in flight, by call id: what they are held against and how much.
    held: Mutex<HashMap<u64, (Holds, f64)>>,
    /// `<channel>:<user>` the rate limits skip.
    exempt: HashSet<String>,
}

impl CostGate {
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn UsageStore>,
        limits: Arc<dyn LimitStore>,
        prices: Arc<Prices>,
    ) -> Self {
        CostGate {
            reach: Reach::new(limits.clone(), config.limits.max_model_calls_per_message),
            limits,
            budgets_on: config.budgets.any(&config.agents),
            exempt: config.limits.exempt.iter().cloned().collect(),
            config,
            writer: UsageWriter::start(store.clone()),
            store,
            prices,
            held: Mutex::default(),
        }
    }

    /// Hold the call's worst case against its caps; the refusal names the cap that is spent.
    async fn reserve(&self, call: &ModelCallFacts<'_>) -> Verdict {
        let now = crate::clock::now_ms();
        let holds = budgets::holds(&self.config, &call.scope, call.background, now);
        if holds.holds.is_empty() {
            return Verdict::Allow;
        }
        let amount = self
            .prices
            .worst_case(&call.model.to_string(), call.estimated_input_tokens);
        match self.writer.reserve(holds.holds.clone(), amount).await {
            Ok(Ok(())) => {
                self.held
                    .lock()
                    .expect("held lock")
                    .insert(call.call_id, (holds, amount));
                Verdict::Allow
            }
            Ok(Err(i)) => {
                let hold = &holds.holds[i];
                tracing::info!(budget = %hold.budget, kind = call.kind.as_str(), "model call refused: budget spent");
                // For the operator's alert (a service-wide cap that refused a call).
                if let Err(e) = self
                    .store
                    .budget_refused(&hold.budget, &hold.period, now)
                    .await
                {
                    tracing::debug!(error = %e, "budget refusal not recorded");
                }
                Verdict::Refuse(holds.refusal(i, now))
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not reserve against the budgets");
                Verdict::Refuse(
                    "⚠️ The spending caps could not be checked just now (storage unavailable); try again shortly."
                        .into(),
                )
            }
        }
    }
}

#[async_trait]
impl Gate for CostGate {
    async fn before_turn(&self, scope: &CallScope<'_>) -> Verdict {
        let limits = &self.config.limits;
        let Some(sender) = scope.sender else {
            return Verdict::Allow;
        };
        let person = windows(limits.messages_per_minute, limits.messages_per_hour);
        let group = match scope.route.kind {
            ferroclaw_channel_core::ChatKind::Group => windows(
                limits.group_messages_per_minute,
                limits.group_messages_per_hour,
            ),
            _ => Vec::new(),
        };
        if person.is_empty() && group.is_empty() {
            return Verdict::Allow;
        }
        let route = scope.route;
        let subject = format!("{}:{sender}", route.channel);
        if self.exempt.contains(&subject) {
            return Verdict::Allow;
        }
        let chat = format!("chat:{}:{}", route.channel, route.chat_id);
        let mut checks = Vec::with_capacity(2);
        if !person.is_empty() {
            checks.push(RateCheck {
                subject: &subject,
                windows: &person,
            });
        }
        if !group.is_empty() {
            checks.push(RateCheck {
                subject: &chat,
                windows: &group,
            });
        }
        let now = crate::clock::now_ms();
        match self.limits.rate_take(&checks, now).await {
            Ok(None) => Verdict::Allow,
            Ok(Some((i, at))) => {
                let for_group = checks[i].subject == chat;
                tracing::info!(channel = %route.channel, group = for_group, "message over the rate limit");
                let (who, minute, hour) = if for_group {
                    (
                        "This group is writing",
                        limits.group_messages_per_minute,
                        limits.group_messages_per_hour,
                    )
                } else {
                    (
                        "You are writing",
                        limits.messages_per_minute,
                        limits.messages_per_hour,
                    )
                };
                let per = match (minute, hour) {
                    (0, hour) => format!("{hour} per hour"),
                    (minute, 0) => format!("{minute} per minute"),
                    (minute, hour) => format!("{minute} per minute, {hour} per hour"),
                };
                Verdict::Refuse(format!(
                    "⏳ {who} faster than this bot answers ({per}); try again in {}.",
                    super::wait_words(at - now)
                ))
            }
            // The limit protects spending; a store that cannot count refuses nothing here
            // (the budgets, checked per call, still hold).
            Err(e) => {
                tracing::warn!(error = %e, "could not count the message for the rate limit");
                Verdict::Allow
            }
        }
    }

    async fn before_run(&self, run: &RunFacts<'_>) -> Verdict {
        let limit = self.config.limits.max_runs_per_message;
        match self.reach.run(&run.scope, limit).await {
            Ok(Counted::Within) => Verdict::Allow,
            Err(e) => {
                tracing::warn!(error = %e, "could not count a run against its message's limit");
                Verdict::Refuse(format!(
                    "refused: the message's run limit could not be checked just now (storage unavailable: {e}); try again shortly."
                ))
            }
            Ok(Counted::Over(limit)) => {
                let what = match run.kind {
                    RunKind::Subagent => "subagent",
                    RunKind::PlanStep => "plan step",
                };
                tracing::info!(
                    limit,
                    what,
                    "run refused: the message reached its run limit"
                );
                Verdict::Refuse(format!(
                    "refused: the message this work answers has started {limit} runs \
                     (subagents, delegations, team tasks, plan steps; limits.max_runs_per_message); \
                     no {what} starts. Report what was finished."
                ))
            }
        }
    }

    async fn before_model(&self, call: &ModelCallFacts<'_>) -> Verdict {
        let limit = self.config.limits.max_model_calls_per_message;
        let counted = match self.reach.call(&call.scope, limit).await {
            Ok(counted) => counted,
            Err(e) => {
                tracing::warn!(error = %e, "could not count a model call against its message's limit");
                return Verdict::Refuse(
                    "⚠️ This message's call limit could not be checked just now (storage unavailable); try again shortly."
                        .into(),
                );
            }
        };
        if let Counted::Over(limit) = counted {
            tracing::info!(
                limit,
                "model call refused: the message reached its call limit"
            );
            return Verdict::Refuse(format!(
                "⚠️ This message has used its {limit} model calls (limits.max_model_calls_per_message); \
                 the work stops here with what was finished."
            ));
        }
        if !self.budgets_on {
            return Verdict::Allow;
        }
        self.reserve(call).await
    }

    fn turn_ended(&self, scope: &CallScope<'_>) {
        self.reach
            .turn_ended(scope, self.config.limits.max_model_calls_per_message);
    }

    fn abandoned_model(&self, call_id: u64) {
        let held = self.held.lock().expect("held lock").remove(&call_id);
        if let Some((holds, amount)) = held {
            self.writer.release(holds.holds, amount);
        }
    }

    async fn after_model(&self, call: &ModelCallFacts<'_>, outcome: ModelOutcome<'_>) {
        let held = self.held.lock().expect("held lock").remove(&call.call_id);
        let (by, usage) = match outcome {
            ModelOutcome::Answered { by, usage } => (by, usage),
            ModelOutcome::Failed => {
                // No answer: the reservation goes back.
                if let Some((holds, amount)) = held
                    && let Err(e) = self.store.budget_settle(&holds.holds, -amount).await
                {
                    tracing::warn!(error = %e, "could not release a budget reservation");
                }
                return;
            }
        };
        let model = by.to_string();
        let cost = self.prices.cost(&model, usage);
        let tokens = [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("cache_write", usage.cache_write_tokens),
        ];
        crate::metrics::model_usage(&model, call.kind.as_str(), &tokens, cost);
        let now = crate::clock::now_ms();
        let scope = &call.scope;
        let route = scope.route;
        let row = NewUsage {
            at_ms: now,
            day: crate::clock::utc_day(now),
            session_key: scope.session_key.to_string(),
            agent: scope.agent.to_string(),
            channel: route.channel.clone(),
            chat: format!("{}:{}", route.channel, route.chat_id),
            user: scope.sender.map(|s| format!("{}:{s}", route.channel)),
            kind: call.kind.as_str().to_string(),
            model,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: cost.unwrap_or(0.0),
            priced: cost.is_some(),
        };
        // A reserved call settles with its row, in the writer's next transaction.
        let settle = held.map(|(holds, amount)| {
            let delta = row.cost_usd - amount;
            (holds.holds, delta)
        });
        let stored = self.writer.record(Stored { row, settle }).await;
        if let Err(e) = stored {
            tracing::warn!(error = %e, "could not record a model call's usage");
        }
    }
}

/// The rate windows of a per-minute and a per-hour limit (0: off), as (length ms, most).
fn windows(per_minute: u32, per_hour: u32) -> Vec<(i64, u32)> {
    [(60_000, per_minute), (3_600_000, per_hour)]
        .into_iter()
        .filter(|(_, max)| *max > 0)
        .collect()
}
