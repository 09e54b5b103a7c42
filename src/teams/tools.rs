//! `team_tasks` and `team_message` (SPEC section 12): the board and the inbox of the teams
//! the calling agent belongs to (`crate::teams`). Offered only to team members. An assigned
//! task whose blockers are all done is claimed for its assignee and started as a run of that
//! agent (through the turn's spawner), at most once (the claim is a compare-and-set on the
//! stored status).

use crate::spawn::{SpawnHandle, SpawnRequest, SpawnScope};
use crate::storage::{NewTeamTask, TaskComment, TaskOrigin, TeamStore, TeamTask, TeamTaskStatus};
use crate::teams::{Team, Teams, task_json, unblocked};
use crate::tools::{Offer, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;

/// What a team tool works with in one call: the turn, the board's store, the calling
/// agent's teams and the turn's spawner (to start ready tasks).
struct TeamCx<'a> {
    turn: &'a ToolContext,
    store: &'a dyn TeamStore,
    teams: Arc<[Arc<Team>]>,
    spawn: Option<&'a SpawnHandle>,
}

impl<'a> TeamCx<'a> {
    fn new(tool: &'a TeamTool, turn: &'a ToolContext) -> Self {
        TeamCx {
            turn,
            store: &*tool.store,
            teams: tool.teams.of(&turn.agent_id),
            spawn: turn.handles.get::<SpawnHandle>(),
        }
    }
}

impl std::ops::Deref for TeamCx<'_> {
    type Target = ToolContext;
    fn deref(&self) -> &ToolContext {
        self.turn
    }
}

/// What both team tools are built with.
pub struct TeamTool {
    teams: Arc<Teams>,
    store: Arc<dyn TeamStore>,
}

impl TeamTool {
    pub fn new(teams: Arc<Teams>, store: Arc<dyn TeamStore>) -> Self {
        TeamTool { teams, store }
    }

    fn offered_to(&self, offer: &Offer<'_>) -> bool {
        !self.teams.of(&offer.agent.id).is_empty()
    }
}

fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError(format!("the board could not be read or written: {e}"))
}

/// The team a call means: the one named, or the agent's only team.
fn team<'a>(cx: &'a TeamCx<'_>, named: Option<&str>) -> Result<&'a Arc<Team>, ToolError> {
    let ids = || {
        cx.teams
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match named {
        Some(id) => {
            cx.teams.iter().find(|t| t.id == id).ok_or_else(|| {
                ToolError(format!("you are not in team `{id}`; your teams: {}", ids()))
            })
        }
        None if cx.teams.len() == 1 => Ok(&cx.teams[0]),
        None if cx.teams.is_empty() => Err(ToolError::new("you are not in a team")),
        None => Err(ToolError(format!(
            "field `team`: you are in several teams ({}); name one",
            ids()
        ))),
    }
}

/// `team_tasks` arguments.
#[derive(serde::Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
enum TaskArgs {
    Create {
        team: Option<String>,
        title: String,
        #[serde(default)]
        description: String,
        assignee: Option<String>,
        #[serde(default)]
        blocked_by: Vec<i64>,
    },
    List {
        team: Option<String>,
    },
    Claim {
        team: Option<String>,
        task_id: i64,
    },
    Update {
        team: Option<String>,
        task_id: i64,
        assignee: Option<String>,
        status: Option<String>,
    },
    Complete {
        team: Option<String>,
        task_id: i64,
        result: String,
    },
    Comment {
        team: Option<String>,
        task_id: i64,
        text: String,
    },
}

pub struct TeamTasks(pub TeamTool);

#[async_trait]
impl Tool for TeamTasks {
    fn name(&self) -> &str {
        "team_tasks"
    }
    fn risk(&self, _args: &Value, _cx: &crate::tools::ToolContext) -> crate::tools::ToolRisk {
        crate::tools::ToolRisk::of(crate::tools::ToolClass::Spawn)
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        self.0.offered_to(offer)
    }
    fn description(&self) -> &str {
        "Your team's task board. create (title, description, assignee = a member, blocked_by = task ids it \
         waits for): an assigned task starts as soon as nothing blocks it; list; claim (task_id); update \
         (task_id, assignee or status open|in_progress); complete (task_id, result); comment (task_id, text)."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "list", "claim", "update", "complete", "comment"]},
                "team": {"type": "string"},
                "title": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "assignee": {"type": "string"},
                "blocked_by": {"type": "array", "items": {"type": "integer"}},
                "task_id": {"type": "integer"},
                "status": {"type": "string", "enum": ["open", "in_progress"]},
                "result": {"type": "string"},
                "text": {"type": "string", "minLength": 1}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let cx = &TeamCx::new(&self.0, cx);
        let me = cx.agent_id.as_str();
        let now = crate::clock::now_ms();
        match crate::tools::typed(args)? {
            TaskArgs::Create {
                team: named,
                title,
                description,
                assignee,
                blocked_by,
            } => {
                let team = team(cx, named.as_deref())?;
                if let Some(who) = &assignee
                    && !team.members.contains(who)
                {
                    return Err(ToolError(format!(
                        "field `assignee`: `{who}` is not in team `{}` (members: {})",
                        team.id,
                        team.members.join(", ")
                    )));
                }
                let board = cx.store.team_tasks(&team.id).await.map_err(failed)?;
                if let Some(id) = blocked_by
                    .iter()
                    .find(|id| !board.iter().any(|t| t.id == **id))
                {
                    return Err(ToolError(format!(
                        "field `blocked_by`: there is no task #{id}"
                    )));
                }
                let origin = cx.spawn.map(|handle| TaskOrigin {
                    session: handle.scope.parent_session.clone(),
                    route: handle.scope.origin.clone(),
                    message: handle.scope.origin_message.clone(),
                });
                let task = NewTeamTask {
                    team: team.id.clone(),
                    title,
                    description,
                    assignee,
                    blocked_by,
                    created_by: me.to_string(),
                    origin,
                };
                let created = cx
                    .store
                    .team_task_create(&task, now)
                    .await
                    .map_err(failed)?;
                let started = start_ready(cx, team).await?;
                Ok(json!({"task": task_json(&created), "started": started}).to_string())
            }
            TaskArgs::List { team: named } => {
                let team = team(cx, named.as_deref())?;
                let board = cx.store.team_tasks(&team.id).await.map_err(failed)?;
                Ok(Value::Array(board.iter().map(task_json).collect()).to_string())
            }
            TaskArgs::Claim {
                team: named,
                task_id,
            } => {
                let team = team(cx, named.as_deref())?;
                let (board, mut task) = board_with(cx, team, task_id).await?;
                if task.status != TeamTaskStatus::Open {
                    return Err(ToolError(format!(
                        "task #{task_id} is {} (owner: {})",
                        task.status,
                        task.owner.as_deref().unwrap_or("none")
                    )));
                }
                if !unblocked(&task, &board) {
                    return Err(ToolError(format!(
                        "task #{task_id} waits for {:?} to be done",
                        task.blocked_by
                    )));
                }
                task.status = TeamTaskStatus::InProgress;
                task.owner = Some(me.to_string());
                save(cx, &task, TeamTaskStatus::Open, now).await?;
                Ok(task_json(&task).to_string())
            }
            TaskArgs::Update {
                team: named,
                task_id,
                assignee,
                status,
            } => {
                let team = team(cx, named.as_deref())?;
                let (_, mut task) = board_with(cx, team, task_id).await?;
                let expected = task.status;
                if expected == TeamTaskStatus::Done {
                    return Err(ToolError(format!("task #{task_id} is already done")));
                }
                if let Some(who) = assignee {
                    if !team.members.contains(&who) {
                        return Err(ToolError(format!(
                            "field `assignee`: `{who}` is not in team `{}`",
                            team.id
                        )));
                    }
                    task.assignee = Some(who);
                }
                if let Some(status) = status.as_deref().and_then(TeamTaskStatus::parse) {
                    task.status = status;
                    if status == TeamTaskStatus::Open {
                        task.owner = None;
                    }
                }
                save(cx, &task, expected, now).await?;
                let started = start_ready(cx, team).await?;
                Ok(json!({"task": task_json(&task), "started": started}).to_string())
            }
            TaskArgs::Complete {
                team: named,
                task_id,
                result,
            } => {
                let team = team(cx, named.as_deref())?;
                let (_, mut task) = board_with(cx, team, task_id).await?;
                let expected = task.status;
                if expected == TeamTaskStatus::Done {
                    return Err(ToolError(format!("task #{task_id} is already done")));
                }
                task.status = TeamTaskStatus::Done;
                task.owner = Some(me.to_string());
                task.result = Some(result);
                save(cx, &task, expected, now).await?;
                // Tasks that waited for this one may start now.
                let started = start_ready(cx, team).await?;
                Ok(json!({"task": task_json(&task), "started": started}).to_string())
            }
            TaskArgs::Comment {
                team: named,
                task_id,
                text,
            } => {
                let team = team(cx, named.as_deref())?;
                let (_, mut task) = board_with(cx, team, task_id).await?;
                let expected = task.status;
                task.comments.push(TaskComment {
                    agent: me.to_string(),
                    text,
                });
                save(cx, &task, expected, now).await?;
                Ok(task_json(&task).to_string())
            }
        }
    }
}

/// A team's board, and a copy of its task `id` to change.
async fn board_with(
    cx: &TeamCx<'_>,
    team: &Team,
    id: i64,
) -> Result<(Vec<TeamTask>, TeamTask), ToolError> {
    let board = cx.store.team_tasks(&team.id).await.map_err(failed)?;
    let task = board
        .iter()
        .find(|t| t.id == id)
        .cloned()
        .ok_or_else(|| ToolError(format!("field `task_id`: there is no task #{id}")))?;
    Ok((board, task))
}

async fn save(
    cx: &TeamCx<'_>,
    task: &TeamTask,
    expected: TeamTaskStatus,
    now: i64,
) -> Result<(), ToolError> {
    if cx
        .store
        .team_task_save(task, expected, now)
        .await
        .map_err(failed)?
    {
        Ok(())
    } else {
        Err(ToolError(format!(
            "task #{} changed meanwhile; list the board and try again",
            task.id
        )))
    }
}

/// Claim and start every assigned, unblocked, open task of `team` as a run of its assignee,
/// in the chat and thread the task came from. Returns the ids started.
async fn start_ready(cx: &TeamCx<'_>, team: &Team) -> Result<Vec<i64>, ToolError> {
    let Some(handle) = cx.spawn else {
        return Ok(Vec::new());
    };
    let board = cx.store.team_tasks(&team.id).await.map_err(failed)?;
    let mut started = Vec::new();
    for task in &board {
        let (Some(assignee), Some(origin)) = (&task.assignee, &task.origin) else {
            continue;
        };
        if task.status != TeamTaskStatus::Open || !unblocked(task, &board) {
            continue;
        }
        let mut claimed = task.clone();
        claimed.status = TeamTaskStatus::InProgress;
        claimed.owner = Some(assignee.clone());
        let now = crate::clock::now_ms();
        if !cx
            .store
            .team_task_save(&claimed, TeamTaskStatus::Open, now)
            .await
            .map_err(failed)?
        {
            continue; // another call claimed it first
        }
        // The run belongs to the session that created the task (the lead's), like a
        // subagent it spawned.
        let scope = SpawnScope {
            parent_session: origin.session.clone(),
            origin: origin.route.clone(),
            origin_message: origin.message.clone(),
            depth: 0,
            spawned_this_turn: Default::default(),
            ..(*handle.scope).clone()
        };
        let request = SpawnRequest {
            task: task_text(task, &board),
            label: Some(format!("{} #{}", team.id, task.id)),
            agent_id: Some(assignee.clone()),
            team: Some(team.id.clone()),
            work: crate::spawn::RunWork::TeamTask,
            ..SpawnRequest::default()
        };
        match handle.spawner.spawn(&scope, request).await {
            Ok(_) => started.push(task.id),
            Err(e) => {
                // Give the task back so it can be started again.
                let _ = cx
                    .store
                    .team_task_save(task, TeamTaskStatus::InProgress, now)
                    .await;
                return Err(ToolError(format!("task #{} could not start: {e}", task.id)));
            }
        }
    }
    Ok(started)
}

/// What a member's run is asked to do for a task.
fn task_text(task: &TeamTask, board: &[TeamTask]) -> String {
    let mut text = format!(
        "Team task #{} of team `{}`: {}\n{}",
        task.id, task.team, task.title, task.description
    );
    for id in &task.blocked_by {
        if let Some(done) = board.iter().find(|t| t.id == *id) {
            text.push_str(&format!(
                "\nResult of task #{id} ({}): {}",
                done.title,
                done.result.as_deref().unwrap_or("(none)")
            ));
        }
    }
    text.push_str(&format!(
        "\nWhen it is finished, record the result with team_tasks (action complete, task_id {}). \
         Teammates' messages: team_message (action read).",
        task.id
    ));
    text
}

/// `team_message` arguments.
#[derive(serde::Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
enum MessageArgs {
    Send {
        team: Option<String>,
        to: String,
        text: String,
    },
    Read {
        team: Option<String>,
    },
}

pub struct TeamMessageTool(pub TeamTool);

#[async_trait]
impl Tool for TeamMessageTool {
    fn name(&self) -> &str {
        "team_message"
    }
    fn offered(&self, offer: &Offer<'_>) -> bool {
        self.0.offered_to(offer)
    }
    fn description(&self) -> &str {
        "Your team's inbox: send (to = a member or all, text) or read your unread messages."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["send", "read"]},
                "team": {"type": "string"},
                "to": {"type": "string"},
                "text": {"type": "string", "minLength": 1}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let cx = &TeamCx::new(&self.0, cx);
        let me = cx.agent_id.as_str();
        let now = crate::clock::now_ms();
        match crate::tools::typed(args)? {
            MessageArgs::Send {
                team: named,
                to,
                text,
            } => {
                let team = team(cx, named.as_deref())?;
                let recipients: Vec<String> = if to == "all" {
                    team.members.iter().filter(|m| *m != me).cloned().collect()
                } else if team.members.contains(&to) {
                    vec![to]
                } else {
                    return Err(ToolError(format!(
                        "field `to`: `{to}` is not in team `{}` (members: {})",
                        team.id,
                        team.members.join(", ")
                    )));
                };
                cx.store
                    .team_message_send(&team.id, me, &recipients, &text, now)
                    .await
                    .map_err(failed)?;
                Ok(format!("sent to {}", recipients.join(", ")))
            }
            MessageArgs::Read { team: named } => {
                let team = team(cx, named.as_deref())?;
                let messages = cx
                    .store
                    .team_inbox_take(&team.id, me, now)
                    .await
                    .map_err(failed)?;
                Ok(Value::Array(
                    messages
                        .iter()
                        .map(|m| json!({"from": m.sender, "text": m.text}))
                        .collect(),
                )
                .to_string())
            }
        }
    }
}
