//! Runs a stop left unfinished: resumed where they were, in this process, whether the stop
//! was this process's own restart or another process's death (its leases expired).
//!
//! A run's row keeps what it runs with ([`StoredSpec`]), the step it is on and that step's
//! input while it runs. Resuming redoes that step with the step's recorded side effects
//! replayed (`tool_effects` under `r<run id>:<step>`, as a user's redone turn replays its
//! own), or, when the step had committed, takes up after it: the step's reply is the
//! result, unless the run waits for its children or (session mode) for instructions. A
//! run is claimed with one conditional UPDATE, so of several processes exactly one resumes
//! it; one started [`MAX_RUN_STARTS`] times without ending (it may be what kills the
//! process) is announced as interrupted instead, once, like a run stored before runs could
//! be resumed or one whose agent or model is no longer configured.

use super::{LiveRun, Registry, RunOrigin, RunRef, RunSpec, Start, runner};
use crate::providers::ModelRef;
use crate::spawn::RunWork;
use crate::storage::{RunMode, RunRow, RunState, StoreError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A run started this many times without ending is not started again.
pub const MAX_RUN_STARTS: i64 = 3;

/// What a run runs with beyond its row's columns, as stored in `runs.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredSpec {
    pub system: String,
    pub tools: Vec<String>,
    pub sandbox: bool,
    pub timeout_secs: u64,
    /// The person the tree works for (absent in runs stored before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// What the run does for its parent (absent: a `sessions_spawn` run, or one stored before
    /// it was kept).
    #[serde(default, skip_serializing_if = "RunWork::is_subagent")]
    pub work: RunWork,
}

impl StoredSpec {
    /// The requester kept in a run row's spec.
    pub fn requester_of(row: &RunRow) -> Option<String> {
        row.spec
            .as_deref()
            .and_then(|json| serde_json::from_str::<StoredSpec>(json).ok())
            .and_then(|spec| spec.requester)
    }
}

impl StoredSpec {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a spec is plain data")
    }
}

impl Registry {
    /// Take over the runs a stop left unfinished whose origin chat is on one of `channels`
    /// (this process can deliver there): resume each, or announce it as interrupted (once).
    /// With leases (several processes), only runs whose lease expired. Logs what it took.
    pub async fn recover(self: &Arc<Self>, channels: &[String]) -> Result<(), StoreError> {
        let now = crate::clock::now_ms();
        let expired = self.lease.map(|_| now);
        let lease_until = self.lease.map(|lease| now + lease.as_millis() as i64);
        let rows = self.store.runs_unannounced(expired).await?;
        let (mut resumed, mut interrupted) = (0, 0);
        for row in rows {
            if !channels.contains(&row.origin_route.channel)
                || self
                    .live
                    .lock()
                    .expect("registry lock")
                    .contains_key(&row.id)
            {
                continue;
            }
            let Some(starts) = self.store.run_claim(&row.id, expired, lease_until).await? else {
                continue; // another process took it first
            };
            match self.resumable(&row, starts) {
                Ok(spec) => {
                    self.resume(&row, spec);
                    resumed += 1;
                }
                Err(why) => {
                    let ending = runner::Ending::from(&row);
                    runner::finish(self, &ending, RunState::Interrupted, why).await?;
                    interrupted += 1;
                }
            }
        }
        if resumed + interrupted > 0 {
            tracing::info!(
                resumed,
                interrupted,
                "took over subagent runs a stop left unfinished"
            );
        }
        Ok(())
    }

    /// The run's spec rebuilt from its row, or why it cannot be resumed.
    fn resumable(&self, row: &RunRow, starts: i64) -> Result<RunSpec, String> {
        let stopped = "The service restarted while this subagent ran";
        let stored: StoredSpec = row
            .spec
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| format!("{stopped}; it did not finish."))?;
        if starts > MAX_RUN_STARTS {
            return Err(format!(
                "{stopped} {MAX_RUN_STARTS} times; it is not started again."
            ));
        }
        let agent = self
            .engine
            .agents()
            .get(&row.agent)
            .cloned()
            .ok_or_else(|| format!("{stopped}, and its agent `{}` is gone.", row.agent))?;
        let model = ModelRef::parse(&row.model)
            .filter(|model| self.engine.personas().knows_model(model))
            .ok_or_else(|| format!("{stopped}, and its model `{}` is gone.", row.model))?;
        Ok(RunSpec {
            id: row.id.clone(),
            agent,
            label: row.label.clone(),
            task: row.task.clone(),
            system: stored.system,
            model,
            tools: stored.tools,
            session_mode: row.mode == RunMode::Session,
            sandbox: stored.sandbox,
            timeout: Duration::from_secs(stored.timeout_secs.max(1)),
            depth: u32::try_from(row.depth).unwrap_or(1),
            origin: RunOrigin {
                parent_session: row.parent_session.clone(),
                route: row.origin_route.clone(),
                message: row.origin_message.clone(),
            },
            status_message: row.status_message,
            start: Start::Resumed {
                step: row.step.max(1),
                input: row.step_input.clone(),
            },
            requester: stored.requester,
            work: stored.work,
        })
    }

    /// Register a claimed run as live here and run it from where it stopped.
    fn resume(self: &Arc<Self>, row: &RunRow, spec: RunSpec) {
        // Whoever waited for it stopped with the process: its outcome is announced.
        let (live, inputs) = LiveRun::new(
            RunRef {
                id: &row.id,
                agent: &row.agent,
                parent_session: &row.parent_session,
                label: &row.label,
            },
            super::DETACHED,
        );
        self.live
            .lock()
            .expect("registry lock")
            .insert(row.id.clone(), live.clone());
        tracing::info!(run_id = %row.id, label = %row.label, step = row.step, starts = row.starts + 1, "subagent resumed");
        self.launch(live, spec, inputs);
    }
}

/// A stored run's ending (a restart reports it as interrupted).
impl<'a> From<&'a RunRow> for runner::Ending<'a> {
    fn from(row: &'a RunRow) -> Self {
        runner::Ending {
            to_waiter: false,
            id: &row.id,
            label: &row.label,
            parent_session: &row.parent_session,
            origin_route: &row.origin_route,
            origin_message: row.origin_message.as_deref(),
            depth: row.depth,
            status_message: row.status_message,
            requester: StoredSpec::requester_of(row),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StoredSpec;

    #[test]
    fn a_stored_spec_reads_back_as_written() {
        let spec = StoredSpec {
            system: "be brief".into(),
            tools: vec!["exec".into(), "message".into()],
            sandbox: true,
            timeout_secs: 90,
            requester: Some("7".into()),
            work: crate::spawn::RunWork::Delegate,
        };
        let back: StoredSpec = serde_json::from_str(&spec.to_json()).unwrap();
        assert_eq!(back, spec);
        // A spec stored before the requester was kept reads back without one.
        let old = r#"{"system":"s","tools":[],"sandbox":false,"timeout_secs":5}"#;
        let old: StoredSpec = serde_json::from_str(old).unwrap();
        assert_eq!(old.requester, None);
        assert_eq!(old.work, crate::spawn::RunWork::Subagent);
    }
}
