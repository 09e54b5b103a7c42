//! A server's tool as the model sees it: `ID__tool` (sanitised to the providers' name rules,
//! at most 64 characters), the server's description and input schema (fixed up to an
//! object schema), arguments through the leak scan, the result cut at `max_result_bytes`
//! and always untrusted (it taints the turn). Knows nothing of connections.

use super::server::{CallError, Listed, Server, State};
use crate::redact::{Redactor, Sink};
use crate::tools::{Offer, Tool, ToolClass, ToolContext, ToolError, ToolRisk};
use async_trait::async_trait;
use rmcp::model::RawContent;
use serde_json::Value;
use std::sync::Arc;

/// The longest tool name providers take.
const MAX_NAME: usize = 64;

/// `<server>__<tool>` with every character providers refuse replaced by `_`, cut to 64.
pub fn offered_name(server: &str, tool: &str) -> String {
    let mut name: String = format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_NAME);
    name
}

/// A server's schema as providers take it: an object with properties.
fn fixed_schema(schema: &Value) -> Value {
    let mut schema = match schema {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    schema.remove("$schema");
    schema.insert("type".into(), Value::String("object".into()));
    schema
        .entry("properties")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    Value::Object(schema)
}

pub struct McpTool {
    name: String,
    server: Arc<Server>,
    listed: Listed,
    schema: Value,
    redactor: Arc<Redactor>,
}

impl McpTool {
    pub fn new(server: Arc<Server>, listed: Listed, redactor: Arc<Redactor>) -> Self {
        McpTool {
            name: offered_name(&server.id, &listed.name),
            schema: fixed_schema(&listed.schema),
            server,
            listed,
            redactor,
        }
    }
}

/// The text of a result: its text parts, a line for each image (given to `images` when the
/// turn's model can see) or other part, cut at `max` bytes with a note.
fn result_text(
    result: rmcp::model::CallToolResult,
    max: usize,
    images: Option<&crate::tools::ToolImages>,
) -> String {
    let mut text = String::new();
    for part in result.content {
        if !text.is_empty() {
            text.push('\n');
        }
        match part.raw {
            RawContent::Text(t) => text.push_str(&t.text),
            RawContent::Image(image) => match images {
                Some(images) => {
                    text.push_str(&format!(
                        "[image: {}, attached for you to see]",
                        image.mime_type
                    ));
                    images.push(crate::providers::ImagePart {
                        mime: image.mime_type,
                        base64: image.data.into(),
                    });
                }
                None => text.push_str(&format!(
                    "[image: {}, {} bytes of base64; this model cannot see images]",
                    image.mime_type,
                    image.data.len()
                )),
            },
            RawContent::Audio(audio) => text.push_str(&format!("[audio: {}]", audio.mime_type)),
            RawContent::Resource(resource) => match resource.resource {
                rmcp::model::ResourceContents::TextResourceContents { text: t, uri, .. } => {
                    text.push_str(&format!("[resource {uri}]\n{t}"))
                }
                rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                    text.push_str(&format!("[resource {uri}: binary]"))
                }
            },
            RawContent::ResourceLink(link) => text.push_str(&format!("[link: {}]", link.uri)),
        }
    }
    if text.is_empty()
        && let Some(structured) = result.structured_content
    {
        text = structured.to_string();
    }
    if text.len() > max {
        let total = text.len();
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!(
            "\n[cut: the result was {total} bytes; the first {cut} are shown (mcp max_result_bytes)]"
        ));
    }
    text
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.listed.description
    }
    fn schema(&self) -> Value {
        self.schema.clone()
    }
    /// A tool the server marks read-only is not recorded in the effect log (a redone turn
    /// may call it again); every other one is, and is not repeated.
    fn read_only(&self) -> bool {
        self.listed.read_only
    }
    /// What it does is the server's business: read-only, or egress to the server; its
    /// result is untrusted.
    fn risk(&self, _args: &Value, _cx: &ToolContext) -> ToolRisk {
        ToolRisk {
            class: if self.listed.read_only {
                ToolClass::Read
            } else {
                ToolClass::Egress
            },
            target: Some(format!("mcp:{}", self.server.id)),
            asks: None,
            untrusted_result: true,
        }
    }
    /// Offered while its server is up or starting (a call then waits for it), to agents
    /// that use the server; not while it is down.
    fn offered(&self, offer: &Offer<'_>) -> bool {
        offer.agent.uses_mcp(&self.server.id)
            && matches!(self.server.state(), State::Up | State::Starting)
    }
    fn unavailable(&self) -> Option<String> {
        let status = self.server.status();
        (status.state == State::Down).then(|| {
            format!(
                "MCP server `{}` is down ({}); its tools come back when it is restarted",
                self.server.id,
                status.last_error.unwrap_or_default()
            )
        })
    }
    fn time_limit(&self, _args: &Value) -> Option<std::time::Duration> {
        // The server's own limit cancels the call first; this only bounds the rest.
        Some(std::time::Duration::from_secs(
            self.server.config.timeout_secs + 5,
        ))
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        self.invoke(args, cx.handles.get::<crate::tools::ToolImages>())
            .await
    }
}

impl McpTool {
    /// One call with these arguments (a turn's, or `ferroclaw mcp call`'s); images go to
    /// `images` when given.
    pub async fn invoke(
        &self,
        args: Value,
        images: Option<&crate::tools::ToolImages>,
    ) -> Result<String, ToolError> {
        let server = &self.server.id;
        // Arguments leave the service: the leak scan first.
        let text = args.to_string();
        let args = match self.redactor.redact(&text, Sink::Tool) {
            std::borrow::Cow::Borrowed(_) => args,
            std::borrow::Cow::Owned(clean) => serde_json::from_str(&clean).unwrap_or(args),
        };
        let arguments = match args {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let started = std::time::Instant::now();
        let outcome = self.server.call(&self.listed.name, arguments).await;
        let label = match &outcome {
            Ok(r) if r.is_error == Some(true) => "error",
            Ok(_) => "ok",
            Err(CallError::Down(_)) => "down",
            Err(CallError::TimedOut(_)) => "timeout",
            Err(CallError::Failed(_)) => "failed",
        };
        crate::metrics::mcp_call(server, &self.listed.name, label, started.elapsed());
        match outcome {
            Ok(result) => {
                let failed = result.is_error == Some(true);
                let text = result_text(result, self.server.config.max_result_bytes, images);
                if failed {
                    Err(ToolError(format!("MCP server `{server}` says: {text}")))
                } else {
                    Ok(text)
                }
            }
            Err(CallError::Down(state)) => Err(ToolError(format!(
                "MCP server `{server}` is down ({state}); its tools come back when it is restarted"
            ))),
            Err(CallError::TimedOut(limit)) => Err(ToolError(format!(
                "MCP server `{server}` did not answer `{}` within {} s; the call was cancelled",
                self.listed.name,
                limit.as_secs()
            ))),
            Err(CallError::Failed(why)) => Err(ToolError(format!(
                "MCP server `{server}`: `{}` failed: {why}",
                self.listed.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_providers_rules() {
        assert_eq!(
            offered_name("time", "get_current_time"),
            "time__get_current_time"
        );
        assert_eq!(offered_name("x", "a.b c/d"), "x__a_b_c_d");
        assert_eq!(offered_name("s", &"t".repeat(100)).len(), 64);
    }

    #[test]
    fn schemas_become_objects_with_properties() {
        let fixed = fixed_schema(&serde_json::json!({"$schema": "x", "required": []}));
        assert_eq!(fixed["type"], "object");
        assert!(fixed["properties"].is_object());
        assert!(fixed.get("$schema").is_none());
    }

    #[test]
    fn long_results_are_cut_saying_so() {
        let result =
            rmcp::model::CallToolResult::success(vec![rmcp::model::Content::text("é".repeat(100))]);
        let text = result_text(result, 51, None);
        assert!(text.starts_with(&"é".repeat(25)));
        assert!(
            text.contains("the result was 200 bytes; the first 50"),
            "{text}"
        );
    }
}
