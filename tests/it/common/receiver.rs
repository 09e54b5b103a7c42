//! A webhook callback receiver that records what it is sent and can fail on purpose.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug)]
pub struct Received {
    pub body: Value,
    pub raw: String,
    pub timestamp: String,
    pub signature: String,
}

pub struct Receiver {
    pub url: String,
    state: Arc<Inner>,
}

struct Inner {
    fail_first: usize,
    attempts: Mutex<usize>,
    received: Mutex<Vec<Received>>,
}

impl Receiver {
    /// Start a receiver that answers 503 to the first `fail_first` deliveries.
    pub async fn start(fail_first: usize) -> Self {
        let state = Arc::new(Inner {
            fail_first,
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
    if attempt <= state.fail_first {
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
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw: raw.clone(),
        timestamp: header("x-ferroclaw-timestamp"),
        signature: header("x-ferroclaw-signature"),
    });
    StatusCode::OK
}
