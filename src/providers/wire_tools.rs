//! The offered tools in a request body, written straight from their shared specs.
//!
//! A body built as one `serde_json::Value` copied every tool's parameter schema into it on
//! every call, then serialised and dropped the copy: about half of a webhook turn's
//! instructions (measured with callgrind, 1,000 turns, 2026-12-06). Here the body's other
//! fields stay a `Value` and the tools follow them from borrowed data, each schema as the
//! JSON text it was given once ([`Schema`]).
//! Knows the two providers' tool shapes; nothing of what a tool does.

use super::{Schema, ToolSpec};
use serde::Serialize;
use serde_json::Value;

/// A request body: `fields` (a JSON object), then the offered tools when there are any.
#[derive(Serialize)]
pub(super) struct WithTools<T: Serialize> {
    #[serde(flatten)]
    pub fields: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<T>,
}

impl<T: Serialize> WithTools<T> {
    /// `fields`, then `specs` in a provider's `shape` (`OpenAiTools`, `AnthropicTools`), or
    /// `fields` alone when no tool is offered.
    pub fn new<'a>(fields: Value, specs: &'a [ToolSpec], shape: fn(&'a [ToolSpec]) -> T) -> Self {
        WithTools {
            fields,
            tools: (!specs.is_empty()).then(|| shape(specs)),
        }
    }
}

/// OpenAI's `tools`: `[{"type": "function", "function": {name, description, parameters}}]`.
pub(super) struct OpenAiTools<'a>(pub &'a [ToolSpec]);

#[derive(Serialize)]
struct OpenAiTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Schema,
}

impl Serialize for OpenAiTools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| OpenAiTool {
            kind: "function",
            function: Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        }))
    }
}

/// Anthropic's `tools`: `[{name, description, input_schema}]`, the last one a prompt-cache
/// breakpoint (`cache_control`), so the tools are cached with the system prompt.
pub(super) struct AnthropicTools<'a>(pub &'a [ToolSpec]);

#[derive(Serialize)]
struct AnthropicTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Schema,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
}

#[derive(Serialize)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl Serialize for AnthropicTools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let last = self.0.len().saturating_sub(1);
        serializer.collect_seq(self.0.iter().enumerate().map(|(i, t)| AnthropicTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.parameters,
            cache_control: (i == last).then_some(Ephemeral { kind: "ephemeral" }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{AnthropicTools, OpenAiTools, WithTools};
    use crate::providers::ToolSpec;
    use serde_json::json;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("does {name}").into(),
            parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}).into(),
        }
    }

    #[test]
    fn the_tools_follow_the_fields_in_each_providers_shape() {
        let specs = [spec("a"), spec("b")];
        let body = WithTools::new(json!({"model": "m", "stream": true}), &specs, OpenAiTools);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"model": "m", "stream": true, "tools": [
                {"type": "function", "function": {"name": "a", "description": "does a",
                    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "b", "description": "does b",
                    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}},
            ]})
        );
        let body = WithTools::new(json!({"model": "m"}), &specs, AnthropicTools);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"model": "m", "tools": [
                {"name": "a", "description": "does a",
                    "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
                {"name": "b", "description": "does b",
                    "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
                    "cache_control": {"type": "ephemeral"}},
            ]})
        );
    }

    #[test]
    fn no_tools_offered_no_tools_key() {
        let body = WithTools::new(json!({"model": "m"}), &[], OpenAiTools);
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"model":"m"}"#);
    }
}
