//! A Slack stand-in on loopback: the Web API methods the adapter calls (`auth.test`,
//! `apps.connections.open`, `chat.postMessage`, `chat.update`, the three-step file upload,
//! `url_private` downloads), checked against the bot or app token, and the Socket Mode
//! protocol as Slack speaks it: `hello` on connect, envelopes with ids, acknowledgements by
//! id, `disconnect` refreshes, and every unacknowledged envelope delivered again on the next
//! connection (with `retry_attempt` counted up). Records every call and every ack.

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub const BOT_TOKEN: &str = "xoxb-TEST-slack-bot-token-SECRET";
pub const APP_TOKEN: &str = "xapp-TEST-slack-app-token-SECRET";
pub const SIGNING_SECRET: &str = "slack-signing-secret-TEST";
pub const BOT_USER: &str = "UBOT";

#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub params: Value,
    pub at: Instant,
    pub status: u16,
}

/// One message as the stand-in keeps it.
#[derive(Clone, Debug)]
pub struct Posted {
    pub channel: String,
    pub thread: Option<String>,
    pub ts: String,
    pub text: String,
    pub blocks: Value,
}

#[derive(Default)]
struct Inner {
    calls: Mutex<Vec<Call>>,
    posted: Mutex<Vec<Posted>>,
    next_ts: AtomicU64,
    next_envelope: AtomicU64,
    /// Envelopes not acknowledged yet, in order (delivered again on a new connection).
    unacked: Mutex<Vec<Value>>,
    acks: Mutex<Vec<String>>,
    /// Envelope ids whose ack the stand-in "loses" (as if the process died before it).
    lose_acks: Mutex<Vec<String>>,
    /// The open connection's sender (frames to the client), and how many were opened.
    socket: Mutex<Option<mpsc::UnboundedSender<Message>>>,
    connections: AtomicU64,
    /// When each connection opened and closed (for "the next opened before the old closed").
    opened_at: Mutex<Vec<Instant>>,
    closed_at: Mutex<Vec<Instant>>,
    update_retry_after: Mutex<VecDeque<u64>>,
    uploads: Mutex<HashMap<String, Vec<u8>>>,
    shares: Mutex<Vec<Value>>,
    files: Mutex<HashMap<String, Vec<u8>>>,
    base: Mutex<String>,
    /// Open connections neither read nor write (pings unanswered) until thawed.
    frozen: std::sync::atomic::AtomicBool,
    thaw: tokio::sync::Notify,
}

pub struct SlackStandIn {
    /// The Web API base (`api_url`).
    pub api_url: String,
    pub base: String,
    inner: Arc<Inner>,
}

impl SlackStandIn {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        inner.next_ts.store(1_000, Ordering::SeqCst);
        let app = Router::new()
            .route("/api/{method}", post(api))
            .route("/socket", get(socket))
            .route("/upload/{id}", post(upload))
            .route("/files/{name}", get(download))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let base = format!("http://{addr}");
        *inner.base.lock().unwrap() = base.clone();
        SlackStandIn {
            api_url: format!("{base}/api"),
            base,
            inner,
        }
    }

    /// Deliver an envelope of `kind` with `payload` (now, or on the next connection).
    fn envelope(&self, kind: &str, payload: Value) -> String {
        let id = format!(
            "env-{}",
            self.inner.next_envelope.fetch_add(1, Ordering::SeqCst)
        );
        let envelope = json!({"envelope_id": id, "type": kind, "payload": payload,
            "accepts_response_payload": false, "retry_attempt": 0});
        // Queued for redelivery and sent under one lock, so a connection opening meanwhile
        // gets it exactly once (from the queue or from here).
        let mut unacked = self.inner.unacked.lock().unwrap();
        unacked.push(envelope.clone());
        if let Some(socket) = self.inner.socket.lock().unwrap().as_ref() {
            let _ = socket.send(Message::Text(envelope.to_string().into()));
        }
        id
    }

    /// A message event (`events_api`) in `channel` from `user`.
    pub fn message(&self, channel: &str, user: &str, ts: &str, text: &str) -> String {
        self.event(
            json!({"type": "message", "channel": channel, "user": user, "text": text,
            "ts": ts, "channel_type": if channel.starts_with('D') { "im" } else { "channel" }}),
        )
    }

    /// Any event (`event` as Slack sends it inside `event_callback`).
    pub fn event(&self, event: Value) -> String {
        let n = self.inner.next_envelope.load(Ordering::SeqCst);
        self.envelope(
            "events_api",
            json!({"type": "event_callback", "event_id": format!("Ev{n}"), "event": event}),
        )
    }

    pub fn slash(&self, channel: &str, user: &str, command: &str, text: &str) -> String {
        let n = self.inner.next_envelope.load(Ordering::SeqCst);
        self.envelope(
            "slash_commands",
            json!({"command": command, "text": text, "channel_id": channel, "user_id": user,
                   "user_name": "someone", "trigger_id": format!("trig{n}")}),
        )
    }

    pub fn press(&self, user: &str, value: &str) -> String {
        let n = self.inner.next_envelope.load(Ordering::SeqCst);
        self.envelope(
            "interactive",
            json!({"type": "block_actions", "user": {"id": user}, "trigger_id": format!("t{n}"),
                   "actions": [{"action_id": value, "value": value, "action_ts": format!("{n}.5")}]}),
        )
    }

    /// Ask the client to reconnect (Slack's refresh).
    pub fn disconnect(&self) {
        if let Some(socket) = self.inner.socket.lock().unwrap().as_ref() {
            let _ = socket.send(Message::Text(
                json!({"type": "disconnect", "reason": "refresh_requested"})
                    .to_string()
                    .into(),
            ));
        }
    }

    /// Drop the open connection without a word.
    pub fn drop_connection(&self) {
        if let Some(socket) = self.inner.socket.lock().unwrap().take() {
            let _ = socket.send(Message::Close(None));
        }
    }

    /// Keep the open connections open but silent: nothing read, nothing sent, no pong (a
    /// stuck peer); off: they go on.
    pub fn freeze(&self, on: bool) {
        self.inner.frozen.store(on, Ordering::SeqCst);
        if !on {
            self.inner.thaw.notify_waiters();
        }
    }

    /// The id the next envelope will have.
    pub fn next_envelope_id(&self) -> String {
        format!("env-{}", self.inner.next_envelope.load(Ordering::SeqCst))
    }

    /// The next ack of this envelope is lost (as if the client died before sending it).
    pub fn lose_ack(&self, envelope: &str) {
        self.inner
            .lose_acks
            .lock()
            .unwrap()
            .push(envelope.to_string());
    }

    pub fn acks(&self) -> Vec<String> {
        self.inner.acks.lock().unwrap().clone()
    }

    pub fn unacked(&self) -> usize {
        self.inner.unacked.lock().unwrap().len()
    }

    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// (opened, closed) times of the connections, in order.
    pub fn connection_times(&self) -> (Vec<Instant>, Vec<Instant>) {
        (
            self.inner.opened_at.lock().unwrap().clone(),
            self.inner.closed_at.lock().unwrap().clone(),
        )
    }

    /// The next `chat.update` calls answer 429 with these `Retry-After` seconds.
    pub fn update_retry_after(&self, seconds: &[u64]) {
        self.inner
            .update_retry_after
            .lock()
            .unwrap()
            .extend(seconds);
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.inner
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Messages as they stand now (edits applied), in `channel`, oldest first.
    pub fn posted(&self, channel: &str) -> Vec<Posted> {
        self.inner
            .posted
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.channel == channel)
            .cloned()
            .collect()
    }

    pub fn texts(&self, channel: &str) -> Vec<String> {
        self.posted(channel).into_iter().map(|p| p.text).collect()
    }

    /// A file the adapter may download (its `url_private`).
    pub fn add_file(&self, name: &str, bytes: &[u8]) -> String {
        self.inner
            .files
            .lock()
            .unwrap()
            .insert(name.to_string(), bytes.to_vec());
        format!("{}/files/{name}", self.base)
    }

    pub fn uploads(&self) -> HashMap<String, Vec<u8>> {
        self.inner.uploads.lock().unwrap().clone()
    }

    pub fn shares(&self) -> Vec<Value> {
        self.inner.shares.lock().unwrap().clone()
    }
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string()
}

fn ok(mut body: Value) -> Response {
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn slack_error(code: &str) -> Response {
    axum::Json(json!({"ok": false, "error": code})).into_response()
}

async fn api(
    State(inner): State<Arc<Inner>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json_body = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let params: Value = if json_body {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    } else {
        let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
        Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        )
    };
    let token = bearer(&headers);
    let mut status = 200;
    let response = answer(&inner, &method, &params, &token, &mut status);
    inner.calls.lock().unwrap().push(Call {
        method,
        params,
        at: Instant::now(),
        status,
    });
    response
}

fn answer(inner: &Inner, method: &str, params: &Value, token: &str, status: &mut u16) -> Response {
    let expected = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    if token != expected {
        return slack_error("invalid_auth");
    }
    match method {
        "auth.test" => ok(json!({"user_id": BOT_USER, "team_id": "T1"})),
        "apps.connections.open" => {
            let base = inner.base.lock().unwrap().replace("http://", "ws://");
            ok(json!({"url": format!("{base}/socket")}))
        }
        "chat.postMessage" => {
            let ts = format!(
                "1700000000.{:06}",
                inner.next_ts.fetch_add(1, Ordering::SeqCst)
            );
            inner.posted.lock().unwrap().push(Posted {
                channel: params["channel"].as_str().unwrap_or_default().to_string(),
                thread: params["thread_ts"].as_str().map(str::to_string),
                ts: ts.clone(),
                text: params["text"].as_str().unwrap_or_default().to_string(),
                blocks: params["blocks"].clone(),
            });
            ok(json!({"ts": ts, "channel": params["channel"]}))
        }
        "chat.update" => {
            if let Some(wait) = inner.update_retry_after.lock().unwrap().pop_front() {
                *status = 429;
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", wait.to_string())],
                    axum::Json(json!({"ok": false, "error": "ratelimited"})),
                )
                    .into_response();
            }
            let mut posted = inner.posted.lock().unwrap();
            let Some(found) = posted
                .iter_mut()
                .find(|p| Some(p.ts.as_str()) == params["ts"].as_str())
            else {
                return slack_error("message_not_found");
            };
            found.text = params["text"].as_str().unwrap_or_default().to_string();
            found.blocks = params["blocks"].clone();
            ok(json!({"ts": params["ts"]}))
        }
        "files.getUploadURLExternal" => {
            if params["filename"].as_str().is_none() || params["length"].as_str().is_none() {
                return slack_error("invalid_arguments");
            }
            let id = format!("F{}", inner.next_ts.fetch_add(1, Ordering::SeqCst));
            let base = inner.base.lock().unwrap().clone();
            ok(json!({"upload_url": format!("{base}/upload/{id}"), "file_id": id}))
        }
        "files.completeUploadExternal" => {
            let id = params["files"][0]["id"].as_str().unwrap_or_default();
            if !inner.uploads.lock().unwrap().contains_key(id) {
                return slack_error("file_not_found");
            }
            inner.shares.lock().unwrap().push(params.clone());
            ok(json!({"files": [{"id": id}]}))
        }
        _ => slack_error("unknown_method"),
    }
}

async fn upload(State(inner): State<Arc<Inner>>, Path(id): Path<String>, body: Bytes) -> Response {
    inner.uploads.lock().unwrap().insert(id, body.to_vec());
    (StatusCode::OK, "OK - uploaded").into_response()
}

async fn download(
    State(inner): State<Arc<Inner>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if bearer(&headers) != BOT_TOKEN {
        return (StatusCode::FORBIDDEN, "no").into_response();
    }
    match inner.files.lock().unwrap().get(&name) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn socket(State(inner): State<Arc<Inner>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |ws| connection(inner, ws))
}

/// One Socket Mode connection: hello, every unacknowledged envelope again, then what is
/// pushed; acks recorded (and taken off the redelivery list) until it closes.
async fn connection(inner: Arc<Inner>, mut ws: WebSocket) {
    inner.connections.fetch_add(1, Ordering::SeqCst);
    inner.opened_at.lock().unwrap().push(Instant::now());
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let _ = ws
        .send(Message::Text(
            json!({"type": "hello", "num_connections": 1})
                .to_string()
                .into(),
        ))
        .await;
    // The newest connection gets what is pushed from now on, and what is still unacked.
    let again: Vec<Value> = {
        let unacked = inner.unacked.lock().unwrap();
        *inner.socket.lock().unwrap() = Some(tx.clone());
        unacked.clone()
    };
    for mut envelope in again {
        envelope["retry_attempt"] = json!(envelope["retry_attempt"].as_u64().unwrap_or(0) + 1);
        let _ = ws.send(Message::Text(envelope.to_string().into())).await;
    }
    loop {
        while inner.frozen.load(Ordering::SeqCst) {
            let thawed = inner.thaw.notified();
            if !inner.frozen.load(Ordering::SeqCst) {
                break;
            }
            thawed.await;
        }
        tokio::select! {
            out = rx.recv() => match out {
                Some(Message::Close(_)) | None => break,
                Some(frame) => if ws.send(frame).await.is_err() { break },
            },
            frame = ws.recv() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let Ok(v) = serde_json::from_str::<Value>(&text) else { continue };
                    let Some(id) = v["envelope_id"].as_str() else { continue };
                    {
                        let mut lose = inner.lose_acks.lock().unwrap();
                        if let Some(at) = lose.iter().position(|l| l == id) {
                            lose.remove(at);
                            continue;
                        }
                    }
                    inner.acks.lock().unwrap().push(id.to_string());
                    inner.unacked.lock().unwrap().retain(|e| e["envelope_id"] != id);
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    inner.closed_at.lock().unwrap().push(Instant::now());
    {
        let mut current = inner.socket.lock().unwrap();
        if current.as_ref().is_some_and(|s| s.same_channel(&tx)) {
            *current = None;
        }
    }
    let _ = tokio::time::timeout(Duration::from_millis(100), ws.send(Message::Close(None))).await;
}
