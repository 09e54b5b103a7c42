//! Delivery to Telegram: replies (split at 4096, HTML with a plain-text fallback), edits,
//! streamed replies (one message edited at most every `stream_edit_interval`, no-op edits
//! skipped, `retry_after` honoured) and the typing indicator, all in the right forum topic.

use crate::format;
use async_trait::async_trait;
use ferroclaw_channel_core::{
    ApprovalPrompt, Channel, ChannelHealth, ChatRoute, Decision, Delivered, DeliveryError,
    EditError, FetchError, LiveReplies, LiveUpdate, Liveness, OutboundFile, OutboundMessage,
    PieceSender, PreviewLedger, TextDelivery,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;
use teloxide::RequestError;
use teloxide::prelude::*;
use teloxide::types::{
    ChatAction, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, MessageId, ParseMode,
    ThreadId,
};
use teloxide::{ApiError, Bot};

pub struct TelegramChannel {
    bot: Bot,
    /// Redacts the token from error texts (reqwest errors carry the URL).
    token: String,
    /// Streamed replies, pieces failed attempts sent, the pace of edits.
    text: TextDelivery<MessageId>,
    pub(crate) ready: AtomicBool,
    /// When the last long poll completed (polling only: a webhook bot is quiet when its
    /// users are).
    pub(crate) liveness: Option<Liveness>,
}

fn chat(route: &ChatRoute) -> Result<ChatId, DeliveryError> {
    route.chat_id.parse::<i64>().map(ChatId).map_err(|_| {
        DeliveryError::Rejected(format!("`{}` is not a Telegram chat id", route.chat_id))
    })
}

fn thread(route: &ChatRoute) -> Option<ThreadId> {
    route
        .thread_id
        .as_deref()
        .and_then(|t| t.parse::<i32>().ok())
        .map(|t| ThreadId(MessageId(t)))
}

impl TelegramChannel {
    pub fn new(
        bot: Bot,
        token: String,
        edit_interval: Duration,
        previews: Option<Arc<dyn PreviewLedger>>,
        liveness: Option<Liveness>,
    ) -> Self {
        TelegramChannel {
            liveness,
            bot,
            token,
            text: TextDelivery::new(
                LiveReplies::new(crate::translate::CHANNEL, previews),
                edit_interval,
            ),
            ready: AtomicBool::new(false),
        }
    }

    pub(crate) fn redact(&self, text: String) -> String {
        if self.token.is_empty() {
            text
        } else {
            text.replace(&self.token, "<token>")
        }
    }

    fn failure(&self, err: RequestError) -> DeliveryError {
        match err {
            RequestError::RetryAfter(seconds) => DeliveryError::RateLimited {
                reason: "Telegram flood control".into(),
                retry_after: seconds.duration(),
            },
            RequestError::Network(_) | RequestError::Io(_) | RequestError::InvalidJson { .. } => {
                DeliveryError::Retry {
                    reason: self.redact(err.to_string()),
                    retry_after: None,
                }
            }
            RequestError::Api(_) | RequestError::MigrateToChatId(_) => {
                DeliveryError::Rejected(self.redact(err.to_string()))
            }
        }
    }

    /// Send one piece as HTML; if Telegram rejects the markup, send the same text plain.
    async fn send_html(
        &self,
        route: &ChatRoute,
        markdown: &str,
    ) -> Result<MessageId, RequestError> {
        let chat = chat(route).map_err(|_| RequestError::Api(ApiError::ChatNotFound))?;
        let mut html = self
            .bot
            .send_message(chat, format::to_html(markdown))
            .parse_mode(ParseMode::Html);
        if let Some(t) = thread(route) {
            html = html.message_thread_id(t);
        }
        match html.await {
            Ok(m) => Ok(m.id),
            Err(RequestError::Api(ApiError::CantParseEntities(_))) => {
                tracing::info!("Telegram rejected the HTML; sending plain text");
                let mut plain = self.bot.send_message(chat, markdown);
                if let Some(t) = thread(route) {
                    plain = plain.message_thread_id(t);
                }
                plain.await.map(|m| m.id)
            }
            Err(e) => Err(e),
        }
    }

    /// Replace a message's text with one piece, HTML first, then plain. Unchanged is fine.
    async fn edit_html(
        &self,
        chat: ChatId,
        id: MessageId,
        markdown: &str,
    ) -> Result<(), RequestError> {
        let html = self
            .bot
            .edit_message_text(chat, id, format::to_html(markdown))
            .parse_mode(ParseMode::Html);
        match html.await {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(RequestError::Api(ApiError::CantParseEntities(_))) => {
                match self.bot.edit_message_text(chat, id, markdown).await {
                    Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// A file, natively: images as photos, OGG audio as a voice note, anything else as a
    /// document; the text is its caption (Telegram keeps 1024 characters of it).
    async fn send_file(
        &self,
        message: &OutboundMessage,
        file: &OutboundFile,
    ) -> Result<Delivered, DeliveryError> {
        let chat_id = chat(&message.route)?;
        if !std::path::Path::new(&file.path).is_file() {
            return Err(DeliveryError::Rejected(format!(
                "the file {} no longer exists",
                file.name
            )));
        }
        let input = InputFile::file(&file.path).file_name(file.name.clone());
        let caption: String = message.text.chars().take(1024).collect();
        let thread = thread(&message.route);
        // The three requests are different types with the same two setters.
        macro_rules! send {
            ($request:expr) => {{
                let mut request = $request;
                if !caption.is_empty() {
                    request = request.caption(caption);
                }
                if let Some(t) = thread {
                    request = request.message_thread_id(t);
                }
                request.await
            }};
        }
        let sent = if file.is_image() {
            send!(self.bot.send_photo(chat_id, input))
        } else if file.mime == "audio/ogg" {
            send!(self.bot.send_voice(chat_id, input))
        } else {
            send!(self.bot.send_document(chat_id, input))
        };
        let sent = sent.map_err(|e| self.failure(e))?;
        Ok(Delivered {
            platform_message_id: Some(sent.id.0.to_string()),
        })
    }
}

impl TelegramChannel {
    /// An approval prompt with its three buttons (plain text: arguments are shown as they
    /// are). Its later edit, which sends no keyboard, takes the buttons away.
    async fn send_approval(
        &self,
        message: &OutboundMessage,
        prompt: &ApprovalPrompt,
    ) -> Result<Delivered, DeliveryError> {
        let chat_id = chat(&message.route)?;
        let button = |label: &str, decision: Decision| {
            InlineKeyboardButton::callback(label, decision.button_data(&prompt.id))
        };
        let keyboard = InlineKeyboardMarkup::new([[
            button("Approve once", Decision::Approve),
            button("Always for this chat", Decision::Always),
            button("Deny", Decision::Deny),
        ]]);
        let text: String = message.text.chars().take(format::LIMIT).collect();
        let mut request = self.bot.send_message(chat_id, text).reply_markup(keyboard);
        if let Some(t) = thread(&message.route) {
            request = request.message_thread_id(t);
        }
        let sent = request.await.map_err(|e| self.failure(e))?;
        Ok(Delivered {
            platform_message_id: Some(sent.id.0.to_string()),
        })
    }
}

/// Telegram's text operations, for the shared delivery (`TextDelivery`).
#[async_trait]
impl PieceSender for TelegramChannel {
    type Id = MessageId;
    type Target = ChatId;

    fn parse_id(&self, id: &str) -> Result<MessageId, DeliveryError> {
        id.parse::<i32>()
            .map(MessageId)
            .map_err(|_| DeliveryError::Rejected(format!("`{id}` is not a Telegram message id")))
    }

    async fn edit_piece(&self, chat: &ChatId, id: &MessageId, text: &str) -> Result<(), EditError> {
        match self.edit_html(*chat, *id, text).await {
            Ok(()) => Ok(()),
            Err(e @ RequestError::Api(ApiError::MessageToEditNotFound)) => {
                Err(EditError::Gone(self.failure(e)))
            }
            Err(e) => Err(EditError::Failed(self.failure(e))),
        }
    }

    async fn send_piece(
        &self,
        _chat: &ChatId,
        message: &OutboundMessage,
        piece: &str,
        _first: bool,
    ) -> Result<MessageId, DeliveryError> {
        self.send_html(&message.route, piece)
            .await
            .map_err(|e| self.failure(e))
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        crate::translate::CHANNEL
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn health(&self) -> ChannelHealth {
        match &self.liveness {
            Some(liveness) => liveness.health(self.is_ready()),
            None => ChannelHealth::connected(self.is_ready()),
        }
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        if let Some(file) = &message.file {
            return self.send_file(message, file).await;
        }
        if let Some(prompt) = &message.approval {
            return self.send_approval(message, prompt).await;
        }
        let chat_id = chat(&message.route)?;
        let pieces = format::split(&message.text, format::LIMIT);
        self.text
            .deliver(self, &chat_id, &message.route.chat_id, message, &pieces)
            .await
    }

    async fn fetch_file(&self, id: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        use futures::StreamExt;
        use teloxide::net::Download;
        let failed = |e: String| FetchError::Failed(self.redact(e));
        let file = self
            .bot
            .get_file(teloxide::types::FileId(id.to_string()))
            .await
            .map_err(|e| failed(e.to_string()))?;
        if u64::from(file.meta.size) > max_bytes {
            return Err(FetchError::TooLarge { limit: max_bytes });
        }
        let mut stream = self.bot.download_file_stream(&file.path);
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| failed(e.to_string()))?;
            if (bytes.len() + chunk.len()) as u64 > max_bytes {
                return Err(FetchError::TooLarge { limit: max_bytes });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    async fn stream_delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        let Ok(chat_id) = chat(route) else { return };
        let mut live = self.text.streams.lock(&route.chat_id, in_reply_to).await;
        let Some(update) = live.push(delta, format::LIMIT, self.text.edit_interval) else {
            return;
        };
        let result = match &update {
            LiveUpdate::Send(text) => {
                let mut send = self.bot.send_message(chat_id, text.clone());
                if let Some(t) = thread(route) {
                    send = send.message_thread_id(t);
                }
                send.await.map(|m| (text.clone(), Some(m.id.0.to_string())))
            }
            LiveUpdate::Edit { id, text } => {
                let Ok(id) = id.parse::<i32>() else { return };
                match self
                    .bot
                    .edit_message_text(chat_id, MessageId(id), text.clone())
                    .await
                {
                    Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => {
                        Ok((text.clone(), None))
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok((text, id)) => {
                self.text
                    .streams
                    .shown(&route.chat_id, in_reply_to, &mut live, text, id)
                    .await
            }
            Err(RequestError::RetryAfter(seconds)) => {
                tracing::info!(
                    seconds = seconds.seconds(),
                    "Telegram asked to slow down edits"
                );
                live.slow_down(seconds.duration());
            }
            Err(e) => {
                tracing::warn!(error = %self.redact(e.to_string()), "streaming update failed")
            }
        }
    }

    async fn typing(&self, route: &ChatRoute) {
        let Ok(chat_id) = chat(route) else { return };
        let mut action = self.bot.send_chat_action(chat_id, ChatAction::Typing);
        if let Some(t) = thread(route) {
            action = action.message_thread_id(t);
        }
        if let Err(e) = action.await {
            tracing::debug!(error = %self.redact(e.to_string()), "typing indicator failed");
        }
    }
}
