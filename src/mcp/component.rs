//! The MCP feature's component: `/status` lines (each server's state and tool count) and,
//! before a turn, waking the lazy servers its agent uses.

use super::{McpServers, State};
use crate::component::{CommandScope, Component, TurnScope};
use crate::storage::StoreError;
use crate::tools::TurnHandles;
use async_trait::async_trait;
use std::sync::Arc;

pub struct McpComponent {
    servers: Arc<McpServers>,
}

impl McpComponent {
    pub fn new(servers: Arc<McpServers>) -> Self {
        McpComponent { servers }
    }
}

#[async_trait]
impl Component for McpComponent {
    async fn status(&self, _cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        if self.servers.is_empty() {
            return Ok(Vec::new());
        }
        let parts: Vec<String> = self
            .servers
            .statuses()
            .into_iter()
            .map(|s| match s.state {
                State::Up => format!("{} up ({} tools)", s.id, s.tools.len()),
                state => format!("{} {}", s.id, format!("{state:?}").to_lowercase()),
            })
            .collect();
        Ok(vec![format!("MCP: {}", parts.join(", "))])
    }

    fn prepare_turn(&self, turn: &TurnScope<'_>, _handles: &mut TurnHandles) {
        self.servers
            .wake(|server| turn.persona.agent.uses_mcp(server));
    }
}
