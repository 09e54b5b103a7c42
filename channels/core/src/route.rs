//! Where a conversation lives on its platform, and the session key derived from it.

use serde::{Deserialize, Serialize};

/// The shape of a conversation; decides the session key layout (SPEC section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A one-to-one chat with a user (`...:dm:<chat id>`).
    Direct,
    /// A group, guild channel or forum (`...:group:<chat id>[:thread:<id>]`).
    Group,
    /// A named conversation with no platform notion of DM/group: webhook conversations and
    /// terminal sessions (`...:<chat id>[:thread:<id>]`).
    Conversation,
}

/// The exact chat and thread a message came from or goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRoute {
    /// Channel instance name: `cli`, `telegram`, `discord`, `webhook:NAME`.
    pub channel: String,
    pub kind: ChatKind,
    pub chat_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

impl ChatRoute {
    /// The stable session key for this route (SPEC section 3). Chat and thread ids are
    /// escaped (`%` → `%25`, `:` → `%3A`) so no two routes share a key: conversation
    /// `bob:thread:t1` and conversation `bob` with thread `t1` stay apart.
    pub fn session_key(&self) -> String {
        self.session_key_for("main")
    }

    /// The session key of this route when `agent` answers it (`agent:<agent>:...`).
    pub fn session_key_for(&self, agent: &str) -> String {
        let chat = escape(&self.chat_id);
        let mut key = match self.kind {
            ChatKind::Direct => format!("agent:{agent}:{}:dm:{chat}", self.channel),
            ChatKind::Group => format!("agent:{agent}:{}:group:{chat}", self.channel),
            ChatKind::Conversation => format!("agent:{agent}:{}:{chat}", self.channel),
        };
        if let Some(thread) = &self.thread_id {
            key.push_str(":thread:");
            key.push_str(&escape(thread));
        }
        key
    }
}

/// One key component with the separator (and the escape character itself) escaped.
fn escape(component: &str) -> std::borrow::Cow<'_, str> {
    if !component.contains([':', '%']) {
        return std::borrow::Cow::Borrowed(component);
    }
    std::borrow::Cow::Owned(component.replace('%', "%25").replace(':', "%3A"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(channel: &str, kind: ChatKind, chat: &str, thread: Option<&str>) -> ChatRoute {
        ChatRoute {
            channel: channel.into(),
            kind,
            chat_id: chat.into(),
            thread_id: thread.map(Into::into),
        }
    }

    #[test]
    fn session_keys_follow_the_spec_table() {
        let cases = [
            (
                route("telegram", ChatKind::Direct, "7", None),
                "agent:main:telegram:dm:7",
            ),
            (
                route("telegram", ChatKind::Group, "-100", None),
                "agent:main:telegram:group:-100",
            ),
            (
                route("telegram", ChatKind::Group, "-100", Some("4")),
                "agent:main:telegram:group:-100:thread:4",
            ),
            (
                route("webhook:support", ChatKind::Conversation, "c-42", None),
                "agent:main:webhook:support:c-42",
            ),
            (
                route(
                    "webhook:support",
                    ChatKind::Conversation,
                    "c-42",
                    Some("t1"),
                ),
                "agent:main:webhook:support:c-42:thread:t1",
            ),
            (
                route("cli", ChatKind::Conversation, "default", None),
                "agent:main:cli:default",
            ),
        ];
        for (route, expected) in cases {
            assert_eq!(route.session_key(), expected);
        }
    }

    #[test]
    fn routes_that_differ_never_share_a_session_key() {
        let c = ChatKind::Conversation;
        let routes = [
            route("webhook:w", c, "bob:thread:t1", None),
            route("webhook:w", c, "bob", Some("t1")),
            route("webhook:w", c, "bob%3Athread%3At1", None),
            route("webhook:w", c, "bob:thread", Some("t1")),
            route("webhook:w", c, "bob", Some("t1:x")),
            route("webhook:w", c, "bob:thread:t1:x", None),
            route("webhook:w", ChatKind::Direct, "x", None),
            route("webhook:w", c, "dm:x", None),
        ];
        let keys: std::collections::HashSet<String> =
            routes.iter().map(ChatRoute::session_key).collect();
        assert_eq!(keys.len(), routes.len(), "{keys:?}");
    }
}
