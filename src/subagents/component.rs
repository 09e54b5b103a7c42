//! Subagents as a component: the spawning tools, `/subagents`, the live count in `/status`,
//! and, for each turn that may spawn, the spawn scope its tools use (where children belong,
//! what they inherit) and a subagent's live status for `exec` output.

use super::{Delegate, SessionsSpawn, SubagentsTool};
use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, Component, Reply, TurnScope};
use crate::spawn::{SpawnHandle, SpawnScope, StepObserver};
use crate::storage::StoreError;
use crate::tools::{Tool, TurnHandles};
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[command(
    "subagents",
    "List, kill or steer subagents",
    Some("kill <id|all> | steer <id> <message>"),
    "/subagents — list subagents; /subagents kill <id|all>; /subagents steer <id> <message>",
)];

pub struct SubagentsComponent;

#[async_trait]
impl Component for SubagentsComponent {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(SessionsSpawn),
            Arc::new(SubagentsTool),
            Arc::new(Delegate),
        ]
    }

    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    /// `/subagents`, `/subagents kill <id|all>`, `/subagents steer <id> <message>`.
    async fn command(
        &self,
        _name: &str,
        args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        let Some(registry) = cx.spawner else {
            return Ok((OutboundKind::Error, "Subagents are not available.".into()));
        };
        let session_key = &cx.session.key;
        let mut words = args.splitn(3, char::is_whitespace);
        Ok(
            match (words.next().unwrap_or(""), words.next(), words.next()) {
                ("" | "list", _, _) => match registry.list(session_key).await {
                    Ok(runs) if runs.is_empty() => {
                        (OutboundKind::Status, "No subagents in this session.".into())
                    }
                    Ok(runs) => {
                        let lines: Vec<String> = runs
                            .iter()
                            .map(|r| {
                                format!(
                                    "{} {} — {} ({} s, {})",
                                    r.id, r.label, r.status, r.runtime_secs, r.model
                                )
                            })
                            .collect();
                        (
                            OutboundKind::Status,
                            format!("Subagents:\n{}", lines.join("\n")),
                        )
                    }
                    Err(e) => (
                        OutboundKind::Error,
                        format!("Could not list subagents: {e}"),
                    ),
                },
                ("kill", Some(target), _) => {
                    let n = registry.kill(session_key, target);
                    let text = if n == 0 && registry.spans_processes() {
                        format!(
                            "No subagent `{target}` runs in this process; the others were told to kill it."
                        )
                    } else {
                        format!("Killing {n} subagent(s).")
                    };
                    (OutboundKind::Status, text)
                }
                ("steer", Some(target), Some(message)) => {
                    match registry.steer(session_key, target, message).await {
                        Ok(()) => (OutboundKind::Status, format!("Steered {target}.")),
                        Err(e) => (OutboundKind::Error, e.to_string()),
                    }
                }
                _ => (
                    OutboundKind::Error,
                    "Usage: /subagents, /subagents kill <id|all>, /subagents steer <id> <message>"
                        .into(),
                ),
            },
        )
    }

    async fn status(&self, cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        Ok(cx
            .spawner
            .map(|registry| {
                format!(
                    "Live subagents: {}",
                    registry.live_children(&cx.session.key)
                )
            })
            .into_iter()
            .collect())
    }

    fn prepare_turn(&self, turn: &TurnScope<'_>, handles: &mut TurnHandles) {
        let persona = turn.persona;
        if let Some(progress) = &persona.progress {
            handles.insert::<Arc<dyn StepObserver>>(progress.clone());
        }
        let Some(spawner) = persona.spawner.clone() else {
            return;
        };
        // A subagent's children announce where it was asked; a person's where they asked.
        let (origin, origin_message) = persona
            .origin
            .clone()
            .unwrap_or_else(|| (turn.route.clone(), Some(turn.message_id.to_string())));
        handles.insert(SpawnHandle {
            spawner,
            scope: Arc::new(SpawnScope {
                parent_session: turn.session_key.to_string(),
                origin,
                origin_message,
                depth: persona.depth,
                parent_model: persona.model.clone(),
                parent_system: persona.system.clone(),
                parent_tools: persona.tools.clone(),
                agent: persona.agent.clone(),
                spawned_this_turn: Default::default(),
                requester: turn.sender.map(str::to_string),
            }),
        });
    }
}
