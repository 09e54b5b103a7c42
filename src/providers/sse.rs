//! The part both protocols share: send the request, turn an HTTP error into its class, and
//! read the SSE answer event by event (parsing via `eventsource-stream`).

use super::ProviderError;
use super::openai::{classify_status, retry_after, transport_error};
use eventsource_stream::{Event, EventStream, Eventsource};
use futures::{Stream, StreamExt};

/// The events of a streamed answer, or the classified error of a refused request.
pub(super) async fn events(
    request: reqwest::RequestBuilder,
) -> Result<EventStream<impl Stream<Item = reqwest::Result<bytes::Bytes>>>, ProviderError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers());
        let body = response.text().await.unwrap_or_default();
        return Err(classify_status(status.as_u16(), &body, retry_after));
    }
    Ok(response.bytes_stream().eventsource())
}

/// The next event, with stream failures classified.
pub(super) async fn next<S>(events: &mut EventStream<S>) -> Option<Result<Event, ProviderError>>
where
    S: Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    let event = events.next().await?;
    Some(event.map_err(|e| match e {
        eventsource_stream::EventStreamError::Transport(e) => transport_error(e),
        other => ProviderError::Protocol(other.to_string()),
    }))
}
