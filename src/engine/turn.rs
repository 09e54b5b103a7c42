//! The ReAct tool loop of one turn: model → tool calls (run concurrently) → results → model,
//! until a final answer, `agent.max_iterations` model calls, an error, or `/stop`.

use super::calls::{self, ModelCall};
use super::context::stored_role;
use super::{Engine, Persona, TurnError, TurnInput, TurnOutput, compact};
use crate::plan::PlanTracker;
use crate::providers::{ChainError, ChatMessage, ChatRequest, ProviderError, Role};
use crate::storage::{NewTranscriptEntry, SessionRow};
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio_util::sync::CancellationToken;

pub(super) fn entry_for(
    message: &ChatMessage,
    model: Option<&str>,
    tokens: (i64, i64),
) -> NewTranscriptEntry {
    NewTranscriptEntry {
        role: stored_role(message.role),
        content: message.content.clone(),
        tool_calls: (!message.tool_calls.is_empty())
            .then(|| serde_json::to_string(&message.tool_calls).expect("tool calls serialise")),
        tool_call_id: message.tool_call_id.clone(),
        model: model.map(str::to_string),
        tokens_in: tokens.0,
        tokens_out: tokens.1,
    }
}

/// The changing part of a call's prompt: what was recalled, then the Active Plan.
fn volatile(recalled: Option<&str>, plan: Option<String>) -> Option<String> {
    match (recalled, plan) {
        (Some(r), Some(p)) => Some(format!("{r}\n\n{p}")),
        (Some(r), None) => Some(r.to_string()),
        (None, plan) => plan,
    }
}

impl Engine {
    /// The tool loop for `user_text`. `output` may already hold work of this turn (planning).
    #[allow(clippy::too_many_arguments)] // the turn's inputs, each used; a struct would only rename them
    pub(super) async fn run_model_turn(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        stop: &CancellationToken,
        user_text: &str,
        tracker: Arc<PlanTracker>,
        mut output: TurnOutput,
        persona: &Persona,
    ) -> Result<TurnOutput, TurnError> {
        let mut user = ChatMessage::text(Role::User, user_text.to_string());
        output.entries.push(entry_for(&user, None, (0, 0)));
        // Images of the message go to this turn's calls only (the transcript keeps the text).
        user.images = input.images.to_vec();
        let mut turn_messages = vec![user];
        let mut history = compact::prepare(self, session, &turn_messages, input.sender).await?;
        let kind = calls::turn_kind(input, persona);
        let tools = self.offered_tools(persona);
        let cx = self.tool_context(input, session, Some(tracker.clone()), persona);
        let max = self.config.agent.max_iterations;
        let mut compacted_after_error = false;
        let affinity: Arc<str> = session.key.as_str().into();
        let mut calls = 0;
        let system = self.system_prompt(persona, None);
        // What the message calls to mind (memories), shown with every call of the turn.
        let recalled = self.recall(input, session, persona, user_text).await;
        while calls < max {
            let mut messages = history.clone();
            messages.extend(turn_messages.iter().cloned());
            // While a plan is active, every call shows the Active Plan after the history:
            // the system prompt stays the same from call to call (the provider's cache keeps it).
            let request = ChatRequest {
                system: system.clone(),
                messages,
                volatile: volatile(recalled.as_deref(), tracker.section().await),
                tools: tools.clone(),
                affinity: Some(affinity.clone()),
            };
            calls += 1;
            let result = tokio::select! {
                _ = stop.cancelled() => return Ok(stopped(output)),
                result = self.complete_streaming(ModelCall::of_turn(kind, input, &session.key, persona), &request, input) => result,
            };
            let (response, answered_by) = match result {
                Ok(ok) => ok,
                Err(ChainError::Final {
                    error: ProviderError::ContextTooLong,
                    ..
                }) if !compacted_after_error => {
                    compacted_after_error = true;
                    tracing::info!("context too long; compacting and retrying once");
                    history = compact::force(self, session, input.sender).await?;
                    continue;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "turn ended without a model answer");
                    let text = match &err {
                        ChainError::NoUsableModel(why) | ChainError::Refused(why) => why.clone(),
                        other => format!("⚠️ The model could not answer: {other}."),
                    };
                    output.outbound.push((OutboundKind::Error, text));
                    return Ok(output);
                }
            };
            let answered_by = answered_by.to_string();
            let tokens = (response.usage.input_tokens, response.usage.output_tokens);
            output.tokens_in += tokens.0;
            output.tokens_out += tokens.1;
            output.model = Some(answered_by.clone());
            let assistant = ChatMessage::assistant_calls(response.content, response.tool_calls);
            output
                .entries
                .push(entry_for(&assistant, Some(&answered_by), tokens));
            if assistant.tool_calls.is_empty() {
                output
                    .outbound
                    .push((OutboundKind::Reply, assistant.content.clone()));
                return Ok(output);
            }
            let batch = assistant.tool_calls.clone();
            turn_messages.push(assistant);
            if let Some(progress) = &persona.progress {
                let names: Vec<&str> = batch.iter().map(|c| c.name.as_str()).collect();
                progress.tools(&names).await;
            }
            let plan_tokens = (AtomicI64::new(0), AtomicI64::new(0));
            let shared: &SessionRow = session;
            let results = tokio::select! {
                _ = stop.cancelled() => {
                    // Keep the transcript well-formed: an assistant call needs its results.
                    output.entries.pop();
                    return Ok(stopped(output));
                }
                results = futures::future::join_all(batch.iter().map(|call| async {
                    // A tool that runs a plan is carried out here: it plans and runs steps.
                    let runs_a_plan = self.tools.get(&call.name).is_some_and(|t| t.runs_a_plan());
                    if runs_a_plan && tools.iter().any(|t| *t.name == *call.name) {
                        // Boxed: every tool call's future would otherwise be sized for it.
                        let planned = Box::pin(async {
                            let (text, used) = self
                                .plan_tool(&call.arguments, input, shared, stop, &tracker, persona)
                                .await;
                            plan_tokens.0.fetch_add(used.0, Ordering::Relaxed);
                            plan_tokens.1.fetch_add(used.1, Ordering::Relaxed);
                            text
                        });
                        self.gated_tool(call, &cx, planned).await
                    } else {
                        self.call_tool(call, &cx, &tools).await
                    }
                })) => results,
            };
            output.tokens_in += plan_tokens.0.into_inner();
            output.tokens_out += plan_tokens.1.into_inner();
            if let Some((_, last)) = batch
                .iter()
                .zip(&results)
                .rev()
                .find(|(call, _)| !self.tools.get(&call.name).is_some_and(|t| t.plans()))
            {
                tracker.provisional(last).await;
            }
            for (call, result) in batch.iter().zip(results) {
                tracing::debug!(tool = %call.name, "tool call finished");
                let message = ChatMessage::tool_result(&call.id, result);
                output.entries.push(entry_for(&message, None, (0, 0)));
                turn_messages.push(message);
            }
            // Images the results brought (a model that sees): shown with the next calls of
            // this turn, after the results (never stored).
            let images = cx
                .handles
                .get::<crate::tools::ToolImages>()
                .map(|found| found.take())
                .unwrap_or_default();
            if !images.is_empty() {
                let mut shown =
                    ChatMessage::text(Role::User, "[The images the tool results above returned.]");
                shown.images = images;
                turn_messages.push(shown);
            }
        }
        output.outbound.push((
            OutboundKind::Error,
            format!(
                "I stopped after {max} model calls (agent.max_iterations) without finishing. \
                 Send another message to let me continue, or /new to start over."
            ),
        ));
        Ok(output)
    }
}

/// A turn ended by `/stop`: keep what finished, say nothing (the `/stop` reply says it).
fn stopped(output: TurnOutput) -> TurnOutput {
    tracing::info!("turn stopped by /stop");
    output
}
