//! Delivery to Slack: replies in mrkdwn split at 3,900 characters (`chat.postMessage`, in
//! the message's thread), edits (`chat.update`, which also drops an answered prompt's
//! buttons), streamed replies by throttled `chat.update` (a 429 slows the stream down by its
//! `Retry-After`), files through `files.getUploadURLExternal` + upload +
//! `files.completeUploadExternal`, approval prompts as Block Kit buttons, and inbound files
//! fetched from `url_private` with the bot token.

use crate::api::{ApiError, WebApi};
use crate::format::{LIMIT, mrkdwn};
use crate::translate::CHANNEL;
use async_trait::async_trait;
use ferroclaw_channel_core::{
    ApprovalPrompt, Channel, ChannelHealth, ChatRoute, Decision, Delivered, DeliveryError,
    EditError, FetchError, LiveReplies, LiveUpdate, Liveness, OutboundMessage, PieceSender,
    PreviewLedger, TextDelivery, split,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct SlackChannel {
    pub(crate) api: Arc<WebApi>,
    text: TextDelivery<String>,
    ready: AtomicBool,
    /// Socket Mode's frames and pongs (None: the Events API, whose requests come to us).
    pub(crate) liveness: Option<Liveness>,
}

/// Where a route's messages go: its channel, and its thread when it has one.
pub struct Target {
    channel: String,
    thread: Option<String>,
}

impl Target {
    fn of(route: &ChatRoute) -> Self {
        Target {
            channel: route.chat_id.clone(),
            thread: route.thread_id.clone(),
        }
    }

    /// A message body in this place.
    fn body(&self, extra: Value) -> Value {
        let mut body = json!({"channel": self.channel});
        if let Some(thread) = &self.thread {
            body["thread_ts"] = json!(thread);
        }
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        body
    }

    /// The live previews of this place (a thread's are its own).
    fn stream_key(&self) -> String {
        match &self.thread {
            Some(thread) => format!("{}/{thread}", self.channel),
            None => self.channel.clone(),
        }
    }
}

impl SlackChannel {
    pub(crate) fn new(
        api: Arc<WebApi>,
        edit_interval: Duration,
        previews: Option<Arc<dyn PreviewLedger>>,
        liveness: Option<Liveness>,
    ) -> Self {
        SlackChannel {
            api,
            text: TextDelivery::new(LiveReplies::new(CHANNEL, previews), edit_interval),
            ready: AtomicBool::new(false),
            liveness,
        }
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    async fn post(&self, target: &Target, text: &str) -> Result<String, ApiError> {
        let answer = self
            .api
            .call("chat.postMessage", &target.body(json!({"text": text})))
            .await?;
        Ok(answer["ts"].as_str().unwrap_or_default().to_string())
    }

    async fn update(&self, target: &Target, ts: &str, text: &str) -> Result<(), ApiError> {
        // `blocks: []` drops an answered approval prompt's buttons.
        let body = json!({"channel": target.channel, "ts": ts, "text": text, "blocks": []});
        self.api.call("chat.update", &body).await.map(|_| ())
    }

    /// An approval prompt: its text and three buttons whose value names the decision.
    async fn send_approval(
        &self,
        message: &OutboundMessage,
        prompt: &ApprovalPrompt,
    ) -> Result<Delivered, DeliveryError> {
        let target = Target::of(&message.route);
        let text: String = mrkdwn(&message.text).chars().take(LIMIT).collect();
        let button = |label: &str, decision: Decision, style: Option<&str>| {
            let mut b = json!({"type": "button", "text": {"type": "plain_text", "text": label},
                "action_id": decision.button_data(&prompt.id), "value": decision.button_data(&prompt.id)});
            if let Some(style) = style {
                b["style"] = json!(style);
            }
            b
        };
        let blocks = json!([
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": [
                button("Approve once", Decision::Approve, Some("primary")),
                button("Always for this chat", Decision::Always, None),
                button("Deny", Decision::Deny, Some("danger")),
            ]}
        ]);
        let answer = self
            .api
            .call(
                "chat.postMessage",
                &target.body(json!({"text": text, "blocks": blocks})),
            )
            .await
            .map_err(ApiError::into_delivery)?;
        Ok(Delivered {
            platform_message_id: answer["ts"].as_str().map(str::to_string),
        })
    }

    /// A file into the message's thread: an upload URL, the bytes, then the share.
    async fn send_file(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        let file = message.file.as_ref().expect("called for a file");
        let bytes = tokio::fs::read(&file.path).await.map_err(|e| {
            DeliveryError::Rejected(format!("the file {} cannot be read: {e}", file.name))
        })?;
        let fail = ApiError::into_delivery;
        // This method takes form fields, not JSON.
        let fields = [
            ("filename", file.name.clone()),
            ("length", bytes.len().to_string()),
        ];
        let slot = self
            .api
            .call_form("files.getUploadURLExternal", None, &fields)
            .await
            .map_err(fail)?;
        let (Some(url), Some(id)) = (slot["upload_url"].as_str(), slot["file_id"].as_str()) else {
            return Err(DeliveryError::Retry {
                reason: "files.getUploadURLExternal gave no upload_url or file_id".into(),
                retry_after: None,
            });
        };
        self.api.upload(url, bytes).await.map_err(fail)?;
        let target = Target::of(&message.route);
        let mut share =
            json!({"files": [{"id": id, "title": file.name}], "channel_id": target.channel});
        if let Some(thread) = &target.thread {
            share["thread_ts"] = json!(thread);
        }
        if !message.text.is_empty() {
            share["initial_comment"] = json!(mrkdwn(&message.text));
        }
        self.api
            .call("files.completeUploadExternal", &share)
            .await
            .map_err(fail)?;
        Ok(Delivered {
            platform_message_id: Some(id.to_string()),
        })
    }
}

/// Slack's text operations, for the shared delivery (`TextDelivery`).
#[async_trait]
impl PieceSender for SlackChannel {
    type Id = String;
    type Target = Target;

    fn parse_id(&self, text: &str) -> Result<String, DeliveryError> {
        Ok(text.to_string())
    }

    async fn edit_piece(&self, target: &Target, id: &String, text: &str) -> Result<(), EditError> {
        match self.update(target, id, text).await {
            Ok(()) => Ok(()),
            Err(ApiError::Slack(code)) if code == "message_not_found" => Err(EditError::Gone(
                DeliveryError::Rejected("the message is gone".into()),
            )),
            Err(e) => Err(EditError::Failed(e.into_delivery())),
        }
    }

    async fn send_piece(
        &self,
        target: &Target,
        _message: &OutboundMessage,
        piece: &str,
        _first: bool,
    ) -> Result<String, DeliveryError> {
        self.post(target, piece)
            .await
            .map_err(ApiError::into_delivery)
    }
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        CHANNEL
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
        if let Some(prompt) = &message.approval {
            return self.send_approval(message, prompt).await;
        }
        if message.file.is_some() {
            return self.send_file(message).await;
        }
        let pieces = split(&mrkdwn(&message.text), LIMIT);
        let target = Target::of(&message.route);
        let stream_key = target.stream_key();
        self.text
            .deliver(self, &target, &stream_key, message, &pieces)
            .await
    }

    async fn stream_delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str) {
        let target = Target::of(route);
        let stream_key = target.stream_key();
        let mut live = self.text.streams.lock(&stream_key, in_reply_to).await;
        let Some(update) = live.push(delta, LIMIT, self.text.edit_interval) else {
            return;
        };
        let result = match &update {
            LiveUpdate::Send(text) => self
                .post(&target, &mrkdwn(text))
                .await
                .map(|ts| (text.clone(), Some(ts))),
            LiveUpdate::Edit { id, text } => self
                .update(&target, id, &mrkdwn(text))
                .await
                .map(|()| (text.clone(), None)),
        };
        match result {
            Ok((text, id)) => {
                self.text
                    .streams
                    .shown(&stream_key, in_reply_to, &mut live, text, id)
                    .await
            }
            Err(ApiError::RateLimited(wait)) => {
                tracing::info!(
                    seconds = wait.as_secs_f64(),
                    "Slack asked to slow down edits"
                );
                live.slow_down(wait);
            }
            Err(e) => tracing::warn!(error = %e, "streaming update failed"),
        }
    }

    async fn fetch_file(&self, id: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        self.api
            .download(id, max_bytes)
            .await
            .map_err(|(e, too_large)| {
                if too_large {
                    FetchError::TooLarge { limit: max_bytes }
                } else {
                    FetchError::Failed(format!("the Slack file could not be fetched: {e}"))
                }
            })
    }
}
