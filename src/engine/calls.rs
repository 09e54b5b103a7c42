//! The engine's two doors to the outside: every model call (`call_model`) and every tool
//! call (`call_tool`, `gated_tool`) goes through here, past the policy gate
//! (`crate::policy::Gate`) before and after it runs. No other engine code calls the chain or
//! the tool registry.

use super::{Engine, Persona, TurnInput};
use crate::policy::{CallKind, CallScope, ModelCallFacts, ToolCallFacts, Verdict};
use crate::providers::{ChainError, ChatRequest, ChatResponse, ModelRef, ToolCall, ToolSpec};
use crate::tools::ToolContext;

/// One model call: what kind of work, for whom, and which models may answer.
pub(crate) struct ModelCall<'a> {
    pub kind: CallKind,
    pub scope: CallScope<'a>,
    pub model: &'a ModelRef,
    /// The models tried after `model` (None: the configured `fallback.models`).
    pub fallbacks: Option<&'a [ModelRef]>,
}

impl<'a> ModelCall<'a> {
    /// A call of `persona`'s turn answering `input`, on its model and its agent's fallbacks.
    pub fn of_turn(
        kind: CallKind,
        input: &TurnInput<'a>,
        session: &'a str,
        persona: &'a Persona,
    ) -> Self {
        ModelCall {
            kind,
            scope: CallScope {
                session_key: session,
                agent: &persona.agent.id,
                sender: input.sender,
                route: input.route,
            },
            model: &persona.model,
            fallbacks: Some(&persona.agent.fallbacks),
        }
    }
}

/// What a turn's tool loop calls its model calls: a person's, a subagent's or a job's.
pub(super) fn turn_kind(input: &TurnInput<'_>, persona: &Persona) -> CallKind {
    if persona.depth > 0 {
        CallKind::Subagent
    } else if input.job.is_some() {
        CallKind::Schedule
    } else {
        CallKind::UserTurn
    }
}

impl Engine {
    /// Ask the model chain, past the gate: a refused call is `ChainError::Refused` and asks
    /// no model; an answered one is reported to the gate with its usage.
    pub(crate) async fn call_model(
        &self,
        call: ModelCall<'_>,
        request: &ChatRequest,
        on_delta: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        let facts = ModelCallFacts {
            scope: call.scope,
            kind: call.kind,
            model: call.model,
        };
        if let Verdict::Refuse(why) = self.gate.before_model(&facts).await {
            tracing::info!(kind = call.kind.as_str(), model = %call.model, "model call refused by policy");
            return Err(ChainError::Refused(why));
        }
        let result = match call.fallbacks {
            Some(fallbacks) => {
                self.chain
                    .complete_via(call.model, fallbacks, request, on_delta)
                    .await
            }
            None => {
                self.chain
                    .complete_from(call.model, request, on_delta)
                    .await
            }
        };
        if let Ok((response, answered_by)) = &result {
            self.gate
                .after_model(&facts, answered_by, &response.usage)
                .await;
        }
        result
    }

    /// Run one tool call from the model: the registry checks it (offered, arguments valid),
    /// then the gate sees it with its validated arguments, then it runs.
    pub(crate) async fn call_tool(
        &self,
        call: &ToolCall,
        cx: &ToolContext,
        offered: &[ToolSpec],
    ) -> String {
        let prepared = match self.tools.prepare(call, offered) {
            Ok(prepared) => prepared,
            Err(refusal) => return refusal,
        };
        let args = prepared.args.clone();
        self.gated(&call.name, &args, cx, self.tools.run(prepared, cx))
            .await
    }

    /// A call the engine carries out itself (a tool that runs a plan), past the same gate.
    pub(crate) async fn gated_tool(
        &self,
        call: &ToolCall,
        cx: &ToolContext,
        work: impl std::future::Future<Output = String>,
    ) -> String {
        let args = serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
        self.gated(&call.name, &args, cx, work).await
    }

    /// Run `work` only when the gate allows the call; the gate sees the result before the
    /// model does. A refusal is the call's result (`Error: ...`).
    async fn gated(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
        cx: &ToolContext,
        work: impl std::future::Future<Output = String>,
    ) -> String {
        let facts = ToolCallFacts {
            scope: CallScope {
                session_key: &cx.session_key,
                agent: &cx.agent_id,
                sender: cx.sender.as_deref(),
                route: &cx.route,
            },
            tool,
            arguments,
        };
        if let Verdict::Refuse(why) = self.gate.before_tool(&facts).await {
            tracing::info!(tool, "tool call refused by policy");
            return format!("Error: {why}");
        }
        let mut result = work.await;
        self.gate.after_tool(&facts, &mut result).await;
        result
    }
}
