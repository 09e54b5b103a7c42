//! The approvals service: opens a request for a call and waits for its decision, and carries
//! out decisions (from a command, a button, the webhook's call) exactly once.

use super::policy::{self, Policies};
use super::prompt;
use crate::outbox::OutboxNotifier;
use crate::policy::{ToolCallFacts, Verdict};
use crate::storage::{
    ApprovalDecision, ApprovalRow, ApprovalState, NewApproval, NewOutbound, Store, StoreError,
};
use ferroclaw_channel_core::{ApprovalPrompt, Decision, DecisionOutcome, OutboundKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How often a waiting call reads its request again anyway (a decision taken by another
/// process is signalled, but a signal can be lost with a dropped database connection).
const POLL: Duration = Duration::from_secs(1);

pub struct Approvals {
    store: Arc<dyn Store>,
    outbox: OutboxNotifier,
    policies: Policies,
    /// Configured secret values, masked in the arguments a prompt shows.
    secrets: Vec<secrecy::SecretString>,
    /// Other processes on the same database (PostgreSQL): told of each decision, so the
    /// one whose call waits reads it at once.
    signals: Option<crate::signals::Signals>,
    /// Calls waiting in this process, by request id: woken when a decision is recorded here.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
}

/// Takes a waiter out of the map when its wait ends (answered, timed out or dropped).
struct Waiting<'a> {
    approvals: &'a Approvals,
    id: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.approvals
            .waiters
            .lock()
            .expect("waiters lock")
            .remove(&self.id);
    }
}

/// The edit of a request's prompt to `text` (who decided, or why no one did); None when the
/// request has no prompt.
fn prompt_edit(row: &ApprovalRow, text: String) -> Option<NewOutbound> {
    Some(NewOutbound {
        route: row.request.route.clone(),
        kind: OutboundKind::Status,
        text,
        in_reply_to: None,
        edit_of: Some(row.prompt_id?),
        file: None,
        approval: None,
    })
}

/// A request id people can type: 8 characters without look-alikes.
fn new_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(8)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

impl Approvals {
    pub fn new(
        config: &crate::config::Config,
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        secrets: Vec<secrecy::SecretString>,
        signals: Option<crate::signals::Signals>,
    ) -> Self {
        Approvals {
            store,
            outbox,
            secrets,
            signals,
            policies: Policies::from_config(config),
            waiters: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn policies(&self) -> &Policies {
        &self.policies
    }

    /// Whether someone chose "always" for this call's tool (and host) in its chat.
    pub(super) async fn remembered(&self, call: &ToolCallFacts<'_>) -> bool {
        let route = call.scope.route;
        let target = call.risk.target.as_deref().unwrap_or("");
        match self
            .store
            .approval_rule_find(&route.channel, &route.chat_id, call.tool, target)
            .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the remembered approvals");
                false
            }
        }
    }

    /// The "always" choices of a chat.
    pub(super) async fn rules(
        &self,
        route: &ferroclaw_channel_core::ChatRoute,
    ) -> Result<Vec<crate::storage::ApprovalRule>, StoreError> {
        self.store
            .approval_rules(Some((&route.channel, &route.chat_id)))
            .await
    }

    /// Remove a chat's "always" choice.
    pub(super) async fn revoke(
        &self,
        route: &ferroclaw_channel_core::ChatRoute,
        id: i64,
    ) -> Result<bool, StoreError> {
        self.store
            .approval_rule_revoke(&route.channel, &route.chat_id, id)
            .await
    }

    /// What run `run_id` read that cannot be trusted. A record that cannot be read counts
    /// as tainted (the turn asks rather than trusts).
    pub(super) async fn run_taint(&self, run_id: &str) -> Option<String> {
        self.store.run_taint_of(run_id).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not read a subagent run's taint; treating it as tainted");
            Some("content whose origin could not be checked".into())
        })
    }

    /// Keep that run `run_id` read `source`.
    pub(super) async fn record_run_taint(&self, run_id: &str, source: &str) {
        let now = crate::clock::now_ms();
        if let Err(e) = self.store.run_taint_record(run_id, source, now).await {
            tracing::warn!(error = %e, "could not record a subagent run's taint");
        }
    }

    /// A request by id.
    pub async fn find(&self, id: &str) -> Result<Option<ApprovalRow>, StoreError> {
        self.store.approval_get(id).await
    }

    /// Ask the chat about `call` (for `reason`) and wait for the decision: approved runs it,
    /// denied or expired does not. A redone turn's same call finds its request again (and
    /// its prompt is not posted twice).
    pub(super) async fn ask(&self, call: &ToolCallFacts<'_>, reason: String) -> Verdict {
        let scope = &call.scope;
        let policy = self.policies.of(scope.agent);
        let requester = scope.sender.map(|s| format!("{}:{s}", scope.route.channel));
        let deciders = policy::deciders(policy, scope.route, requester.as_deref());
        if deciders.is_empty() {
            return Verdict::Refuse(format!(
                "`{}` needs a person's approval ({reason}), and no one may give it in this chat \
                 (approvals.approvers names no one, and this is not a direct chat); it did not run",
                call.tool
            ));
        }
        let id = new_id();
        let now = crate::clock::now_ms();
        let request = NewApproval {
            call_ref: call
                .call_ref
                .map_or_else(|| format!("once:{id}"), str::to_string),
            id,
            session_key: scope.session_key.to_string(),
            route: scope.route.clone(),
            agent: scope.agent.to_string(),
            requester,
            tool: call.tool.to_string(),
            target: call.risk.target.clone().unwrap_or_default(),
            arguments: prompt::shown_arguments(call.arguments, &self.secrets),
            reason,
            deciders,
            expires_at_ms: now.saturating_add(policy.timeout_secs as i64 * 1000),
        };
        let prompt = NewOutbound {
            route: scope.route.clone(),
            kind: OutboundKind::Approval,
            text: prompt::prompt_text(&request, policy.timeout_secs),
            in_reply_to: scope.origin_message.map(str::to_string),
            edit_of: None,
            file: None,
            approval: Some(ApprovalPrompt {
                id: request.id.clone(),
                tool: request.tool.clone(),
                arguments: request.arguments.clone(),
                reason: request.reason.clone(),
                expires_at: request.expires_at_ms / 1000,
            }),
        };
        let row = match self.store.approval_open(&request, &prompt, now).await {
            Ok((row, created)) => {
                if created {
                    self.outbox.kick(&scope.route.channel);
                    tracing::info!(approval = %row.request.id, tool = call.tool, "tool call waits for approval");
                } else {
                    tracing::info!(approval = %row.request.id, tool = call.tool, "redone call waits for its earlier approval request");
                }
                row
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not store an approval request");
                return Verdict::Refuse(format!(
                    "`{}` needs approval and the request could not be stored; it did not run",
                    call.tool
                ));
            }
        };
        self.wait(&row.request.id).await
    }

    /// Wait until request `id` is decided (or expires, which denies it).
    async fn wait(&self, id: &str) -> Verdict {
        let notify = Arc::new(Notify::new());
        self.waiters
            .lock()
            .expect("waiters lock")
            .insert(id.to_string(), notify.clone());
        let _waiting = Waiting {
            approvals: self,
            id: id.to_string(),
        };
        loop {
            let row = match self.store.approval_get(id).await {
                Ok(Some(row)) => row,
                Ok(None) => return Verdict::Refuse("the approval request is gone".into()),
                Err(e) => {
                    tracing::warn!(error = %e, approval = id, "could not read an approval request");
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            };
            let by = row.decided_by.clone().unwrap_or_default();
            match row.state {
                ApprovalState::Approved => {
                    tracing::info!(approval = id, by = %by, "tool call approved");
                    return Verdict::Allow;
                }
                ApprovalState::Denied => {
                    return Verdict::Refuse(format!(
                        "{by} denied this `{}` call; it did not run",
                        row.request.tool
                    ));
                }
                ApprovalState::Expired | ApprovalState::Withdrawn => {
                    return Verdict::Refuse(format!(
                        "no one approved this `{}` call in time; it did not run",
                        row.request.tool
                    ));
                }
                ApprovalState::Pending => {}
            }
            let left = row.request.expires_at_ms - crate::clock::now_ms();
            if left <= 0 {
                self.expire(&row).await;
                continue;
            }
            let nap = POLL.min(Duration::from_millis(left as u64));
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// Wake the call waiting for request `id`, here and (PostgreSQL) in the other processes.
    fn wake(&self, id: &str) {
        self.wake_here(id);
        if let Some(signals) = &self.signals {
            signals.send(crate::signals::Signal::Approval { id: id.to_string() });
        }
    }

    /// Wake the call waiting for request `id` in this process, if one does.
    pub fn wake_here(&self, id: &str) {
        if let Some(waiter) = self.waiters.lock().expect("waiters lock").get(id) {
            waiter.notify_one();
        }
    }

    /// Mark a pending request past its deadline expired, with its prompt's edit.
    async fn expire(&self, row: &ApprovalRow) {
        let edit = prompt_edit(row, prompt::decided_text(&row.request, None, ""));
        let decision = ApprovalDecision {
            id: &row.request.id,
            state: ApprovalState::Expired,
            always: false,
            by: "timeout",
            now_ms: crate::clock::now_ms(),
            edit,
        };
        match self.store.approval_decide(&decision).await {
            Ok(true) => {
                tracing::info!(approval = %row.request.id, "approval request expired");
                self.outbox.kick(&row.request.route.channel);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "could not mark an approval request expired"),
        }
    }

    /// `/stop` ended `session`'s turn: its requests still pending are withdrawn (a later
    /// press is answered "expired") and their prompts say so.
    pub async fn withdraw_session(&self, session: &str) {
        let pending = match self.store.approvals_pending().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "could not read pending approvals to withdraw");
                return;
            }
        };
        for row in pending.iter().filter(|r| r.request.session_key == session) {
            let withdrawal = ApprovalDecision {
                id: &row.request.id,
                state: ApprovalState::Withdrawn,
                always: false,
                by: "stop",
                now_ms: crate::clock::now_ms(),
                edit: prompt_edit(row, prompt::withdrawn_text(&row.request)),
            };
            match self.store.approval_decide(&withdrawal).await {
                Ok(true) => {
                    self.outbox.kick(&row.request.route.channel);
                    self.wake(&row.request.id);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "could not withdraw an approval request"),
            }
        }
    }

    /// Carry out `person`'s decision on request `id` (`<channel>:<user>`). `channel`, when
    /// given, is where a button or call came from: it decides only requests asked there.
    /// Exactly one decision takes effect however many arrive.
    pub async fn decide(
        &self,
        id: &str,
        decision: Decision,
        person: &str,
        channel: Option<&str>,
    ) -> Result<DecisionOutcome, StoreError> {
        let Some(row) = self.store.approval_get(id).await? else {
            return Ok(DecisionOutcome::NotFound);
        };
        if channel.is_some_and(|c| c != row.request.route.channel) {
            return Ok(DecisionOutcome::NotFound);
        }
        if !row.request.deciders.iter().any(|d| d == person) {
            tracing::info!(
                approval = id,
                person,
                "a decision from someone who may not decide was refused"
            );
            return Ok(DecisionOutcome::NotAllowed);
        }
        let now = crate::clock::now_ms();
        let recorded = ApprovalDecision {
            id,
            state: if decision == Decision::Deny {
                ApprovalState::Denied
            } else {
                ApprovalState::Approved
            },
            always: decision == Decision::Always,
            by: person,
            now_ms: now,
            edit: prompt_edit(
                &row,
                prompt::decided_text(&row.request, Some(decision), person),
            ),
        };
        if self.store.approval_decide(&recorded).await? {
            tracing::info!(
                approval = id,
                decision = decision.as_str(),
                by = person,
                "approval decided"
            );
            self.outbox.kick(&row.request.route.channel);
            self.wake(id);
            return Ok(DecisionOutcome::Recorded {
                decision,
                by: person.to_string(),
            });
        }
        // It was not pending, or its time was up: say which.
        let row = self.store.approval_get(id).await?.unwrap_or(row);
        Ok(match row.state {
            ApprovalState::Approved | ApprovalState::Denied => DecisionOutcome::AlreadyDecided {
                decision: match (row.state, row.always) {
                    (ApprovalState::Denied, _) => Decision::Deny,
                    (_, true) => Decision::Always,
                    _ => Decision::Approve,
                },
                by: row.decided_by.unwrap_or_default(),
            },
            ApprovalState::Pending => {
                self.expire(&row).await;
                DecisionOutcome::Expired
            }
            ApprovalState::Expired | ApprovalState::Withdrawn => DecisionOutcome::Expired,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_eight_typeable_characters() {
        let id = super::new_id();
        assert_eq!(id.len(), 8);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(id, super::new_id());
    }
}
