//! `exec`: a shell command in the session's sandbox container, or on the host when
//! `tools.host_exec` allows it. Offered only where one of the two is possible: the persona
//! decides, per agent (`policy::Personas::exec_place`), and the turn hands the tool its
//! [`ExecPlace`] (and a subagent's live status) as turn handles.

use crate::exec::{ExecPlace, ExecRequest, OutputSink};
use crate::spawn::StepObserver;
use crate::tools::{Offer, Tool, ToolClass, ToolContext, ToolError, ToolRisk};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

#[derive(serde::Deserialize)]
struct ExecArgs {
    command: String,
    workdir: Option<String>,
    timeout_secs: Option<u64>,
}

/// Extra time the tool call gets beyond the command's own timeout, to report it.
const REPORT_MARGIN: Duration = Duration::from_secs(30);
/// A command's timeout when the model names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub struct ExecTool {
    /// `sandbox.timeout_secs`: the longest a command may run.
    max_timeout: Duration,
}

impl ExecTool {
    pub fn new(max_timeout: Duration) -> Self {
        ExecTool { max_timeout }
    }

    fn timeout(&self, requested: Option<u64>) -> Duration {
        requested
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(self.max_timeout)
            .max(Duration::from_secs(1))
    }
}

/// Output goes to a subagent's live status as it arrives.
struct ToObserver(Arc<dyn StepObserver>);

#[async_trait]
impl OutputSink for ToObserver {
    async fn output(&self, chunk: &str) {
        self.0.output(chunk).await;
    }
}

#[async_trait]
impl Tool for ExecTool {
    fn name(&self) -> &str {
        "exec"
    }
    fn description(&self) -> &str {
        "Run a shell command (sh -c) in your workspace folder and return its exit code, stdout and stderr \
         (each capped). It is killed when `timeout_secs` (default 60) passes."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "workdir": {"type": "string", "description": "a folder inside the workspace"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }
    fn time_limit(&self, args: &Value) -> Option<Duration> {
        Some(self.timeout(args["timeout_secs"].as_u64()) + REPORT_MARGIN)
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        offer.exec
    }
    fn in_container(&self) -> bool {
        true
    }
    /// A command runs; on the host it always asks.
    fn risk(&self, _args: &Value, cx: &ToolContext) -> ToolRisk {
        ToolRisk {
            asks: matches!(cx.handles.get::<ExecPlace>(), Some(ExecPlace::Host))
                .then(|| "`exec` runs on the host, which always asks".to_string()),
            ..ToolRisk::of(ToolClass::Exec)
        }
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let args: ExecArgs = crate::tools::typed(args)?;
        let place = cx
            .handles
            .get::<ExecPlace>()
            .ok_or_else(|| ToolError::new("exec is not available here"))?;
        let workdir = match &args.workdir {
            Some(dir) => {
                crate::tools::confine(&cx.workspace, dir)?;
                Some(dir.trim_end_matches('/').to_string())
            }
            None => None,
        };
        let request = ExecRequest {
            command: args.command,
            workdir,
            timeout: self.timeout(args.timeout_secs),
        };
        let progress = cx.handles.get::<Arc<dyn StepObserver>>();
        let sink = progress.cloned().map(ToObserver);
        let sink = sink.as_ref().map(|s| s as &dyn OutputSink);
        let outcome = match place {
            ExecPlace::Sandbox { sandbox, owner } => sandbox
                .exec(owner, &cx.workspace, &request, sink)
                .await
                .map_err(|e| ToolError(e.to_string()))?,
            ExecPlace::Host => crate::sandbox::host::run(&cx.workspace, &request, sink)
                .await
                .map_err(ToolError)?,
        };
        if let Some(progress) = progress {
            progress.output_end().await;
        }
        Ok(outcome.to_result(request.timeout))
    }
}
