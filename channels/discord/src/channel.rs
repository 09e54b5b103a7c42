//! Delivery to Discord: replies split at 2000 characters (Discord Markdown passed through),
//! edits, streamed replies (one message edited at most every `stream_edit_interval`), typing,
//! slash-command answers as follow-ups of the deferred interaction, all into the thread the
//! request came from.

use crate::errors::{failure, redact};
use crate::translate::CHANNEL;
use async_trait::async_trait;
use ferroclaw_channel_core::{
    ApprovalPrompt, Channel, ChannelHealth, ChatKind, ChatRoute, Decision, Delivered,
    DeliveryError, EditError, LiveReplies, LiveUpdate, Liveness, OutboundKind, OutboundMessage,
    PieceSender, PreviewLedger, TextDelivery, split,
};
use serenity::builder::{
    Builder, CreateActionRow, CreateButton, CreateInteractionResponseFollowup, CreateMessage,
    EditMessage,
};
use serenity::http::Http;
use serenity::model::application::ButtonStyle;
use serenity::model::channel::MessageReference;
use serenity::model::id::{ChannelId, MessageId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Discord's limit for one message, in characters.
pub const LIMIT: usize = 2000;
/// How long Discord accepts follow-ups of an interaction.
const INTERACTION_LIFETIME: Duration = Duration::from_secs(15 * 60);

pub struct DiscordChannel {
    http: Arc<Http>,
    /// Redacts the token from error texts.
    token: String,
    /// Streamed replies, pieces failed attempts sent, the pace of edits.
    text: TextDelivery<MessageId>,
    /// DM channel of each user we talk to (a DM session is keyed by the user).
    dms: Mutex<HashMap<u64, ChannelId>>,
    /// Deferred slash commands awaiting their answer: interaction id → token. Kept in memory
    /// only (a token is a credential); after a restart the answer is posted as a message.
    interactions: Mutex<HashMap<String, (String, Instant)>>,
    ready: AtomicBool,
    /// Heartbeats acknowledged and dispatches received (fed by the gateway task).
    pub(crate) liveness: Liveness,
}

fn id(text: &str, what: &str) -> Result<u64, DeliveryError> {
    text.parse::<u64>()
        .map_err(|_| DeliveryError::Rejected(format!("`{text}` is not a Discord {what} id")))
}

impl DiscordChannel {
    pub(crate) fn new(
        http: Arc<Http>,
        token: String,
        edit_interval: Duration,
        previews: Option<Arc<dyn PreviewLedger>>,
        liveness: Liveness,
    ) -> Self {
        DiscordChannel {
            http,
            token,
            text: TextDelivery::new(LiveReplies::new(CHANNEL, previews), edit_interval),
            dms: Mutex::new(HashMap::new()),
            interactions: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
            liveness,
        }
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub(crate) fn redact(&self, text: String) -> String {
        redact(text, &self.token)
    }

    /// Remember a user's DM channel (seen on an inbound DM), saving a lookup on reply.
    pub(crate) fn learn_dm(&self, user: u64, channel: ChannelId) {
        self.dms.lock().expect("dms lock").insert(user, channel);
    }

    /// A deferred slash command whose answer is still to come.
    pub(crate) fn await_answer(&self, interaction: String, token: String) {
        let mut map = self.interactions.lock().expect("interactions lock");
        map.retain(|_, (_, at)| at.elapsed() < INTERACTION_LIFETIME);
        map.insert(interaction, (token, Instant::now()));
    }

    fn interaction_token(&self, message: &OutboundMessage) -> Option<String> {
        if message.kind != OutboundKind::Reply {
            return None;
        }
        let reply_to = message.in_reply_to.as_ref()?;
        let map = self.interactions.lock().expect("interactions lock");
        map.get(reply_to)
            .filter(|(_, at)| at.elapsed() < INTERACTION_LIFETIME)
            .map(|(token, _)| token.clone())
    }

    /// The Discord channel a route's messages go to: the thread, the guild channel, or the
    /// user's DM channel (opened once when not seen yet).
    async fn target(&self, route: &ChatRoute) -> Result<ChannelId, DeliveryError> {
        match route.kind {
            ChatKind::Group => {
                let channel = route.thread_id.as_deref().unwrap_or(&route.chat_id);
                Ok(ChannelId::new(id(channel, "channel")?))
            }
            ChatKind::Direct => {
                let user = id(&route.chat_id, "user")?;
                if let Some(channel) = self.dms.lock().expect("dms lock").get(&user) {
                    return Ok(*channel);
                }
                let dm = self
                    .http
                    .create_private_channel(
                        &serde_json::json!({ "recipient_id": user.to_string() }),
                    )
                    .await
                    .map_err(|e| failure(e, &self.token))?;
                self.learn_dm(user, dm.id);
                Ok(dm.id)
            }
            ChatKind::Conversation => Err(DeliveryError::Rejected(
                "a Discord route is a DM or a guild channel".into(),
            )),
        }
    }

    async fn edit(
        &self,
        target: ChannelId,
        id: MessageId,
        text: &str,
    ) -> Result<(), DeliveryError> {
        target
            // No bot message keeps buttons once edited (an approval prompt's edit says who
            // decided; its buttons go).
            .edit_message(
                &self.http,
                id,
                EditMessage::new().content(text).components(Vec::new()),
            )
            .await
            .map(|_| ())
            .map_err(|e| failure(e, &self.token))
    }
}

impl DiscordChannel {
    /// An approval prompt with three buttons, answered by component interactions.
    async fn send_approval(
        &self,
        message: &OutboundMessage,
        prompt: &ApprovalPrompt,
    ) -> Result<Delivered, DeliveryError> {
        let target = self.target(&message.route).await?;
        let button = |label: &str, decision: Decision, style: ButtonStyle| {
            CreateButton::new(decision.button_data(&prompt.id))
                .label(label)
                .style(style)
        };
        let row = CreateActionRow::Buttons(vec![
            button("Approve once", Decision::Approve, ButtonStyle::Success),
            button(
                "Always for this chat",
                Decision::Always,
                ButtonStyle::Primary,
            ),
            button("Deny", Decision::Deny, ButtonStyle::Danger),
        ]);
        let text: String = message.text.chars().take(LIMIT).collect();
        let create = CreateMessage::new().content(text).components(vec![row]);
        let sent = target
            .send_message(&self.http, create)
            .await
            .map_err(|e| failure(e, &self.token))?;
        Ok(Delivered {
            platform_message_id: Some(sent.id.to_string()),
        })
    }
}

/// A guild reply points at the message it answers (DMs need no such pointer); a missing
/// original does not fail the reply.
fn reference(target: ChannelId, route: &ChatRoute, in_reply_to: &str) -> Option<MessageReference> {
    if route.kind != ChatKind::Group {
        return None;
    }
    let original = in_reply_to.parse::<u64>().ok()?;
    let mut reference = MessageReference::from((target, MessageId::new(original)));
    reference.fail_if_not_exists = Some(false);
    Some(reference)
}

/// Discord's text operations, for the shared delivery (`TextDelivery`): a piece is a
/// follow-up of a deferred slash command, or a message (the first replying to the inbound
/// message in a guild).
#[async_trait]
impl PieceSender for DiscordChannel {
    type Id = MessageId;
    type Target = ChannelId;

    fn parse_id(&self, text: &str) -> Result<MessageId, DeliveryError> {
        Ok(MessageId::new(id(text, "message")?))
    }

    async fn edit_piece(
        &self,
        target: &ChannelId,
        id: &MessageId,
        text: &str,
    ) -> Result<(), EditError> {
        match self.edit(*target, *id, text).await {
            Ok(()) => Ok(()),
            Err(e @ DeliveryError::Rejected(_)) => Err(EditError::Gone(e)),
            Err(e) => Err(EditError::Failed(e)),
        }
    }

    async fn send_piece(
        &self,
        target: &ChannelId,
        message: &OutboundMessage,
        piece: &str,
        first: bool,
    ) -> Result<MessageId, DeliveryError> {
        let result = match self.interaction_token(message) {
            Some(token) => {
                CreateInteractionResponseFollowup::new()
                    .content(piece)
                    .execute(&self.http, (None, &token))
                    .await
            }
            None => {
                let mut create = CreateMessage::new().content(piece);
                if first
                    && message.kind == OutboundKind::Reply
                    && let Some(reference) = message
                        .in_reply_to
                        .as_deref()
                        .and_then(|r| reference(*target, &message.route, r))
                {
                    create = create.reference_message(reference);
                }
                target.send_message(&self.http, create).await
            }
        };
        result.map(|m| m.id).map_err(|e| failure(e, &self.token))
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Down while the shard is not connected; connected, by acknowledged heartbeats (the
    /// gateway task notes each), not by the socket being open.
    fn health(&self) -> ChannelHealth {
        self.liveness.health(self.is_ready())
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        if let Some(prompt) = &message.approval {
            return self.send_approval(message, prompt).await;
        }
        if let Some(file) = &message.file {
            let target = self.target(&message.route).await?;
            let attachment = serenity::builder::CreateAttachment::path(&file.path)
                .await
                .map_err(|e| {
                    DeliveryError::Rejected(format!("the file {} cannot be read: {e}", file.name))
                })?;
            let caption: String = message.text.chars().take(LIMIT).collect();
            let create = CreateMessage::new().content(caption).add_file(attachment);
            let sent = target
                .send_message(&self.http, create)
                .await
                .map_err(|e| failure(e, &self.token))?;
            return Ok(Delivered {
                platform_message_id: Some(sent.id.to_string()),
            });
        }
        let pieces = split(&message.text, LIMIT);
        if pieces.is_empty() {
            return Ok(Delivered::default());
        }
        let target = self.target(&message.route).await?;
        let stream_key = target.get().to_string();
        let delivered = self
            .text
            .deliver(self, &target, &stream_key, message, &pieces)
            .await?;
        // A slash command's answer is complete: its interaction token is no longer needed.
        if let Some(reply_to) = &message.in_reply_to
            && message.kind == OutboundKind::Reply
        {
            self.interactions
                .lock()
                .expect("interactions lock")
                .remove(reply_to);
        }
        Ok(delivered)
    }

    async fn stream_delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        // A slash command's answer arrives whole, as the follow-up of its interaction.
        if self
            .interactions
            .lock()
            .expect("interactions lock")
            .contains_key(in_reply_to)
        {
            return;
        }
        let Ok(target) = self.target(route).await else {
            return;
        };
        let stream_key = target.get().to_string();
        let mut live = self.text.streams.lock(&stream_key, in_reply_to).await;
        let Some(update) = live.push(delta, LIMIT, self.text.edit_interval) else {
            return;
        };
        let result = match &update {
            LiveUpdate::Send(text) => {
                let mut create = CreateMessage::new().content(text);
                if let Some(reference) = reference(target, route, in_reply_to) {
                    create = create.reference_message(reference);
                }
                target
                    .send_message(&self.http, create)
                    .await
                    .map(|m| (text.clone(), Some(m.id.to_string())))
            }
            LiveUpdate::Edit { id, text } => match id.parse::<u64>() {
                Ok(shown) => target
                    .edit_message(
                        &self.http,
                        MessageId::new(shown),
                        EditMessage::new().content(text),
                    )
                    .await
                    .map(|_| (text.clone(), None)),
                Err(_) => return,
            },
        };
        match result {
            Ok((text, id)) => {
                self.text
                    .streams
                    .shown(&stream_key, in_reply_to, &mut live, text, id)
                    .await
            }
            Err(e) => match failure(e, &self.token) {
                DeliveryError::RateLimited {
                    retry_after: wait, ..
                } => {
                    tracing::info!(
                        seconds = wait.as_secs_f64(),
                        "Discord asked to slow down edits"
                    );
                    live.slow_down(wait);
                }
                e => tracing::warn!(error = %e, "streaming update failed"),
            },
        }
    }

    async fn typing(&self, route: &ChatRoute) {
        let Ok(target) = self.target(route).await else {
            return;
        };
        if let Err(e) = target.broadcast_typing(&self.http).await {
            tracing::debug!(error = %self.redact(e.to_string()), "typing indicator failed");
        }
    }
}
