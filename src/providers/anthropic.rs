//! Anthropic Messages API (`POST {base_url}/v1/messages`, SSE streaming, tool use).

use super::http_error::classify_status;
use super::stream_limits;
use super::wire_tools::{AnthropicTools, WithTools};
use super::{
    ChatRequest, ChatResponse, DeltaSink, ModelProvider, ProviderError, Role, ToolCall, Usage,
};
use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

const API_VERSION: &str = "2023-06-01";
const MAX_TOKENS: u32 = super::MAX_OUTPUT_TOKENS;

pub struct AnthropicProvider {
    /// Where the client comes from, asked on each call (built on the first, not at start-up).
    http: crate::http::Transport,
    endpoint: String,
    api_key: Option<SecretString>,
}

impl AnthropicProvider {
    pub fn new(
        http: crate::http::Transport,
        base_url: &str,
        api_key: Option<SecretString>,
    ) -> Self {
        AnthropicProvider {
            http,
            endpoint: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            api_key,
        }
    }

    /// The body's fields but the tools (see `complete`).
    fn body(model: &str, request: &ChatRequest) -> Value {
        let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
        for m in &request.messages {
            match m.role {
                Role::User if !m.images.is_empty() => {
                    let mut parts: Vec<Value> = m
                        .images
                        .iter()
                        .map(|i| json!({"type": "image", "source": {"type": "base64", "media_type": i.mime, "data": &*i.base64}}))
                        .collect();
                    parts.push(json!({"type": "text", "text": m.content}));
                    messages.push(json!({"role": "user", "content": parts}));
                }
                Role::User => messages.push(json!({"role": "user", "content": m.content})),
                Role::Assistant => {
                    let mut content = Vec::new();
                    if !m.content.is_empty() {
                        content.push(json!({"type": "text", "text": m.content}));
                    }
                    for call in &m.tool_calls {
                        let input: Value =
                            serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    if content.is_empty() {
                        content.push(json!({"type": "text", "text": "(no text)"}));
                    }
                    messages.push(json!({"role": "assistant", "content": content}));
                }
                Role::Tool => {
                    let block = json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content});
                    // Results of one batch of calls travel together in one user message.
                    match messages.last_mut() {
                        Some(last) if last["role"] == "user" && last["content"].is_array() => {
                            last["content"].as_array_mut().expect("checked").push(block);
                        }
                        _ => messages.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        // Cache breakpoints: the tools and the system prompt (stable from call to call),
        // and the history up to the newest message (the next call of the turn reads it back).
        if let Some(last) = messages.last_mut() {
            mark_cached(last);
        }
        if let Some(volatile) = &request.volatile {
            let block = json!({"type": "text", "text": volatile});
            match messages.last_mut() {
                Some(last) if last["role"] == "user" => {
                    as_blocks(last);
                    last["content"].as_array_mut().expect("blocks").push(block);
                }
                _ => messages.push(json!({"role": "user", "content": [block]})),
            }
        }
        let mut body = json!({
            "model": model,
            "max_tokens": MAX_TOKENS,
            "messages": messages,
            "stream": true,
        });
        if !request.system.is_empty() {
            body["system"] = json!([{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}]);
        }
        body
    }
}

/// A message's content as a list of blocks (a plain string becomes one text block).
fn as_blocks(message: &mut Value) {
    if let Some(text) = message["content"].as_str() {
        message["content"] = json!([{"type": "text", "text": text}]);
    }
}

/// Mark the end of `message` as a cache breakpoint (its last block).
fn mark_cached(message: &mut Value) {
    as_blocks(message);
    if let Some(block) = message["content"].as_array_mut().and_then(|b| b.last_mut()) {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        // Held until the answer has streamed: the HTTP/2 pool counts the call on its
        // connection.
        let lease = self.http.lease();
        let mut builder = lease
            .post(&self.endpoint)
            .header("anthropic-version", API_VERSION)
            // The tools are written from their shared schemas, not copied into the body.
            .json(&WithTools::new(
                Self::body(model, request),
                &request.tools,
                AnthropicTools,
            ));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key.expose_secret());
        }
        let mut events = super::sse::events(&lease, builder).await?;
        let mut out = Assembly::default();
        while let Some(event) = super::sse::next(&mut events).await {
            let event = event?;
            if event.data.is_empty() {
                continue;
            }
            let data: Value = serde_json::from_str(&event.data)
                .map_err(|e| ProviderError::Protocol(format!("bad stream event: {e}")))?;
            let kind = data["type"].as_str().unwrap_or(event.event.as_str());
            if kind == "message_stop" {
                out.finished = true;
                break;
            }
            out.push(kind, &data, on_delta)?;
        }
        out.finish()
    }
}

/// Reassembles content blocks by index.
#[derive(Default)]
struct Assembly {
    text: String,
    /// (block index, call) for tool_use blocks.
    calls: Vec<(u64, ToolCall)>,
    usage: Usage,
    /// `message_stop` or a `stop_reason` was seen: the answer is complete.
    finished: bool,
}

impl Assembly {
    fn push(
        &mut self,
        kind: &str,
        data: &Value,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), ProviderError> {
        match kind {
            "message_start" => {
                // Anthropic counts cache reads and writes apart from `input_tokens`; every
                // input token is the sum.
                let count = |key: &str| {
                    data.pointer(&format!("/message/usage/{key}"))
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                };
                let (plain, read, written) = (
                    count("input_tokens"),
                    count("cache_read_input_tokens"),
                    count("cache_creation_input_tokens"),
                );
                self.usage.input_tokens = plain + read + written;
                self.usage.cached_input_tokens = read;
                self.usage.cache_write_tokens = written;
            }
            "content_block_start" => {
                let block = &data["content_block"];
                if block["type"] == "tool_use" {
                    if self.calls.len() >= stream_limits::MAX_TOOL_CALLS {
                        return Err(ProviderError::Protocol(format!(
                            "more than {} tool calls in one answer",
                            stream_limits::MAX_TOOL_CALLS
                        )));
                    }
                    let index = data["index"].as_u64().unwrap_or(0);
                    self.calls.push((
                        index,
                        ToolCall {
                            id: stream_limits::short_text(
                                "id",
                                block["id"].as_str().unwrap_or_default(),
                            )?,
                            name: stream_limits::short_text(
                                "name",
                                block["name"].as_str().unwrap_or_default(),
                            )?,
                            arguments: String::new(),
                        },
                    ));
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        if !text.is_empty() {
                            self.text.push_str(text);
                            on_delta(text);
                        }
                    }
                    Some("input_json_delta") => {
                        let index = data["index"].as_u64().unwrap_or(0);
                        if let Some((_, call)) = self.calls.iter_mut().find(|(i, _)| *i == index) {
                            call.arguments
                                .push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if data
                    .pointer("/delta/stop_reason")
                    .is_some_and(Value::is_string)
                {
                    self.finished = true;
                }
                if let Some(n) = data.pointer("/usage/output_tokens").and_then(Value::as_i64) {
                    self.usage.output_tokens = n;
                }
            }
            "error" => {
                let error_type = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return Err(match error_type {
                    "overloaded_error" => ProviderError::Overloaded { retry_after: None },
                    "rate_limit_error" => ProviderError::RateLimited { retry_after: None },
                    "api_error" => ProviderError::Server { status: 500 },
                    _ => classify_status(400, message, None),
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        if !self.finished {
            return Err(super::sse::cut_off());
        }
        Ok(ChatResponse {
            content: self.text,
            tool_calls: self
                .calls
                .into_iter()
                .map(|(_, mut call)| {
                    if call.arguments.trim().is_empty() {
                        call.arguments = "{}".into();
                    }
                    call
                })
                .collect(),
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_reads_and_writes_are_counted_as_input_and_apart() {
        // The events of a streamed answer whose prompt hit and extended the cache.
        let mut asm = Assembly::default();
        let start = serde_json::json!({"type":"message_start","message":{"id":"msg_1",
            "type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5",
            "stop_reason":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":188,
            "cache_read_input_tokens":1800,"output_tokens":1}}});
        asm.push("message_start", &start, &|_| {}).unwrap();
        let end = serde_json::json!({"type":"message_delta",
            "delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}});
        asm.push("message_delta", &end, &|_| {}).unwrap();
        assert_eq!(
            asm.finish().unwrap().usage,
            Usage {
                input_tokens: 21 + 188 + 1800,
                output_tokens: 42,
                cached_input_tokens: 1800,
                cache_write_tokens: 188,
            }
        );
    }

    #[test]
    fn a_stream_without_message_stop_or_stop_reason_is_an_error_not_a_reply() {
        let mut asm = Assembly::default();
        let delta = serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"half"}});
        asm.push("content_block_delta", &delta, &|_| {}).unwrap();
        assert!(matches!(asm.finish(), Err(ProviderError::Protocol(_))));
    }

    proptest::proptest! {
        /// Any sequence of events, well-formed or not: no panic, and what is held stays
        /// within the bounds.
        #[test]
        fn arbitrary_events_never_panic_and_stay_bounded(events in proptest::collection::vec(stream_limits::arbitrary_chunk(), 0..80)) {
            let mut asm = Assembly::default();
            for event in &events {
                let kind = event["type"].as_str().unwrap_or("content_block_start").to_string();
                if asm.push(&kind, event, &|_| {}).is_err() {
                    break;
                }
                proptest::prop_assert!(asm.calls.len() <= stream_limits::MAX_TOOL_CALLS);
            }
            let _ = asm.finish();
        }
    }
}
