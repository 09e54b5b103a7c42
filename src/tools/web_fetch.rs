//! `web_fetch`: HTTP(S) GET with size and time limits, under the policy of
//! [`crate::egress`] (loopback, private, metadata and the host's own addresses refused unless
//! `tools.web_fetch_allow_private`; `[egress]` hosts: denied ones refused, unlisted ones in
//! allowlist mode asked about first; secrets redacted from the URL; no system proxy).

use super::{Tool, ToolClass, ToolContext, ToolError, ToolRisk};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

const MAX_BYTES: usize = 512 * 1024;
const TIMEOUT: Duration = Duration::from_secs(20);

pub struct WebFetch {
    guarded: std::sync::Arc<crate::egress::Guarded>,
}

impl WebFetch {
    /// Fetches under the service's one address policy.
    pub fn new(guarded: std::sync::Arc<crate::egress::Guarded>) -> Self {
        WebFetch { guarded }
    }
}

#[async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &str {
        "web_fetch"
    }
    fn description(&self) -> &str {
        "Fetch a web page or API response over http(s) with GET; returns the status and up to 512 KB of the body."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"url": {"type": "string", "description": "http:// or https:// URL"}},
               "required": ["url"], "additionalProperties": false})
    }
    fn read_only(&self) -> bool {
        true
    }
    /// Egress to the URL's host (asking first when the egress allowlist does not list it);
    /// what comes back is untrusted.
    fn risk(&self, args: &Value, _cx: &ToolContext) -> ToolRisk {
        let host = args
            .get("url")
            .and_then(Value::as_str)
            .and_then(|u| reqwest::Url::parse(u).ok())
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .unwrap_or_default();
        ToolRisk {
            class: ToolClass::Egress,
            asks: self.guarded.unlisted_reason(&host),
            target: Some(host),
            untrusted_result: true,
        }
    }
    async fn run(&self, args: Value, _cx: &ToolContext) -> Result<String, ToolError> {
        #[derive(serde::Deserialize)]
        struct Args {
            url: String,
        }
        let Args { url: raw } = super::typed(args)?;
        let (client, url) = self
            .guarded
            .check(&raw, crate::egress::Caller::Tool)
            .map_err(|e| {
                ToolError(if e.starts_with("refused") {
                    e
                } else {
                    format!("field `url`: {e}")
                })
            })?;
        let response = client.get(url).timeout(TIMEOUT).send().await.map_err(|e| {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            ToolError(format!("fetch failed: {text}"))
        })?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut body = Vec::new();
        let mut truncated = false;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ToolError(format!("reading the body failed: {e}")))?;
            let room = MAX_BYTES - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body);
        Ok(format!(
            "HTTP {} ({content_type}){}\n\n{text}",
            status.as_u16(),
            if truncated {
                ", truncated at 512 KB"
            } else {
                ""
            }
        ))
    }
}
