//! OpenAI-compatible chat completions (`POST {base_url}/chat/completions`, SSE streaming).
//! Also serves OpenRouter, Ollama, vLLM and llama.cpp servers.

use super::http_error::classify_status;
use super::wire_tools::{OpenAiTools, WithTools};
use super::{
    ChatRequest, ChatResponse, DeltaSink, ModelProvider, ProviderError, Role, ToolCall, Usage,
    stream_limits,
};
use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

pub struct OpenAiProvider {
    /// Where the client comes from, asked on each call (built on the first, not at start-up).
    http: crate::http::Transport,
    endpoint: String,
    api_key: Option<SecretString>,
}

impl OpenAiProvider {
    pub fn new(
        http: crate::http::Transport,
        base_url: &str,
        api_key: Option<SecretString>,
    ) -> Self {
        OpenAiProvider {
            http,
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key,
        }
    }

    /// The body's fields but the tools (see `complete`).
    fn body(model: &str, request: &ChatRequest) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system.is_empty() {
            messages.push(json!({"role": "system", "content": request.system}));
        }
        for m in &request.messages {
            let mut msg = json!({"role": m.role.as_str(), "content": m.content});
            if !m.images.is_empty() {
                let mut parts = vec![json!({"type": "text", "text": m.content})];
                parts.extend(m.images.iter().map(|i| {
                    json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.mime, i.base64)}})
                }));
                msg["content"] = Value::Array(parts);
            }
            if !m.tool_calls.is_empty() {
                msg["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            if let (Role::Tool, Some(id)) = (m.role, &m.tool_call_id) {
                msg["tool_call_id"] = json!(id);
            }
            messages.push(msg);
        }
        if let Some(volatile) = &request.volatile {
            messages.push(json!({"role": "system", "content": volatile}));
        }
        json!({
            "model": model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        // Held until the answer has streamed: the HTTP/2 pool counts the call on its
        // connection.
        let lease = self.http.lease();
        // The tools are written from their shared schemas, not copied into the body; the
        // body's values are dropped once written (not held while the answer streams).
        let mut builder = lease.post(&self.endpoint).json(&WithTools::new(
            Self::body(model, request),
            &request.tools,
            OpenAiTools,
        ));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose_secret());
        }
        let mut events = super::sse::events(&lease, builder).await?;
        let mut out = StreamAssembly::default();
        while let Some(event) = super::sse::next(&mut events).await {
            let event = event?;
            if event.data.trim() == "[DONE]" {
                out.finished = true;
                break;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| ProviderError::Protocol(format!("bad stream chunk: {e}")))?;
            if let Some(err) = chunk.get("error") {
                return Err(classify_status(
                    500,
                    &super::http_error::short(&err.to_string()),
                    None,
                ));
            }
            out.push(&chunk, on_delta)?;
        }
        out.finish()
    }
}

/// Reassembles streamed content and tool-call fragments (keyed by `index`, bounded by
/// `stream_limits`).
#[derive(Default)]
struct StreamAssembly {
    content: String,
    calls: Vec<ToolCall>,
    usage: Usage,
    /// `[DONE]` or a `finish_reason` was seen: the answer is complete.
    finished: bool,
}

impl StreamAssembly {
    fn push(&mut self, chunk: &Value, on_delta: DeltaSink<'_>) -> Result<(), ProviderError> {
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            // `prompt_tokens` counts the cached part too; the cached part is reported apart.
            self.usage.input_tokens = usage["prompt_tokens"].as_i64().unwrap_or(0);
            self.usage.output_tokens = usage["completion_tokens"].as_i64().unwrap_or(0);
            self.usage.cached_input_tokens = usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_i64)
                .unwrap_or(0);
        }
        if chunk
            .pointer("/choices/0/finish_reason")
            .is_some_and(Value::is_string)
        {
            self.finished = true;
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.content.push_str(text);
            on_delta(text);
        }
        let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for fragment in calls {
            let index = stream_limits::tool_index(&fragment["index"])?;
            while self.calls.len() <= index {
                self.calls.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let call = &mut self.calls[index];
            if let Some(id) = fragment["id"].as_str() {
                call.id = stream_limits::short_text("id", id)?;
            }
            // Some servers repeat the full name in every fragment: set, never append.
            if let Some(name) = fragment.pointer("/function/name").and_then(Value::as_str)
                && !name.is_empty()
            {
                call.name = stream_limits::short_text("name", name)?;
            }
            if let Some(args) = fragment
                .pointer("/function/arguments")
                .and_then(Value::as_str)
            {
                call.arguments.push_str(args);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<ChatResponse, ProviderError> {
        if !self.finished {
            return Err(super::sse::cut_off());
        }
        for (i, call) in self.calls.iter_mut().enumerate() {
            if call.id.is_empty() {
                call.id = format!("call_{i}");
            }
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".into();
            }
        }
        Ok(ChatResponse {
            content: self.content,
            tool_calls: self.calls,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_fragments_reassemble_even_when_names_repeat() {
        let mut asm = StreamAssembly::default();
        let sink = |_: &str| {};
        let chunks = [
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"get_time","arguments":"{\"tz"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"get_time","arguments":"\":\"UTC\"}"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"list_files","arguments":""}}]}}]}),
        ];
        for c in &chunks {
            asm.push(c, &sink).unwrap();
        }
        assert!(!asm.finished, "no [DONE] or finish_reason yet");
        asm.finished = true;
        let out = asm.finish().unwrap();
        assert_eq!(out.tool_calls.len(), 2);
        assert_eq!(out.tool_calls[0].name, "get_time");
        assert_eq!(out.tool_calls[0].arguments, r#"{"tz":"UTC"}"#);
        assert_eq!(out.tool_calls[1].arguments, "{}");
    }

    #[test]
    fn usage_with_cached_prompt_tokens_is_read_from_the_last_chunk() {
        // What OpenAI sends last when asked for `stream_options.include_usage`.
        let mut asm = StreamAssembly::default();
        let chunks = [
            json!({"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":null}),
            json!({"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,
                "total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},
                "completion_tokens_details":{"reasoning_tokens":0}}}),
        ];
        for c in &chunks {
            asm.push(c, &|_| {}).unwrap();
        }
        let usage = asm.finish().unwrap().usage;
        assert_eq!(
            usage,
            Usage {
                input_tokens: 2006,
                output_tokens: 300,
                cached_input_tokens: 1920,
                cache_write_tokens: 0,
            }
        );
    }

    #[test]
    fn a_stream_without_done_or_finish_reason_is_an_error_not_a_reply() {
        let mut asm = StreamAssembly::default();
        asm.push(
            &json!({"choices":[{"delta":{"content":"half an ans"}}]}),
            &|_| {},
        )
        .unwrap();
        assert!(matches!(asm.finish(), Err(ProviderError::Protocol(_))));
        let mut asm = StreamAssembly::default();
        asm.push(
            &json!({"choices":[{"delta":{"content":"whole"},"finish_reason":"stop"}]}),
            &|_| {},
        )
        .unwrap();
        assert_eq!(asm.finish().unwrap().content, "whole");
    }

    #[test]
    fn a_huge_tool_call_index_is_a_protocol_error_not_an_allocation() {
        let mut asm = StreamAssembly::default();
        let chunk = json!({"choices":[{"delta":{"tool_calls":[{"index":18446744073709551615u64,"id":"x","function":{"name":"f","arguments":"{}"}}]}}]});
        assert!(matches!(
            asm.push(&chunk, &|_| {}),
            Err(ProviderError::Protocol(_))
        ));
        assert!(asm.calls.is_empty());
    }

    proptest::proptest! {
        /// Any sequence of chunks, well-formed or not: no panic, and what is held stays
        /// within the bounds.
        #[test]
        fn arbitrary_chunks_never_panic_and_stay_bounded(chunks in proptest::collection::vec(super::super::stream_limits::arbitrary_chunk(), 0..24)) {
            let mut asm = StreamAssembly::default();
            for chunk in &chunks {
                if asm.push(chunk, &|_| {}).is_err() {
                    break;
                }
                proptest::prop_assert!(asm.calls.len() <= stream_limits::MAX_TOOL_CALLS);
            }
            let _ = asm.finish();
        }
    }
}
