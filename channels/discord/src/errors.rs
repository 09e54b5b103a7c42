//! serenity errors → what the outbox does next. The token never appears in a reason.

use ferroclaw_channel_core::DeliveryError;
use serenity::http::HttpError;
use std::time::Duration;

/// How long to pause after a 429 whose wait Discord's headers gave but serenity, with its rate
/// limiter off (a non-default `api_url`), does not pass on. Against discord.com serenity's
/// rate limiter reads the headers and waits itself, so a 429 never reaches us.
const RATE_LIMIT_PAUSE: Duration = Duration::from_secs(1);

pub(crate) fn redact(text: String, token: &str) -> String {
    if token.is_empty() {
        text
    } else {
        text.replace(token, "<token>")
    }
}

/// Retry on network trouble, 429 and 5xx; reject what Discord refused (4xx).
pub(crate) fn failure(err: serenity::Error, token: &str) -> DeliveryError {
    let reason = redact(err.to_string(), token);
    match err {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            let status = response.status_code.as_u16();
            let reason = redact(
                format!("Discord answered {status}: {}", response.error.message),
                token,
            );
            match status {
                429 => DeliveryError::RateLimited {
                    reason,
                    retry_after: RATE_LIMIT_PAUSE,
                },
                408 | 500..=599 => DeliveryError::Retry {
                    reason,
                    retry_after: None,
                },
                _ => DeliveryError::Rejected(reason),
            }
        }
        serenity::Error::Model(_) => DeliveryError::Rejected(reason),
        _ => DeliveryError::Retry {
            reason,
            retry_after: None,
        },
    }
}
