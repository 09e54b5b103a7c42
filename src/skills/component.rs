//! Skills as a component: `read_skill`, each agent's menu in its system prompt, and its
//! skills with their content hashes in `/status`.

use super::{ReadSkill, SkillLibrary, menu_section};
use crate::component::{CommandScope, Component};
use crate::policy::Persona;
use crate::storage::StoreError;
use crate::tools::Tool;
use std::sync::Arc;

pub struct SkillsComponent {
    library: Arc<SkillLibrary>,
}

impl SkillsComponent {
    pub fn new(library: Arc<SkillLibrary>) -> Self {
        SkillsComponent { library }
    }
}

#[async_trait::async_trait]
impl Component for SkillsComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(ReadSkill::new(self.library.clone()))]
    }

    /// The agent's skills with their content hashes (a changed file says so).
    async fn status(&self, cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        let menu = self.library.menu(&cx.agent.id);
        if menu.is_empty() {
            return Ok(Vec::new());
        }
        let shown: Vec<String> = menu.iter().map(super::Skill::fingerprint).collect();
        Ok(vec![format!("Skills: {}", shown.join(", "))])
    }

    fn prompt_section(&self, persona: &Persona) -> Option<String> {
        menu_section(&self.library.menu(&persona.agent.id))
    }
}
