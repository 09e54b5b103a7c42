//! Teams (SPEC section 12): `[teams.ID]` with a lead and members. Members share a task board
//! (`team_tasks`) and an inbox (`team_message`); agents outside every team see neither tool.
//! An assigned task whose blockers are all done is started as a run of its assignee (a
//! subagent like any other, announced in the lead's chat and thread exactly once).
//!
//! Owns the membership rule and the board's texts; the board itself is stored
//! (`storage::TeamStore`), the tools are `tools.rs`. Knows the config; not
//! the engine.

mod component;
mod tools;
pub use component::{COMMANDS, TeamsComponent};
pub use tools::{TeamMessageTool, TeamTasks, TeamTool};

use crate::config::Config;
use crate::storage::{TeamTask, TeamTaskStatus};
use std::fmt::Write;
use std::sync::Arc;

/// One team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    pub id: String,
    pub lead: String,
    /// Every member, the lead first.
    pub members: Vec<String>,
}

/// Every configured team.
#[derive(Debug, Default)]
pub struct Teams {
    teams: Vec<Arc<Team>>,
}

impl Teams {
    pub fn from_config(config: &Config) -> Self {
        let teams = config
            .teams
            .iter()
            .map(|(id, team)| {
                let mut members = vec![team.lead.clone()];
                members.extend(team.members.iter().filter(|m| **m != team.lead).cloned());
                Arc::new(Team {
                    id: id.clone(),
                    lead: team.lead.clone(),
                    members,
                })
            })
            .collect();
        Teams { teams }
    }

    /// The teams `agent` is a member of.
    pub fn of(&self, agent: &str) -> Arc<[Arc<Team>]> {
        self.teams
            .iter()
            .filter(|t| t.members.iter().any(|m| m == agent))
            .cloned()
            .collect()
    }

    pub fn all(&self) -> &[Arc<Team>] {
        &self.teams
    }
}

impl crate::policy::Teammates for Teams {
    fn in_team(&self, agent: &str, team: &str) -> bool {
        self.teams
            .iter()
            .any(|t| t.id == team && t.members.iter().any(|m| m == agent))
    }
}

/// A task as the tools and the admin API show it.
pub fn task_json(task: &TeamTask) -> serde_json::Value {
    serde_json::json!({"id": task.id, "title": task.title, "description": task.description,
        "status": task.status.as_str(), "assignee": task.assignee, "owner": task.owner,
        "blocked_by": task.blocked_by, "result": task.result, "created_by": task.created_by,
        "comments": task.comments.iter().map(|c| serde_json::json!({"agent": c.agent, "text": c.text})).collect::<Vec<_>>(),
        "created_at": task.created_at, "updated_at": task.updated_at})
}

/// Whether every task `task` waits for is done.
pub fn unblocked(task: &TeamTask, board: &[TeamTask]) -> bool {
    task.blocked_by.iter().all(|id| {
        board
            .iter()
            .any(|t| t.id == *id && t.status == TeamTaskStatus::Done)
    })
}

/// The board as `/team` shows it.
pub fn board_text(team: &Team, board: &[TeamTask]) -> String {
    let mut out = format!("👥 Team {} (lead: {})", team.id, team.lead);
    if board.is_empty() {
        out.push_str("\nNo tasks yet.");
    }
    for task in board {
        let marker = match task.status {
            TeamTaskStatus::Done => "✅",
            TeamTaskStatus::InProgress => "→",
            TeamTaskStatus::Open if !unblocked(task, board) => "⏸",
            TeamTaskStatus::Open => "○",
        };
        let _ = write!(out, "\n{marker} #{} {}", task.id, task.title);
        if let Some(who) = task.owner.as_ref().or(task.assignee.as_ref()) {
            let _ = write!(out, " ({who})");
        }
        if task.status == TeamTaskStatus::Open && !task.blocked_by.is_empty() {
            let ids: Vec<String> = task.blocked_by.iter().map(|i| format!("#{i}")).collect();
            let _ = write!(out, " — waits for {}", ids.join(", "));
        }
        if let Some(result) = &task.result {
            let short: String = result.chars().take(160).collect();
            let _ = write!(out, " — {short}");
        }
    }
    out
}
