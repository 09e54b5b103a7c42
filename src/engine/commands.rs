//! Chat commands (SPEC section 4): parsing and the ones that need no model call.

use super::{Engine, TurnError, TurnOutput};
use crate::providers::ModelRef;
use crate::spawn::Spawner;
use crate::storage::SessionRow;
use ferroclaw_channel_core::{ChatCommand, OutboundKind};
use std::fmt::Write;
use std::sync::Arc;

pub const HELP_TEXT: &str = "Commands:\n\
/plan <task> — plan first, then execute\n\
/new, /reset — start a fresh session for this chat (the old transcript is archived)\n\
/stop — abort the running turn of this session and its subagents\n\
/status — model, fallbacks, token usage, plan progress, live subagents\n\
/model [provider/model] — show or set this session's model\n\
/subagents — list subagents; /subagents kill <id|all>; /subagents steer <id> <message>\n\
/team — the task boards of this agent's teams\n\
/schedules — this chat's reminders and jobs; /schedules cancel <id>\n\
/help — this list";

/// Commands as platforms register them.
pub const COMMANDS: &[ChatCommand] = &[
    command("plan", "Plan first, then execute a task", Some("task")),
    command("new", "Start a fresh session", None),
    command("reset", "Start a fresh session", None),
    command("stop", "Stop the running turn and its subagents", None),
    command("status", "Model, usage, plan and subagents", None),
    command("model", "Show or set this chat's model", Some("model")),
    command(
        "subagents",
        "List, kill or steer subagents",
        Some("kill <id|all> | steer <id> <message>"),
    ),
    command("team", "Show the team task boards", None),
    command(
        "schedules",
        "List or cancel reminders and jobs",
        Some("cancel <id>"),
    ),
    command("help", "List the commands", None),
];

const fn command(
    name: &'static str,
    description: &'static str,
    argument: Option<&'static str>,
) -> ChatCommand {
    ChatCommand {
        name,
        description,
        argument,
    }
}

/// A parsed chat command. Closed set: every command the product defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Plan(String),
    New,
    Stop,
    Status,
    Model(Option<String>),
    Subagents(String),
    Team,
    Schedules(String),
    Help,
    Unknown(String),
}

impl Command {
    /// `None` when the text is not a command (does not start with `/`).
    pub fn parse(text: &str) -> Option<Command> {
        let rest = text.strip_prefix('/')?;
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        // Telegram appends @botname in groups: `/status@ferroclaw_bot`.
        let name = name.split('@').next().unwrap_or(name).to_ascii_lowercase();
        let args = args.trim().to_string();
        Some(match name.as_str() {
            "plan" => Command::Plan(args),
            "new" | "reset" => Command::New,
            "stop" => Command::Stop,
            "status" => Command::Status,
            "model" => Command::Model((!args.is_empty()).then_some(args)),
            "subagents" => Command::Subagents(args),
            "team" => Command::Team,
            "schedules" => Command::Schedules(args),
            "help" | "start" => Command::Help,
            _ => Command::Unknown(name),
        })
    }
}

impl Engine {
    pub(super) async fn run_command(
        &self,
        command: Command,
        session: &mut SessionRow,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> Result<TurnOutput, TurnError> {
        let now = crate::clock::now_ms();
        let (kind, text) = match command {
            Command::Help => (OutboundKind::Reply, HELP_TEXT.to_string()),
            Command::New => {
                session.epoch = self.store.session_reset(&session.key, now).await?;
                // A fresh session starts with a fresh container (the workspace stays).
                self.release_sandbox(&session.key).await;
                session.summary = None;
                session.summary_upto = 0;
                (
                    OutboundKind::Status,
                    "Started a fresh session. The previous conversation is archived.".into(),
                )
            }
            Command::Status => {
                let jobs = self.store.jobs_live_count(&session.key).await?;
                (
                    OutboundKind::Status,
                    self.status_text(session, spawner, jobs),
                )
            }
            Command::Team => (OutboundKind::Status, self.team_text(session).await?),
            Command::Schedules(args) => self.schedules_command(session, &args).await?,
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
            Command::Subagents(args) => self.subagents_command(&session.key, &args, spawner).await,
            Command::Unknown(name) => (
                OutboundKind::Error,
                format!("Unknown command /{name}. Send /help for the list."),
            ),
        };
        Ok(TurnOutput::reply(kind, text))
    }

    /// `/subagents`, `/subagents kill <id|all>`, `/subagents steer <id> <message>`.
    async fn subagents_command(
        &self,
        session_key: &str,
        args: &str,
        spawner: Option<&Arc<dyn Spawner>>,
    ) -> (OutboundKind, String) {
        let Some(registry) = spawner else {
            return (OutboundKind::Error, "Subagents are not available.".into());
        };
        let mut words = args.splitn(3, char::is_whitespace);
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
        }
    }

    /// Where `exec` runs, for `/status` (None when it is off and no sandbox is configured).
    fn exec_status(&self) -> Option<String> {
        use crate::sandbox::Availability;
        let sandbox = self.personas.sandbox().map(|s| s.availability());
        match (self.config.sandbox.enabled, sandbox) {
            (true, Some(Availability::Ready)) => Some(format!(
                "sandboxed (Docker, image {})",
                self.config.sandbox.image
            )),
            (true, Some(Availability::Unavailable(why))) => {
                Some(format!("unavailable — the sandbox is enabled but {why}"))
            }
            (true, _) => Some("sandboxed (Docker, not connected yet)".into()),
            (false, _) if self.config.tools.host_exec => Some("on the host".into()),
            (false, _) => None,
        }
    }

    /// `/schedules` (list) and `/schedules cancel <id>`.
    async fn schedules_command(
        &self,
        session: &SessionRow,
        args: &str,
    ) -> Result<(OutboundKind, String), TurnError> {
        if let Some(id) = args.strip_prefix("cancel").map(str::trim) {
            return Ok(if id.is_empty() {
                (OutboundKind::Error, "Usage: /schedules cancel <id>".into())
            } else if self.store.job_cancel(&session.key, id).await? {
                self.schedules.wake();
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
            .filter(|j| j.state == crate::storage::JobState::Active)
            .map(|j| {
                format!(
                    "⏰ {} — {} ({}) — next: {} — {}",
                    j.id,
                    j.spec,
                    j.kind.as_str(),
                    j.next_run
                        .map_or("-".into(), |t| crate::schedules::show_time(t, &j.timezone)),
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

    /// The boards of the teams the session's agent is in.
    async fn team_text(&self, session: &SessionRow) -> Result<String, TurnError> {
        let agent = self.agents().of_session(&session.key);
        let teams = self.personas.teams_of(&agent.id);
        if teams.is_empty() {
            return Ok(format!("Agent {} is not in a team.", agent.id));
        }
        let mut boards = Vec::new();
        for team in teams.iter() {
            let board = self.store.team_tasks(&team.id).await?;
            boards.push(crate::teams::board_text(team, &board));
        }
        Ok(boards.join("\n\n"))
    }

    fn status_text(
        &self,
        session: &SessionRow,
        spawner: Option<&Arc<dyn Spawner>>,
        jobs: i64,
    ) -> String {
        let mut out = String::new();
        let agent = self.agents().of_session(&session.key);
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
        if let Some(line) = self.exec_status() {
            let _ = write!(out, "\nExec: {line}");
        }
        let _ = write!(out, "\nScheduled jobs: {jobs} (/schedules)");
        if let Some(registry) = spawner {
            let _ = write!(
                out,
                "\nLive subagents: {}",
                registry.live_children(&session.key)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_arguments_and_bot_suffixes() {
        assert_eq!(Command::parse("hello"), None);
        assert_eq!(Command::parse("/new"), Some(Command::New));
        assert_eq!(Command::parse("/reset"), Some(Command::New));
        assert_eq!(Command::parse("/status@ferro_bot"), Some(Command::Status));
        assert_eq!(Command::parse("/model"), Some(Command::Model(None)));
        assert_eq!(
            Command::parse("/model openai/gpt-4o"),
            Some(Command::Model(Some("openai/gpt-4o".into())))
        );
        assert_eq!(
            Command::parse("/plan  build it "),
            Some(Command::Plan("build it".into()))
        );
        assert_eq!(
            Command::parse("/bogus"),
            Some(Command::Unknown("bogus".into()))
        );
    }
}
