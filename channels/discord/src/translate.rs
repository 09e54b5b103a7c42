//! serenity messages, slash commands and button presses → ferroclaw's [`InboundMessage`]
//! and [`DecisionRequest`]. Pure functions; the
//! only place that reads Discord message fields.

use ferroclaw_channel_core::{
    Attachment, AttachmentKind, AttachmentSource, ChatKind, ChatRoute, Decision, DecisionRequest,
    InboundMessage, Sender,
};
use serenity::model::application::{
    CommandDataOptionValue, CommandInteraction, ComponentInteraction,
};
use serenity::model::channel::{ChannelType, Message, PartialChannel};
use serenity::model::id::UserId;

/// The channel name in routes and session keys.
pub const CHANNEL: &str = "discord";

/// Where a Discord channel sits, which decides the session (SPEC section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A direct message: the session is the user's.
    Direct,
    /// A guild text channel.
    Channel,
    /// A thread: its own session under its parent channel.
    Thread { parent: u64 },
}

impl Place {
    /// A guild channel's place from its type and parent.
    pub fn of_guild_channel(kind: ChannelType, parent: Option<u64>) -> Place {
        match (kind, parent) {
            (
                ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::NewsThread,
                Some(parent),
            ) => Place::Thread { parent },
            _ => Place::Channel,
        }
    }

    fn route(self, channel_id: u64, user_id: u64) -> ChatRoute {
        let (kind, chat_id, thread_id) = match self {
            Place::Direct => (ChatKind::Direct, user_id, None),
            Place::Channel => (ChatKind::Group, channel_id, None),
            Place::Thread { parent } => (ChatKind::Group, parent, Some(channel_id)),
        };
        ChatRoute {
            channel: CHANNEL.into(),
            kind,
            chat_id: chat_id.to_string(),
            thread_id: thread_id.map(|t| t.to_string()),
        }
    }
}

/// The display name Discord shows for a user.
fn display_name(user: &serenity::model::user::User) -> String {
    user.global_name
        .clone()
        .unwrap_or_else(|| user.name.clone())
}

/// A message's attachments, fetched later from their CDN URLs.
fn attachments(message: &Message) -> Vec<Attachment> {
    message
        .attachments
        .iter()
        .map(|a| {
            let mime = a.content_type.clone();
            let kind = match mime.as_deref() {
                _ if a.duration_secs.is_some() => AttachmentKind::Voice,
                Some(m) if m.starts_with("image/") => AttachmentKind::Image,
                Some(m) if m.starts_with("audio/") => AttachmentKind::Audio,
                _ => AttachmentKind::Document,
            };
            Attachment {
                kind,
                name: a.filename.clone(),
                mime,
                size: Some(u64::from(a.size)),
                source: AttachmentSource::Url { url: a.url.clone() },
            }
        })
        .collect()
}

/// Normalise a message. None for messages from bots (ourselves included) and messages with
/// neither text nor files (content withheld without the MESSAGE_CONTENT intent).
pub fn inbound(message: &Message, me: UserId, place: Place) -> Option<InboundMessage> {
    if message.author.bot || message.author.id == me {
        return None;
    }
    let tokens = [format!("<@{me}>"), format!("<@!{me}>")];
    let mentioned = place == Place::Direct
        || message.mentions.iter().any(|u| u.id == me)
        || tokens.iter().any(|t| message.content.contains(t.as_str()))
        || message
            .referenced_message
            .as_ref()
            .is_some_and(|r| r.author.id == me);
    let mut text = message.content.clone();
    for token in &tokens {
        text = text.replace(token.as_str(), "");
    }
    let text = text
        .trim()
        .trim_start_matches([',', ':'])
        .trim()
        .to_string();
    let attachments = attachments(message);
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    Some(InboundMessage {
        route: place.route(message.channel_id.get(), message.author.id.get()),
        sender: Sender {
            id: message.author.id.to_string(),
            name: display_name(&message.author),
        },
        platform_message_id: message.id.to_string(),
        text,
        mentioned,
        reply_to: message
            .message_reference
            .as_ref()
            .and_then(|r| r.message_id)
            .map(|id| id.to_string()),
        internal: false,
        attachments,
        mention_names: Vec::new(),
    })
}

/// Where a slash command was used, from the channel Discord sends with it.
/// A press of an approval prompt's button: the decision it carries, or None for a button
/// that is not ours.
pub fn press(component: &ComponentInteraction) -> Option<DecisionRequest> {
    let (approval_id, decision) = Decision::from_button_data(&component.data.custom_id)?;
    Some(DecisionRequest {
        channel: CHANNEL.to_string(),
        approval_id,
        decision,
        sender: Sender {
            id: component.user.id.get().to_string(),
            name: component.user.name.clone(),
        },
        // A redelivered interaction has the same id: one journal entry.
        platform_id: format!("ix:{}", component.id.get()),
    })
}

pub fn command_place(command: &CommandInteraction) -> Place {
    if command.guild_id.is_none() {
        return Place::Direct;
    }
    command
        .channel
        .as_ref()
        .map_or(Place::Channel, |c: &PartialChannel| {
            Place::of_guild_channel(c.kind, c.parent_id.map(|p| p.get()))
        })
}

/// A slash command as the text a user would type (`/plan write a poem`), addressed to us.
pub fn command(command: &CommandInteraction, place: Place) -> InboundMessage {
    let mut text = format!("/{}", command.data.name);
    for option in &command.data.options {
        if let CommandDataOptionValue::String(value) = &option.value {
            text.push(' ');
            text.push_str(value.trim());
        }
    }
    InboundMessage {
        route: place.route(command.channel_id.get(), command.user.id.get()),
        sender: Sender {
            id: command.user.id.to_string(),
            name: display_name(&command.user),
        },
        platform_message_id: command.id.to_string(),
        text,
        mentioned: true,
        reply_to: None,
        internal: false,
        attachments: Vec::new(),
        mention_names: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ME: u64 = 900;

    fn message(extra: serde_json::Value) -> Message {
        let mut m = json!({"id": "501", "channel_id": "300", "content": "hello",
            "author": {"id": "7", "username": "alice", "global_name": "Alice", "discriminator": "0"},
            "timestamp": "2026-11-30T10:00:00.000000+00:00", "tts": false, "mention_everyone": false,
            "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        serde_json::from_value(m).unwrap()
    }

    #[test]
    fn a_direct_message_is_the_users_session_and_always_mentioned() {
        let m = inbound(&message(json!({})), UserId::new(ME), Place::Direct).unwrap();
        assert_eq!(m.route.session_key(), "agent:main:discord:dm:7");
        assert!(m.mentioned);
        assert_eq!(
            (m.sender.name.as_str(), m.platform_message_id.as_str()),
            ("Alice", "501")
        );
    }

    #[test]
    fn guild_mentions_are_detected_and_stripped_and_threads_keep_their_parent() {
        let bot =
            json!({"id": ME.to_string(), "username": "ferro", "discriminator": "0", "bot": true});
        let m = message(
            json!({"guild_id": "1", "content": "<@900> what time is it?", "mentions": [bot]}),
        );
        let m = inbound(&m, UserId::new(ME), Place::Thread { parent: 200 }).unwrap();
        assert!(m.mentioned);
        assert_eq!(m.text, "what time is it?");
        assert_eq!(
            m.route.session_key(),
            "agent:main:discord:group:200:thread:300"
        );
        let plain = inbound(
            &message(json!({"guild_id": "1", "content": "just chatting"})),
            UserId::new(ME),
            Place::Channel,
        )
        .unwrap();
        assert!(!plain.mentioned);
        assert_eq!(plain.route.session_key(), "agent:main:discord:group:300");
    }

    #[test]
    fn bots_ourselves_and_empty_messages_are_ignored() {
        let bot = json!({"id": "8", "username": "b", "discriminator": "0", "bot": true});
        assert!(
            inbound(
                &message(json!({"author": bot})),
                UserId::new(ME),
                Place::Direct
            )
            .is_none()
        );
        let me = json!({"id": ME.to_string(), "username": "ferro", "discriminator": "0"});
        assert!(
            inbound(
                &message(json!({"author": me})),
                UserId::new(ME),
                Place::Direct
            )
            .is_none()
        );
        assert!(
            inbound(
                &message(json!({"content": ""})),
                UserId::new(ME),
                Place::Direct
            )
            .is_none()
        );
        assert!(
            inbound(
                &message(json!({"content": "<@900>"})),
                UserId::new(ME),
                Place::Channel
            )
            .is_none()
        );
    }

    #[test]
    fn thread_types_with_a_parent_are_threads() {
        assert_eq!(
            Place::of_guild_channel(ChannelType::PublicThread, Some(5)),
            Place::Thread { parent: 5 }
        );
        assert_eq!(
            Place::of_guild_channel(ChannelType::Text, Some(5)),
            Place::Channel
        );
    }
}
