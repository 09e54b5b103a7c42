//! The engine's two doors to the outside: every model call (`call_model`) and every tool
//! call (`call_tool`, `gated_tool`) goes through here, past the policy gate
//! (`crate::policy::Gate`) before and after it runs. No other engine code calls the chain or
//! the tool registry.

use super::{Engine, Persona, TurnInput};
use crate::policy::{
    CallKind, CallScope, ModelCallFacts, ModelOutcome, RunFacts, RunKind, ToolCallFacts, Verdict,
};
use crate::providers::{ChainError, ChatRequest, ChatResponse, ModelRef, ToolCall, ToolSpec};
use crate::tools::ToolContext;

/// One model call: what kind of work, for whom, and which models may answer.
pub(crate) struct ModelCall<'a> {
    pub kind: CallKind,
    pub scope: CallScope<'a>,
    pub model: &'a ModelRef,
    /// The models tried after `model` (None: the configured `fallback.models`).
    pub fallbacks: Option<&'a [ModelRef]>,
    /// Background work whatever its kind (a plan run for a tool).
    pub background: bool,
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
            scope: turn_scope(input, session, persona),
            model: &persona.model,
            fallbacks: Some(&persona.agent.fallbacks),
            // A run's calls, and those of a plan run for a tool, are background work.
            background: persona.work.is_some() || input.for_tool,
        }
    }
}

/// Who `persona`'s turn answering `input` works for: a subagent's work traces back to the
/// message its tree started from, a person's to their message.
pub(super) fn turn_scope<'a>(
    input: &TurnInput<'a>,
    session: &'a str,
    persona: &'a Persona,
) -> CallScope<'a> {
    let (route, origin_message, origin_fresh) = match &persona.origin {
        Some((route, message)) => (route, message.as_deref(), false),
        None => (
            input.route,
            Some(input.message_id),
            !input.effects.is_some_and(|(_, redo)| redo),
        ),
    };
    CallScope {
        session_key: session,
        agent: &persona.agent.id,
        sender: input.sender,
        route,
        origin_message,
        origin_fresh,
    }
}

/// Tells the gate of a model call that was dropped before it ended.
struct Abandoned<'a> {
    gate: &'a dyn crate::policy::Gate,
    call_id: u64,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.gate.abandoned_model(self.call_id);
        }
    }
}

/// A number no other model call of this process has (`ModelCallFacts::call_id`).
fn next_call_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The request's input tokens, estimated high: a token per 3 bytes of text (most
/// tokenizers average 4), the tool specs' estimate, and 1,600 per image.
fn estimated_input_tokens(request: &ChatRequest, tool_tokens: usize) -> i64 {
    let text: usize = request.system.len()
        + request.volatile.as_deref().map_or(0, str::len)
        + request
            .messages
            .iter()
            .map(|m| {
                m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            })
            .sum::<usize>();
    let images: usize = request.messages.iter().map(|m| m.images.len()).sum();
    let tools = if request.tools.is_empty() {
        0
    } else {
        tool_tokens
    };
    (text / 3 + tools + images * 1_600) as i64
}

/// What a turn's tool loop calls its model calls: a person's, a run's or a job's.
pub(super) fn turn_kind(input: &TurnInput<'_>, persona: &Persona) -> CallKind {
    use crate::spawn::RunWork;
    match persona.work {
        Some(RunWork::Subagent) => CallKind::Subagent,
        Some(RunWork::Delegate) => CallKind::Delegate,
        Some(RunWork::TeamTask) => CallKind::TeamTask,
        None if input.heartbeat => CallKind::Heartbeat,
        None if input.job.is_some() => CallKind::Schedule,
        None => CallKind::UserTurn,
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
            call_id: next_call_id(),
            estimated_input_tokens: estimated_input_tokens(request, self.tool_tokens),
            background: call.background || call.kind.is_background(),
        };
        let chain = async {
            match call.fallbacks {
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
            }
        };
        self.gated_model(&facts, chain, |(response, by)| (Some(by), &response.usage))
            .await?
    }

    /// A voice note or audio file to text through the transcription service, past the gate
    /// like any model call (its caps, its message's call limit; its usage recorded as
    /// `transcription`). Err says why not (shown to the person).
    pub(crate) async fn call_transcription(
        &self,
        call: ModelCall<'_>,
        (name, mime, bytes): (&str, &str, Vec<u8>),
    ) -> Result<String, String> {
        let facts = ModelCallFacts {
            scope: call.scope,
            kind: CallKind::Transcription,
            model: call.model,
            call_id: next_call_id(),
            // Audio tokens, estimated high from the file's size (compressed speech runs at
            // 1–4 KB a second; speech models count 10–50 tokens a second).
            estimated_input_tokens: (bytes.len() / 64) as i64,
            background: call.background,
        };
        let transcribed = self.transcriber.transcribe(name, mime, bytes);
        let answer = self
            .gated_model(&facts, transcribed, |(_, usage)| (None, usage))
            .await
            .map_err(|refused| refused.to_string())?;
        answer.map(|(text, _)| text)
    }

    /// Run `call` past the gate: refused (`Err`), it is never made; else its result, with
    /// the gate told how it ended (`answered` says who answered — None: the model asked —
    /// and what it used) or that
    /// it was dropped before it ended (`/stop`).
    async fn gated_model<T, E>(
        &self,
        facts: &ModelCallFacts<'_>,
        call: impl std::future::Future<Output = Result<T, E>>,
        answered: impl FnOnce(&T) -> (Option<&ModelRef>, &crate::providers::Usage),
    ) -> Result<Result<T, E>, ChainError> {
        if let Verdict::Refuse(why) = self.gate.before_model(facts).await {
            tracing::info!(kind = facts.kind.as_str(), model = %facts.model, "model call refused by policy");
            return Err(ChainError::Refused(why));
        }
        // Dropped before it ends (`/stop`), the call is reported abandoned.
        let mut pending = Abandoned {
            gate: &*self.gate,
            call_id: facts.call_id,
            armed: true,
        };
        let result = call.await;
        let outcome = match &result {
            Ok(value) => {
                let (by, usage) = answered(value);
                ModelOutcome::Answered {
                    by: by.unwrap_or(facts.model),
                    usage,
                }
            }
            Err(_) => ModelOutcome::Failed,
        };
        pending.armed = false;
        self.gate.after_model(facts, outcome).await;
        Ok(result)
    }

    /// Ask the gate whether a run (a subagent, a plan step) may start; `Err` says why not.
    pub(crate) async fn admit_run(
        &self,
        scope: CallScope<'_>,
        kind: RunKind,
    ) -> Result<(), String> {
        self.gate
            .before_run(&RunFacts { scope, kind })
            .await
            .into_result()
    }

    /// Ask the gate whether a person's message may be answered by the model now.
    pub(crate) async fn admit_turn(&self, scope: CallScope<'_>) -> Result<(), String> {
        self.gate.before_turn(&scope).await.into_result()
    }

    /// Run one tool call from the model: the registry checks it (offered, arguments valid),
    /// then the gate sees it with its validated arguments, then it runs.
    pub(crate) async fn call_tool(
        &self,
        call: &ToolCall,
        cx: &ToolContext,
        offered: &[ToolSpec],
    ) -> String {
        let mut prepared = match self.tools.prepare(call, offered) {
            Ok(prepared) => prepared,
            Err(refusal) => return refusal,
        };
        let call_ref = prepared.identify(cx);
        let risk = prepared.risk(cx);
        let args = prepared.args.clone();
        let facts = self.tool_facts(&call.name, &args, &risk, call_ref.as_deref(), cx);
        self.gated(facts, self.tools.run(prepared, cx)).await
    }

    /// A call the engine carries out itself (a tool that runs a plan), past the same gate.
    pub(crate) async fn gated_tool(
        &self,
        call: &ToolCall,
        cx: &ToolContext,
        work: impl std::future::Future<Output = String>,
    ) -> String {
        let args = serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
        let risk = match self.tools.get(&call.name) {
            Some(tool) => tool.risk(&args, cx),
            None => crate::tools::ToolRisk::of(crate::tools::ToolClass::Spawn),
        };
        let facts = self.tool_facts(&call.name, &args, &risk, None, cx);
        self.gated(facts, work).await
    }

    fn tool_facts<'a>(
        &self,
        tool: &'a str,
        arguments: &'a serde_json::Value,
        risk: &'a crate::tools::ToolRisk,
        call_ref: Option<&'a str>,
        cx: &'a ToolContext,
    ) -> ToolCallFacts<'a> {
        ToolCallFacts {
            scope: CallScope {
                session_key: &cx.session_key,
                agent: &cx.agent_id,
                sender: cx.sender.as_deref(),
                route: &cx.route,
                origin_message: cx.in_reply_to.as_deref(),
                origin_fresh: false,
            },
            tool,
            arguments,
            risk,
            call_ref,
            handles: &cx.handles,
        }
    }

    /// Run `work` only when the gate allows the call; the gate sees the result before the
    /// model does. A refusal is the call's result (`Error: ...`).
    async fn gated(
        &self,
        facts: ToolCallFacts<'_>,
        work: impl std::future::Future<Output = String>,
    ) -> String {
        if let Verdict::Refuse(why) = self.gate.before_tool(&facts).await {
            tracing::info!(tool = facts.tool, "tool call refused by policy");
            return format!("Error: {why}");
        }
        let mut result = work.await;
        self.gate.after_tool(&facts, &mut result).await;
        result
    }
}
