//! The approvals gate: before a tool call, whether it must wait for a person (and then the
//! wait); after it, whether its result tainted the turn.

use super::Taint;
use super::policy;
use super::service::Approvals;
use crate::policy::{Gate, ToolCallFacts, Verdict};
use async_trait::async_trait;
use std::sync::Arc;

pub struct ApprovalGate {
    approvals: Arc<Approvals>,
}

impl ApprovalGate {
    pub fn new(approvals: Arc<Approvals>) -> Self {
        ApprovalGate { approvals }
    }
}

#[async_trait]
impl Gate for ApprovalGate {
    async fn before_tool(&self, call: &ToolCallFacts<'_>) -> Verdict {
        let held = call.handles.get::<Taint>();
        if let Some(held) = held
            && let Some(run) = held.take_reported_run()
            && let Some(source) = self.approvals.run_taint(&run).await
        {
            held.mark(|| format!("a subagent's result that read {source}"));
        }
        let taint = held.and_then(Taint::source);
        let rules = self.approvals.policies().of(call.scope.agent);
        let Some(reason) = policy::reason(rules, call.tool, call.risk, taint.as_deref()) else {
            return Verdict::Allow;
        };
        if self.approvals.remembered(call).await {
            return Verdict::Allow;
        }
        self.approvals.ask(call, reason).await
    }

    async fn after_tool(&self, call: &ToolCallFacts<'_>, result: &mut String) {
        if !call.risk.untrusted_result || result.starts_with("Error:") {
            return;
        }
        let Some(taint) = call.handles.get::<Taint>() else {
            return;
        };
        let source = match call.risk.target.as_deref() {
            Some(host) if !host.is_empty() => format!("what `{}` got from {host}", call.tool),
            _ => format!("the result of `{}`", call.tool),
        };
        // A subagent's taint is kept with its run: the turn that reads its outcome (in
        // whichever process, after a restart too) is tainted by it.
        if taint.mark(|| source.clone())
            && let Some(run) = crate::spawn::run_of_session(call.scope.session_key)
        {
            self.approvals.record_run_taint(run, &source).await;
        }
    }
}
