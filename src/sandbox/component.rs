//! Running commands as a component: the `exec` tool, where it runs in `/status`, the turn's
//! [`ExecPlace`] for the tool, and a session's container let go on `/new`.

use super::{Availability, ExecPlace, ExecTool, Sandbox};
use crate::component::{CommandScope, Component, TurnScope};
use crate::storage::StoreError;
use crate::tools::{Tool, TurnHandles};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

pub struct SandboxComponent {
    sandbox: Option<Arc<dyn Sandbox>>,
    /// `sandbox.enabled` and its image (for `/status`).
    enabled: bool,
    image: String,
    /// `tools.host_exec`.
    host_exec: bool,
    /// `sandbox.timeout_secs`: the longest a command may run.
    max_timeout: Duration,
}

impl SandboxComponent {
    pub fn new(sandbox: Option<Arc<dyn Sandbox>>, config: &crate::config::Config) -> Self {
        SandboxComponent {
            sandbox,
            enabled: config.sandbox.enabled,
            image: config.sandbox.image.clone(),
            host_exec: config.tools.host_exec,
            max_timeout: Duration::from_secs(config.sandbox.timeout_secs),
        }
    }

    /// Where `exec` runs, for `/status` (None when it is off and no sandbox is configured).
    fn exec_status(&self) -> Option<String> {
        let sandbox = self.sandbox.as_ref().map(|s| s.availability());
        match (self.enabled, sandbox) {
            (true, Some(Availability::Ready)) => {
                Some(format!("sandboxed (Docker, image {})", self.image))
            }
            (true, Some(Availability::Unavailable(why))) => {
                Some(format!("unavailable — the sandbox is enabled but {why}"))
            }
            (true, _) => Some("sandboxed (Docker, not connected yet)".into()),
            (false, _) if self.host_exec => Some("on the host".into()),
            (false, _) => None,
        }
    }
}

#[async_trait]
impl Component for SandboxComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        // Always registered; each agent is offered it only where it can run.
        vec![Arc::new(ExecTool::new(self.max_timeout))]
    }

    async fn status(&self, _cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        Ok(self
            .exec_status()
            .map(|line| format!("Exec: {line}"))
            .into_iter()
            .collect())
    }

    fn prepare_turn(&self, turn: &TurnScope<'_>, handles: &mut TurnHandles) {
        if let Some(place) = &turn.persona.exec {
            handles.insert::<ExecPlace>(place.clone());
        }
    }

    /// A fresh session starts with a fresh container (the workspace stays).
    async fn session_reset(&self, session_key: &str) {
        if let Some(sandbox) = &self.sandbox {
            sandbox.release(session_key).await;
        }
    }
}
