//! `schedule` (create, list, cancel): reminders and recurring jobs that post into the chat
//! and thread they came from (`crate::schedules`). The result of `create` is the stored job,
//! so the model cannot claim a job it did not save. Limits: active jobs per session, jobs a
//! job's own turn may create, and how many job turns in a row may lead to a new job.

use crate::schedules::{self, first_run, job_json};
use crate::storage::{Job, JobState, MissedPolicy};
use crate::tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};

#[derive(serde::Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
enum Args {
    Create {
        prompt: String,
        at: Option<String>,
        #[serde(rename = "in")]
        within: Option<String>,
        cron: Option<String>,
        timezone: Option<String>,
        #[serde(default)]
        heartbeat: bool,
        session: Option<String>,
        missed: Option<String>,
    },
    List,
    Cancel {
        id: String,
    },
}

fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError(format!("the schedule could not be read or written: {e}"))
}

pub struct ScheduleTool {
    schedules: schedules::ScheduleHandle,
    store: std::sync::Arc<dyn crate::storage::JobStore>,
}

impl ScheduleTool {
    pub fn new(
        schedules: schedules::ScheduleHandle,
        store: std::sync::Arc<dyn crate::storage::JobStore>,
    ) -> Self {
        ScheduleTool { schedules, store }
    }
}

#[async_trait]
impl Tool for ScheduleTool {
    fn name(&self) -> &str {
        "schedule"
    }
    fn for_children(&self) -> bool {
        false
    }
    fn description(&self) -> &str {
        "Reminders and recurring jobs that post into this chat. create: prompt (what to do or say when it \
         is due) and one of at (\"2026-12-01 09:00\", \"09:00\"), in (\"20 minutes\") or cron (\"0 9 * * 1\"); \
         optional timezone (IANA), heartbeat (a recurring check that stays silent when there is nothing \
         to report), session (own | origin: run in this conversation), missed (run_once | skip). \
         list; cancel (id). The result is the stored job."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "list", "cancel"]},
                "prompt": {"type": "string", "minLength": 1},
                "at": {"type": "string"},
                "in": {"type": "string"},
                "cron": {"type": "string"},
                "timezone": {"type": "string"},
                "heartbeat": {"type": "boolean"},
                "session": {"type": "string", "enum": ["own", "origin"]},
                "missed": {"type": "string", "enum": ["run_once", "skip"]},
                "id": {"type": "string"}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let limits = &self.schedules.config;
        // A job's own turn: the job it runs for (its session owns what it creates).
        let parent = match cx.job.as_deref() {
            Some(id) => self.store.job_get(id).await.map_err(failed)?,
            None => None,
        };
        let owner = parent
            .as_ref()
            .map_or(cx.session_key.clone(), |p| p.session_key.clone());
        match crate::tools::typed(args)? {
            Args::List => {
                let jobs = self.store.jobs_of(&owner).await.map_err(failed)?;
                let live: Vec<Value> = jobs
                    .iter()
                    .filter(|j| j.state == JobState::Active)
                    .map(job_json)
                    .collect();
                Ok(Value::Array(live).to_string())
            }
            Args::Cancel { id } => {
                if self.store.job_cancel(&owner, &id).await.map_err(failed)? {
                    self.schedules.wake();
                    Ok(format!("cancelled job {id}"))
                } else {
                    Err(ToolError(format!(
                        "no active job `{id}` in this conversation"
                    )))
                }
            }
            Args::Create {
                prompt,
                at,
                within,
                cron,
                timezone,
                heartbeat,
                session,
                missed,
            } => {
                let zone_name = timezone.unwrap_or_else(|| {
                    self.schedules
                        .zone_for(&cx.route.channel, cx.sender.as_deref().unwrap_or_default())
                });
                let zone = schedules::zone(&zone_name)
                    .map_err(|e| ToolError(format!("field `timezone`: {e}")))?;
                let (kind, spec, next) = first_run(
                    at.as_deref(),
                    within.as_deref(),
                    cron.as_deref(),
                    &zone,
                    jiff::Timestamp::now(),
                )
                .map_err(ToolError)?;
                if kind == crate::storage::JobKind::Cron {
                    let min_ms = limits.min_interval_secs.saturating_mul(1000) as i64;
                    let gap = schedules::shortest_gap(&spec, &zone, next - 1, 24);
                    if gap.is_some_and(|gap| gap < min_ms) {
                        return Err(ToolError(format!(
                            "field `cron`: `{spec}` runs {} s apart; the shortest interval allowed is {} s (schedules.min_interval_secs)",
                            gap.unwrap_or_default() / 1000,
                            limits.min_interval_secs
                        )));
                    }
                }
                let live = self.store.jobs_live_count(&owner).await.map_err(failed)?;
                if live >= i64::from(limits.max_per_session) {
                    return Err(ToolError(format!(
                        "refused: this conversation already has {live} active jobs (schedules.max_per_session); cancel one first"
                    )));
                }
                let chain = match &parent {
                    Some(parent) => {
                        let made = self
                            .store
                            .jobs_created_in(cx.in_reply_to.as_deref().unwrap_or_default())
                            .await
                            .map_err(failed)?;
                        if made >= i64::from(limits.max_per_job_turn) {
                            return Err(ToolError(format!(
                                "refused: a scheduled job's turn may create {} job(s) (schedules.max_per_job_turn)",
                                limits.max_per_job_turn
                            )));
                        }
                        if parent.chain + 1 > i64::from(limits.max_chain) {
                            return Err(ToolError(format!(
                                "refused: this job was scheduled by {} job runs in a row (schedules.max_chain); \
                                 a person must ask for the next one",
                                parent.chain
                            )));
                        }
                        parent.chain + 1
                    }
                    None => 0,
                };
                let id = schedules::new_job_id();
                let job = Job {
                    id,
                    session_key: owner,
                    agent: crate::agents::agent_of(&cx.session_key)
                        .unwrap_or(crate::agents::MAIN)
                        .to_string(),
                    origin_route: cx.route.clone(),
                    // A job's message id is not the platform's: replies refer to none.
                    origin_message: match &parent {
                        Some(parent) => parent.origin_message.clone(),
                        None => cx.in_reply_to.clone(),
                    },
                    kind,
                    spec,
                    timezone: zone_name,
                    prompt,
                    in_origin: session.as_deref() == Some("origin"),
                    heartbeat,
                    missed: missed
                        .as_deref()
                        .and_then(MissedPolicy::parse)
                        .unwrap_or(MissedPolicy::RunOnce),
                    state: JobState::Active,
                    next_run: Some(next),
                    runs: 0,
                    last_run: None,
                    chain,
                    created_in: cx.in_reply_to.clone().unwrap_or_default(),
                    created_at: crate::clock::now_ms(),
                };
                self.store.job_insert(&job).await.map_err(failed)?;
                self.schedules.wake();
                Ok(job_json(&job).to_string())
            }
        }
    }
}
