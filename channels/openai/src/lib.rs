//! The OpenAI-compatible way in (SPEC section 14): `POST /v1/chat/completions` and
//! `GET /v1/models`, behind a bearer token, so every OpenAI client library, IDE plugin and
//! agent framework can talk to ferroclaw's agent.
//!
//! A request is an inbound message of the `api` channel like any other: it goes through the
//! journal (a repeated `X-Request-Id` is not run twice), the session's lane and the fallback
//! chain; tools run inside ferroclaw and only the assistant's text comes back. Streamed text
//! reaches the request through [`Channel::stream_delta`](ferroclaw_channel_core::Channel) in
//! the process that runs the turn; the final reply is read from the [`MessageLog`], so a turn
//! run by another process still answers (then in one piece).
//!
//! Owns the OpenAI wire shapes (request, response, SSE chunks, errors); knows nothing of
//! storage, sessions or the engine.

mod channel;
mod error;
mod request;
mod routes;

pub use channel::ApiChannel;
use channel::{Counts, Streams};
pub use ferroclaw_channel_core::MessageLog;
use std::sync::Arc;

/// The channel instance name of API requests (session keys `agent:<id>:api:<session>`).
pub const CHANNEL: &str = "api";

/// What the factory takes (the token resolved by the service).
pub struct Settings {
    pub token: secrecy::SecretString,
    /// Agent ids a request may select with `model = "ferroclaw:<id>"`; the first is the
    /// default (`model = "ferroclaw"`).
    pub agents: Vec<String>,
    pub max_body_bytes: usize,
    /// `agent.max_input_chars`: a longer input is refused with 400.
    pub max_input_chars: usize,
}

/// The adapter factory: the `api` channel, and the routes once the inbox exists.
pub fn build(settings: Settings) -> ferroclaw_channel_core::Built {
    let streams = Arc::new(Streams::default());
    let counts = Arc::new(Counts::default());
    ferroclaw_channel_core::Built {
        channels: vec![Arc::new(ApiChannel::new(streams.clone(), counts.clone()))],
        access: Vec::new(),
        receiver: Box::new(Routes {
            settings,
            streams,
            counts,
        }),
    }
}

struct Routes {
    settings: Settings,
    streams: Arc<Streams>,
    counts: Arc<Counts>,
}

impl ferroclaw_channel_core::Receiver for Routes {
    fn start(
        &self,
        cx: ferroclaw_channel_core::ReceiverContext,
    ) -> ferroclaw_channel_core::Receiving {
        ferroclaw_channel_core::Receiving {
            router: Some(routes::router(routes::State {
                token: self.settings.token.clone(),
                agents: self.settings.agents.clone(),
                max_body_bytes: self.settings.max_body_bytes,
                max_input_chars: self.settings.max_input_chars,
                inbox: cx.inbox,
                log: cx.messages,
                streams: self.streams.clone(),
                counts: self.counts.clone(),
                shutdown: cx.shutdown,
            })),
            task: None,
            description: vec![
                "api (POST /v1/chat/completions, GET /v1/models; OpenAI-compatible)".into(),
            ],
        }
    }
}
