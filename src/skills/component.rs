//! Skills as a component: `read_skill`, and each agent's menu in its system prompt.

use super::{ReadSkill, SkillLibrary, menu_section};
use crate::component::Component;
use crate::policy::Persona;
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

impl Component for SkillsComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(ReadSkill::new(self.library.clone()))]
    }

    fn prompt_section(&self, persona: &Persona) -> Option<String> {
        menu_section(&self.library.menu(&persona.agent.id))
    }
}
