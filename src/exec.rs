//! The seam between turns and where commands run: the [`Sandbox`] contract (containers
//! keyed by an owner), what a command is and what came of it, and [`ExecPlace`], where a
//! persona's `exec` runs. `crate::policy` decides the place; `crate::sandbox` implements the
//! containers and the host runner and holds the `exec` tool. Knows nothing else.

use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of each output stream kept; the rest is dropped and the result says so.
pub const OUTPUT_CAP: usize = 16 * 1024;

/// Where a turn's `exec` runs.
#[derive(Clone)]
pub enum ExecPlace {
    /// In `owner`'s container.
    Sandbox {
        sandbox: Arc<dyn Sandbox>,
        owner: String,
    },
    Host,
}

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
