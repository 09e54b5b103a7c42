//! `plan`: the model creates a plan or records a step's progress (SPEC section 6).

use super::{Tool, ToolContext, ToolError};
use crate::plan::{self, StepStatus};
use async_trait::async_trait;
use serde_json::{Value, json};

pub struct PlanTool;

#[async_trait]
impl Tool for PlanTool {
    fn name(&self) -> &'static str {
        "plan"
    }
    fn description(&self) -> &'static str {
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
            .plan
            .as_ref()
            .ok_or_else(|| ToolError::new("plans are not available in this session"))?;
        match args["action"].as_str() {
            Some("create") => {
                let (goal, steps) = plan::validate(&args).map_err(ToolError)?;
                let card = tracker
                    .create(goal, steps)
                    .await
                    .map_err(|e| ToolError(format!("could not save the plan: {e}")))?;
                Ok(format!("Plan created and shown to the user:\n{card}"))
            }
            Some("update") => {
                let step = args["step"]
                    .as_u64()
                    .ok_or_else(|| ToolError::new("field `step` is required for update"))?;
                let status = args["status"]
                    .as_str()
                    .and_then(StepStatus::parse)
                    .ok_or_else(|| ToolError::new("field `status` is required for update"))?;
                let actual = args["actual"].as_str().map(str::to_string);
                let card = tracker
                    .update(step as usize, status, actual)
                    .await
                    .map_err(ToolError)?;
                Ok(format!(
                    "Step {step} recorded as {}.\n{card}",
                    args["status"].as_str().unwrap_or_default()
                ))
            }
            _ => Err(ToolError::new("field `action` must be create or update")),
        }
    }
}
