//! Model providers: the [`ModelProvider`] trait, the wire protocols that implement it
//! (`openai.rs`, `anthropic.rs`) and the fallback chain that wraps them
//! (`chain.rs`).
//!
//! Providers turn a [`ChatRequest`] into a [`ChatResponse`], streaming text deltas to a
//! callback, and classify failures into [`ProviderError`] variants the chain acts on. They
//! know HTTP and JSON; they do not know sessions, channels or storage.

mod anthropic;
mod chain;
mod http_error;
mod key_ring;
#[cfg(feature = "local-model")]
mod local;
mod openai;
mod sse;
mod stream_limits;
mod wire_tools;

pub use anthropic::AnthropicProvider;
pub use chain::{ChainError, FallbackChain, ModelRef};
pub use key_ring::KeyRing;
#[cfg(feature = "local-model")]
pub use local::{LocalProvider, ModelSource};
pub use openai::OpenAiProvider;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// A tool call requested by the model; `arguments` is JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    /// Images a user message shows the model (sent as image parts; never stored).
    pub images: Vec<ImagePart>,
}

/// An image for a model that can see: its type and its bytes, base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    pub mime: String,
    pub base64: std::sync::Arc<str>,
}

impl ChatMessage {
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            images: Vec::new(),
        }
    }

    /// The model's message asking for `tool_calls` (with any text it wrote).
    pub fn assistant_calls(content: String, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            tool_calls,
            ..ChatMessage::text(Role::Assistant, content)
        }
    }

    /// A tool's result, answering the call `call_id`.
    pub fn tool_result(call_id: &str, content: String) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.to_string()),
            ..ChatMessage::text(Role::Tool, content)
        }
    }
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// All three shared: built once per tool, not per turn (thousands of waiting turns hold
    /// their offered specs; cloned strings were 1.8 KB of each).
    pub name: std::sync::Arc<str>,
    pub description: std::sync::Arc<str>,
    pub parameters: Schema,
}

impl ToolSpec {
    /// The same spec: its three parts are the very ones `other` points at (what a turn's
    /// list of specs is shared by, `crate::interned`; comparing the schemas' trees would
    /// cost each turn more than the copy it saves).
    pub fn shares(&self, other: &ToolSpec) -> bool {
        use std::sync::Arc;
        Arc::ptr_eq(&self.name, &other.name)
            && Arc::ptr_eq(&self.description, &other.description)
            && Arc::ptr_eq(&self.parameters.value, &other.parameters.value)
    }
}

/// A tool's parameter schema and its JSON text, written once: a request body copies the
/// text instead of walking the tree (serialising the schemas on every call was a tenth of a
/// webhook turn's instructions, measured with callgrind). Reads as the `Value` it holds.
#[derive(Debug, Clone)]
pub struct Schema {
    value: std::sync::Arc<serde_json::Value>,
    text: std::sync::Arc<serde_json::value::RawValue>,
}

impl Schema {
    pub fn new(value: serde_json::Value) -> Self {
        let text = serde_json::value::to_raw_value(&value).expect("a JSON value serialises");
        Schema {
            value: std::sync::Arc::new(value),
            text: text.into(),
        }
    }

    /// The schema as JSON text.
    pub fn text(&self) -> &str {
        self.text.get()
    }
}

impl From<serde_json::Value> for Schema {
    fn from(value: serde_json::Value) -> Self {
        Schema::new(value)
    }
}

impl std::ops::Deref for Schema {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.value
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl serde::Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The stable part of the system prompt (persona, features' sections): byte-identical
    /// from call to call, so a provider's prompt cache keeps it and the history after it.
    pub system: String,
    pub messages: Vec<ChatMessage>,
    /// What changes from call to call (the Active Plan): sent after the history, so it does
    /// not rewrite the cached prefix.
    pub volatile: Option<String>,
    /// Shared by every call of a turn (thousands of turns may wait at once).
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Who is asking (the session key): a provider with several API keys keeps a session on
    /// one key while it is healthy.
    pub affinity: Option<std::sync::Arc<str>>,
}

/// The longest answer a call asks for (Anthropic's `max_tokens`; budgets reserve for it).
pub const MAX_OUTPUT_TOKENS: u32 = 8_192;

/// What one model call used, as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, whatever it was billed at (cached and cache-written included).
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Of the input, tokens read from the provider's prompt cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`).
    pub cached_input_tokens: i64,
    /// Of the input, tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`).
    pub cache_write_tokens: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// Why a model call failed, in the classes the fallback chain acts on (SPEC section 9).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("rate limited")]
    RateLimited { retry_after: Option<Duration> },
    #[error("overloaded")]
    Overloaded { retry_after: Option<Duration> },
    #[error("server error (HTTP {status})")]
    Server { status: u16 },
    #[error("timed out")]
    Timeout,
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("authentication refused (HTTP {status})")]
    Auth { status: u16 },
    #[error("quota or billing exhausted")]
    Billing,
    #[error("model not found")]
    ModelNotFound,
    #[error("context too long")]
    ContextTooLong,
    /// Every API key of the provider is cooling down or was refused (auth profiles).
    #[error("all {keys} API keys are cooling down or refused ({tried} tried now)")]
    KeysExhausted { keys: usize, tried: usize },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unreadable response: {0}")]
    Protocol(String),
}

impl ProviderError {
    /// A short fixed name for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::RateLimited { .. } => "rate_limited",
            ProviderError::Overloaded { .. } => "overloaded",
            ProviderError::Server { .. } => "server_error",
            ProviderError::Timeout => "timeout",
            ProviderError::Connect(_) => "connect_error",
            ProviderError::Auth { .. } => "auth_error",
            ProviderError::Billing => "billing",
            ProviderError::ModelNotFound => "model_not_found",
            ProviderError::ContextTooLong => "context_too_long",
            ProviderError::KeysExhausted { .. } => "keys_exhausted",
            ProviderError::InvalidRequest(_) => "invalid_request",
            ProviderError::Protocol(_) => "protocol_error",
        }
    }

    /// Retry on the same model (after `retry_after` when given).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Overloaded { .. }
                | ProviderError::Server { .. }
                | ProviderError::Timeout
                | ProviderError::Connect(_)
        )
    }

    /// Never move to another model for this error.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ProviderError::InvalidRequest(_) | ProviderError::ContextTooLong
        )
    }

    /// Whether this failure says the model (or its provider) is unavailable for everyone for
    /// a while — rate limits, overload, refused or exhausted keys, a missing model, server
    /// errors that outlasted the retries — so the chain cools it down. A bad answer, a cut
    /// stream, a timeout or a dropped connection is that one request's error: other
    /// conversations keep the model.
    pub fn cools_model(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Overloaded { .. }
                | ProviderError::Server { .. }
                | ProviderError::Auth { .. }
                | ProviderError::Billing
                | ProviderError::ModelNotFound
                | ProviderError::KeysExhausted { .. }
        )
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after }
            | ProviderError::Overloaded { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// Receives reply text as it streams in.
pub type DeltaSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// One LLM endpoint speaking one protocol.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Run one completion of `model`, streaming text deltas to `on_delta`.
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError>;
}
