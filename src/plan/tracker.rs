//! A session's plan during a turn: kept in the session row (so it survives restarts), shown
//! as a card in the chat that is edited in place as steps change, and summarised when the
//! last step finishes. One tracker per turn; updates are serialised.

use super::{Plan, PlanMode, StepStatus};
use crate::outbox::{OutboxNotifier, StatusCard};
use crate::storage::{Store, StoreError};
use ferroclaw_channel_core::{ChatRoute, OutboundKind};
use std::sync::Arc;
use tokio::sync::Mutex;

const PROVISIONAL_CHARS: usize = 400;

pub struct PlanTracker {
    store: Arc<dyn Store>,
    session_key: String,
    /// The plan's card in the request's thread (its id is kept in the plan).
    card: StatusCard,
    plan: Mutex<Option<Plan>>,
}

impl PlanTracker {
    /// The tracker for a session, with its stored plan (if any).
    pub fn load(
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        session_key: &str,
        stored: Option<&str>,
        route: ChatRoute,
        in_reply_to: Option<String>,
    ) -> Self {
        let plan = stored.and_then(|json| match serde_json::from_str::<Plan>(json) {
            Ok(plan) => Some(plan),
            Err(e) => {
                tracing::warn!(error = %e, "stored plan unreadable; ignoring it");
                None
            }
        });
        PlanTracker {
            card: StatusCard::new(
                store.clone(),
                outbox,
                session_key,
                route,
                in_reply_to,
                OutboundKind::Plan,
            ),
            store,
            session_key: session_key.to_string(),
            plan: Mutex::new(plan),
        }
    }

    /// The `## Active Plan` section, while a plan is active.
    pub async fn section(&self) -> Option<String> {
        self.plan
            .lock()
            .await
            .as_ref()
            .filter(|p| p.active && p.mode == PlanMode::Tracker)
            .map(Plan::prompt_section)
    }

    /// The plan as it stands.
    pub async fn snapshot(&self) -> Option<Plan> {
        self.plan.lock().await.clone()
    }

    /// Mark a `steps` plan as waiting for the user's decision on a failed step (or not).
    pub async fn set_awaiting(&self, step: Option<usize>) -> Result<(), StoreError> {
        let mut guard = self.plan.lock().await;
        let Some(plan) = guard.as_mut() else {
            return Ok(());
        };
        plan.awaiting = step;
        let snapshot = plan.clone();
        self.persist(&snapshot).await
    }

    /// End the plan early (`/plan stop`): no longer active; its summary is posted.
    pub async fn stop(&self) -> Result<Option<String>, StoreError> {
        let mut guard = self.plan.lock().await;
        let Some(plan) = guard.as_mut().filter(|p| p.active) else {
            return Ok(None);
        };
        plan.active = false;
        plan.awaiting = None;
        let snapshot = plan.clone();
        self.persist(&snapshot).await?;
        let summary = snapshot.summary_text();
        self.card.post_beside(summary.clone()).await?;
        Ok(Some(summary))
    }

    /// Start a new plan (replacing any other) and post its card.
    pub async fn create(
        &self,
        goal: String,
        steps: Vec<(String, String)>,
        mode: PlanMode,
    ) -> Result<String, StoreError> {
        let mut guard = self.plan.lock().await;
        let mut plan = Plan::new(goal, steps);
        plan.mode = mode;
        let card = plan.card_text();
        plan.card = Some(self.card.show(None, card.clone()).await?);
        self.persist(&plan).await?;
        *guard = Some(plan);
        Ok(card)
    }

    /// Record a step's status (and actual result); edit the card; summarise when finished.
    pub async fn update(
        &self,
        step: usize,
        status: StepStatus,
        actual: Option<String>,
    ) -> Result<String, String> {
        let mut guard = self.plan.lock().await;
        let plan = guard
            .as_mut()
            .filter(|p| p.active)
            .ok_or("there is no active plan; create one first")?;
        let count = plan.steps.len();
        let target = step
            .checked_sub(1)
            .and_then(|i| plan.steps.get_mut(i))
            .ok_or_else(|| format!("field `step`: the plan has steps 1 to {count}"))?;
        target.status = status;
        if let Some(actual) = actual.filter(|a| !a.trim().is_empty()) {
            target.actual = Some(actual);
            target.provisional = None;
        }
        let card = plan.card_text();
        let finished = plan.finished();
        if finished {
            plan.active = false;
        }
        let snapshot = plan.clone();
        let fail = |e: StoreError| format!("could not save the plan: {e}");
        self.persist(&snapshot).await.map_err(fail)?;
        self.card
            .show(snapshot.card, card.clone())
            .await
            .map_err(fail)?;
        if finished {
            self.card
                .post_beside(snapshot.summary_text())
                .await
                .map_err(fail)?;
        }
        Ok(card)
    }

    /// Remember the latest tool result as the current step's provisional actual.
    pub async fn provisional(&self, result: &str) {
        let mut guard = self.plan.lock().await;
        let Some(plan) = guard
            .as_mut()
            .filter(|p| p.active && p.mode == PlanMode::Tracker)
        else {
            return;
        };
        let Some(i) = plan.current() else { return };
        if plan.steps[i].actual.is_some() {
            return;
        }
        plan.steps[i].provisional = Some(result.chars().take(PROVISIONAL_CHARS).collect());
        let snapshot = plan.clone();
        drop(guard);
        if let Err(e) = self.persist(&snapshot).await {
            tracing::warn!(error = %e, "could not save the provisional result");
        }
    }

    async fn persist(&self, plan: &Plan) -> Result<(), StoreError> {
        let json = serde_json::to_string(plan).expect("plans serialise");
        self.store
            .session_set_plan(&self.session_key, Some(&json))
            .await
    }
}
