//! Slack's Web API over the service's HTTP stack (reqwest): one POST per method, its `ok`
//! checked, a 429 turned into the wait its `Retry-After` names. Tokens go in the
//! `Authorization` header only and are redacted from every error text.

use ferroclaw_channel_core::DeliveryError;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::time::Duration;

/// Total timeout of one call.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 429: wait this long.
    RateLimited(Duration),
    /// `ok: false` with Slack's error code (`channel_not_found`, `message_not_found`, …).
    Slack(String),
    /// No answer, or not one Slack gives (network trouble, 5xx).
    Http(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::RateLimited(wait) => {
                write!(f, "rate limited for {:.1} s", wait.as_secs_f64())
            }
            ApiError::Slack(code) => write!(f, "Slack said {code}"),
            ApiError::Http(why) => write!(f, "{why}"),
        }
    }
}

impl ApiError {
    /// How the outbox acts on it: wait on a 429, retry trouble, give up on what Slack refuses.
    pub fn into_delivery(self) -> DeliveryError {
        match self {
            ApiError::RateLimited(retry_after) => DeliveryError::RateLimited {
                reason: "Slack rate limit".into(),
                retry_after,
            },
            ApiError::Slack(code) if retryable(&code) => DeliveryError::Retry {
                reason: format!("Slack said {code}"),
                retry_after: None,
            },
            ApiError::Slack(code) => DeliveryError::Rejected(format!("Slack said {code}")),
            ApiError::Http(why) => DeliveryError::Retry {
                reason: why,
                retry_after: None,
            },
        }
    }
}

/// Errors that pass (Slack's own trouble), as opposed to a refusal of this message.
fn retryable(code: &str) -> bool {
    matches!(
        code,
        "internal_error"
            | "fatal_error"
            | "service_unavailable"
            | "request_timeout"
            | "ratelimited"
    )
}

pub struct WebApi {
    http: reqwest::Client,
    base: String,
    token: SecretString,
}

impl WebApi {
    pub fn new(base: &str, token: SecretString) -> Self {
        WebApi {
            http: reqwest::Client::builder()
                .timeout(TIMEOUT)
                .connect_timeout(Duration::from_secs(10))
                .build()
                .expect("the HTTP client builds"),
            base: base.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// `method` with a JSON body, as the bot.
    pub async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(self.token.expose_secret())
            .json(body);
        self.answer(request).await
    }

    /// `method` with form fields (methods that take no JSON), as the bot or with `token`
    /// (the app-level token of `apps.connections.open`).
    pub async fn call_form(
        &self,
        method: &str,
        token: Option<&SecretString>,
        fields: &[(&str, String)],
    ) -> Result<Value, ApiError> {
        let token = token.unwrap_or(&self.token);
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(token.expose_secret())
            .form(fields);
        self.answer(request).await
    }

    /// POST `bytes` to an upload URL `files.getUploadURLExternal` gave.
    pub async fn upload(&self, url: &str, bytes: Vec<u8>) -> Result<(), ApiError> {
        let response = self
            .http
            .post(url)
            .bearer_auth(self.token.expose_secret())
            .body(bytes)
            .send()
            .await
            .map_err(|e| ApiError::Http(self.redact(e.without_url().to_string())))?;
        check_status(&response)?;
        Ok(())
    }

    /// GET a private file's bytes (`url_private`, with the bot token), at most `max` bytes.
    pub async fn download(&self, url: &str, max: u64) -> Result<Vec<u8>, (ApiError, bool)> {
        let mut response = self
            .http
            .get(url)
            .bearer_auth(self.token.expose_secret())
            .send()
            .await
            .map_err(|e| {
                (
                    ApiError::Http(self.redact(e.without_url().to_string())),
                    false,
                )
            })?;
        check_status(&response).map_err(|e| (e, false))?;
        if response.content_length().is_some_and(|n| n > max) {
            return Err((ApiError::Http("too large".into()), true));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            (
                ApiError::Http(self.redact(e.without_url().to_string())),
                false,
            )
        })? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                return Err((ApiError::Http("too large".into()), true));
            }
        }
        Ok(bytes)
    }

    async fn answer(&self, request: reqwest::RequestBuilder) -> Result<Value, ApiError> {
        let response = request
            .send()
            .await
            .map_err(|e| ApiError::Http(self.redact(e.without_url().to_string())))?;
        check_status(&response)?;
        let body: Value = response
            .json()
            .await
            .map_err(|e| ApiError::Http(format!("unreadable answer: {}", e.without_url())))?;
        if body["ok"].as_bool() == Some(true) {
            Ok(body)
        } else {
            Err(ApiError::Slack(
                body["error"]
                    .as_str()
                    .unwrap_or("unknown_error")
                    .to_string(),
            ))
        }
    }

    /// An error text with the token taken out.
    pub fn redact(&self, text: String) -> String {
        text.replace(self.token.expose_secret(), "[redacted]")
    }
}

/// 429 (with its `Retry-After`) and other non-success statuses as errors.
fn check_status(response: &reqwest::Response) -> Result<(), ApiError> {
    let status = response.status();
    if status.as_u16() == 429 {
        let wait = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(1);
        return Err(ApiError::RateLimited(Duration::from_secs(wait)));
    }
    if !status.is_success() {
        return Err(ApiError::Http(format!("Slack answered {status}")));
    }
    Ok(())
}
