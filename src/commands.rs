//! The chat command vocabulary (SPEC section 4), below both the ingress (which carries out
//! `/stop` at once) and the engine (which answers the rest): parsing a message into a
//! [`Command`], and the core commands' names and help lines. A feature's own commands
//! (`/subagents`, `/team`, `/schedules`) are its component's (`Component::commands`); they
//! parse as [`Command::Feature`].

use ferroclaw_channel_core::ChatCommand;

/// A chat command as platforms register it, and its line in `/help`.
#[derive(Debug, Clone)]
pub struct CommandInfo {
    pub command: ChatCommand,
    pub help: &'static str,
}

/// A parsed chat command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Plan(String),
    New,
    Stop,
    Status,
    Model(Option<String>),
    Help,
    /// Any other `/name`: a feature's command, or unknown (`name` lower-case).
    Feature {
        name: String,
        args: String,
    },
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
            "help" | "start" => Command::Help,
            _ => Command::Feature { name, args },
        })
    }
}

/// A command's registration and `/help` line (an empty help line: not listed).
pub const fn command(
    name: &'static str,
    description: &'static str,
    argument: Option<&'static str>,
    help: &'static str,
) -> CommandInfo {
    CommandInfo {
        command: ChatCommand {
            name,
            description,
            argument,
        },
        help,
    }
}

/// The engine's own commands, in `/help` order (`/help` itself comes last).
pub const CORE: &[CommandInfo] = &[
    command(
        "plan",
        "Plan first, then execute a task",
        Some("task"),
        "/plan <task> — plan first, then execute",
    ),
    command(
        "new",
        "Start a fresh session",
        None,
        "/new, /reset — start a fresh session for this chat (the old transcript is archived)",
    ),
    command("reset", "Start a fresh session", None, ""),
    command(
        "stop",
        "Stop the running turn and its subagents",
        None,
        "/stop — abort the running turn of this session and its subagents",
    ),
    command(
        "status",
        "Model, usage, plan and subagents",
        None,
        "/status — model, fallbacks, token usage, plan progress, live subagents",
    ),
    command(
        "model",
        "Show or set this chat's model",
        Some("model"),
        "/model [provider/model] — show or set this session's model",
    ),
];

/// `/help`, always last.
pub const HELP: CommandInfo = command("help", "List the commands", None, "/help — this list");

/// Every command platforms register: the core ones, then each feature's, then `/help`.
pub fn registered<'a>(features: impl IntoIterator<Item = &'a CommandInfo>) -> Vec<CommandInfo> {
    CORE.iter()
        .chain(features)
        .chain(std::iter::once(&HELP))
        .cloned()
        .collect()
}

/// The `/help` text for `commands` (as [`registered`] lists them).
pub fn help_text(commands: &[CommandInfo]) -> String {
    let mut text = String::from("Commands:");
    for c in commands.iter().filter(|c| !c.help.is_empty()) {
        text.push('\n');
        text.push_str(c.help);
    }
    text
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
            Some(Command::Feature {
                name: "bogus".into(),
                args: String::new()
            })
        );
        assert_eq!(
            Command::parse("/Team@bot x"),
            Some(Command::Feature {
                name: "team".into(),
                args: "x".into()
            })
        );
    }

    #[test]
    fn help_lists_core_then_features_then_help() {
        const TEAM: CommandInfo = command("team", "Boards", None, "/team — boards");
        let all = registered([&TEAM]);
        let names: Vec<&str> = all.iter().map(|c| c.command.name).collect();
        assert_eq!(
            names,
            [
                "plan", "new", "reset", "stop", "status", "model", "team", "help"
            ]
        );
        let help = help_text(&all);
        assert!(help.starts_with("Commands:\n/plan <task>"));
        assert!(help.ends_with("/team — boards\n/help — this list"));
        assert!(!help.contains("\n\n"), "{help}");
    }
}
