//! Bounds on what one streamed model answer may make us hold. Everything a provider sends is
//! untrusted: an index, a size or an id outside these bounds is a protocol error (the chain
//! falls back), never an allocation the process cannot survive.

/// Tool calls in one answer (an OpenAI `tool_calls[].index` must be below this).
pub(super) const MAX_TOOL_CALLS: usize = 64;
/// Bytes read from one streamed answer, all events together.
pub(super) const MAX_STREAM_BYTES: usize = 8 << 20;
/// Characters of a tool call id or name.
pub(super) const MAX_ID_CHARS: usize = 256;

/// The `index` of a streamed tool-call fragment, when it is one we can hold.
pub(super) fn tool_index(value: &serde_json::Value) -> Result<usize, super::ProviderError> {
    match value.as_u64() {
        None if value.is_null() => Ok(0),
        Some(i) if i < MAX_TOOL_CALLS as u64 => Ok(i as usize),
        _ => Err(super::ProviderError::Protocol(format!(
            "tool call index {value} is out of range (at most {MAX_TOOL_CALLS} calls)"
        ))),
    }
}

/// A tool call id or name, refused when absurdly long.
pub(super) fn short_text(what: &str, value: &str) -> Result<String, super::ProviderError> {
    if value.chars().count() > MAX_ID_CHARS {
        return Err(super::ProviderError::Protocol(format!(
            "tool call {what} longer than {MAX_ID_CHARS} characters"
        )));
    }
    Ok(value.to_string())
}

/// Arbitrary stream chunks for property tests: JSON shaped like either protocol's chunks,
/// with hostile indexes, types and sizes.
#[cfg(test)]
pub(super) fn arbitrary_chunk() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::{Value, json};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let index = prop_oneof![0u64..4, Just(u64::MAX), Just(1 << 40), any::<u64>()];
    prop_oneof![
        // OpenAI-shaped fragments.
        (index.clone(), value.clone(), value.clone(), value.clone()).prop_map(
            |(index, id, name, args)| json!({"choices":[{"delta":{"tool_calls":[{"index": index, "id": id, "function": {"name": name, "arguments": args}}]}, "finish_reason": null}]})
        ),
        (value.clone(), value.clone()).prop_map(|(content, usage)| json!({"choices":[{"delta":{"content": content}}], "usage": usage})),
        // Anthropic-shaped events.
        (index.clone(), value.clone(), value.clone()).prop_map(|(index, id, name)| json!({"type":"content_block_start","index": index, "content_block": {"type":"tool_use","id": id,"name": name}})),
        (index, value.clone()).prop_map(|(index, partial)| json!({"type":"content_block_delta","index": index, "delta": {"type":"input_json_delta","partial_json": partial}})),
        value,
    ]
}
