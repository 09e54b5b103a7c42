//! The gate every tool call and every model call passes, before and after it runs.
//!
//! The engine calls [`Gate`] around each call (`Engine::call_tool`, `Engine::call_model`) and
//! knows nothing of the rules behind it; a gate knows the call's facts (who, where, what) and
//! nothing of the tool loop. The default allows everything; approvals, budgets, egress rules
//! and the outbound leak scan are gates, composed in order by [`Gates`].

use crate::providers::{ModelRef, Usage};
use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;
use std::sync::Arc;

/// What kind of work a model call does (budgets and usage reports group by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A person's turn (the tool loop, or `/plan`'s final answer).
    UserTurn,
    /// A subagent's step.
    Subagent,
    /// A scheduled job's turn.
    Schedule,
    /// A `/plan` or `plan_and_execute` planning call.
    Planning,
    /// One step of a `steps` plan, or its closing answer.
    PlanStep,
    /// Summarising old history.
    Compaction,
    /// A vision model describing an image for a model that cannot see.
    VisionDescription,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::UserTurn => "user_turn",
            CallKind::Subagent => "subagent",
            CallKind::Schedule => "schedule",
            CallKind::Planning => "planning",
            CallKind::PlanStep => "plan_step",
            CallKind::Compaction => "compaction",
            CallKind::VisionDescription => "vision_description",
        }
    }
}

/// Who a call is made for and where: the session, the agent, the person (when a person asked)
/// and the chat its replies go to.
#[derive(Debug, Clone, Copy)]
pub struct CallScope<'a> {
    pub session_key: &'a str,
    pub agent: &'a str,
    pub sender: Option<&'a str>,
    pub route: &'a ChatRoute,
}

/// A tool call about to run (or that ran).
#[derive(Debug, Clone, Copy)]
pub struct ToolCallFacts<'a> {
    pub scope: CallScope<'a>,
    pub tool: &'a str,
    /// The arguments, parsed and checked against the tool's schema (a call whose arguments
    /// do not pass never reaches the gate: the model is told why).
    pub arguments: &'a serde_json::Value,
}

/// A model call about to be made (or that was made).
#[derive(Debug, Clone, Copy)]
pub struct ModelCallFacts<'a> {
    pub scope: CallScope<'a>,
    pub kind: CallKind,
    /// The model asked for first (the chain may answer with a fallback).
    pub model: &'a ModelRef,
}

/// A gate's answer before a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Not run; the text says why (a tool's refusal goes to the model as its result, a model
    /// call's to the chat).
    Refuse(String),
}

/// A policy around calls. Every method defaults to allowing and changing nothing.
#[async_trait]
pub trait Gate: Send + Sync {
    async fn before_tool(&self, _call: &ToolCallFacts<'_>) -> Verdict {
        Verdict::Allow
    }
    /// Sees (and may rewrite) a tool's result before the model does.
    async fn after_tool(&self, _call: &ToolCallFacts<'_>, _result: &mut String) {}
    async fn before_model(&self, _call: &ModelCallFacts<'_>) -> Verdict {
        Verdict::Allow
    }
    /// A call that got an answer: which model gave it and what it used.
    async fn after_model(
        &self,
        _call: &ModelCallFacts<'_>,
        _answered_by: &ModelRef,
        _usage: &Usage,
    ) {
    }
}

/// The gate that allows everything (no policy configured).
pub struct AllowAll;

impl Gate for AllowAll {}

/// Several gates in order: the first refusal wins; every gate sees every result.
#[derive(Clone, Default)]
pub struct Gates(Vec<Arc<dyn Gate>>);

impl Gates {
    pub fn new(gates: Vec<Arc<dyn Gate>>) -> Self {
        Gates(gates)
    }
}

#[async_trait]
impl Gate for Gates {
    async fn before_tool(&self, call: &ToolCallFacts<'_>) -> Verdict {
        for gate in &self.0 {
            if let Verdict::Refuse(why) = gate.before_tool(call).await {
                return Verdict::Refuse(why);
            }
        }
        Verdict::Allow
    }
    async fn after_tool(&self, call: &ToolCallFacts<'_>, result: &mut String) {
        for gate in &self.0 {
            gate.after_tool(call, result).await;
        }
    }
    async fn before_model(&self, call: &ModelCallFacts<'_>) -> Verdict {
        for gate in &self.0 {
            if let Verdict::Refuse(why) = gate.before_model(call).await {
                return Verdict::Refuse(why);
            }
        }
        Verdict::Allow
    }
    async fn after_model(&self, call: &ModelCallFacts<'_>, answered_by: &ModelRef, usage: &Usage) {
        for gate in &self.0 {
            gate.after_model(call, answered_by, usage).await;
        }
    }
}
