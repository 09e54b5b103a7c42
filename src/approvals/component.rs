//! `/approvals` (this chat's "always" choices, `revoke <id>`), the help lines of `/approve`
//! and `/deny` (carried out by the ingress, before any lane: the session's lane is the one
//! waiting), and each turn's taint handle.

use super::Taint;
use super::service::Approvals;
use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, Component, Reply, TurnScope};
use crate::storage::StoreError;
use crate::tools::TurnHandles;
use async_trait::async_trait;
use ferroclaw_channel_core::{ChatKind, OutboundKind};
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[
    command(
        "approve",
        "Approve a waiting tool call",
        Some("<id> [always]"),
        "/approve <id> [always] — let a waiting tool call run (always: in this chat from now on)",
    ),
    command(
        "deny",
        "Deny a waiting tool call",
        Some("<id>"),
        "/deny <id> — refuse a waiting tool call",
    ),
    command(
        "approvals",
        "Remembered approvals in this chat",
        Some("[revoke <id>]"),
        "/approvals — this chat's remembered \"always\" choices; /approvals revoke <id> removes one",
    ),
];

pub struct ApprovalsComponent {
    approvals: Arc<Approvals>,
}

impl ApprovalsComponent {
    pub fn new(approvals: Arc<Approvals>) -> Self {
        ApprovalsComponent { approvals }
    }
}

#[async_trait]
impl Component for ApprovalsComponent {
    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    async fn command(
        &self,
        name: &str,
        args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        let route = &cx.session.route;
        if name != "approvals" {
            // `/approve` and `/deny` are carried out before any lane; one that reaches a turn
            // came through a path that does not decide (a job's text).
            return Ok((
                OutboundKind::Error,
                format!("/{name} is carried out when a person sends it."),
            ));
        }
        let mut words = args.split_whitespace();
        match (words.next(), words.next()) {
            (None, _) => {
                let rules = self.approvals.rules(route).await?;
                if rules.is_empty() {
                    return Ok((
                        OutboundKind::Status,
                        "No remembered approvals in this chat.".into(),
                    ));
                }
                let mut lines = vec!["🔐 Remembered approvals in this chat:".to_string()];
                for rule in rules {
                    let target = if rule.target.is_empty() {
                        String::new()
                    } else {
                        format!(" for {}", rule.target)
                    };
                    lines.push(format!(
                        "{}. `{}`{target} — by {}",
                        rule.id, rule.tool, rule.created_by
                    ));
                }
                lines.push("/approvals revoke <id> removes one.".into());
                Ok((OutboundKind::Status, lines.join("\n")))
            }
            (Some("revoke"), Some(id)) => {
                let Ok(id) = id.parse::<i64>() else {
                    return Ok((OutboundKind::Error, format!("`{id}` is not a number.")));
                };
                Ok(if self.approvals.revoke(route, id).await? {
                    (
                        OutboundKind::Status,
                        format!("Revoked {id}: that call asks again."),
                    )
                } else {
                    (
                        OutboundKind::Error,
                        format!("No remembered approval {id} in this chat."),
                    )
                })
            }
            _ => Ok((
                OutboundKind::Error,
                "Usage: /approvals, or /approvals revoke <id>".into(),
            )),
        }
    }

    /// The turn starts tainted when it carries files, or comes from a group member who is
    /// not an approver; one that reads a subagent's outcome is tainted by what that run read
    /// (the gate looks it up).
    fn prepare_turn(&self, turn: &TurnScope<'_>, handles: &mut TurnHandles) {
        if let Some(run) = turn.reports_run {
            handles.insert(Taint::reporting(run));
            return;
        }
        let source = if turn.attachments > 0 {
            Some("an attached file".to_string())
        } else {
            match turn.sender {
                Some(sender) if turn.route.kind == ChatKind::Group => {
                    let person = format!("{}:{sender}", turn.route.channel);
                    let agent = &turn.persona.agent.id;
                    (!self.approvals.policies().is_approver(agent, &person))
                        .then(|| format!("a group message from {person}, who is not an approver"))
                }
                _ => None,
            }
        };
        handles.insert(Taint::new(source));
    }
}
