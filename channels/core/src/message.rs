//! The normalised inbound and outbound messages every adapter speaks.

use crate::ChatRoute;
use serde::{Deserialize, Serialize};

/// Who sent an inbound message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

/// One platform message, normalised. `(route.channel, platform_message_id)` is unique: the
/// journal uses it to process each platform message at most once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundMessage {
    pub route: ChatRoute,
    pub sender: Sender,
    /// The platform's id for this message, unique within the conversation's channel.
    pub platform_message_id: String,
    pub text: String,
    /// The bot was mentioned (or replied to) in a group.
    #[serde(default)]
    pub mentioned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Produced by ferroclaw itself (a subagent's outcome for its parent), not by a person:
    /// access control does not apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub internal: bool,
    /// Files that came with the message (photos, documents, voice notes), fetched when its
    /// turn runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// A voice note in a group that requires a mention: answered only when its transcript
    /// names the bot by one of these (the mention is checked after transcription).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mention_names: Vec<String>,
}

/// What an attached file is, as the platform said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachmentKind {
    Image,
    Document,
    Voice,
    Audio,
}

/// Where an attached file's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AttachmentSource {
    /// A plain URL (webhook `url`, Discord's CDN).
    Url { url: String },
    /// The bytes themselves, base64 (webhook `content`).
    Inline { base64: String },
    /// A platform file id the channel fetches (Telegram's `file_id`).
    Platform { id: String },
}

/// A file that came with an inbound message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
    /// The file name (made up from the kind when the platform gives none).
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// The size the platform announced, if any (checked again while fetching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    pub source: AttachmentSource,
}

/// What a bot message is, for channels that show kinds differently (webhook `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboundKind {
    Reply,
    Plan,
    Announce,
    Status,
    Error,
    /// A tool call waiting for a person's decision (`OutboundMessage::approval`).
    Approval,
}

impl OutboundKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboundKind::Reply => "reply",
            OutboundKind::Plan => "plan",
            OutboundKind::Announce => "announce",
            OutboundKind::Status => "status",
            OutboundKind::Error => "error",
            OutboundKind::Approval => "approval",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "reply" => OutboundKind::Reply,
            "plan" => OutboundKind::Plan,
            "announce" => OutboundKind::Announce,
            "status" => OutboundKind::Status,
            "error" => OutboundKind::Error,
            "approval" => OutboundKind::Approval,
            _ => return None,
        })
    }
}

/// One bot message taken from the outbox, to be delivered in order within its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// Outbox id; increases with every message, so it is also the per-conversation sequence.
    pub id: i64,
    pub route: ChatRoute,
    pub kind: OutboundKind,
    pub text: String,
    /// The inbound platform message this answers, when there is one.
    pub in_reply_to: Option<String>,
    /// The outbox id of the message this one edits (replaces), when it is an edit.
    pub edit_of: Option<i64>,
    /// The platform id of the edited message, once known (for platforms that edit by id).
    pub edit_platform_id: Option<String>,
    /// A file to send, with `text` as its caption (`send_file`).
    pub file: Option<OutboundFile>,
    /// The approval request a message of kind `approval` asks (buttons where the platform
    /// has them; `text` says the same for every other client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::ApprovalPrompt>,
}

/// A file a bot message carries: a path on this host, its name and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundFile {
    pub path: String,
    pub name: String,
    pub mime: String,
}

impl OutboundFile {
    /// Images go as photos, voice as voice notes, everything else as a document.
    pub fn is_image(&self) -> bool {
        matches!(
            self.mime.as_str(),
            "image/jpeg" | "image/png" | "image/webp" | "image/gif"
        )
    }
}
