//! Running shell commands for the `exec` tool (SPEC sections 2, 7, 8): in a Docker container
//! per session or sandboxed subagent run ([`docker`]), or on the host when the operator allows
//! it ([`host`]). Both capture output with a cap ([`output`]), stop a command at its timeout
//! and say so in the result.
//!
//! Owns containers and processes. Must not know the engine, channels or storage: the engine
//! decides who may exec where and hands a [`Sandbox`] owner key (a session key or a run id).

pub mod docker;
pub mod host;
mod output;

pub use docker::DockerSandbox;
pub use output::{Capture, OUTPUT_CAP};

use async_trait::async_trait;
use std::path::Path;
use std::time::Duration;

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    /// Relative to the workspace (already checked to stay inside it).
    pub workdir: Option<String>,
    pub timeout: Duration,
}

/// What came of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    /// None when the command did not finish (timed out).
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Output beyond [`OUTPUT_CAP`] bytes per stream was dropped.
    pub truncated: bool,
}

impl ExecOutcome {
    /// The tool result the model reads.
    pub fn to_result(&self, timeout: Duration) -> String {
        let mut text = match (self.timed_out, self.exit_code) {
            (true, _) => format!(
                "timed out after {} s; the command was killed",
                timeout.as_secs()
            ),
            (false, Some(code)) => format!("exit code {code}"),
            (false, None) => "finished without an exit code".to_string(),
        };
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if !stream.is_empty() {
                text.push_str(&format!("\n--- {name} ---\n{stream}"));
            }
        }
        if self.truncated {
            text.push_str(&format!(
                "\n[output truncated: only the first {OUTPUT_CAP} bytes of each stream are kept]"
            ));
        }
        text
    }
}

/// Output as it arrives (a subagent's live status shows it).
#[async_trait]
pub trait OutputSink: Send + Sync {
    async fn output(&self, chunk: &str);
}

/// Whether containers can be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Not tried yet (connected on first use).
    Unknown,
    Ready,
    Unavailable(String),
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No engine, no image: nothing can run in a container.
    #[error("the sandbox is unavailable: {0}")]
    Unavailable(String),
    #[error("the sandbox failed: {0}")]
    Failed(String),
}

/// Containers keyed by an owner (a session key or a subagent run).
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// Run `request` in `owner`'s container (created on first use with `workspace` mounted).
    async fn exec(
        &self,
        owner: &str,
        workspace: &Path,
        request: &ExecRequest,
        sink: Option<&dyn OutputSink>,
    ) -> Result<ExecOutcome, SandboxError>;
    /// Remove `owner`'s container (session reset, run ended).
    async fn release(&self, owner: &str);
    /// Remove every container of this process (shutdown).
    async fn release_all(&self);
    /// Connect now if not yet (start-up); the state afterwards.
    async fn prepare(&self) -> Availability;
    fn availability(&self) -> Availability;
}
