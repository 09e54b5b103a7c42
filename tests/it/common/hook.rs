//! A client for the webhook channel: signed posts and the conversation list.

use super::service::Service;
use serde_json::{Value, json};

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub struct Hook {
    pub base: String,
    pub client: reqwest::Client,
    secret: String,
}

impl Hook {
    pub fn new(service: &Service, secret: &str) -> Self {
        Self::for_base(&service.base, secret)
    }

    pub fn for_base(base: &str, secret: &str) -> Self {
        Hook {
            base: base.to_string(),
            client: reqwest::Client::new(),
            secret: secret.into(),
        }
    }

    pub async fn post_raw(&self, path: &str, body: &str, ts: i64, secret: &str) -> (u16, Value) {
        let sig = ferroclaw_channel_webhook::sign(secret.as_bytes(), ts, body.as_bytes());
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("x-ferroclaw-timestamp", ts.to_string())
            .header("x-ferroclaw-signature", sig)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Posts a whole message body, signed, waiting up to a minute for the turn; asserts 200
    /// and returns the answer (`replies`, ...).
    pub async fn post_message(&self, body: &Value) -> Value {
        let (status, answer) = self
            .post_raw(
                "/v1/webhooks/main/messages?wait=60",
                &body.to_string(),
                now(),
                &self.secret,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    pub async fn send(
        &self,
        conversation: &str,
        thread: Option<&str>,
        id: &str,
        text: &str,
        query: &str,
    ) -> (u16, Value) {
        let body = json!({"conversation_id": conversation, "thread_id": thread, "message_id": id,
            "sender": {"id": "u-7", "name": "Alice"}, "text": text});
        self.post_raw(
            &format!("/v1/webhooks/main/messages{query}"),
            &body.to_string(),
            now(),
            &self.secret,
        )
        .await
    }

    /// Send one message, wait (up to 30 s) for its turn, and return its replies' text,
    /// joined by newlines.
    pub async fn ask(&self, conversation: &str, id: &str, text: &str) -> String {
        let (status, body) = self.send(conversation, None, id, text, "?wait=30").await;
        assert_eq!(status, 200, "{body}");
        body["replies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub async fn list(&self, conversation: &str, after: i64) -> Vec<Value> {
        let v: Value = self
            .client
            .get(format!(
                "{}/v1/webhooks/main/conversations/{conversation}/messages?after={after}",
                self.base
            ))
            .bearer_auth(&self.secret)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["messages"].as_array().unwrap().clone()
    }

    /// Wait (up to 40 s) for a reply in `conversation` whose text contains `text`.
    pub async fn reply_containing(&self, conversation: &str, text: &str) -> String {
        super::wait_for(
            &format!("a reply containing {text:?}"),
            std::time::Duration::from_secs(40),
            || async {
                self.list(conversation, 0)
                    .await
                    .into_iter()
                    .filter(|m| m["kind"] == "reply")
                    .filter_map(|m| m["text"].as_str().map(str::to_string))
                    .find(|t| t.contains(text))
            },
        )
        .await
    }
}
