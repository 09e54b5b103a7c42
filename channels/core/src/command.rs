//! A chat command as platforms register it (Telegram's setMyCommands, Discord's application
//! commands). The service owns the list; adapters only show it.

/// One chat command (`/plan <task>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatCommand {
    /// The name without the slash (`plan`).
    pub name: &'static str,
    pub description: &'static str,
    /// What follows the name, when the command takes text (`task`); platforms with typed
    /// options offer it as one optional string option.
    pub argument: Option<&'static str>,
}
