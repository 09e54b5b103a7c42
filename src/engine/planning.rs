//! `/plan <task>`: a planning call that may use only read-only tools and must answer with
//! `{goal, steps: [{action, expected_outcome}]}`; output that does not validate becomes a
//! one-step plan holding the whole task. The plan is stored and its card posted; then it is
//! carried out: in `tracker` mode by the normal tool loop with the Active Plan in every
//! system prompt, in `steps` mode one bounded loop per step (`steps.rs`).

use super::calls::ModelCall;
use super::turn::entry_for;
use super::{Engine, Persona, TurnError, TurnInput, TurnOutput};
use crate::plan::{self, PlanMode, PlanTracker};
use crate::policy::CallKind;
use crate::providers::{ChatMessage, ChatRequest, Role};
use crate::storage::SessionRow;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Model calls the planning step may make (it may look around with read-only tools first).
const PLANNING_CALLS: u32 = 6;

pub const PLANNING_PROMPT: &str = "## Planning\nYou are planning, not executing. You may look around with the \
read-only tools. Then answer with ONLY a JSON object, no prose: {\"goal\": string, \"steps\": [{\"action\": string, \
\"expected_outcome\": string}]} with 1 to 50 concrete steps.";

impl Engine {
    #[allow(clippy::too_many_arguments)] // the turn's inputs, each used
    pub(super) async fn run_planned_turn(
        &self,
        input: &TurnInput<'_>,
        session: &mut SessionRow,
        stop: &CancellationToken,
        task: &str,
        tracker: Arc<PlanTracker>,
        persona: &Persona,
        mode: PlanMode,
    ) -> Result<TurnOutput, TurnError> {
        let mut output = TurnOutput::default();
        let Some((goal, steps)) = self
            .plan_task(input, session, stop, task, persona, &mut output)
            .await
        else {
            return Ok(output);
        };
        let card = tracker.create(goal, steps, mode).await?;
        // The transcript keeps the request and the plan it produced.
        output.entries.push(entry_for(
            &ChatMessage::text(Role::User, format!("/plan {task}")),
            None,
            (0, 0),
        ));
        output.entries.push(entry_for(
            &ChatMessage::text(Role::Assistant, card),
            output.model.as_deref(),
            (0, 0),
        ));
        match mode {
            PlanMode::Tracker => {
                self.run_model_turn(input, session, stop, task, tracker, output, persona)
                    .await
            }
            PlanMode::Steps => {
                let outcome = self
                    .run_steps(input, session, stop, &tracker, persona)
                    .await?;
                Ok(outcome.into_output(output))
            }
        }
    }

    /// The planning calls for `task` (read-only tools); None when stopped. Tokens and the
    /// model go into `output`.
    pub(super) async fn plan_task(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        task: &str,
        persona: &Persona,
        output: &mut TurnOutput,
    ) -> Option<(String, Vec<(String, String)>)> {
        // Read-only tools this agent has.
        let read_only = self.tools.read_only_specs();
        let tools: std::sync::Arc<[_]> = read_only
            .into_iter()
            .filter(|t| persona.tools.iter().any(|n| **n == *t.name))
            .collect();
        let cx = self.tool_context(input, session, None, persona);
        let system = self.system_prompt(persona, Some(PLANNING_PROMPT));
        let mut messages = vec![ChatMessage::text(Role::User, task.to_string())];
        let mut answer = None;
        for _ in 0..PLANNING_CALLS.min(self.config.agent.max_iterations) {
            let request = ChatRequest {
                system: system.clone(),
                messages: messages.clone(),
                volatile: None,
                tools: tools.clone(),
                affinity: Some(session.key.as_str().into()),
            };
            let result = tokio::select! {
                _ = stop.cancelled() => return None,
                result = self.call_model(ModelCall::of_turn(CallKind::Planning, input, &session.key, persona), &request, &|_| {}) => result,
            };
            let (response, answered_by) = match result {
                Ok(ok) => ok,
                Err(e) => {
                    tracing::warn!(error = %e, "planning call failed; planning the task as one step");
                    break;
                }
            };
            output.tokens_in += response.usage.input_tokens;
            output.tokens_out += response.usage.output_tokens;
            output.model = Some(answered_by.to_string());
            if response.tool_calls.is_empty() {
                answer = Some(response.content);
                break;
            }
            let calls = response.tool_calls.clone();
            messages.push(ChatMessage::assistant_calls(
                response.content,
                response.tool_calls,
            ));
            let results =
                futures::future::join_all(calls.iter().map(|c| self.call_tool(c, &cx, &tools)))
                    .await;
            for (call, result) in calls.iter().zip(results) {
                messages.push(ChatMessage::tool_result(&call.id, result));
            }
        }
        let parsed = answer
            .as_deref()
            .ok_or_else(|| "no planning answer".to_string())
            .and_then(plan::parse_planning_output);
        Some(parsed.unwrap_or_else(|why| {
            tracing::info!(%why, "planning output did not validate; planning the task as one step");
            let p = plan::Plan::single_step(task);
            (
                p.goal,
                p.steps
                    .into_iter()
                    .map(|s| (s.action, s.expected))
                    .collect(),
            )
        }))
    }
}
