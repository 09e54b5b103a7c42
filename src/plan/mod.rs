//! Plans (SPEC section 6): the plan model, its validation, the `## Active Plan` section every
//! model call of the session carries, and the checklist card shown in the chat.
//! `tracker.rs` keeps a session's plan stored and its card edited; the engine drives the
//! planning step. This module knows no channel and no provider.

mod component;
mod tools;
mod tracker;

pub use component::PlanComponent;
pub use tools::{PlanAndExecute, PlanTool};
pub use tracker::PlanTracker;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most steps a plan may have (a `steps` plan runs each in its own bounded loop, so a
/// long plan costs time, not context).
pub const MAX_STEPS: usize = 50;

/// How a plan is carried out (defined with the config that names it).
pub use crate::config::PlanMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Done,
    Failed,
    Skipped,
}

impl StepStatus {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => StepStatus::Pending,
            "in_progress" => StepStatus::InProgress,
            "done" => StepStatus::Done,
            "failed" => StepStatus::Failed,
            "skipped" => StepStatus::Skipped,
            _ => return None,
        })
    }

    fn finished(self) -> bool {
        matches!(
            self,
            StepStatus::Done | StepStatus::Failed | StepStatus::Skipped
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub action: String,
    pub expected: String,
    pub status: StepStatus,
    #[serde(default)]
    pub actual: Option<String>,
    /// The latest tool result while the step runs, until the model records an actual.
    #[serde(default)]
    pub provisional: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub goal: String,
    pub steps: Vec<Step>,
    /// Outbox id of the card in the chat (edits refer to it).
    #[serde(default)]
    pub card: Option<i64>,
    pub active: bool,
    #[serde(default)]
    pub mode: PlanMode,
    /// A `steps` plan whose step (index) failed twice: the user decides with
    /// `/plan continue|skip|stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<usize>,
}

impl Plan {
    pub fn new(goal: String, steps: Vec<(String, String)>) -> Self {
        Plan {
            goal,
            steps: steps
                .into_iter()
                .map(|(action, expected)| Step {
                    action,
                    expected,
                    status: StepStatus::Pending,
                    actual: None,
                    provisional: None,
                })
                .collect(),
            card: None,
            active: true,
            mode: PlanMode::Tracker,
            awaiting: None,
        }
    }

    /// The whole task as one step: the fallback when planning output does not validate.
    pub fn single_step(task: &str) -> Self {
        Plan::new(
            task.to_string(),
            vec![(
                task.to_string(),
                "The task is done as the user asked.".into(),
            )],
        )
    }

    /// The step being worked on: the first in progress, else the first pending.
    pub fn current(&self) -> Option<usize> {
        self.steps
            .iter()
            .position(|s| s.status == StepStatus::InProgress)
            .or_else(|| {
                self.steps
                    .iter()
                    .position(|s| s.status == StepStatus::Pending)
            })
    }

    pub fn finished(&self) -> bool {
        self.steps.iter().all(|s| s.status.finished())
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |st| self.steps.iter().filter(|s| s.status == st).count();
        (
            count(StepStatus::Done),
            count(StepStatus::Failed),
            count(StepStatus::Skipped),
        )
    }

    fn marker(&self, i: usize) -> &'static str {
        match self.steps[i].status {
            StepStatus::Done => "✅",
            StepStatus::Failed => "❌",
            StepStatus::Skipped => "⤼",
            _ if Some(i) == self.current() => "→",
            _ => "○",
        }
    }

    fn suffix(&self, i: usize) -> &'static str {
        match self.steps[i].status {
            StepStatus::Skipped => " (skipped)",
            StepStatus::Pending | StepStatus::InProgress if Some(i) != self.current() => {
                " (pending)"
            }
            _ => "",
        }
    }

    /// The `## Active Plan` section appended to every system prompt while the plan is active.
    pub fn prompt_section(&self) -> String {
        let mut out = format!("## Active Plan\nGoal: {}\n", self.goal);
        for (i, step) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "{} {}. {}{}\n",
                self.marker(i),
                i + 1,
                step.action,
                self.suffix(i)
            ));
            out.push_str(&format!("   Expected: {}\n", step.expected));
            match (&step.actual, &step.provisional) {
                (Some(actual), _) => out.push_str(&format!("   Actual: {actual}\n")),
                (None, Some(p)) => out.push_str(&format!(
                    "   Actual (provisional, latest tool result): {p}\n"
                )),
                _ => {}
            }
        }
        out.push_str(
            "\nBefore moving on, compare the step's Actual result with its Expected outcome. When they \
             differ, adjust the plan (plan tool: update or create) or tell the user. Record progress \
             with the plan tool: update with the step number, its status (in_progress, done, failed, \
             skipped) and the actual result.",
        );
        out
    }

    /// The checklist card shown in the chat.
    pub fn card_text(&self) -> String {
        let mut out = format!("📋 Plan: {}\n", self.goal);
        for (i, step) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "{} {}. {}{}",
                self.marker(i),
                i + 1,
                step.action,
                self.suffix(i)
            ));
            if step.status == StepStatus::Failed
                && let Some(actual) = &step.actual
            {
                out.push_str(&format!(" — {actual}"));
            }
            out.push('\n');
        }
        out.trim_end().to_string()
    }

    pub fn summary_text(&self) -> String {
        let (done, failed, skipped) = self.counts();
        format!(
            "📋 Plan finished: {}\n✅ {done} done · ❌ {failed} failed · ⤼ {skipped} skipped",
            self.goal
        )
    }

    /// One line for `/status`.
    pub fn progress(&self) -> String {
        let (done, failed, skipped) = self.counts();
        let current = self
            .current()
            .map(|i| format!("; current: {}. {}", i + 1, self.steps[i].action))
            .unwrap_or_default();
        format!(
            "{} — {}/{} steps finished ({done} done, {failed} failed, {skipped} skipped){current}",
            self.goal,
            done + failed + skipped,
            self.steps.len()
        )
    }
}

/// Validate `{goal, steps: [{action, expected_outcome}]}` (1–50 steps, non-empty texts).
pub fn validate(value: &Value) -> Result<(String, Vec<(String, String)>), String> {
    let text = |v: &Value, field: &str| -> Result<String, String> {
        match v.get(field).and_then(Value::as_str).map(str::trim) {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(format!("`{field}` must be a non-empty string")),
        }
    };
    let goal = text(value, "goal")?;
    let steps = value
        .get("steps")
        .and_then(Value::as_array)
        .ok_or("`steps` must be a list")?;
    if steps.is_empty() || steps.len() > MAX_STEPS {
        return Err(format!(
            "a plan has 1 to {MAX_STEPS} steps, not {}",
            steps.len()
        ));
    }
    let steps = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok((
                text(s, "action").map_err(|e| format!("step {}: {e}", i + 1))?,
                text(s, "expected_outcome").map_err(|e| format!("step {}: {e}", i + 1))?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((goal, steps))
}

/// Read a plan out of a model's planning answer (JSON, possibly in a code fence or prose).
pub fn parse_planning_output(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let start = text.find('{').ok_or("no JSON object in the answer")?;
    let end = text.rfind('}').ok_or("no JSON object in the answer")?;
    if end < start {
        return Err("no JSON object in the answer".into());
    }
    let value: Value =
        serde_json::from_str(&text[start..=end]).map_err(|e| format!("not JSON: {e}"))?;
    validate(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planning_output_is_validated() {
        let good = "Here:\n```json\n{\"goal\":\"G\",\"steps\":[{\"action\":\"a\",\"expected_outcome\":\"e\"}]}\n```";
        assert_eq!(
            parse_planning_output(good).unwrap(),
            ("G".into(), vec![("a".into(), "e".into())])
        );
        for bad in [
            "no json",
            "{\"goal\":\"G\",\"steps\":[]}",
            "{\"goal\":\"\",\"steps\":[{\"action\":\"a\",\"expected_outcome\":\"e\"}]}",
            "{\"goal\":\"G\",\"steps\":[{\"action\":\"a\"}]}",
            "{\"goal\":\"G\",\"steps\":[{\"action\":\" \",\"expected_outcome\":\"e\"}]}",
            "{\"goal\": 5}",
        ] {
            assert!(parse_planning_output(bad).is_err(), "{bad}");
        }
        let too_many: Vec<Value> = (0..51)
            .map(|i| serde_json::json!({"action": format!("a{i}"), "expected_outcome": "e"}))
            .collect();
        assert!(validate(&serde_json::json!({"goal": "G", "steps": too_many})).is_err());
    }

    #[test]
    fn the_prompt_section_marks_each_state() {
        let mut plan = Plan::new(
            "Ship".into(),
            vec![
                ("a".into(), "ea".into()),
                ("b".into(), "eb".into()),
                ("c".into(), "ec".into()),
                ("d".into(), "ed".into()),
            ],
        );
        plan.steps[0].status = StepStatus::Done;
        plan.steps[0].actual = Some("did a".into());
        plan.steps[1].status = StepStatus::Failed;
        plan.steps[1].actual = Some("b broke".into());
        plan.steps[2].provisional = Some("tool said x".into());
        let section = plan.prompt_section();
        assert!(section.starts_with("## Active Plan\nGoal: Ship\n"));
        assert!(section.contains("✅ 1. a\n   Expected: ea\n   Actual: did a\n"));
        assert!(section.contains("❌ 2. b\n   Expected: eb\n   Actual: b broke\n"));
        assert!(section.contains(
            "→ 3. c\n   Expected: ec\n   Actual (provisional, latest tool result): tool said x\n"
        ));
        assert!(section.contains("○ 4. d (pending)\n"));
        assert!(section.contains("compare the step's Actual result with its Expected outcome"));
        assert!(plan.card_text().contains("❌ 2. b — b broke"));
    }
}
