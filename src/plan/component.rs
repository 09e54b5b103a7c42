//! Plans' tools as a component. Planning itself is a mode of the turn (`/plan`, the Active
//! Plan section, the steps runner) and belongs to the engine, which hands the `plan` tool the
//! session's [`PlanTracker`](super::PlanTracker) as a turn handle and carries out a tool that
//! runs a plan (`Tool::runs_a_plan`: `plan_and_execute`) itself.

use super::{PlanAndExecute, PlanTool};
use crate::component::Component;
use crate::tools::Tool;
use std::sync::Arc;

pub struct PlanComponent;

impl Component for PlanComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(PlanTool), Arc::new(PlanAndExecute)]
    }
}
