//! The gate every tool call and every model call passes, before and after it runs.
//!
//! The engine calls [`Gate`] around each call (`Engine::call_tool`, `Engine::call_model`) and
//! knows nothing of the rules behind it; a gate knows the call's facts (who, where, what) and
//! nothing of the tool loop. The default allows everything; approvals, budgets, egress rules
//! and the outbound leak scan are gates, composed in order by [`Gates`].

use crate::providers::{ModelRef, Usage};
use crate::tools::{ToolRisk, TurnHandles};
use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;
use std::sync::Arc;

/// What kind of work a model call does (budgets and usage reports group by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A person's turn (the tool loop, or `/plan`'s final answer).
    UserTurn,
    /// A subagent's step (`sessions_spawn`).
    Subagent,
    /// A step of a run `delegate`d to another agent.
    Delegate,
    /// A step of a team task's run.
    TeamTask,
    /// A scheduled job's turn.
    Schedule,
    /// A heartbeat job's turn.
    Heartbeat,
    /// A `/plan` or `plan_and_execute` planning call.
    Planning,
    /// One step of a `steps` plan, or its closing answer.
    PlanStep,
    /// Summarising old history.
    Compaction,
    /// Reading history compaction drops for facts worth remembering.
    MemoryFlush,
    /// A vision model describing an image for a model that cannot see.
    VisionDescription,
    /// Speech to text (a voice note or an audio file).
    Transcription,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::UserTurn => "user_turn",
            CallKind::Subagent => "subagent",
            CallKind::Delegate => "delegate",
            CallKind::TeamTask => "team_task",
            CallKind::Schedule => "schedule",
            CallKind::Heartbeat => "heartbeat",
            CallKind::Planning => "planning",
            CallKind::PlanStep => "plan_step",
            CallKind::Compaction => "compaction",
            CallKind::MemoryFlush => "memory_flush",
            CallKind::VisionDescription => "vision_description",
            CallKind::Transcription => "transcription",
        }
    }

    /// Work of this kind is never what a person in the chat waits on.
    pub fn is_background(self) -> bool {
        matches!(
            self,
            CallKind::Subagent
                | CallKind::Delegate
                | CallKind::TeamTask
                | CallKind::Schedule
                | CallKind::Heartbeat
        )
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
    /// The person's message this work traces back to, in `route`'s chat (a subagent's: the
    /// message its tree started from): one message's limits count under it.
    pub origin_message: Option<&'a str>,
    /// Made by the first attempt of the very turn answering `origin_message`, in this
    /// process (not a redo, not a subagent): the message's first few model calls are counted
    /// here without the store.
    pub origin_fresh: bool,
}

/// A tool call about to run (or that ran).
#[derive(Clone, Copy)]
pub struct ToolCallFacts<'a> {
    pub scope: CallScope<'a>,
    pub tool: &'a str,
    /// The arguments, parsed and checked against the tool's schema (a call whose arguments
    /// do not pass never reaches the gate: the model is told why).
    pub arguments: &'a serde_json::Value,
    /// What the call can do, as its tool says (class, host, untrusted result).
    pub risk: &'a ToolRisk,
    /// The call's identity across attempts of its turn (None where the turn is not redone
    /// after a crash): a decision taken for it holds when the turn is redone.
    pub call_ref: Option<&'a str>,
    /// The turn's handles (what the components put in for this turn).
    pub handles: &'a TurnHandles,
}

/// A model call about to be made (or that was made).
#[derive(Debug, Clone, Copy)]
pub struct ModelCallFacts<'a> {
    pub scope: CallScope<'a>,
    pub kind: CallKind,
    /// The model asked for first (the chain may answer with a fallback).
    pub model: &'a ModelRef,
    /// Unique in this process: `before_model` and `after_model` of one call share it.
    pub call_id: u64,
    /// The request's input tokens, estimated on the high side before the call.
    pub estimated_input_tokens: i64,
    /// Work nobody in the chat waits on (runs, jobs, plan steps run for a tool): the
    /// background cap holds it.
    pub background: bool,
}

/// How a model call that was allowed ended.
#[derive(Debug, Clone, Copy)]
pub enum ModelOutcome<'a> {
    /// `by` answered (the first model or a fallback), using `usage`.
    Answered { by: &'a ModelRef, usage: &'a Usage },
    /// No model answered (or a later gate refused the call).
    Failed,
}

/// Work that is a run of its own: a subagent (spawned, delegated or a team task's) or one
/// step of a `steps` plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Subagent,
    PlanStep,
}

/// A run about to start.
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    pub scope: CallScope<'a>,
    pub kind: RunKind,
}

/// A gate's answer before a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Not run; the text says why (a tool's refusal goes to the model as its result, a model
    /// call's to the chat).
    Refuse(String),
}

impl Verdict {
    /// `Err(why)` for a refusal.
    pub fn into_result(self) -> Result<(), String> {
        match self {
            Verdict::Allow => Ok(()),
            Verdict::Refuse(why) => Err(why),
        }
    }
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
    /// Every call `before_model` allowed ends here once: answered (by which model, using
    /// what) or failed.
    async fn after_model(&self, _call: &ModelCallFacts<'_>, _outcome: ModelOutcome<'_>) {}
    /// A call `before_model` allowed was dropped before it ended (`/stop`, a timeout): no
    /// `after_model` comes for `call_id`. Not async (it runs in a drop): hand work on.
    fn abandoned_model(&self, _call_id: u64) {}
    /// A subagent run or a plan step about to start (a refusal: it does not start).
    async fn before_run(&self, _run: &RunFacts<'_>) -> Verdict {
        Verdict::Allow
    }
    /// A person's message about to be answered by the model (not a chat command).
    async fn before_turn(&self, _scope: &CallScope<'_>) -> Verdict {
        Verdict::Allow
    }
    /// The turn answering a person's message ended (answered, refused or failed): what a
    /// gate keeps for that turn alone may go. Not async: hand work on.
    fn turn_ended(&self, _scope: &CallScope<'_>) {}
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

    /// Ask the gates in order; the first refusal wins.
    async fn first_refusal<'a>(
        &'a self,
        ask: impl Fn(&'a dyn Gate) -> futures::future::BoxFuture<'a, Verdict>,
    ) -> Verdict {
        for gate in &self.0 {
            if let Verdict::Refuse(why) = ask(&**gate).await {
                return Verdict::Refuse(why);
            }
        }
        Verdict::Allow
    }
}

#[async_trait]
impl Gate for Gates {
    async fn before_tool(&self, call: &ToolCallFacts<'_>) -> Verdict {
        self.first_refusal(|gate| gate.before_tool(call)).await
    }
    async fn after_tool(&self, call: &ToolCallFacts<'_>, result: &mut String) {
        for gate in &self.0 {
            gate.after_tool(call, result).await;
        }
    }
    async fn before_model(&self, call: &ModelCallFacts<'_>) -> Verdict {
        for (i, gate) in self.0.iter().enumerate() {
            if let Verdict::Refuse(why) = gate.before_model(call).await {
                // The gates that allowed it (and may hold something for it) hear it ended.
                for earlier in &self.0[..i] {
                    earlier.after_model(call, ModelOutcome::Failed).await;
                }
                return Verdict::Refuse(why);
            }
        }
        Verdict::Allow
    }
    async fn after_model(&self, call: &ModelCallFacts<'_>, outcome: ModelOutcome<'_>) {
        for gate in &self.0 {
            gate.after_model(call, outcome).await;
        }
    }
    fn abandoned_model(&self, call_id: u64) {
        for gate in &self.0 {
            gate.abandoned_model(call_id);
        }
    }
    async fn before_run(&self, run: &RunFacts<'_>) -> Verdict {
        self.first_refusal(|gate| gate.before_run(run)).await
    }
    async fn before_turn(&self, scope: &CallScope<'_>) -> Verdict {
        self.first_refusal(|gate| gate.before_turn(scope)).await
    }
    fn turn_ended(&self, scope: &CallScope<'_>) {
        for gate in &self.0 {
            gate.turn_ended(scope);
        }
    }
}
