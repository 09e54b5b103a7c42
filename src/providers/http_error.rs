//! HTTP failures of a model call, in the classes the fallback chain acts on: transport
//! errors, HTTP statuses with their bodies (both protocols share the mapping), Retry-After.

use super::ProviderError;
use std::time::Duration;

pub(super) fn transport_error(err: reqwest::Error) -> ProviderError {
    if err.is_timeout() {
        ProviderError::Timeout
    } else if err.is_connect() {
        // The innermost cause says why (refused, no such host, a certificate not trusted);
        // the outer ones only that connecting failed. Causes carry no URL.
        let mut cause: &dyn std::error::Error = &err;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        ProviderError::Connect(format!("could not connect: {cause}"))
    } else {
        ProviderError::Connect(format!("transport error: {}", without_url(&err)))
    }
}

fn without_url(err: &reqwest::Error) -> String {
    // The URL can carry credentials in odd setups; never show it.
    let mut s = err.to_string();
    if let Some(url) = err.url() {
        s = s.replace(url.as_str(), "<url>");
    }
    s
}

pub(super) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value
        .trim()
        .parse::<f64>()
        .ok()
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)))
}

/// Map an HTTP error status and body to an error class (both protocols share this).
pub(super) fn classify_status(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
) -> ProviderError {
    let lower = body.to_ascii_lowercase();
    let context_too_long = lower.contains("context_length_exceeded")
        || lower.contains("prompt is too long")
        || lower.contains("maximum context length")
        || lower.contains("context window");
    match status {
        429 if lower.contains("insufficient_quota") => ProviderError::Billing,
        429 => ProviderError::RateLimited { retry_after },
        529 => ProviderError::Overloaded { retry_after },
        401 | 403 => ProviderError::Auth { status },
        402 => ProviderError::Billing,
        404 => ProviderError::ModelNotFound,
        400 | 413 if context_too_long => ProviderError::ContextTooLong,
        400 if lower.contains("model_not_found") || lower.contains("does not exist") => {
            ProviderError::ModelNotFound
        }
        400..=499 => ProviderError::InvalidRequest(short(body)),
        _ if lower.contains("overloaded") => ProviderError::Overloaded { retry_after },
        _ => ProviderError::Server { status },
    }
}

pub(super) fn short(body: &str) -> String {
    body.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statuses_map_to_the_classes_the_chain_acts_on() {
        let cases = [
            (429, "{}", ProviderError::RateLimited { retry_after: None }),
            (
                429,
                r#"{"error":{"code":"insufficient_quota"}}"#,
                ProviderError::Billing,
            ),
            (529, "", ProviderError::Overloaded { retry_after: None }),
            (503, "", ProviderError::Server { status: 503 }),
            (401, "", ProviderError::Auth { status: 401 }),
            (403, "", ProviderError::Auth { status: 403 }),
            (402, "", ProviderError::Billing),
            (404, "", ProviderError::ModelNotFound),
            (
                400,
                r#"{"error":{"code":"context_length_exceeded"}}"#,
                ProviderError::ContextTooLong,
            ),
            (
                400,
                "prompt is too long: 250000 tokens",
                ProviderError::ContextTooLong,
            ),
        ];
        for (status, body, expected) in cases {
            assert_eq!(
                classify_status(status, body, None),
                expected,
                "status {status} body {body}"
            );
        }
        assert!(matches!(
            classify_status(400, "bad field", None),
            ProviderError::InvalidRequest(_)
        ));
    }
}
