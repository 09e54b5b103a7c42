//! `GET /v1/webhooks/NAME/events`: every bot message of the webhook as Server-Sent Events
//! (`id` = seq, `event: message`, data = the callback JSON). A reconnecting client sends
//! `Last-Event-ID` and continues after it without repeats; without it the stream starts at
//! `?after=SEQ`, or with the next new message.

use crate::bearer::check_bearer;
use crate::error::{ApiError, unavailable};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

#[derive(serde::Deserialize)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
}

pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let endpoint = state.endpoint(&name)?;
    check_bearer(&headers, &endpoint.secret)?;
    let channel = crate::channel_name(&name);
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    let start = match last_event_id.or(query.after) {
        Some(seq) => seq,
        None => state
            .log
            .last_seq(&channel)
            .await
            .map_err(|e| unavailable(&name, "events", e))?,
    };
    let cursor = Cursor {
        state: state.clone(),
        channel,
        last: start,
        buffered: VecDeque::new(),
        wake: state.log.subscribe(),
    };
    let stream = futures::stream::unfold(cursor, |mut cursor| async move {
        let message = cursor.next().await?;
        let event = Event::default()
            .id(message.id.to_string())
            .event("message")
            .data(crate::callback::payload(&message, true).to_string());
        Some((Ok(event), cursor))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Cursor {
    state: Arc<AppState>,
    channel: String,
    last: i64,
    buffered: VecDeque<ferroclaw_channel_core::OutboundMessage>,
    wake: tokio::sync::broadcast::Receiver<String>,
}

impl Cursor {
    /// The next message after `last`; None when the service shuts down.
    async fn next(&mut self) -> Option<ferroclaw_channel_core::OutboundMessage> {
        loop {
            if let Some(message) = self.buffered.pop_front() {
                self.last = message.id;
                return Some(message);
            }
            match self.state.log.after(&self.channel, self.last, 100).await {
                Ok(batch) if !batch.is_empty() => {
                    self.buffered.extend(batch);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(channel = %self.channel, error = %e, "event stream read failed")
                }
            }
            tokio::select! {
                _ = self.state.shutdown.cancelled() => return None,
                _ = self.wake.recv() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}
