//! `read_skill`: the instructions of one skill on the agent's menu (`crate::skills`). Offered
//! only to agents whose menu is not empty.

use super::SkillLibrary;
use crate::tools::{Offer, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;

pub struct ReadSkill {
    library: Arc<SkillLibrary>,
}

impl ReadSkill {
    pub fn new(library: Arc<SkillLibrary>) -> Self {
        ReadSkill { library }
    }
}

#[async_trait]
impl Tool for ReadSkill {
    fn name(&self) -> &str {
        "read_skill"
    }
    fn description(&self) -> &str {
        "Read the instructions of a skill listed under Skills in your instructions."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}},
            "required": ["name"],
            "additionalProperties": false
        })
    }
    fn read_only(&self) -> bool {
        true
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        !self.library.menu(&offer.agent.id).is_empty()
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let name = args["name"].as_str().unwrap_or_default();
        let skills = self.library.menu(&cx.agent_id);
        let skill = skills.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
            ToolError(format!(
                "no skill `{name}` here; yours: {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })?;
        let file = skill.file.clone();
        let skill = skill.clone();
        tokio::task::spawn_blocking(move || skill.instructions())
            .await
            .map_err(|e| ToolError(e.to_string()))?
            .map_err(|e| {
                tracing::warn!(file = %file.display(), problem = %e, "skill could not be read");
                ToolError(e)
            })
    }
}
