//! `sessions_spawn` and `subagents` (SPEC section 7): thin adapters from tool arguments to
//! the turn's [`Spawner`](crate::spawn::Spawner).

use super::{Tool, ToolContext, ToolError};
use crate::spawn::{SpawnHandle, SpawnRequest};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::time::Duration;

fn scope(cx: &ToolContext) -> Result<&SpawnHandle, ToolError> {
    cx.spawn
        .as_ref()
        .ok_or_else(|| ToolError::new("subagents are not available here"))
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("plain data serialises")
}

pub struct SessionsSpawn;

#[async_trait]
impl Tool for SessionsSpawn {
    fn name(&self) -> &'static str {
        "sessions_spawn"
    }
    fn description(&self) -> &'static str {
        "Start a subagent that works on a task in its own session and returns at once. Its outcome is \
         announced in this chat and reported back to you when it ends. It does not see this conversation: \
         put everything it needs in `task`."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1},
                "label": {"type": "string"},
                "system_prompt": {"type": "string"},
                "model": {"type": "string", "description": "<provider>/<model>; default: yours"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "allowlist; default: all of yours"},
                "mode": {"type": "string", "enum": ["run", "session"]},
                "sandbox": {"type": "boolean"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            },
            "required": ["task"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let scope = scope(cx)?;
        let text = |k: &str| args[k].as_str().map(str::to_string);
        let request = SpawnRequest {
            task: text("task").unwrap_or_default(),
            label: text("label"),
            system_prompt: text("system_prompt"),
            model: text("model"),
            tools: args["tools"].as_array().map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            }),
            session_mode: args["mode"] == "session",
            timeout_secs: args["timeout_secs"].as_u64(),
        };
        let accepted = scope
            .spawner
            .spawn(&scope.scope, request)
            .await
            .map_err(|e| ToolError(e.to_string()))?;
        Ok(to_json(&accepted))
    }
}

pub struct SubagentsTool;

#[async_trait]
impl Tool for SubagentsTool {
    fn name(&self) -> &'static str {
        "subagents"
    }
    fn description(&self) -> &'static str {
        "Manage this session's subagents: list; kill (target = run id, label or all); steer (target, message: \
         interrupt its current step and continue with a new instruction); wait (target, timeout_secs)."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "kill", "steer", "wait"]},
                "target": {"type": "string"},
                "message": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    fn time_limit(&self, args: &Value) -> Option<Duration> {
        // `wait` waits as long as it was asked to, and a little more to report.
        (args["action"] == "wait")
            .then(|| Duration::from_secs(args["timeout_secs"].as_u64().unwrap_or(60) + 5))
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let handle = scope(cx)?;
        let registry = &handle.spawner;
        let session = &handle.scope.parent_session;
        let target = args["target"].as_str();
        let need_target =
            || target.ok_or_else(|| ToolError::new("field `target` is required for this action"));
        match args["action"].as_str().unwrap_or_default() {
            "list" => {
                let runs = registry
                    .list(session)
                    .await
                    .map_err(|e| ToolError(e.to_string()))?;
                Ok(to_json(&runs))
            }
            "kill" => {
                let n = registry.kill(session, need_target()?);
                Ok(format!("killed {n} subagent(s)"))
            }
            "steer" => {
                let message = args["message"]
                    .as_str()
                    .ok_or_else(|| ToolError::new("field `message` is required for steer"))?;
                registry
                    .steer(session, need_target()?, message)
                    .map_err(|e| ToolError(e.to_string()))?;
                Ok("steered".into())
            }
            "wait" => {
                let timeout = Duration::from_secs(args["timeout_secs"].as_u64().unwrap_or(60));
                let report = registry
                    .wait(session, need_target()?, timeout)
                    .await
                    .map_err(|e| ToolError(e.to_string()))?;
                Ok(to_json(&report))
            }
            other => Err(ToolError(format!(
                "field `action`: unknown action `{other}`"
            ))),
        }
    }
}
