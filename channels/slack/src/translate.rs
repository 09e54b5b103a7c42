//! Slack payloads into ferroclaw's messages: events (`message`, `app_mention`) become
//! [`InboundMessage`]s routed to a DM, a channel or a thread; slash-command payloads become
//! command messages; a Block Kit button press becomes an approval decision. Bots, the bot
//! itself, edits and deletions are not turns. The same for Socket Mode and the Events API.

use ferroclaw_channel_core::{
    Attachment, AttachmentKind, AttachmentSource, ChatKind, ChatRoute, Decision, DecisionRequest,
    InboundMessage, Sender,
};
use serde_json::Value;

/// The channel instance name (routes, session keys, access rules).
pub const CHANNEL: &str = "slack";

/// What a payload asks of the service.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per payload, handed on at once
pub enum Inbound {
    Message(InboundMessage),
    Decision(DecisionRequest),
    /// Nothing to do (and why, for the debug log): it is acknowledged all the same.
    Ignore(&'static str),
}

/// A channel id's kind: `D…` is a DM; everything else (`C…`, `G…`) a channel.
fn kind_of(channel: &str, channel_type: Option<&str>) -> ChatKind {
    match channel_type {
        Some("im") => ChatKind::Direct,
        Some(_) => ChatKind::Group,
        None if channel.starts_with('D') => ChatKind::Direct,
        None => ChatKind::Group,
    }
}

/// Slack's escaping of `&`, `<`, `>` in message text, undone.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// An `event_callback`'s event (`payload["event"]`).
pub fn event(event: &Value, bot_user: &str, require_mention: bool) -> Inbound {
    let kind = event["type"].as_str().unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        return Inbound::Ignore("not a message event");
    }
    match event["subtype"].as_str() {
        None | Some("file_share") | Some("thread_broadcast") => {}
        // message_changed, message_deleted, channel_join, bot_message, …
        Some(_) => return Inbound::Ignore("an edit, a deletion or a notice"),
    }
    let user = event["user"].as_str().unwrap_or_default();
    if user.is_empty() || event.get("bot_id").is_some_and(|b| !b.is_null()) || user == bot_user {
        return Inbound::Ignore("a bot's message");
    }
    let (Some(channel), Some(ts)) = (event["channel"].as_str(), event["ts"].as_str()) else {
        return Inbound::Ignore("no channel or ts");
    };
    let chat_kind = kind_of(channel, event["channel_type"].as_str());
    let mention = format!("<@{bot_user}>");
    let raw = event["text"].as_str().unwrap_or_default();
    let mentioned = kind == "app_mention" || (!bot_user.is_empty() && raw.contains(&mention));
    if chat_kind == ChatKind::Group && require_mention && !mentioned {
        return Inbound::Ignore("a channel message without a mention");
    }
    let text = unescape(raw.replace(&mention, "").trim());
    let thread_id = event["thread_ts"]
        .as_str()
        .filter(|thread| *thread != ts)
        .map(str::to_string);
    let attachments = event["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(file)
        .collect();
    Inbound::Message(InboundMessage {
        route: ChatRoute {
            channel: CHANNEL.into(),
            kind: chat_kind,
            chat_id: channel.to_string(),
            thread_id,
        },
        sender: Sender {
            id: user.to_string(),
            name: String::new(),
        },
        platform_message_id: ts.to_string(),
        text,
        mentioned: mentioned || chat_kind == ChatKind::Direct,
        reply_to: None,
        internal: false,
        attachments,
        mention_names: Vec::new(),
    })
}

/// A shared file, fetched later through its `url_private` (with the bot token).
fn file(f: &Value) -> Option<Attachment> {
    let url = f["url_private_download"]
        .as_str()
        .or_else(|| f["url_private"].as_str())?;
    let mime = f["mimetype"].as_str().unwrap_or("application/octet-stream");
    let kind = if mime.starts_with("image/") {
        AttachmentKind::Image
    } else if mime.starts_with("audio/") {
        AttachmentKind::Audio
    } else {
        AttachmentKind::Document
    };
    Some(Attachment {
        kind,
        name: f["name"].as_str().unwrap_or("file").to_string(),
        mime: Some(mime.to_string()),
        size: f["size"].as_u64(),
        source: AttachmentSource::Platform {
            id: url.to_string(),
        },
    })
}

/// A slash command's payload (`command`, `text`, `user_id`, `channel_id`, `trigger_id`):
/// the command as a message in its channel, addressed to the bot.
pub fn slash_command(payload: &Value) -> Inbound {
    let field = |name: &str| payload[name].as_str().unwrap_or_default();
    let (command, channel, user) = (field("command"), field("channel_id"), field("user_id"));
    if command.is_empty() || channel.is_empty() || user.is_empty() {
        return Inbound::Ignore("a slash command without command, channel_id or user_id");
    }
    let text = format!("{command} {}", field("text")).trim().to_string();
    Inbound::Message(InboundMessage {
        route: ChatRoute {
            channel: CHANNEL.into(),
            kind: kind_of(channel, None),
            chat_id: channel.to_string(),
            thread_id: None,
        },
        sender: Sender {
            id: user.to_string(),
            name: field("user_name").to_string(),
        },
        platform_message_id: format!("cmd-{}", field("trigger_id")),
        text,
        mentioned: true,
        reply_to: None,
        internal: false,
        attachments: Vec::new(),
        mention_names: Vec::new(),
    })
}

/// An interactive payload: a press of an approval prompt's button.
pub fn interaction(payload: &Value) -> Inbound {
    if payload["type"] != "block_actions" {
        return Inbound::Ignore("not a button press");
    }
    let action = &payload["actions"][0];
    let Some((approval_id, decision)) = action["value"]
        .as_str()
        .or_else(|| action["action_id"].as_str())
        .and_then(Decision::from_button_data)
    else {
        return Inbound::Ignore("not an approval button");
    };
    let Some(user) = payload["user"]["id"].as_str() else {
        return Inbound::Ignore("a press without a user");
    };
    let press = action["action_ts"]
        .as_str()
        .or_else(|| payload["trigger_id"].as_str())
        .unwrap_or_default();
    Inbound::Decision(DecisionRequest {
        channel: CHANNEL.into(),
        approval_id,
        decision,
        sender: Sender {
            id: user.to_string(),
            name: payload["user"]["name"].as_str().unwrap_or("").to_string(),
        },
        platform_id: format!("act-{press}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(event: Inbound) -> InboundMessage {
        match event {
            Inbound::Message(m) => m,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn dms_channels_threads_and_mentions() {
        let dm = message(event(
            &json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U1",
                    "text": "a &lt; b", "ts": "1.1"}),
            "UBOT",
            true,
        ));
        assert_eq!(dm.route.kind, ChatKind::Direct);
        assert_eq!(dm.text, "a < b");
        let quiet = event(
            &json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1",
                    "text": "hello all", "ts": "1.2"}),
            "UBOT",
            true,
        );
        assert!(matches!(quiet, Inbound::Ignore(_)));
        let threaded = message(event(
            &json!({"type": "app_mention", "channel": "C1", "user": "U1",
                    "text": "<@UBOT> what now?", "ts": "1.4", "thread_ts": "1.3"}),
            "UBOT",
            true,
        ));
        assert_eq!(threaded.text, "what now?");
        assert_eq!(threaded.route.thread_id.as_deref(), Some("1.3"));
        for ignored in [
            json!({"type": "message", "subtype": "message_changed", "channel": "D1", "ts": "2"}),
            json!({"type": "message", "channel": "D1", "user": "UBOT", "text": "me", "ts": "3"}),
            json!({"type": "message", "channel": "D1", "user": "U2", "bot_id": "B1", "text": "x", "ts": "4"}),
        ] {
            assert!(matches!(event(&ignored, "UBOT", true), Inbound::Ignore(_)));
        }
    }

    #[test]
    fn a_button_press_is_a_decision() {
        let press = interaction(&json!({"type": "block_actions", "user": {"id": "U1"},
            "actions": [{"action_id": "x", "value": Decision::Deny.button_data("ap1"), "action_ts": "9.9"}]}));
        match press {
            Inbound::Decision(d) => {
                assert_eq!(
                    (d.approval_id.as_str(), d.decision),
                    ("ap1", Decision::Deny)
                );
                assert_eq!(d.platform_id, "act-9.9");
            }
            other => panic!("{other:?}"),
        }
    }
}
