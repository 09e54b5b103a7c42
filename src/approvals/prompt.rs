//! What people see of a request: its arguments made safe to show, the prompt, and the
//! prompt's edit once someone decided.

use crate::storage::NewApproval;
use ferroclaw_channel_core::Decision;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A string value longer than this is cut in the prompt (its length and hash are shown).
const LONG: usize = 300;
/// Object keys whose values are never shown.
const SECRET_KEYS: [&str; 8] = [
    "token",
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
];

/// The arguments as a prompt shows them: configured secret values and values under
/// secret-looking keys masked, long strings cut with their length and a short hash (so two
/// requests can be told apart).
pub fn shown_arguments(arguments: &Value, secrets: &[SecretString]) -> String {
    let shown = redact(arguments, None, secrets);
    let text = match &shown {
        Value::Object(map) if map.len() == 1 => {
            // One argument (a command, a URL): its value alone reads best.
            match map.values().next() {
                Some(Value::String(s)) => s.clone(),
                _ => shown.to_string(),
            }
        }
        _ => shown.to_string(),
    };
    cut(&text)
}

fn redact(value: &Value, key: Option<&str>, secrets: &[SecretString]) -> Value {
    if let Some(key) = key {
        let lower = key.to_ascii_lowercase();
        if SECRET_KEYS.iter().any(|s| lower.contains(s)) {
            return Value::String("[hidden]".into());
        }
    }
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), redact(v, Some(k), secrets)))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| redact(v, None, secrets)).collect())
        }
        Value::String(s) => {
            let mut s = s.clone();
            for secret in secrets {
                let value = secret.expose_secret();
                // Short values would mask ordinary words; configured secrets are long.
                if value.len() >= 8 && s.contains(value) {
                    s = s.replace(value, "[redacted]");
                }
            }
            Value::String(cut(&s))
        }
        other => other.clone(),
    }
}

/// `s`, or its first part with its length and a short hash when it is long.
fn cut(s: &str) -> String {
    if s.chars().count() <= LONG {
        return s.to_string();
    }
    let head: String = s.chars().take(LONG / 2).collect();
    let digest = Sha256::digest(s.as_bytes());
    format!(
        "{head}… ({} characters, sha256 {})",
        s.chars().count(),
        hex::encode(&digest[..4])
    )
}

/// The prompt's text (every client sees it; platforms with buttons add them).
pub fn prompt_text(r: &NewApproval, timeout_secs: u64) -> String {
    format!(
        "🔐 Approval needed ({id}): `{tool}`\n{args}\nWhy: {reason}\nReply /approve {id} (or /approve {id} always for this chat) or /deny {id} within {wait}.",
        id = r.id,
        tool = r.tool,
        args = r.arguments,
        reason = r.reason,
        wait = crate::usage::wait_words(timeout_secs as i64 * 1000),
    )
}

/// The prompt once decided: who decided what.
pub fn decided_text(r: &NewApproval, decision: Option<Decision>, by: &str) -> String {
    let head = format!("`{}` ({})", r.tool, r.id);
    match decision {
        Some(Decision::Approve) => format!("✅ {head} approved by {by}.\n{}", r.arguments),
        Some(Decision::Always) => format!(
            "✅ {head} approved by {by}, and from now on in this chat{}.\n{}",
            if r.target.is_empty() {
                String::new()
            } else {
                format!(" for {}", r.target)
            },
            r.arguments
        ),
        Some(Decision::Deny) => format!("🚫 {head} denied by {by}.\n{}", r.arguments),
        None => format!(
            "⌛ {head} was not approved in time; it did not run.\n{}",
            r.arguments
        ),
    }
}

/// The prompt once its turn was stopped before anyone decided.
pub fn withdrawn_text(r: &NewApproval) -> String {
    format!(
        "⏹ `{}` ({}) was withdrawn: its turn was stopped.\n{}",
        r.tool, r.id, r.arguments
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_and_long_values_cut_with_length_and_hash() {
        let long = "x".repeat(1000);
        let secret = SecretString::from("tok-CONFIGURED-123");
        let shown = shown_arguments(
            &json!({"url": "https://a.example/?t=tok-CONFIGURED-123", "api_key": "sk-live-123", "body": long}),
            std::slice::from_ref(&secret),
        );
        assert!(!shown.contains("tok-CONFIGURED-123"), "{shown}");
        assert!(shown.contains("?t=[redacted]"), "{shown}");
        assert!(!shown.contains("sk-live-123"), "{shown}");
        assert!(shown.contains("[hidden]"));
        assert!(shown.contains("1000 characters, sha256 "), "{shown}");
        assert!(shown.len() < 600);
        assert_eq!(
            shown_arguments(&json!({"command": "ls -la"}), &[]),
            "ls -la"
        );
    }
}
