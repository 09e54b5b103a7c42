//! Teams as a component: the board and inbox tools, and `/team`.

use super::{TeamMessageTool, TeamTasks, TeamTool, Teams, board_text};
use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, Component, Reply};
use crate::storage::{StoreError, TeamStore};
use crate::tools::Tool;
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[command(
    "team",
    "Show the team task boards",
    None,
    "/team — the task boards of this agent's teams",
)];

pub struct TeamsComponent {
    teams: Arc<Teams>,
    store: Arc<dyn TeamStore>,
}

impl TeamsComponent {
    pub fn new(teams: Arc<Teams>, store: Arc<dyn TeamStore>) -> Self {
        TeamsComponent { teams, store }
    }
}

#[async_trait]
impl Component for TeamsComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(TeamTasks(TeamTool::new(
                self.teams.clone(),
                self.store.clone(),
            ))),
            Arc::new(TeamMessageTool(TeamTool::new(
                self.teams.clone(),
                self.store.clone(),
            ))),
        ]
    }

    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    /// `/team`: the boards of the teams the session's agent is in.
    async fn command(
        &self,
        _name: &str,
        _args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        let teams = self.teams.of(&cx.agent.id);
        if teams.is_empty() {
            return Ok((
                OutboundKind::Status,
                format!("Agent {} is not in a team.", cx.agent.id),
            ));
        }
        let mut boards = Vec::new();
        for team in teams.iter() {
            let board = self.store.team_tasks(&team.id).await?;
            boards.push(board_text(team, &board));
        }
        Ok((OutboundKind::Status, boards.join("\n\n")))
    }
}
