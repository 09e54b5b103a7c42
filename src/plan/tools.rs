//! `plan`: the model creates a plan or records a step's progress (SPEC section 6); and
//! `plan_and_execute`, which the engine's steps runner carries out. The session's
//! [`PlanTracker`](crate::plan::PlanTracker) comes as a turn handle.

use crate::plan::{self, StepStatus};
use crate::tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};

/// `plan` arguments (`create` also carries `goal` and `steps`, validated by `plan::validate`).
#[derive(serde::Deserialize)]
struct PlanArgs {
    action: Action,
    step: Option<usize>,
    status: Option<String>,
    actual: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    Create,
    Update,
}

pub struct PlanTool;

#[async_trait]
impl Tool for PlanTool {
    fn name(&self) -> &str {
        "plan"
    }
    fn for_children(&self) -> bool {
        false
    }
    fn plans(&self) -> bool {
        true
    }
    fn description(&self) -> &str {
        "Create a step-by-step plan (action=create with goal and steps) or record progress on a step \
         (action=update with step number, status and the actual result). The plan is shown to the user."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "update"]},
                "goal": {"type": "string"},
                "steps": {"type": "array", "maxItems": plan::MAX_STEPS, "items": {
                    "type": "object",
                    "properties": {"action": {"type": "string"}, "expected_outcome": {"type": "string"}},
                    "required": ["action", "expected_outcome"]
                }},
                "step": {"type": "integer", "minimum": 1},
                "status": {"type": "string", "enum": ["in_progress", "done", "failed", "skipped"]},
                "actual": {"type": "string"}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let tracker = cx
            .handles
            .get::<std::sync::Arc<plan::PlanTracker>>()
            .ok_or_else(|| ToolError::new("plans are not available in this session"))?;
        let PlanArgs {
            action,
            step,
            status,
            actual,
        } = crate::tools::typed(args.clone())?;
        match action {
            Action::Create => {
                let (goal, steps) = plan::validate(&args).map_err(ToolError)?;
                let card = tracker
                    .create(goal, steps, crate::plan::PlanMode::Tracker)
                    .await
                    .map_err(|e| ToolError(format!("could not save the plan: {e}")))?;
                Ok(format!("Plan created and shown to the user:\n{card}"))
            }
            Action::Update => {
                let step =
                    step.ok_or_else(|| ToolError::new("field `step` is required for update"))?;
                let word = status
                    .ok_or_else(|| ToolError::new("field `status` is required for update"))?;
                let status = StepStatus::parse(&word)
                    .ok_or_else(|| ToolError::new("field `status` is not a step status"))?;
                let card = tracker
                    .update(step, status, actual)
                    .await
                    .map_err(ToolError)?;
                Ok(format!("Step {step} recorded as {word}.\n{card}"))
            }
        }
    }
}

/// `plan_and_execute`: the agent plans a large request itself and runs it as a `steps` plan
/// (each step its own bounded loop); the steps' results come back as the result. The engine
/// carries it out (it needs the model and the plan), so `run` here is never reached in a
/// turn; it is not offered inside a step or to subagents.
pub struct PlanAndExecute;

#[async_trait]
impl Tool for PlanAndExecute {
    fn name(&self) -> &str {
        "plan_and_execute"
    }
    fn risk(&self, _args: &Value, _cx: &crate::tools::ToolContext) -> crate::tools::ToolRisk {
        crate::tools::ToolRisk::of(crate::tools::ToolClass::Spawn)
    }
    fn for_children(&self) -> bool {
        false
    }
    fn plans(&self) -> bool {
        true
    }
    fn runs_a_plan(&self) -> bool {
        true
    }
    fn description(&self) -> &str {
        "For a large task with several distinct parts: plan it into steps and carry each step out in its \
         own focused loop; returns the combined result. The plan is shown to the user."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"task": {"type": "string", "minLength": 1}},
            "required": ["task"],
            "additionalProperties": false
        })
    }
    async fn run(&self, _args: Value, _cx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new(
            "plan_and_execute runs only in an agent's own turn",
        ))
    }
}
