//! Property test of the webhook ingress: arbitrary bodies, headers and paths never panic and
//! always get 2xx or 4xx (with a JSON error for 4xx). Half the cases carry a valid signature
//! so the body parser is exercised, not just the signature check.

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request;
use ferroclaw_channel_core::{
    Accepted, InboundMessage, Inbox, InboxError, LogUnavailable, OutboundMessage,
};
use ferroclaw_channel_webhook::{MessageLog, WebhookEndpoint, router, sign};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tower::ServiceExt;

struct AcceptAll;

#[async_trait]
impl Inbox for AcceptAll {
    async fn accept(&self, message: InboundMessage) -> Result<Accepted, InboxError> {
        Ok(Accepted::New {
            session_key: message.route.session_key(),
            journal_id: 1,
        })
    }
}

struct EmptyLog(broadcast::Sender<String>);

#[async_trait]
impl MessageLog for EmptyLog {
    async fn conversation(
        &self,
        _: &str,
        _: &str,
        _: i64,
        _: i64,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        Ok(Vec::new())
    }
    async fn after(&self, _: &str, _: i64, _: i64) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        Ok(Vec::new())
    }
    async fn last_seq(&self, _: &str) -> Result<i64, LogUnavailable> {
        Ok(0)
    }
    async fn replies(
        &self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<Vec<OutboundMessage>, LogUnavailable> {
        Ok(Vec::new())
    }
    async fn wait_answered(&self, _: i64, _: Duration) -> bool {
        true
    }
    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.0.subscribe()
    }
}

fn app() -> axum::Router {
    let mut endpoints = HashMap::new();
    endpoints.insert(
        "main".to_string(),
        WebhookEndpoint::new(
            "s3cret".to_string().into(),
            ferroclaw_channel_webhook::SignatureScheme::Ferroclaw,
        )
        .unwrap(),
    );
    router(
        endpoints,
        Arc::new(AcceptAll),
        Arc::new(EmptyLog(broadcast::channel(4).0)),
        4096,
        Default::default(),
    )
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// JSON-ish bodies: sometimes well-formed messages with odd field values, sometimes noise.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,20}".prop_map(serde_json::Value::from),
        Just(serde_json::json!({"id": "u"})),
        Just(serde_json::json!([])),
    ];
    let message = (
        value.clone(),
        value.clone(),
        value.clone(),
        value.clone(),
        value,
        any::<bool>(),
    )
        .prop_map(|(conversation, message, sender, text, thread, drop_one)| {
            let mut map = serde_json::Map::new();
            map.insert("conversation_id".into(), conversation);
            map.insert("message_id".into(), message);
            map.insert("sender".into(), sender);
            map.insert("text".into(), text);
            map.insert("thread_id".into(), thread);
            if drop_one {
                map.remove("text");
            }
            serde_json::to_vec(&map).unwrap()
        });
    prop_oneof![message, proptest::collection::vec(any::<u8>(), 0..6000)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn arbitrary_requests_get_only_2xx_or_4xx(
        body in body(),
        signed in any::<bool>(),
        timestamp in prop_oneof![Just(None), Just(Some("nan".to_string())), any::<i64>().prop_map(|t| Some(t.to_string()))],
        signature in prop_oneof![Just(None), ".{0,80}".prop_map(Some)],
        path in prop_oneof![Just("/v1/webhooks/main/messages".to_string()), Just("/v1/webhooks/main/messages?wait=x".to_string()),
                            Just("/v1/webhooks/main/messages?wait=1".to_string()), Just("/v1/webhooks/other/messages".to_string())],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (status, response_body) = runtime.block_on(async {
            let mut request = Request::post(path.as_str());
            if signed {
                let ts = now();
                request = request
                    .header("x-ferroclaw-timestamp", ts.to_string())
                    .header("x-ferroclaw-signature", sign(b"s3cret", ts, &body));
            } else {
                if let Some(v) = timestamp.as_deref().and_then(|t| axum::http::HeaderValue::from_str(t).ok()) {
                    request = request.header("x-ferroclaw-timestamp", v);
                }
                if let Some(v) = signature.as_deref().and_then(|s| axum::http::HeaderValue::from_str(s).ok()) {
                    request = request.header("x-ferroclaw-signature", v);
                }
            }
            let response = app().oneshot(request.body(Body::from(body.clone())).unwrap()).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            (status, bytes)
        });
        prop_assert!(status.is_success() || status.is_client_error(), "status {status}");
        if status.is_client_error() {
            let json: serde_json::Value = serde_json::from_slice(&response_body).expect("4xx bodies are JSON");
            prop_assert!(json["error"].is_string());
        }
        prop_assert!(signed || !status.is_success(), "an unsigned request was accepted");
    }
}
