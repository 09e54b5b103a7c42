//! MCP servers as tools (SPEC section 19). Each `[mcp.servers.ID]` is a [`Server`] with a
//! supervisor task (`server.rs`: open with the official SDK `rmcp` — `connect.rs` — list the
//! tools, follow `tools/list_changed`, restart with backoff when it dies or stops
//! answering). [`McpServers`] is the feature: the registry's [`ToolSource`] (a snapshot of
//! every server's tools as [`McpTool`]s named `ID__tool`, rebuilt when a server's tools or
//! state change; a down server's tools are not offered and a call says it is down), the
//! statuses `mcp list`, `/status` and `GET /v1/admin/mcp` show, and the component that
//! starts lazy servers when a turn of an agent that uses them begins.
//!
//! Start-up never waits for a server. Stdio children are killed on shutdown, and a start
//! after a kill -9 ends those the dead process left (`children.rs`).
//!
//! Owns the servers and their tools; knows nothing of the engine, channels or storage.

mod children;
mod component;
mod connect;
mod server;
mod tool;

pub use component::McpComponent;
pub use server::{State, Status};
pub use tool::{McpTool, offered_name};

use crate::config::{Config, Secrets};
use crate::redact::Redactor;
use crate::tools::{DynamicTool, ToolSource};
use server::Server;
use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub struct McpServers {
    servers: Vec<Arc<Server>>,
    redactor: Arc<Redactor>,
    /// Some server's tools or state changed.
    changed: Arc<Notify>,
    tools: RwLock<Arc<[Arc<DynamicTool>]>>,
    children: Arc<children::Children>,
}

impl McpServers {
    pub fn from_config(config: &Config, secrets: &Secrets, redactor: Arc<Redactor>) -> Self {
        let changed = Arc::new(Notify::new());
        let servers = config
            .mcp
            .servers
            .iter()
            .map(|(id, server)| {
                let prefix = format!("mcp.servers.{id}.");
                let own = secrets
                    .mcp
                    .iter()
                    .filter(|(key, _)| key.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Arc::new(Server::new(
                    id.clone(),
                    server.clone(),
                    own,
                    changed.clone(),
                    std::path::Path::new(&config.agent.workspace)
                        .join(".mcp")
                        .join(format!("{id}.tools.json")),
                ))
            })
            .collect();
        let servers = McpServers {
            servers,
            redactor,
            changed,
            tools: RwLock::new(Arc::from(Vec::new())),
            children: Arc::new(children::Children::new(&config.agent.workspace)),
        };
        // The tools remembered from an earlier run, offered while their servers start.
        servers.rebuild();
        servers
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Start every server's supervisor (lazy ones wait to be woken) and the task that keeps
    /// the tool snapshot current; all end with `cancel`. Returns at once.
    pub fn start(self: &Arc<Self>, tracker: &TaskTracker, cancel: CancellationToken) {
        if self.servers.is_empty() {
            return;
        }
        let ended = self.children.end_leftovers();
        if ended > 0 {
            tracing::info!(ended, "ended MCP server processes an earlier run left");
        }
        for server in &self.servers {
            tracker.spawn(
                server
                    .clone()
                    .supervise(self.children.clone(), cancel.child_token()),
            );
        }
        let me = self.clone();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = me.changed.notified() => me.rebuild(),
                }
            }
        });
    }

    /// Every server's status, in configured order.
    pub fn statuses(&self) -> Vec<Status> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// Wake the lazy servers `uses` says a turn needs.
    pub fn wake(&self, uses: impl Fn(&str) -> bool) {
        for server in &self.servers {
            if uses(&server.id) {
                server.wake();
            }
        }
    }

    /// Wait until no server is starting (or `limit` passed): for `mcp list` and `mcp call`.
    pub async fn settled(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self
            .servers
            .iter()
            .any(|s| matches!(s.state(), State::Starting))
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Build the tool snapshot again from every server's listed tools (a name two tools
    /// share after sanitising keeps the first; a schema that does not compile is left out).
    fn rebuild(&self) {
        let mut seen = HashSet::new();
        let mut tools = Vec::new();
        for server in &self.servers {
            for listed in server.listed() {
                let tool = McpTool::new(server.clone(), listed, self.redactor.clone());
                let name = crate::tools::Tool::name(&tool).to_string();
                if !seen.insert(name.clone()) {
                    tracing::warn!(server = %server.id, tool = %name, "two MCP tools share this name; the second is left out");
                    continue;
                }
                match DynamicTool::new(Arc::new(tool)) {
                    Ok(found) => tools.push(Arc::new(found)),
                    Err(e) => tracing::warn!(
                        server = %server.id, tool = %name, error = %e,
                        "an MCP tool's input schema is not valid JSON Schema; it is left out"
                    ),
                }
            }
        }
        *self.tools.write().expect("tools lock") = Arc::from(tools);
    }

    /// The server called `id`.
    fn server(&self, id: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.id == id)
    }

    /// Call `tool` of server `id` directly (`ferroclaw mcp call`): the result's text.
    pub async fn call(
        &self,
        id: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<String, String> {
        let server = self
            .server(id)
            .ok_or_else(|| format!("no MCP server `{id}` is configured"))?;
        server.wake();
        self.settled(std::time::Duration::from_secs(
            server.config.timeout_secs + 1,
        ))
        .await;
        let Some(listed) = server.listed().into_iter().find(|t| t.name == tool) else {
            let status = server.status();
            return Err(match status.state {
                State::Up => format!(
                    "server `{id}` has no tool `{tool}` (it has: {})",
                    status.tools.join(", ")
                ),
                _ => format!(
                    "server `{id}` is {:?}: {}",
                    status.state,
                    status.last_error.unwrap_or_default()
                )
                .to_lowercase(),
            });
        };
        McpTool::new(server.clone(), listed, self.redactor.clone())
            .invoke(arguments, None)
            .await
            .map_err(|e| e.0)
    }
}

impl ToolSource for McpServers {
    fn current(&self) -> Arc<[Arc<DynamicTool>]> {
        self.tools.read().expect("tools lock").clone()
    }
}
