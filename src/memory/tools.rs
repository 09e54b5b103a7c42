//! `memory_save`, `memory_search`, `memory_forget`: the model's hands on long-term memory.
//! Each acts as the turn's asker (its chat and sender); what it may see or forget is
//! `Memory`'s decision. A save carries its call's identity, so a turn redone after a crash
//! saves once.

use super::{Asker, Memory, SaveScope};
use crate::tools::{Tool, ToolContext, ToolError, current_call};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;

fn asker(cx: &ToolContext) -> Asker<'_> {
    Asker {
        route: &cx.route,
        sender: cx.sender.as_deref(),
    }
}

pub struct MemorySave(pub Arc<Memory>);
pub struct MemorySearch(pub Arc<Memory>);
pub struct MemoryForget(pub Arc<Memory>);

#[derive(serde::Deserialize)]
struct SaveArgs {
    text: String,
    #[serde(default)]
    tags: Vec<String>,
    scope: Option<String>,
}

#[async_trait]
impl Tool for MemorySave {
    fn name(&self) -> &str {
        "memory_save"
    }
    fn description(&self) -> &str {
        "Remember a durable fact for later conversations (a preference, a name, a decision): one \
         fact per call, in a sentence that stands alone. scope \"me\" (default): the person you \
         are talking with; \"chat\": everyone in this chat."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The fact, self-contained"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "scope": {"type": "string", "enum": ["me", "chat"]}
            },
            "required": ["text"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let args: SaveArgs = serde_json::from_value(args).map_err(|e| ToolError(e.to_string()))?;
        let who = asker(cx);
        let scope = match args.scope.as_deref() {
            Some("chat") => SaveScope::Chat,
            Some("me") => SaveScope::Me,
            // A turn without a person (a job, a subagent's step) saves for the chat.
            _ if who.sender.is_none() => SaveScope::Chat,
            _ => SaveScope::Me,
        };
        let call_ref = current_call().map(|(id, _)| id);
        let (id, _) = self
            .0
            .save(
                &who,
                scope,
                &args.text,
                &args.tags,
                Some(&cx.session_key),
                call_ref,
            )
            .await
            .map_err(ToolError)?;
        let whose = match scope {
            SaveScope::Me => "for this person",
            SaveScope::Chat => "for this chat",
        };
        Ok(format!("Saved memory #{id} {whose}."))
    }
}

#[async_trait]
impl Tool for MemorySearch {
    fn name(&self) -> &str {
        "memory_search"
    }
    fn description(&self) -> &str {
        "Search what you remember about the person you are talking with and this chat. Returns \
         the best matches with their ids."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "k": {"type": "integer", "minimum": 1, "maximum": 20}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let query = args["query"].as_str().unwrap_or_default();
        let k = args["k"].as_u64().unwrap_or(5).clamp(1, 20) as usize;
        let who = asker(cx);
        let scopes = self.0.visible_scopes(&who).await.map_err(ToolError)?;
        let rows = self.0.search(&scopes, query, k).await.map_err(ToolError)?;
        if rows.is_empty() {
            return Ok("No memories match.".into());
        }
        Ok(rows
            .iter()
            .map(|r| format!("#{} {}", r.id, r.text))
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

#[async_trait]
impl Tool for MemoryForget {
    fn name(&self) -> &str {
        "memory_forget"
    }
    fn description(&self) -> &str {
        "Forget a memory by its id (#id as shown), when the person asks or it is no longer true."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let id = args["id"]
            .as_i64()
            .ok_or_else(|| ToolError("`id` must be a memory's number".into()))?;
        if self.0.forget(&asker(cx), id).await.map_err(ToolError)? {
            Ok(format!("Forgot memory #{id}."))
        } else {
            Err(ToolError(format!(
                "there is no memory #{id} you can forget here"
            )))
        }
    }
}
