//! A chat-completions request body, validated field by field (errors name the field).

use crate::error::ApiError;
use serde_json::Value;

/// What ferroclaw takes from a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The `model` as sent (echoed in the answer).
    pub(crate) model: String,
    /// The messages sent, as (role, text).
    pub(crate) messages: Vec<(String, String)>,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) user: Option<String>,
}

impl Completion {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| ApiError::invalid("The body must be a JSON object."))?;
        let model = match object.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(_) => return Err(ApiError::invalid("`model` must be a non-empty string.")),
            None => return Err(ApiError::invalid("Missing required parameter: `model`.")),
        };
        let list = match object.get("messages") {
            Some(Value::Array(list)) if !list.is_empty() => list,
            Some(_) => return Err(ApiError::invalid("`messages` must be a non-empty array.")),
            None => return Err(ApiError::invalid("Missing required parameter: `messages`.")),
        };
        let mut messages = Vec::with_capacity(list.len());
        for (i, message) in list.iter().enumerate() {
            let role = match message.get("role") {
                Some(Value::String(r)) => r.clone(),
                _ => {
                    return Err(ApiError::invalid(format!(
                        "`messages[{i}].role` must be a string."
                    )));
                }
            };
            let text = match message.get("content") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                // Content parts: the text parts, in order.
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Some(_) => {
                    return Err(ApiError::invalid(format!(
                        "`messages[{i}].content` must be a string or an array of content parts."
                    )));
                }
            };
            messages.push((role, text));
        }
        if !messages.iter().any(|(role, _)| role == "user") {
            return Err(ApiError::invalid(
                "`messages` must hold at least one message with role `user`.",
            ));
        }
        let flag = |name: &str| -> Result<bool, ApiError> {
            match object.get(name) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(ApiError::invalid(format!("`{name}` must be a boolean."))),
            }
        };
        let stream = flag("stream")?;
        let include_usage = match object.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(Value::Object(options)) => match options.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "`stream_options.include_usage` must be a boolean.",
                    ));
                }
            },
            Some(_) => return Err(ApiError::invalid("`stream_options` must be an object.")),
        };
        let user = match object.get("user") {
            None | Some(Value::Null) => None,
            Some(Value::String(u)) if !u.is_empty() => Some(u.clone()),
            Some(_) => return Err(ApiError::invalid("`user` must be a non-empty string.")),
        };
        Ok(Completion {
            model,
            messages,
            stream,
            include_usage,
            user,
        })
    }

    /// The text handed to the agent. A kept session (named by `user` or the header) already
    /// holds its history: the last user message alone. A one-off request has only what it
    /// sent: earlier messages come first as context, then the last user message.
    pub(crate) fn text(&self, kept_session: bool) -> String {
        let last = self
            .messages
            .iter()
            .rposition(|(role, _)| role == "user")
            .expect("checked at parse");
        let question = self.messages[last].1.clone();
        if kept_session || self.messages.len() == 1 {
            return question;
        }
        let mut text = String::from("Conversation so far:\n");
        for (i, (role, content)) in self.messages.iter().enumerate() {
            if i != last {
                text.push_str(&format!("[{role}] {content}\n"));
            }
        }
        text.push('\n');
        text.push_str(&question);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(body: &str) -> String {
        Completion::parse(body.as_bytes()).unwrap_err().body()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn errors_name_the_field() {
        assert!(error("{").contains("not valid JSON"));
        assert!(error(r#"{"messages":[{"role":"user","content":"x"}]}"#).contains("`model`"));
        assert!(error(r#"{"model":"ferroclaw"}"#).contains("`messages`"));
        assert!(
            error(r#"{"model":"ferroclaw","messages":[{"content":"x"}]}"#)
                .contains("`messages[0].role`")
        );
        assert!(
            error(r#"{"model":"ferroclaw","messages":[{"role":"user","content":5}]}"#)
                .contains("`messages[0].content`")
        );
        assert!(
            error(r#"{"model":"ferroclaw","messages":[{"role":"system","content":"x"}]}"#)
                .contains("role `user`")
        );
        assert!(
            error(r#"{"model":"f","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#)
                .contains("`stream`")
        );
    }

    #[test]
    fn a_one_off_request_carries_its_history_and_a_kept_session_only_the_question() {
        let c = Completion::parse(
            br#"{"model":"ferroclaw","stream":true,"stream_options":{"include_usage":true},
                "messages":[{"role":"system","content":"Be brief."},
                            {"role":"user","content":[{"type":"text","text":"My name is Ada."}]},
                            {"role":"assistant","content":"Hello Ada."},
                            {"role":"user","content":"What is my name?"}]}"#,
        )
        .unwrap();
        assert!(c.stream && c.include_usage);
        assert_eq!(c.text(true), "What is my name?");
        assert_eq!(
            c.text(false),
            "Conversation so far:\n[system] Be brief.\n[user] My name is Ada.\n\
             [assistant] Hello Ada.\n\nWhat is my name?"
        );
    }
}
