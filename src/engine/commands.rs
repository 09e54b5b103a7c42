//! The engine's chat commands (SPEC section 4) that need no model call: `/new`, `/status`,
//! `/model`, `/help`; a feature's command goes to its component (`Component::command`).
//! The vocabulary is `crate::commands`.

use crate::commands::Command;

use super::{Engine, TurnError, TurnOutput};
use crate::component::CommandScope;
use crate::providers::ModelRef;
use crate::spawn::Spawner;
use crate::storage::SessionRow;
use ferroclaw_channel_core::OutboundKind;
use std::fmt::Write;
use std::sync::Arc;

impl Engine {
    pub(super) async fn run_command(
        &self,
        command: Command,
        session: &mut SessionRow,
        spawner: Option<&Arc<dyn Spawner>>,
        sender: Option<&str>,
    ) -> Result<TurnOutput, TurnError> {
        let now = crate::clock::now_ms();
        let agent = self.agents().of_session(&session.key).clone();
        let (kind, text) = match command {
            Command::Help => (OutboundKind::Reply, self.help.clone()),
            Command::New => {
                session.epoch = self.store.session_reset(&session.key, now).await?;
                // What the features held for the session (a container) is let go.
                for component in &self.components {
                    component.session_reset(&session.key).await;
                }
                session.summary = None;
                session.summary_upto = 0;
                (
                    OutboundKind::Status,
                    "Started a fresh session. The previous conversation is archived.".into(),
                )
            }
            Command::Status => {
                let scope = CommandScope {
                    session,
                    agent: &agent,
                    spawner,
                    sender,
                };
                let mut lines = Vec::new();
                for component in &self.components {
                    lines.extend(component.status(&scope).await?);
                }
                (
                    OutboundKind::Status,
                    self.status_text(session, &agent, &lines),
                )
            }
            Command::Model(None) => (
                OutboundKind::Status,
                format!("Model: {}", self.session_model(session)),
            ),
            Command::Model(Some(name)) => match ModelRef::parse(&name) {
                Some(model) if self.chain.knows(&model) => {
                    self.store
                        .session_set_model(&session.key, Some(&name))
                        .await?;
                    session.model = Some(name.clone());
                    (
                        OutboundKind::Status,
                        format!("Model for this session set to {model}."),
                    )
                }
                Some(model) => (
                    OutboundKind::Error,
                    format!(
                        "Unknown provider `{}`; use one of the configured providers.",
                        model.provider
                    ),
                ),
                None => (
                    OutboundKind::Error,
                    "Usage: /model <provider>/<model id>".into(),
                ),
            },
            // `/stop` is answered by the ingress while a turn runs; queued behind nothing it
            // has nothing to stop.
            Command::Stop => (OutboundKind::Status, "Nothing is running.".into()),
            Command::Plan(_) => (OutboundKind::Error, "Usage: /plan <task>".into()),
            Command::Feature { name, args } => match self.feature_commands.get(name.as_str()) {
                Some(&i) => {
                    let scope = CommandScope {
                        session,
                        agent: &agent,
                        spawner,
                        sender,
                    };
                    self.components[i].command(&name, &args, &scope).await?
                }
                None => (
                    OutboundKind::Error,
                    format!("Unknown command /{name}. Send /help for the list."),
                ),
            },
        };
        Ok(TurnOutput::reply(kind, text))
    }

    /// `/status`: the session's agent, model, usage and plan, then the features' lines.
    fn status_text(
        &self,
        session: &SessionRow,
        agent: &crate::agents::AgentProfile,
        features: &[String],
    ) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Agent: {}", agent.id);
        let _ = writeln!(out, "Session: {}", session.key);
        let _ = writeln!(out, "Model: {}", self.session_model(session));
        let fallbacks: Vec<String> = agent.fallbacks.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "Fallbacks: {}",
            if fallbacks.is_empty() {
                "none".into()
            } else {
                fallbacks.join(", ")
            }
        );
        if let Some(last) = &session.last_model {
            let _ = writeln!(out, "Last answer from: {last}");
            // Auth profiles are named by index, never by key.
            let profile = ModelRef::parse(last)
                .and_then(|m| self.chain.key_profile(&m.provider, &session.key));
            if let Some((i, n)) = profile {
                let _ = writeln!(out, "API key: profile #{i} of {n}");
            }
        }
        let _ = write!(
            out,
            "Tokens: {} in, {} out",
            session.tokens_in, session.tokens_out
        );
        let plan = session
            .plan
            .as_deref()
            .and_then(|json| serde_json::from_str::<crate::plan::Plan>(json).ok())
            .filter(|p| p.active);
        match plan {
            Some(plan) => {
                let _ = write!(out, "\nPlan: {}", plan.progress());
            }
            None => out.push_str("\nPlan: none"),
        }
        for line in features {
            out.push('\n');
            out.push_str(line);
        }
        out
    }
}
