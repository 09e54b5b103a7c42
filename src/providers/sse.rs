//! The part both protocols share: send the request, turn an HTTP error into its class, and
//! read the SSE answer event by event (parsing via `eventsource-stream`).

use super::ProviderError;
use super::http_error::{classify_status, retry_after, transport_error};
use super::stream_limits::MAX_STREAM_BYTES;
use eventsource_stream::{Event, EventStream, Eventsource};
use futures::{Stream, StreamExt};

/// Why reading the body of a streamed answer stopped.
#[derive(Debug)]
pub(super) enum BodyError {
    Transport(reqwest::Error),
    /// The answer exceeded `MAX_STREAM_BYTES`.
    TooLarge,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Transport(e) => e.fmt(f),
            BodyError::TooLarge => write!(f, "answer larger than {MAX_STREAM_BYTES} bytes"),
        }
    }
}

/// The events of a streamed answer, or the classified error of a refused request. A 200
/// that is not an event stream (an HTML page from a proxy, say) is a protocol error. The
/// protocol the answer came in is told to `lease` (its transport learns what the provider
/// speaks).
pub(super) async fn events(
    lease: &crate::http::Lease,
    request: reqwest::RequestBuilder,
) -> Result<EventStream<impl Stream<Item = Result<bytes::Bytes, BodyError>>>, ProviderError> {
    let response = request.send().await.map_err(|error| {
        if error.is_connect() {
            lease.unreachable();
        }
        transport_error(error)
    })?;
    lease.heard(response.version());
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers());
        let body = response.text().await.unwrap_or_default();
        return Err(classify_status(status.as_u16(), &body, retry_after));
    }
    if let Some(kind) = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        && !kind.contains("event-stream")
    {
        return Err(ProviderError::Protocol(format!(
            "expected an event stream, got {}",
            kind.chars().take(60).collect::<String>()
        )));
    }
    let mut read = 0usize;
    let bounded = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(BodyError::Transport)?;
        read += chunk.len();
        if read > MAX_STREAM_BYTES {
            return Err(BodyError::TooLarge);
        }
        Ok(chunk)
    });
    Ok(bounded.eventsource())
}

/// The next event, with stream failures classified.
pub(super) async fn next<S>(events: &mut EventStream<S>) -> Option<Result<Event, ProviderError>>
where
    S: Stream<Item = Result<bytes::Bytes, BodyError>> + Unpin,
{
    let event = events.next().await?;
    Some(event.map_err(|e| match e {
        eventsource_stream::EventStreamError::Transport(BodyError::Transport(e)) => {
            transport_error(e)
        }
        other => ProviderError::Protocol(other.to_string()),
    }))
}

/// The error for an answer that ended without its protocol's end marker (a cut-off stream,
/// an empty 200): never committed as if it were a complete reply.
pub(super) fn cut_off() -> ProviderError {
    ProviderError::Protocol("the answer stream ended before it was complete".into())
}
