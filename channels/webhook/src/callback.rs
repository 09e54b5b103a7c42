//! Delivery of bot messages to a webhook's `callback_url`, signed like inbound requests.

use crate::{SignatureScheme, Signing};
use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, ChannelHealth, ChannelState, Delivered, DeliveryError, OutboundMessage,
};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub struct WebhookChannel {
    name: String,
    signing: Signing,
    callback_url: Option<String>,
    /// Where the client comes from, asked on each delivery (the service's is built then, not
    /// at start-up).
    http: fn() -> reqwest::Client,
    calls: Calls,
}

/// How the callbacks went (what `health` shows).
#[derive(Default)]
struct Calls {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Failures since the last success.
    failing: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Calls {
    fn went(&self, result: &Result<Delivered, DeliveryError>) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                self.failing.store(0, Ordering::Relaxed);
                *self.last_error.lock().expect("calls lock") = None;
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.failing.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().expect("calls lock") = Some(e.to_string());
            }
        }
    }
}

impl WebhookChannel {
    /// `callback_url` empty: messages are only kept for the list and event endpoints.
    pub fn new(
        webhook: &str,
        signing: Signing,
        callback_url: &str,
        http: fn() -> reqwest::Client,
    ) -> Self {
        WebhookChannel {
            name: crate::channel_name(webhook),
            signing,
            callback_url: (!callback_url.is_empty()).then(|| callback_url.to_string()),
            http,
            calls: Calls::default(),
        }
    }
}

/// The JSON form of a bot message (callback body and list entry).
pub(crate) fn payload(message: &OutboundMessage, with_seq: bool) -> Value {
    let mut value = json!({
        "conversation_id": message.route.chat_id,
        "thread_id": message.route.thread_id,
        "id": message.id.to_string(),
        "kind": message.kind.as_str(),
        "text": message.text,
        "in_reply_to": message.in_reply_to,
        "edit_of": message.edit_of.map(|id| id.to_string()),
    });
    if with_seq {
        value["seq"] = json!(message.id);
    }
    if let Some(approval) = &message.approval {
        // SPEC §17: answered by POST /v1/webhooks/<name>/approvals/<id>.
        value["approval"] = json!({"id": approval.id, "tool": approval.tool,
            "arguments": approval.arguments, "reason": approval.reason,
            "expires_at": approval.expires_at});
    }
    if let Some(file) = &message.file {
        // Downloaded with the endpoint's bearer: GET <server>/v1/webhooks/<name>/files/<id>.
        let webhook = message
            .route
            .channel
            .strip_prefix("webhook:")
            .unwrap_or_default();
        let size = std::fs::metadata(&file.path).map(|m| m.len()).ok();
        let download = format!("/v1/webhooks/{webhook}/files/{}", message.id);
        // SPEC §15: `attachments: [{name, mime, url}]` (the URL needs the endpoint's bearer);
        // `file` is kept for one release for consumers of the earlier shape.
        value["attachments"] = json!([{"name": file.name, "mime": file.mime, "size": size,
            "url": download}]);
        value["file"] = json!({"name": file.name, "mime": file.mime, "size": size,
            "download": download});
    }
    value
}

#[async_trait]
impl Channel for WebhookChannel {
    fn name(&self) -> &str {
        &self.name
    }

    /// Up while callbacks go through; degraded while they fail (never down: requests still
    /// come in, and the deliveries alert tells of the failing callbacks).
    fn health(&self) -> ChannelHealth {
        let mut health = ChannelHealth::connected(true);
        if self.callback_url.is_none() {
            return health;
        }
        let calls = &self.calls;
        if calls.failing.load(Ordering::Relaxed) > 0 {
            health.state = ChannelState::Degraded;
            health.detail = calls.last_error.lock().expect("calls lock").clone();
        }
        for (name, count) in [
            ("callbacks_ok", &calls.ok),
            ("callbacks_failed", &calls.failed),
            ("callbacks_failing", &calls.failing),
        ] {
            health
                .figures
                .insert(name.to_string(), count.load(Ordering::Relaxed));
        }
        health
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        let Some(url) = &self.callback_url else {
            return Ok(Delivered {
                platform_message_id: Some(message.id.to_string()),
            });
        };
        let result = self.call_back(url, message).await;
        self.calls.went(&result);
        result
    }
}

impl WebhookChannel {
    /// One signed POST of `message` to the callback URL.
    async fn call_back(
        &self,
        url: &str,
        message: &OutboundMessage,
    ) -> Result<Delivered, DeliveryError> {
        let delivered = Delivered {
            platform_message_id: Some(message.id.to_string()),
        };
        let body = serde_json::to_vec(&payload(message, true)).expect("JSON values serialise");
        let timestamp = ferroclaw_channel_core::clock::now_secs();
        let key = self.signing.key();
        let request = (self.http)()
            .post(url)
            .header("content-type", "application/json");
        let request = match self.signing.scheme {
            SignatureScheme::Ferroclaw => request
                .header("x-ferroclaw-timestamp", timestamp.to_string())
                .header("x-ferroclaw-signature", crate::sign(key, timestamp, &body)),
            SignatureScheme::Standard => {
                // The same id on every attempt: receivers deduplicate retries by it.
                let id = format!("msg_{}", message.id);
                let signature = crate::standard::sign(key, &id, timestamp, &body);
                request
                    .header("webhook-id", id)
                    .header("webhook-timestamp", timestamp.to_string())
                    .header("webhook-signature", signature)
            }
        };
        let response = request
            .timeout(Duration::from_secs(15))
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::Retry {
                reason: if e.is_timeout() {
                    "callback timed out".into()
                } else {
                    "callback unreachable".into()
                },
                retry_after: None,
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(delivered)
        } else {
            Err(DeliveryError::Retry {
                reason: format!("callback answered HTTP {}", status.as_u16()),
                retry_after: None,
            })
        }
    }
}
