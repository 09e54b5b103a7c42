//! A webhook callback receiver that records what it is sent and can fail on purpose.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub body: Value,
    pub raw: String,
    pub timestamp: String,
    pub signature: String,
    /// Every header, lower-case names.
    pub headers: Vec<(String, String)>,
}

pub struct Receiver {
    pub url: String,
    state: Arc<Inner>,
}

struct Inner {
    fail_first: usize,
    /// Also answer 503 to every `n`th attempt (0: never).
    fail_every: usize,
    attempts: Mutex<usize>,
    received: Mutex<Vec<Received>>,
}

impl Receiver {
    /// Start a receiver that answers 503 to the first `fail_first` deliveries.
    pub async fn start(fail_first: usize) -> Self {
        Self::start_failing(fail_first, 0).await
    }

    /// A receiver that answers 503 to every `n`th delivery attempt, for ever.
    pub async fn failing_every(n: usize) -> Self {
        Self::start_failing(0, n).await
    }

    async fn start_failing(fail_first: usize, fail_every: usize) -> Self {
        let state = Arc::new(Inner {
            fail_first,
            fail_every,
            attempts: Mutex::new(0),
            received: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/callback", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/callback", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, state }
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn attempts(&self) -> usize {
        *self.state.attempts.lock().unwrap()
    }
}

async fn handle(State(state): State<Arc<Inner>>, headers: HeaderMap, raw: String) -> StatusCode {
    let attempt = {
        let mut attempts = state.attempts.lock().unwrap();
        *attempts += 1;
        *attempts
    };
    if attempt <= state.fail_first || (state.fail_every > 0 && attempt % state.fail_every == 0) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    state.received.lock().unwrap().push(Received {
        at: Instant::now(),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw: raw.clone(),
        timestamp: header("x-ferroclaw-timestamp"),
        signature: header("x-ferroclaw-signature"),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect(),
    });
    StatusCode::OK
}
