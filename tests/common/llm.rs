//! An OpenAI-compatible chat-completions stand-in: streams SSE in small pieces and records
//! every request with its start and end time.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the stand-in does for one request.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Stream `text` after `delay`.
    Reply { text: String, delay: Duration },
    /// Answer with an HTTP error status and body.
    Fail { status: u16, body: String },
    /// Never answer (the client must give up or be killed).
    Hang,
}

impl Behaviour {
    pub fn reply(text: impl Into<String>) -> Self {
        Behaviour::Reply {
            text: text.into(),
            delay: Duration::ZERO,
        }
    }
    pub fn slow(text: impl Into<String>, delay: Duration) -> Self {
        Behaviour::Reply {
            text: text.into(),
            delay,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub body: Value,
    pub authorization: Option<String>,
    pub last_user: String,
    pub started: Instant,
    pub finished: Option<Instant>,
}

type Script = dyn Fn(&Value, usize) -> Behaviour + Send + Sync;

pub struct LlmStandIn {
    pub url: String,
    state: Arc<Inner>,
}

struct Inner {
    script: Box<Script>,
    requests: Mutex<Vec<Recorded>>,
}

impl LlmStandIn {
    /// Start a stand-in whose answer to each request comes from `script(body, index)`.
    pub async fn start(
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        let state = Arc::new(Inner {
            script: Box::new(script),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        LlmStandIn { url, state }
    }

    /// Echo stand-in: replies "echo: <last user message>".
    pub async fn echo() -> Self {
        Self::start(|body, _| Behaviour::reply(format!("echo: {}", last_user(body)))).await
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }
}

pub fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn handle(
    State(state): State<Arc<Inner>>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let index = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(Recorded {
            body: body.clone(),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            last_user: last_user(&body),
            started: Instant::now(),
            finished: None,
        });
        requests.len() - 1
    };
    let behaviour = (state.script)(&body, index);
    let finish = {
        let state = state.clone();
        move || state.requests.lock().unwrap()[index].finished = Some(Instant::now())
    };
    match behaviour {
        Behaviour::Fail { status, body } => {
            finish();
            (StatusCode::from_u16(status).unwrap(), body).into_response()
        }
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Behaviour::Reply { text, delay } => {
            tokio::time::sleep(delay).await;
            let sse = sse_for_text(&text);
            finish();
            // Cut the stream into 7-byte pieces to exercise reassembly.
            let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
                sse.as_bytes().chunks(7).map(|c| Ok(c.to_vec())).collect();
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(pieces)))
                .unwrap()
        }
    }
}

/// An OpenAI streaming body for `text`, in several content deltas, with usage.
pub fn sse_for_text(text: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(5) {
        let s: String = piece.iter().collect();
        let chunk = json!({"choices":[{"index":0,"delta":{"content": s}}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    let usage = json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}});
    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    out
}
