//! Delivery to Telegram: replies (split at 4096, HTML with a plain-text fallback), edits,
//! streamed replies (one message edited at most every `stream_edit_interval`, no-op edits
//! skipped, `retry_after` honoured) and the typing indicator, all in the right forum topic.

use crate::format;
use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, ChatRoute, Delivered, DeliveryError, FetchError, LiveReplies, LiveUpdate,
    OutboundFile, OutboundKind, OutboundMessage, PreviewLedger, SentPieces,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;
use teloxide::RequestError;
use teloxide::prelude::*;
use teloxide::types::{ChatAction, InputFile, MessageId, ParseMode, ThreadId};
use teloxide::{ApiError, Bot};

pub struct TelegramChannel {
    bot: Bot,
    /// Redacts the token from error texts (reqwest errors carry the URL).
    token: String,
    edit_interval: Duration,
    streams: LiveReplies,
    partial: SentPieces<MessageId>,
    pub(crate) ready: AtomicBool,
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
    ) -> Self {
        TelegramChannel {
            bot,
            token,
            edit_interval,
            streams: LiveReplies::new(crate::translate::CHANNEL, previews),
            partial: SentPieces::default(),
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
    async fn send_piece(
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
    async fn edit_piece(
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

    /// Send pieces `from..` of a message, remembering progress for retries.
    async fn send_pieces(
        &self,
        message: &OutboundMessage,
        pieces: &[String],
        mut sent: Vec<MessageId>,
    ) -> Result<Vec<MessageId>, DeliveryError> {
        for piece in &pieces[sent.len().min(pieces.len())..] {
            match self.send_piece(&message.route, piece).await {
                Ok(id) => sent.push(id),
                Err(e) => {
                    self.partial.keep(message.id, sent);
                    return Err(self.failure(e));
                }
            }
        }
        Ok(sent)
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

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        crate::translate::CHANNEL
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        if let Some(file) = &message.file {
            return self.send_file(message, file).await;
        }
        let chat_id = chat(&message.route)?;
        let pieces = format::split(&message.text, format::LIMIT);
        if pieces.is_empty() {
            return Ok(Delivered::default());
        }
        // An edit of an earlier message (plan cards, status messages).
        if let Some(id) = message
            .edit_platform_id
            .as_deref()
            .and_then(|id| id.parse::<i32>().ok())
        {
            self.edit_piece(chat_id, MessageId(id), &pieces[0])
                .await
                .map_err(|e| self.failure(e))?;
            return Ok(Delivered {
                platform_message_id: Some(id.to_string()),
            });
        }
        let mut sent = self.partial.take(message.id);
        // A reply that was streamed (here, or by an attempt before a crash): its first piece
        // replaces the streamed message.
        let mut streamed = None;
        if sent.is_empty()
            && message.kind == OutboundKind::Reply
            && let Some(reply_to) = &message.in_reply_to
            && let Some((shown, edit)) = self
                .streams
                .settle_final(
                    &message.route.chat_id,
                    reply_to,
                    &pieces[0],
                    self.edit_interval,
                )
                .await
        {
            streamed = Some(reply_to);
            if let Ok(shown) = shown.parse::<i32>().map(MessageId) {
                let kept = !edit
                    || match self.edit_piece(chat_id, shown, &pieces[0]).await {
                        Ok(()) => true,
                        // The preview was deleted in the chat: the reply is sent fresh.
                        Err(RequestError::Api(ApiError::MessageToEditNotFound)) => false,
                        Err(e) => return Err(self.failure(e)),
                    };
                if kept {
                    sent.push(shown);
                }
            }
        }
        let sent = self.send_pieces(message, &pieces, sent).await?;
        if let Some(reply_to) = streamed {
            self.streams
                .finished(&message.route.chat_id, reply_to)
                .await;
        }
        Ok(Delivered {
            platform_message_id: sent.first().map(|id| id.0.to_string()),
        })
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
        let mut live = self.streams.lock(&route.chat_id, in_reply_to).await;
        let Some(update) = live.push(delta, format::LIMIT, self.edit_interval) else {
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
                self.streams
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
