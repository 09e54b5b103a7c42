//! teloxide `Message` → ferroclaw's [`InboundMessage`]. Pure functions, tested on real
//! Bot API payloads; the only place that reads Telegram message fields.

use ferroclaw_channel_core::{
    Attachment, AttachmentKind, AttachmentSource, ChatKind, ChatRoute, Decision, DecisionRequest,
    InboundMessage, Sender,
};
use teloxide::types::{CallbackQueryId, Me, Message, MessageEntityKind, Update, UpdateKind};

/// The channel name in routes and session keys.
pub const CHANNEL: &str = "telegram";

/// The message inside an update, when the update is a (new) message.
pub fn message(update: &Update) -> Option<&Message> {
    match &update.kind {
        UpdateKind::Message(m) => Some(m),
        _ => None,
    }
}

/// A button press on an approval prompt: the decision it carries, or None for any other
/// update (or a payload that is not ours).
pub fn press(update: &Update) -> Option<(DecisionRequest, CallbackQueryId)> {
    let UpdateKind::CallbackQuery(query) = &update.kind else {
        return None;
    };
    let (approval_id, decision) = Decision::from_button_data(query.data.as_deref()?)?;
    let request = DecisionRequest {
        channel: CHANNEL.to_string(),
        approval_id,
        decision,
        sender: Sender {
            id: query.from.id.0.to_string(),
            name: query.from.full_name(),
        },
        // Telegram redelivers a press with the same query id: one journal entry.
        platform_id: format!("cbq:{}", query.id.0),
    };
    Some((request, query.id.clone()))
}

/// The files of a message: the largest size of a photo, a document, a voice note, audio.
fn attachments(message: &Message) -> Vec<Attachment> {
    let file =
        |kind, name: String, mime: Option<String>, meta: &teloxide::types::FileMeta| Attachment {
            kind,
            name,
            mime,
            size: Some(u64::from(meta.size)),
            source: AttachmentSource::Platform {
                id: meta.id.0.clone(),
            },
        };
    let mut out = Vec::new();
    if let Some(largest) = message
        .photo()
        .and_then(|sizes| sizes.iter().max_by_key(|p| p.width * p.height))
    {
        out.push(file(
            AttachmentKind::Image,
            "photo.jpg".into(),
            Some("image/jpeg".into()),
            &largest.file,
        ));
    }
    if let Some(doc) = message.document() {
        let mime = doc.mime_type.as_ref().map(ToString::to_string);
        let kind = if mime.as_deref().is_some_and(|m| m.starts_with("image/")) {
            AttachmentKind::Image
        } else {
            AttachmentKind::Document
        };
        let name = doc.file_name.clone().unwrap_or_else(|| "document".into());
        out.push(file(kind, name, mime, &doc.file));
    }
    if let Some(voice) = message.voice() {
        let mime = voice.mime_type.as_ref().map(ToString::to_string);
        out.push(file(
            AttachmentKind::Voice,
            "voice.ogg".into(),
            mime,
            &voice.file,
        ));
    }
    if let Some(audio) = message.audio() {
        let mime = audio.mime_type.as_ref().map(ToString::to_string);
        let name = audio
            .file_name
            .clone()
            .unwrap_or_else(|| "audio.mp3".into());
        out.push(file(AttachmentKind::Audio, name, mime, &audio.file));
    }
    out
}

/// Normalise a Telegram message. None for messages without text or files, or sent by bots.
pub fn inbound(message: &Message, me: &Me) -> Option<InboundMessage> {
    let attachments = attachments(message);
    let text = match message.text().or(message.caption()) {
        Some(text) => text,
        None if !attachments.is_empty() => "",
        None => return None,
    };
    let from = message.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let private = message.chat.is_private();
    let username = me.user.username.as_deref().unwrap_or_default();
    let mention = format!("@{username}");
    let mentioned = private
        || message
            .parse_entities()
            .or_else(|| message.parse_caption_entities())
            .unwrap_or_default()
            .iter()
            .any(|e| match e.kind() {
                MessageEntityKind::Mention => {
                    !username.is_empty() && e.text().eq_ignore_ascii_case(&mention)
                }
                MessageEntityKind::TextMention { user } => user.id == me.user.id,
                MessageEntityKind::BotCommand => {
                    // `/cmd` or `/cmd@us`, not `/cmd@someone_else`.
                    e.text()
                        .split_once('@')
                        .is_none_or(|(_, bot)| bot.eq_ignore_ascii_case(username))
                }
                _ => false,
            })
        || message
            .reply_to_message()
            .and_then(|r| r.from.as_ref())
            .is_some_and(|u| u.id == me.user.id);
    let text = if username.is_empty() {
        text.to_string()
    } else {
        strip_mention(text, &mention)
    };
    Some(InboundMessage {
        route: ChatRoute {
            channel: CHANNEL.into(),
            kind: if private {
                ChatKind::Direct
            } else {
                ChatKind::Group
            },
            chat_id: message.chat.id.0.to_string(),
            thread_id: message
                .is_topic_message
                .then_some(message.thread_id)
                .flatten()
                .map(|t| t.0.0.to_string()),
        },
        sender: Sender {
            id: from.id.0.to_string(),
            name: from.full_name(),
        },
        platform_message_id: message.id.0.to_string(),
        text,
        mentioned,
        reply_to: message.reply_to_message().map(|r| r.id.0.to_string()),
        internal: false,
        attachments,
        mention_names: Vec::new(),
    })
}

/// Drop a leading or trailing `@botname` so the model sees what was said to it.
fn strip_mention(text: &str, mention: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let m = mention.to_ascii_lowercase();
    if lower.starts_with(&m) {
        return text[mention.len()..]
            .trim_start_matches([',', ':', ' '])
            .trim()
            .to_string();
    }
    if lower.ends_with(&m) {
        return text[..text.len() - mention.len()].trim().to_string();
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn me() -> Me {
        // teloxide's types deserialise from text (as on the wire), not from `Value`.
        serde_json::from_str(&json!({"id": 1, "is_bot": true, "first_name": "Ferro", "username": "ferro_bot",
            "can_join_groups": true, "can_read_all_group_messages": false, "supports_inline_queries": false,
            "can_connect_to_business": false, "has_main_web_app": false}).to_string())
        .unwrap()
    }

    fn update(message: serde_json::Value) -> Update {
        serde_json::from_str(&json!({"update_id": 1, "message": message}).to_string()).unwrap()
    }

    fn normalise(message: serde_json::Value) -> Option<InboundMessage> {
        inbound(super::message(&update(message)).unwrap(), &me())
    }

    const ALICE: &str = r#"{"id":7,"is_bot":false,"first_name":"Alice","username":"alice"}"#;

    fn alice() -> serde_json::Value {
        serde_json::from_str(ALICE).unwrap()
    }

    #[test]
    fn a_direct_message_is_a_dm_session_and_always_mentioned() {
        let m = normalise(json!({"message_id": 5, "date": 1700000000, "chat": {"id": 7, "type": "private", "first_name": "Alice"},
            "from": alice(), "text": "hello"}))
        .unwrap();
        assert_eq!(m.route.session_key(), "agent:main:telegram:dm:7");
        assert!(m.mentioned);
        assert_eq!(
            (m.platform_message_id.as_str(), m.sender.name.as_str()),
            ("5", "Alice")
        );
    }

    #[test]
    fn a_forum_topic_message_keeps_its_thread_and_mentions_are_detected() {
        let m = normalise(json!({"message_id": 10, "message_thread_id": 4, "is_topic_message": true, "date": 1700000000,
            "chat": {"id": -1001234, "type": "supergroup", "title": "Forum", "is_forum": true},
            "from": alice(), "text": "@ferro_bot what time is it?",
            "entities": [{"type": "mention", "offset": 0, "length": 10}]}))
        .unwrap();
        assert_eq!(
            m.route.session_key(),
            "agent:main:telegram:group:-1001234:thread:4"
        );
        assert!(m.mentioned);
        assert_eq!(m.text, "what time is it?");
    }

    #[test]
    fn group_messages_without_mention_or_reply_are_not_mentioned() {
        let plain = normalise(json!({"message_id": 11, "date": 1700000000, "chat": {"id": -5, "type": "group", "title": "G"},
            "from": alice(), "text": "just chatting @someone",
            "entities": [{"type": "mention", "offset": 14, "length": 8}]}))
        .unwrap();
        assert!(!plain.mentioned);
        assert!(plain.route.thread_id.is_none());
        let reply = normalise(json!({"message_id": 12, "date": 1700000000, "chat": {"id": -5, "type": "group", "title": "G"},
            "from": alice(), "text": "and you?",
            "reply_to_message": {"message_id": 9, "date": 1700000000, "chat": {"id": -5, "type": "group", "title": "G"},
                "from": {"id": 1, "is_bot": true, "first_name": "Ferro", "username": "ferro_bot"}, "text": "hi"}}))
        .unwrap();
        assert!(reply.mentioned, "a reply to the bot counts as a mention");
        assert_eq!(reply.reply_to.as_deref(), Some("9"));
        let other_bot_cmd = normalise(json!({"message_id": 13, "date": 1700000000, "chat": {"id": -5, "type": "group", "title": "G"},
            "from": alice(), "text": "/status@other_bot", "entities": [{"type": "bot_command", "offset": 0, "length": 17}]}))
        .unwrap();
        assert!(!other_bot_cmd.mentioned);
    }

    #[test]
    fn messages_from_bots_and_without_text_are_ignored() {
        assert!(normalise(json!({"message_id": 1, "date": 1700000000, "chat": {"id": 7, "type": "private", "first_name": "B"},
            "from": {"id": 8, "is_bot": true, "first_name": "B"}, "text": "beep"}))
        .is_none());
        assert!(normalise(json!({"message_id": 2, "date": 1700000000, "chat": {"id": 7, "type": "private", "first_name": "A"},
            "from": alice(), "sticker": {"file_id": "x", "file_unique_id": "y", "width": 1, "height": 1, "is_animated": false,
            "is_video": false, "type": "regular"}}))
        .is_none());
    }
}
