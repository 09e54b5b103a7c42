//! The two routes: `GET /v1/models` and `POST /v1/chat/completions` (plain JSON or SSE).

use crate::channel::{Counts, OpenStream, Streams};
use crate::error::ApiError;
use crate::request::Completion;
use axum::Router;
use axum::body::Body;
use axum::extract::State as Extract;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferroclaw_channel_core::auth;
use ferroclaw_channel_core::clock::now_secs;
use ferroclaw_channel_core::{
    Accepted, ChatKind, ChatRoute, InboundMessage, Inbox, MessageLog, OutboundKind, Sender,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest a request waits for its answer.
const MAX_WAIT: Duration = Duration::from_secs(600);

pub(crate) struct State {
    pub(crate) token: SecretString,
    pub(crate) agents: Vec<String>,
    pub(crate) max_body_bytes: usize,
    /// The longest message a turn takes (`agent.max_input_chars`): longer is a 400 here,
    /// not a failed turn.
    pub(crate) max_input_chars: usize,
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) log: Arc<dyn MessageLog>,
    pub(crate) streams: Arc<Streams>,
    /// Requests and failures, for the channel's health.
    pub(crate) counts: Arc<Counts>,
    pub(crate) shutdown: CancellationToken,
}

pub(crate) fn router(state: State) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::new(state))
}

impl State {
    /// 401 unless `Authorization: Bearer <token>` (constant-time compare).
    fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let given = auth::bearer(headers).unwrap_or("");
        if auth::token_matches(given, self.token.expose_secret()) {
            Ok(())
        } else {
            Err(ApiError::unauthorized())
        }
    }

    /// The agent a `model` names: `ferroclaw` (None: the agent the bindings choose, else
    /// the default agent) or `ferroclaw:<id>`.
    fn agent(&self, model: &str) -> Result<Option<String>, ApiError> {
        match model.strip_prefix("ferroclaw") {
            Some("") => Ok(None),
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(|id| self.agents.iter().find(|a| *a == id))
                .map(|id| Some(id.clone()))
                .ok_or_else(|| ApiError::unknown_model(model)),
            None => Err(ApiError::unknown_model(model)),
        }
    }

    /// Until the journal entry is answered (false: timed out or shutting down).
    fn answered(&self, journal_id: i64) -> BoxFuture<'static, bool> {
        let (log, shutdown) = (self.log.clone(), self.shutdown.clone());
        Box::pin(async move {
            tokio::select! {
                answered = log.wait_answered(journal_id, MAX_WAIT) => answered,
                _ = shutdown.cancelled() => false,
            }
        })
    }
}

async fn models(Extract(state): Extract<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(e) = state.check(&headers) {
        return e.into_response();
    }
    let model =
        |id: String| json!({"id": id, "object": "model", "created": 0, "owned_by": "ferroclaw"});
    let mut data = vec![model("ferroclaw".into())];
    data.extend(state.agents.iter().map(|a| model(format!("ferroclaw:{a}"))));
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// One request in flight: where it went and what it is answered with.
struct Asked {
    session: String,
    request_id: String,
    journal_id: i64,
    model: String,
    created: i64,
}

/// A completion, counted by how it was answered.
async fn completions(
    Extract(state): Extract<Arc<State>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let counts = state.counts.clone();
    let response = match complete(state, headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    };
    counts.answered(response.status().as_u16());
    response
}

async fn complete(state: Arc<State>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    state.check(&headers)?;
    let body = axum::body::to_bytes(body, state.max_body_bytes)
        .await
        .map_err(|_| ApiError::too_large(state.max_body_bytes))?;
    let request = Completion::parse(&body)?;
    let agent = state.agent(&request.model)?;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    // A kept session is named by the header or `user`; otherwise each request is its own
    // (named after the request id, so a retried request finds its first run).
    let request_id =
        header("x-request-id").unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let named = header("x-ferroclaw-session").or_else(|| request.user.clone());
    let kept = named.is_some();
    let session = named.unwrap_or_else(|| format!("once-{request_id}"));
    let text = request.text(kept);
    let chars = text.chars().count();
    if chars > state.max_input_chars {
        return Err(ApiError::invalid(format!(
            "`messages`: the input is {chars} characters; the limit is {} (agent.max_input_chars).",
            state.max_input_chars
        )));
    }
    let message = InboundMessage {
        route: ChatRoute {
            channel: crate::CHANNEL.into(),
            kind: ChatKind::Conversation,
            chat_id: session.clone(),
            thread_id: None,
        },
        sender: Sender {
            id: request.user.clone().unwrap_or_else(|| "api".into()),
            name: String::new(),
        },
        platform_message_id: request_id.clone(),
        text,
        mentioned: true,
        reply_to: None,
        internal: false,
        attachments: Vec::new(),
        mention_names: Vec::new(),
    };
    // Open before the message is journalled, so no streamed piece is missed.
    let stream = request
        .stream
        .then(|| state.streams.open(&session, &request_id));
    let accepted = state
        .inbox
        .accept_for(message, agent.as_deref())
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "api: could not journal the request");
            ApiError::unavailable()
        })?;
    let journal_id = match accepted {
        Accepted::New { journal_id, .. } | Accepted::Duplicate { journal_id, .. } => journal_id,
    };
    let asked = Asked {
        session,
        request_id,
        journal_id,
        model: request.model.clone(),
        created: now_secs(),
    };
    match stream {
        None => answer(&state, &asked).await,
        Some(stream) => Ok(streamed(state, asked, stream, request.include_usage)),
    }
}

/// What a finished turn answered: the reply text, or the chat's error message.
async fn outcome(state: &State, asked: &Asked) -> Result<String, ApiError> {
    let replies = state
        .log
        .replies(crate::CHANNEL, &asked.session, &asked.request_id)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "api: could not read the replies");
            ApiError::unavailable()
        })?;
    let texts: Vec<&str> = replies
        .iter()
        .filter(|m| m.kind == OutboundKind::Reply && m.edit_of.is_none())
        .map(|m| m.text.as_str())
        .collect();
    if texts.is_empty()
        && let Some(error) = replies.iter().find(|m| m.kind == OutboundKind::Error)
    {
        return Err(ApiError::upstream(error.text.clone()));
    }
    Ok(texts.join("\n\n"))
}

/// Tokens the request used: its own turn's, recorded with its answer (not the session's
/// growth, which concurrent requests on one session would share).
async fn usage(state: &State, asked: &Asked) -> Value {
    let (prompt, completion) = state
        .log
        .turn_usage(asked.journal_id)
        .await
        .unwrap_or((0, 0));
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

async fn answer(state: &State, asked: &Asked) -> Result<Response, ApiError> {
    if !state.answered(asked.journal_id).await {
        return Err(ApiError::timeout());
    }
    let text = outcome(state, asked).await?;
    Ok(axum::Json(json!({
        "id": format!("chatcmpl-{}", asked.journal_id),
        "object": "chat.completion",
        "created": asked.created,
        "model": asked.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }],
        "usage": usage(state, asked).await,
    }))
    .into_response())
}

/// Where a streamed answer is.
enum Phase {
    /// Nothing sent yet: the role chunk comes first.
    Start,
    /// Passing on pieces until the turn is answered.
    Pieces,
    Done,
}

struct Streaming {
    state: Arc<State>,
    asked: Asked,
    stream: OpenStream,
    answered: BoxFuture<'static, bool>,
    /// Text sent so far.
    sent: String,
    include_usage: bool,
    phase: Phase,
}

impl Streaming {
    /// One `chat.completion.chunk` event with these `choices`.
    fn frame(&self, choices: Value) -> Value {
        json!({
            "id": format!("chatcmpl-{}", self.asked.journal_id),
            "object": "chat.completion.chunk",
            "created": self.asked.created,
            "model": self.asked.model,
            "choices": choices,
        })
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        data(self.frame(json!([{"index": 0, "delta": delta, "finish_reason": finish}])))
    }

    /// The events after the turn is answered: the rest of the text, the finish, the usage.
    async fn finish(&mut self, answered: bool) -> Vec<Event> {
        let text = if answered {
            outcome(&self.state, &self.asked).await
        } else {
            Err(ApiError::timeout())
        };
        let mut events = Vec::new();
        match text {
            Ok(text) => {
                // The final text normally continues what was streamed; a turn run by another
                // process streamed nothing here and comes whole.
                match text.strip_prefix(self.sent.as_str()) {
                    Some(rest) if !rest.is_empty() => {
                        events.push(self.chunk(json!({"content": rest}), None));
                    }
                    Some(_) => {}
                    None => tracing::warn!(
                        "api: the streamed text differs from the final reply; the rest is not sent"
                    ),
                }
                events.push(self.chunk(json!({}), Some("stop")));
                if self.include_usage {
                    let mut last = self.frame(json!([]));
                    last["usage"] = usage(&self.state, &self.asked).await;
                    events.push(data(last));
                }
            }
            Err(error) => events.push(data(error.body())),
        }
        events.push(Event::default().data("[DONE]"));
        events
    }

    async fn next(mut self) -> Option<(Vec<Event>, Self)> {
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Pieces;
                let first = self.chunk(json!({"role": "assistant", "content": ""}), None);
                Some((vec![first], self))
            }
            Phase::Pieces => {
                let events = tokio::select! {
                    biased;
                    Some(piece) = self.stream.pieces.recv() => {
                        self.sent.push_str(&piece);
                        vec![self.chunk(json!({"content": piece}), None)]
                    }
                    answered = &mut self.answered => {
                        self.phase = Phase::Done;
                        self.finish(answered).await
                    }
                };
                Some((events, self))
            }
            Phase::Done => None,
        }
    }
}

fn data(value: Value) -> Event {
    Event::default().data(value.to_string())
}

fn streamed(state: Arc<State>, asked: Asked, stream: OpenStream, include_usage: bool) -> Response {
    let answered = state.answered(asked.journal_id);
    let streaming = Streaming {
        state,
        asked,
        stream,
        answered,
        sent: String::new(),
        include_usage,
        phase: Phase::Start,
    };
    let events = futures::stream::unfold(streaming, Streaming::next)
        .flat_map(futures::stream::iter)
        .map(Ok::<_, std::convert::Infallible>);
    Sse::new(events).into_response()
}
