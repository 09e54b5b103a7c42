//! `steps` plans (SPEC section 12): each step runs in its own bounded tool loop with a fresh
//! context — the goal, the step, and short results of the steps before it, never the
//! session's transcript — so a long plan costs time, not context. A step's result is
//! recorded in the plan and the card edited as it finishes; a failing step is retried once,
//! then the user decides (`/plan continue|skip|stop`). The final answer summarises every
//! step. Also what the `plan_and_execute` tool runs (never offered inside a step, so
//! planning does not recurse).

use super::calls::ModelCall;
use super::{Engine, Persona, TurnError, TurnInput, TurnOutput, turn::entry_for};
use crate::plan::{Plan, PlanTracker, StepStatus};
use crate::policy::CallKind;
use crate::providers::{ChainError, ChatMessage, ChatRequest, Role, ToolSpec};
use crate::storage::SessionRow;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a step's instructions add to the agent's system prompt.
const STEP_PROMPT: &str = "## Plan step\nYou are carrying out ONE step of a plan. Do only this step, \
then answer with its result in a few sentences. If the step cannot be done, answer with `STEP FAILED:` \
followed by the reason.";

/// What the final answer's call adds to the system prompt.
const SUMMARY_PROMPT: &str = "## Plan finished\nAll steps of the plan have run. Write the final answer \
for the user from the goal and the step results below.";

/// A step's recorded result (the card and later steps see this much).
const RESULT_CHARS: usize = 600;
/// Earlier results one step sees, most recent first.
const EARLIER_RESULTS_CHARS: usize = 4_000;
/// Step results the final answer's call sees.
const SUMMARY_RESULTS_CHARS: usize = 8_000;

/// What running a plan's steps came to.
pub(crate) struct StepsOutcome {
    /// The final answer, or the question to the user after a step failed twice.
    pub text: String,
    pub stopped: bool,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub model: Option<String>,
}

impl StepsOutcome {
    /// Add it to a turn's output: the answer is the turn's reply and goes in the transcript.
    pub(crate) fn into_output(self, mut output: TurnOutput) -> TurnOutput {
        output.tokens_in += self.tokens_in;
        output.tokens_out += self.tokens_out;
        if self.model.is_some() {
            output.model = self.model.clone();
        }
        if !self.stopped {
            output.entries.push(entry_for(
                &ChatMessage::text(Role::Assistant, self.text.clone()),
                self.model.as_deref(),
                (0, 0),
            ));
            output.outbound.push((OutboundKind::Reply, self.text));
        }
        output
    }
}

/// How one attempt at a step ended.
enum StepRun {
    Done(String),
    Failed(String),
    Stopped,
    /// The policy refused the step's model call (a spent cap, the message's limits): the
    /// plan pauses at once with the reason (a retry would be refused the same way).
    Refused(String),
}

/// The plan waits at step `i` for `/plan continue`: the answer says why and what finished.
async fn paused(
    tracker: &PlanTracker,
    plan: &Plan,
    i: usize,
    why: String,
    mut outcome: StepsOutcome,
) -> Result<StepsOutcome, TurnError> {
    tracker.set_awaiting(Some(i)).await?;
    outcome.text = format!(
        "{why}\n\n{}\nReply /plan continue to go on.",
        plan.summary_text()
    );
    Ok(outcome)
}

/// A user's decision about a step that failed twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Continue,
    Skip,
    Stop,
}

impl Decision {
    pub(crate) fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "continue" => Decision::Continue,
            "skip" => Decision::Skip,
            "stop" => Decision::Stop,
            _ => return None,
        })
    }
}

impl Engine {
    /// Run the plan's unfinished steps, in order, each in its own bounded loop.
    pub(crate) async fn run_steps(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        tracker: &PlanTracker,
        persona: &Persona,
    ) -> Result<StepsOutcome, TurnError> {
        let mut outcome = StepsOutcome {
            text: String::new(),
            stopped: false,
            tokens_in: 0,
            tokens_out: 0,
            model: None,
        };
        let tools: Arc<[ToolSpec]> = self
            .offered_tools(persona)
            .iter()
            // Planning does not recurse; the runner records a step's progress (`Tool::plans`).
            .filter(|t| !self.tools.get(&t.name).is_some_and(|tool| tool.plans()))
            .cloned()
            .collect();
        loop {
            let Some(plan) = tracker.snapshot().await.filter(|p| p.active) else {
                break;
            };
            let Some(i) = plan.current() else { break };
            // A step is a run of its own: the message's limits may stop the plan here.
            let scope = super::calls::turn_scope(input, &session.key, persona);
            if let Err(why) = self
                .admit_run(scope, crate::policy::RunKind::PlanStep)
                .await
            {
                return paused(tracker, &plan, i, why, outcome).await;
            }
            let _ = tracker.update(i + 1, StepStatus::InProgress, None).await;
            let mut failure = None;
            for attempt in 1..=2 {
                match self
                    .run_step(
                        input,
                        session,
                        stop,
                        persona,
                        &tools,
                        &plan,
                        i,
                        &mut outcome,
                    )
                    .await
                {
                    StepRun::Done(result) => {
                        failure = None;
                        let result = short(&result, RESULT_CHARS);
                        if let Err(e) = tracker.update(i + 1, StepStatus::Done, Some(result)).await
                        {
                            tracing::warn!(error = %e, "could not record a step's result");
                        }
                        break;
                    }
                    StepRun::Failed(why) => {
                        tracing::info!(step = i + 1, attempt, %why, "plan step failed");
                        failure = Some(why);
                    }
                    StepRun::Stopped => {
                        outcome.stopped = true;
                        return Ok(outcome);
                    }
                    StepRun::Refused(why) => {
                        return paused(tracker, &plan, i, why, outcome).await;
                    }
                }
            }
            if let Some(why) = failure {
                tracker.set_awaiting(Some(i)).await?;
                outcome.text = format!(
                    "Step {} ({}) failed twice: {}\nReply /plan continue to try it again, /plan skip to go on \
                     without it, or /plan stop to end the plan.",
                    i + 1,
                    plan.steps[i].action,
                    short(&why, RESULT_CHARS)
                );
                return Ok(outcome);
            }
        }
        let Some(plan) = tracker.snapshot().await else {
            outcome.text = "There is no plan to carry out.".into();
            return Ok(outcome);
        };
        outcome.text = self
            .summarise(input, session, stop, persona, &plan, &mut outcome)
            .await;
        Ok(outcome)
    }

    /// One attempt at step `i`: a fresh conversation of at most `agent.max_step_iterations`
    /// model calls.
    #[allow(clippy::too_many_arguments)] // the step's inputs, each used
    async fn run_step(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        persona: &Persona,
        tools: &Arc<[ToolSpec]>,
        plan: &Plan,
        i: usize,
        outcome: &mut StepsOutcome,
    ) -> StepRun {
        let system = self.system_prompt(persona, Some(STEP_PROMPT));
        let cx = self.tool_context(input, session, None, persona);
        let mut messages = vec![ChatMessage::text(Role::User, step_request(plan, i))];
        let calls = self.config.agent.max_step_iterations.max(1);
        for _ in 0..calls {
            let request = ChatRequest {
                system: system.clone(),
                messages: messages.clone(),
                volatile: None,
                tools: tools.clone(),
                affinity: Some(session.key.as_str().into()),
            };
            let chain = self.call_model(
                ModelCall::of_turn(CallKind::PlanStep, input, &session.key, persona),
                &request,
                &|_| {},
            );
            let (response, answered_by) = tokio::select! {
                _ = stop.cancelled() => return StepRun::Stopped,
                result = chain => match result {
                    Ok(ok) => ok,
                    Err(ChainError::Refused(why)) => return StepRun::Refused(why),
                    Err(e) => return StepRun::Failed(format!("the model could not answer: {e}")),
                },
            };
            outcome.tokens_in += response.usage.input_tokens;
            outcome.tokens_out += response.usage.output_tokens;
            outcome.model = Some(answered_by.to_string());
            if response.tool_calls.is_empty() {
                let text = response.content.trim().to_string();
                return match text.strip_prefix("STEP FAILED") {
                    Some(why) => StepRun::Failed(why.trim_start_matches(':').trim().to_string()),
                    None => StepRun::Done(text),
                };
            }
            let batch = response.tool_calls.clone();
            messages.push(ChatMessage::assistant_calls(
                response.content,
                response.tool_calls,
            ));
            let results = tokio::select! {
                _ = stop.cancelled() => return StepRun::Stopped,
                results = futures::future::join_all(batch.iter().map(|c| self.call_tool(c, &cx, tools))) => results,
            };
            for (call, result) in batch.iter().zip(results) {
                messages.push(ChatMessage::tool_result(&call.id, result));
            }
        }
        StepRun::Failed(format!("no result after {calls} model calls"))
    }

    /// The final answer from the goal and every step's short result (one bounded call; the
    /// plan's own summary when the model cannot answer).
    async fn summarise(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        persona: &Persona,
        plan: &Plan,
        outcome: &mut StepsOutcome,
    ) -> String {
        let per_step = (SUMMARY_RESULTS_CHARS / plan.steps.len().max(1)).max(80);
        let mut text = format!("Goal: {}\n\nStep results:\n", plan.goal);
        for (n, step) in plan.steps.iter().enumerate() {
            let result = step.actual.as_deref().unwrap_or("(no result)");
            text.push_str(&format!(
                "{}. {} [{}] — {}\n",
                n + 1,
                short(&step.action, 120),
                status_word(step.status),
                short(result, per_step)
            ));
        }
        let request = ChatRequest {
            system: self.system_prompt(persona, Some(SUMMARY_PROMPT)),
            messages: vec![ChatMessage::text(Role::User, text.clone())],
            volatile: None,
            tools: Arc::from([]),
            affinity: Some(session.key.as_str().into()),
        };
        let chain = self.call_model(
            ModelCall::of_turn(CallKind::PlanStep, input, &session.key, persona),
            &request,
            &|_| {},
        );
        let answer = tokio::select! {
            _ = stop.cancelled() => None,
            result = chain => result.ok(),
        };
        match answer {
            Some((response, answered_by)) if !response.content.trim().is_empty() => {
                outcome.tokens_in += response.usage.input_tokens;
                outcome.tokens_out += response.usage.output_tokens;
                outcome.model = Some(answered_by.to_string());
                response.content
            }
            _ => format!("{}\n\n{text}", plan.summary_text()),
        }
    }

    /// `/plan continue|skip|stop` for a `steps` plan waiting on a failed step.
    pub(crate) async fn plan_decision(
        &self,
        decision: Decision,
        input: &TurnInput<'_>,
        session: &SessionRow,
        stop: &CancellationToken,
        tracker: &PlanTracker,
        persona: &Persona,
    ) -> Result<TurnOutput, TurnError> {
        let waiting = tracker
            .snapshot()
            .await
            .filter(|p| p.active)
            .and_then(|p| p.awaiting);
        let Some(i) = waiting else {
            return Ok(TurnOutput::reply(
                OutboundKind::Status,
                "No plan is waiting for a decision.",
            ));
        };
        let mut output = TurnOutput::default();
        output.entries.push(entry_for(
            &ChatMessage::text(Role::User, format!("/plan {decision:?}").to_lowercase()),
            None,
            (0, 0),
        ));
        tracker.set_awaiting(None).await?;
        match decision {
            Decision::Continue => {}
            Decision::Skip => {
                let _ = tracker
                    .update(
                        i + 1,
                        StepStatus::Skipped,
                        Some("skipped by the user".into()),
                    )
                    .await;
            }
            Decision::Stop => {
                let _ = tracker
                    .update(
                        i + 1,
                        StepStatus::Failed,
                        Some("stopped by the user".into()),
                    )
                    .await;
                let summary = tracker.stop().await?;
                let text = summary.map_or_else(
                    || "The plan has ended.".to_string(),
                    |s| format!("Plan stopped.\n{s}"),
                );
                output.outbound.push((OutboundKind::Status, text));
                return Ok(output);
            }
        }
        let outcome = self
            .run_steps(input, session, stop, tracker, persona)
            .await?;
        Ok(outcome.into_output(output))
    }
}

/// The one user message of a step: the goal, earlier results (most recent first, within a
/// budget), the step.
fn step_request(plan: &Plan, i: usize) -> String {
    let mut earlier = Vec::new();
    let mut budget = EARLIER_RESULTS_CHARS;
    let mut left_out = 0;
    for (n, step) in plan.steps[..i].iter().enumerate().rev() {
        let line = format!(
            "{}. {} [{}] — {}",
            n + 1,
            short(&step.action, 120),
            status_word(step.status),
            short(step.actual.as_deref().unwrap_or("(no result)"), 300)
        );
        if line.len() > budget {
            left_out = n + 1;
            break;
        }
        budget -= line.len();
        earlier.push(line);
    }
    earlier.reverse();
    let mut text = format!("Goal: {}\n\n", plan.goal);
    if !earlier.is_empty() {
        text.push_str("Results of earlier steps:\n");
        if left_out > 0 {
            text.push_str(&format!("({left_out} earlier steps not shown)\n"));
        }
        text.push_str(&earlier.join("\n"));
        text.push_str("\n\n");
    }
    let step = &plan.steps[i];
    text.push_str(&format!(
        "Your step ({} of {}): {}\nExpected: {}",
        i + 1,
        plan.steps.len(),
        step.action,
        step.expected
    ));
    text
}

fn status_word(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Done => "done",
        StepStatus::Failed => "failed",
        StepStatus::Skipped => "skipped",
        StepStatus::Pending => "pending",
        StepStatus::InProgress => "in progress",
    }
}

/// At most `max` characters of `text`, marked when cut.
fn short(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_sees_the_goal_its_step_and_earlier_results_within_a_budget() {
        let steps = (1..=50)
            .map(|n| (format!("step {n}"), format!("outcome {n}")))
            .collect();
        let mut plan = Plan::new("the goal".into(), steps);
        for step in &mut plan.steps[..49] {
            step.status = StepStatus::Done;
            step.actual = Some("r".repeat(1_000));
        }
        let text = step_request(&plan, 49);
        assert!(text.starts_with("Goal: the goal"));
        assert!(text.ends_with("Your step (50 of 50): step 50\nExpected: outcome 50"));
        assert!(text.contains("earlier steps not shown"));
        assert!(text.len() < EARLIER_RESULTS_CHARS + 500, "{}", text.len());
        assert!(step_request(&plan, 0).find("Results of earlier").is_none());
    }
}
