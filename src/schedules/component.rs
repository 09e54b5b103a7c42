//! Scheduled jobs as a component: the `schedule` tool, `/schedules` and the count in
//! `/status`.

use super::{ScheduleHandle, ScheduleTool, show_time};
use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, Component, Reply};
use crate::storage::{JobState, JobStore, StoreError};
use crate::tools::Tool;
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[command(
    "schedules",
    "List or cancel reminders and jobs",
    Some("cancel <id>"),
    "/schedules — this chat's reminders and jobs; /schedules cancel <id>",
)];

pub struct SchedulesComponent {
    handle: ScheduleHandle,
    store: Arc<dyn JobStore>,
}

impl SchedulesComponent {
    pub fn new(handle: ScheduleHandle, store: Arc<dyn JobStore>) -> Self {
        SchedulesComponent { handle, store }
    }
}

#[async_trait]
impl Component for SchedulesComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(ScheduleTool::new(
            self.handle.clone(),
            self.store.clone(),
        ))]
    }

    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    /// `/schedules` (list) and `/schedules cancel <id>`.
    async fn command(
        &self,
        _name: &str,
        args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        let session = cx.session;
        if let Some(id) = args.strip_prefix("cancel").map(str::trim) {
            return Ok(if id.is_empty() {
                (OutboundKind::Error, "Usage: /schedules cancel <id>".into())
            } else if self.store.job_cancel(&session.key, id).await? {
                self.handle.wake();
                (OutboundKind::Status, format!("Cancelled job {id}."))
            } else {
                (
                    OutboundKind::Error,
                    format!("No active job `{id}` in this chat."),
                )
            });
        }
        let jobs = self.store.jobs_of(&session.key).await?;
        let live: Vec<String> = jobs
            .iter()
            .filter(|j| j.state == JobState::Active)
            .map(|j| {
                format!(
                    "⏰ {} — {} ({}) — next: {} — {}",
                    j.id,
                    j.spec,
                    j.kind.as_str(),
                    j.next_run.map_or("-".into(), |t| show_time(t, &j.timezone)),
                    j.prompt.chars().take(80).collect::<String>()
                )
            })
            .collect();
        Ok((
            OutboundKind::Status,
            if live.is_empty() {
                "No reminders or jobs in this chat.".into()
            } else {
                live.join("\n")
            },
        ))
    }

    async fn status(&self, cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        let jobs = self.store.jobs_live_count(&cx.session.key).await?;
        Ok(vec![format!("Scheduled jobs: {jobs} (/schedules)")])
    }
}
