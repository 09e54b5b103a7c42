//! A Discord stand-in on loopback, driven by the real serenity client: the REST routes a bot
//! uses (`/api/v10/...`: gateway discovery, users/@me, channels, messages and edits, typing,
//! DM channels, application commands, interaction callbacks and follow-ups) and a gateway
//! WebSocket (HELLO, IDENTIFY → READY, heartbeats, dispatches with increasing `s`, RESUME →
//! replay of missed events then RESUMED). Like the real server it sends the real heartbeat
//! interval, can drop the connection without a close frame, close with 4014 when the
//! MESSAGE_CONTENT intent is not allowed, and answer 429 with Discord's rate-limit headers.
//! Every REST call is recorded.

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

pub const TOKEN: &str = "MTIz.TEST-discord-token.SECRET";
pub const BOT_ID: u64 = 900;
pub const APP_ID: u64 = 901;
pub const GUILD: u64 = 1;
/// A guild text channel.
pub const CHANNEL: u64 = 300;
/// A public thread under [`CHANNEL`].
pub const THREAD: u64 = 400;
/// The DM channel of user 7.
pub const DM_CHANNEL: u64 = 607;
/// The privileged intent a bot must be allowed in the Developer Portal.
pub const MESSAGE_CONTENT: u64 = 1 << 15;

#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub body: Value,
    pub at: Instant,
    pub status: u16,
}

enum Control {
    Dispatch(String),
    Drop,
}

#[derive(Default)]
struct Inner {
    base: Mutex<String>,
    calls: Mutex<Vec<Call>>,
    next_id: AtomicU64,
    /// channel id → [(message id, text)] in order of creation, edits applied.
    messages: Mutex<HashMap<u64, Vec<(u64, String)>>>,
    /// Dispatches of the current session: (seq, frame).
    events: Mutex<Vec<(u64, String)>>,
    seq: AtomicU64,
    session: AtomicU64,
    connection: Mutex<Option<mpsc::UnboundedSender<Control>>>,
    connections: AtomicU64,
    identifies: Mutex<Vec<Value>>,
    resumes: Mutex<Vec<Value>>,
    refuse_message_content: AtomicBool,
    resume_replays_last: AtomicBool,
    /// Retry-After seconds of the next 429s to POST .../messages.
    rate_limits: Mutex<VecDeque<f64>>,
    wrong_tokens: Mutex<Vec<String>>,
    /// Interaction token → the channel its follow-ups land in.
    interaction_channels: Mutex<HashMap<String, u64>>,
    /// New gateway connections are refused (Discord unreachable).
    gateway_down: AtomicBool,
    /// The interval HELLO announces, in ms (0: Discord's own 41250).
    heartbeat_interval: AtomicU64,
    /// Heartbeats are read and never acknowledged (a gateway that stopped answering).
    withhold_acks: AtomicBool,
}

pub struct DiscordStandIn {
    pub url: String,
    inner: Arc<Inner>,
}

impl DiscordStandIn {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        inner.next_id.store(10_000, Ordering::SeqCst);
        let app = Router::new()
            .route("/gw", axum::routing::get(gateway))
            .route("/{*path}", axum::routing::any(rest))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        *inner.base.lock().unwrap() = url.clone();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        DiscordStandIn { url, inner }
    }

    /// Dispatch a gateway event to the bot (queued for a resume while disconnected).
    pub fn dispatch(&self, t: &str, d: Value) {
        self.inner.dispatch(t, d);
    }

    /// A user's message (MESSAGE_CREATE). `guild` None is a DM.
    pub fn message(&self, channel: u64, guild: Option<u64>, user: u64, id: u64, text: &str) {
        self.message_with(channel, guild, user, id, text, json!({}));
    }

    /// A guild message that mentions the bot (a real mention: `<@ID>` and `mentions`).
    pub fn mention(&self, channel: u64, user: u64, id: u64, text: &str) {
        self.message_with(
            channel,
            Some(GUILD),
            user,
            id,
            &format!("<@{BOT_ID}> {text}"),
            json!({"mentions": [bot_user()]}),
        );
    }

    pub fn message_with(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        id: u64,
        text: &str,
        extra: Value,
    ) {
        let mut m = message_json(channel, id, &user_json(user), text);
        if let Some(g) = guild {
            m["guild_id"] = json!(g.to_string());
            m["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00",
                "deaf": false, "mute": false, "flags": 0});
        }
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        self.dispatch("MESSAGE_CREATE", m);
    }

    /// A press by `user` of the button `custom_id` under the bot's message `message_id` in a
    /// DM (`guild` None) or guild channel: a component interaction (INTERACTION_CREATE, type
    /// 3) with id `id`.
    pub fn press(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        id: u64,
        message_id: u64,
        custom_id: &str,
    ) {
        let data = json!({"custom_id": custom_id, "component_type": 2});
        let mut d = interaction(channel, guild, user, id, 3, data);
        d["message"] = message_json(channel, message_id, &bot_user(), "prompt");
        self.dispatch("INTERACTION_CREATE", d);
    }

    /// A slash command (INTERACTION_CREATE) with its one text option.
    pub fn slash(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        id: u64,
        name: &str,
        text: Option<&str>,
    ) {
        let options = match text {
            Some(t) => json!([{"name": "text", "type": 3, "value": t}]),
            None => json!([]),
        };
        let data = json!({"id": "55", "name": name, "type": 1, "options": options});
        let d = interaction(channel, guild, user, id, 2, data);
        self.inner
            .interaction_channels
            .lock()
            .unwrap()
            .insert(format!("itoken-{id}"), channel);
        self.dispatch("INTERACTION_CREATE", d);
    }

    /// The heartbeat interval HELLO announces to new connections (Discord's is 41.25 s; a
    /// client must follow whatever the server says).
    pub fn heartbeat_interval_ms(&self, ms: u64) {
        self.inner.heartbeat_interval.store(ms, Ordering::SeqCst);
    }

    /// Stop (or start again) acknowledging heartbeats, on every connection.
    pub fn withhold_acks(&self, on: bool) {
        self.inner.withhold_acks.store(on, Ordering::SeqCst);
    }

    /// Drop the gateway connection without a close frame (as a network fault does).
    pub fn drop_connection(&self) {
        if let Some(c) = self.inner.connection.lock().unwrap().take() {
            let _ = c.send(Control::Drop);
        }
    }

    /// Refuse (or accept again) new gateway connections, as when Discord is unreachable.
    pub fn gateway_down(&self, down: bool) {
        self.inner.gateway_down.store(down, Ordering::SeqCst);
    }

    pub fn connected(&self) -> bool {
        self.inner.connection.lock().unwrap().is_some()
    }

    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    pub fn refuse_message_content(&self, on: bool) {
        self.inner
            .refuse_message_content
            .store(on, Ordering::SeqCst);
    }

    /// On RESUME, also send again the last event the bot already had (Discord's delivery is
    /// at least once).
    pub fn resume_replays_last(&self, on: bool) {
        self.inner.resume_replays_last.store(on, Ordering::SeqCst);
    }

    /// The next POSTs of messages answer 429 with these Retry-After values.
    pub fn rate_limit_next_messages(&self, retry_after: &[f64]) {
        self.inner.rate_limits.lock().unwrap().extend(retry_after);
    }

    pub fn identifies(&self) -> Vec<Value> {
        self.inner.identifies.lock().unwrap().clone()
    }

    pub fn resumes(&self) -> Vec<Value> {
        self.inner.resumes.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.inner.calls.lock().unwrap().clone()
    }

    /// Calls whose method is `method` and whose path contains `path`.
    pub fn calls_to(&self, method: &str, path: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && c.path.contains(path))
            .collect()
    }

    /// The bot's messages in a channel, in order, with edits applied.
    pub fn texts(&self, channel: u64) -> Vec<String> {
        self.inner
            .messages
            .lock()
            .unwrap()
            .get(&channel)
            .map(|m| m.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default()
    }

    /// The bot's messages in a channel with their ids, in order, with edits applied.
    pub fn messages(&self, channel: u64) -> Vec<(u64, String)> {
        self.inner
            .messages
            .lock()
            .unwrap()
            .get(&channel)
            .cloned()
            .unwrap_or_default()
    }

    pub fn wrong_tokens(&self) -> Vec<String> {
        self.inner.wrong_tokens.lock().unwrap().clone()
    }
}

impl Inner {
    /// A new bot message in `channel`: stored, answered as Discord does.
    fn post(&self, channel: u64, text: &str) -> (u16, Value) {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut messages = self.messages.lock().unwrap();
        messages
            .entry(channel)
            .or_default()
            .push((id, text.to_string()));
        (200, message_json(channel, id, &bot_user(), text))
    }

    fn dispatch(&self, t: &str, d: Value) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let frame = json!({"op": 0, "s": seq, "t": t, "d": d}).to_string();
        self.events.lock().unwrap().push((seq, frame.clone()));
        if let Some(c) = self.connection.lock().unwrap().as_ref() {
            let _ = c.send(Control::Dispatch(frame));
        }
    }
}

/// An interaction of `kind` (2: a slash command, 3: a component) by `user` in a DM (`guild`
/// None) or guild channel, as Discord's gateway sends it; its token is `itoken-<id>`.
fn interaction(
    channel: u64,
    guild: Option<u64>,
    user: u64,
    id: u64,
    kind: u8,
    data: Value,
) -> Value {
    let mut d = json!({"id": id.to_string(), "application_id": APP_ID.to_string(), "type": kind,
        "data": data, "channel_id": channel.to_string(), "token": format!("itoken-{id}"),
        "version": 1, "app_permissions": "0", "locale": "en-US", "entitlements": [],
        "authorizing_integration_owners": {}, "context": 0, "attachment_size_limit": 26214400,
        "channel": channel_json(channel)});
    match guild {
        Some(g) => {
            d["guild_id"] = json!(g.to_string());
            d["guild_locale"] = json!("en-US");
            d["member"] = json!({"user": user_json(user), "roles": [], "permissions": "0",
                "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0});
        }
        None => d["user"] = user_json(user),
    }
    d
}

fn bot_user() -> Value {
    json!({"id": BOT_ID.to_string(), "username": "ferro", "discriminator": "0", "global_name": null,
        "avatar": null, "bot": true})
}

fn user_json(id: u64) -> Value {
    json!({"id": id.to_string(), "username": format!("user{id}"), "discriminator": "0",
        "global_name": format!("User {id}"), "avatar": null})
}

fn message_json(channel: u64, id: u64, author: &Value, text: &str) -> Value {
    json!({"id": id.to_string(), "channel_id": channel.to_string(), "author": author, "content": text,
        "timestamp": "2026-11-30T10:00:00.000000+00:00", "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0, "flags": 0})
}

fn channel_json(id: u64) -> Value {
    match id {
        THREAD => json!({"id": THREAD.to_string(), "type": 11, "guild_id": GUILD.to_string(),
            "parent_id": CHANNEL.to_string(), "name": "a thread",
            "thread_metadata": {"archived": false, "auto_archive_duration": 1440,
                "archive_timestamp": "2026-11-30T10:00:00.000000+00:00", "locked": false}}),
        DM_CHANNEL => {
            json!({"id": DM_CHANNEL.to_string(), "type": 1, "recipients": [user_json(7)]})
        }
        other => json!({"id": other.to_string(), "type": 0, "guild_id": GUILD.to_string(),
            "name": "general", "position": 0, "permission_overwrites": [], "nsfw": false}),
    }
}

async fn gateway(State(inner): State<Arc<Inner>>, ws: WebSocketUpgrade) -> Response {
    if inner.gateway_down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    ws.on_upgrade(move |socket| connection(inner, socket))
}

async fn connection(inner: Arc<Inner>, mut socket: WebSocket) {
    inner.connections.fetch_add(1, Ordering::SeqCst);
    let interval = match inner.heartbeat_interval.load(Ordering::SeqCst) {
        0 => 41250,
        ms => ms,
    };
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}}).to_string();
    if socket.send(WsMessage::Text(hello.into())).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    loop {
        tokio::select! {
            control = rx.recv() => match control {
                Some(Control::Dispatch(frame)) => {
                    if socket.send(WsMessage::Text(frame.into())).await.is_err() {
                        break;
                    }
                }
                // Dropping the socket closes TCP with no close frame.
                Some(Control::Drop) | None => return,
            },
            frame = socket.recv() => {
                let Some(Ok(WsMessage::Text(text))) = frame else {
                    match frame {
                        Some(Ok(_)) => continue,
                        _ => break,
                    }
                };
                let payload: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                match payload["op"].as_u64() {
                    Some(1) if inner.withhold_acks.load(Ordering::SeqCst) => {}
                    Some(1) => {
                        let ack = json!({"op": 11}).to_string();
                        if socket.send(WsMessage::Text(ack.into())).await.is_err() {
                            break;
                        }
                    }
                    Some(2) => {
                        inner.identifies.lock().unwrap().push(payload["d"].clone());
                        let intents = payload["d"]["intents"].as_u64().unwrap_or(0);
                        if inner.refuse_message_content.load(Ordering::SeqCst)
                            && intents & MESSAGE_CONTENT != 0
                        {
                            let close = CloseFrame { code: 4014, reason: "Disallowed intent(s).".into() };
                            let _ = socket.send(WsMessage::Close(Some(close))).await;
                            break;
                        }
                        // A new session: sequence numbers start again.
                        let session = inner.session.fetch_add(1, Ordering::SeqCst) + 1;
                        inner.events.lock().unwrap().clear();
                        inner.seq.store(0, Ordering::SeqCst);
                        *inner.connection.lock().unwrap() = Some(tx.clone());
                        let base = inner.base.lock().unwrap().replace("http://", "ws://");
                        inner.dispatch("READY", json!({"v": 10, "user": bot_user(), "guilds": [],
                            "session_id": format!("session-{session}"),
                            "resume_gateway_url": format!("{base}/gw"),
                            "shard": [0, 1], "application": {"id": APP_ID.to_string(), "flags": 0}}));
                    }
                    Some(6) => {
                        inner.resumes.lock().unwrap().push(payload["d"].clone());
                        let seen = payload["d"]["seq"].as_u64().unwrap_or(0);
                        let from = if inner.resume_replays_last.load(Ordering::SeqCst) {
                            seen.saturating_sub(1)
                        } else {
                            seen
                        };
                        let missed: Vec<String> = inner.events.lock().unwrap().iter()
                            .filter(|(s, _)| *s > from).map(|(_, f)| f.clone()).collect();
                        for frame in missed {
                            if socket.send(WsMessage::Text(frame.into())).await.is_err() {
                                return;
                            }
                        }
                        *inner.connection.lock().unwrap() = Some(tx.clone());
                        inner.dispatch("RESUMED", json!({"_trace": ["stand-in"]}));
                    }
                    _ => {}
                }
            }
        }
    }
}

fn record(inner: &Inner, method: &Method, path: &str, body: &Value, status: u16) {
    inner.calls.lock().unwrap().push(Call {
        method: method.to_string(),
        path: path.to_string(),
        body: body.clone(),
        at: Instant::now(),
        status,
    });
}

/// A JSON body, or a multipart one as its `payload_json` with the file names sent under
/// `_files` (how serenity sends attachments).
fn request_body(headers: &HeaderMap, body: &Bytes) -> Value {
    let multipart = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("multipart/"));
    if !multipart {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    let raw = String::from_utf8_lossy(body);
    let mut request = Value::Null;
    let mut files = Vec::new();
    for part in raw.split("Content-Disposition: form-data; ").skip(1) {
        let (head, rest) = part.split_once("\r\n\r\n").unwrap_or((part, ""));
        if head.starts_with("name=\"payload_json\"") {
            let json = rest.split("\r\n--").next().unwrap_or_default();
            request = serde_json::from_str(json).unwrap_or(Value::Null);
        } else if let Some(name) = head.split("filename=\"").nth(1) {
            files.push(json!(name.split('"').next().unwrap_or_default()));
        }
    }
    if request.is_null() {
        request = json!({});
    }
    request["_files"] = Value::Array(files);
    request
}

async fn rest(
    State(inner): State<Arc<Inner>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    // Interaction callbacks and follow-ups are authorised by the interaction token.
    let by_interaction = path.contains("/interactions/") || path.contains("/webhooks/");
    if !by_interaction && auth != format!("Bot {TOKEN}") {
        inner.wrong_tokens.lock().unwrap().push(auth);
        record(&inner, &method, &path, &Value::Null, 401);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"message": "401: Unauthorized", "code": 0})),
        )
            .into_response();
    }
    let segments: Vec<&str> = path.trim_start_matches("api/v10/").split('/').collect();
    let request = request_body(&headers, &body);
    let text = request["content"].as_str().unwrap_or_default().to_string();
    let (status, answer): (u16, Value) = match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway"]) | ("GET", ["gateway", "bot"]) => {
            let base = inner.base.lock().unwrap().replace("http://", "ws://");
            (
                200,
                json!({"url": format!("{base}/gw"), "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
            )
        }
        ("GET", ["users", "@me"]) => (200, bot_user()),
        ("GET", ["channels", id]) => (200, channel_json(id.parse().unwrap_or(0))),
        ("POST", ["users", "@me", "channels"]) => (200, channel_json(DM_CHANNEL)),
        ("POST", ["channels", _, "typing"]) => (204, Value::Null),
        ("POST", ["channels", channel, "messages"]) => {
            let wait = inner.rate_limits.lock().unwrap().pop_front();
            if let Some(wait) = wait {
                record(&inner, &method, &path, &request, 429);
                return rate_limited(wait);
            }
            inner.post(channel.parse().unwrap_or(0), &text)
        }
        ("PATCH", ["channels", channel, "messages", id]) => {
            let channel: u64 = channel.parse().unwrap_or(0);
            let id: u64 = id.parse().unwrap_or(0);
            let mut messages = inner.messages.lock().unwrap();
            match messages
                .get_mut(&channel)
                .and_then(|m| m.iter_mut().find(|(i, _)| *i == id))
            {
                Some(m) => {
                    m.1 = text.clone();
                    (200, message_json(channel, id, &bot_user(), &text))
                }
                None => (404, json!({"message": "Unknown Message", "code": 10008})),
            }
        }
        ("PUT", ["applications", _, "commands"]) => (200, json!([])),
        ("POST", ["interactions", _, _, "callback"]) => (204, Value::Null),
        ("POST", ["webhooks", _, token]) => {
            // A follow-up lands in the interaction's channel.
            let channel = inner
                .interaction_channels
                .lock()
                .unwrap()
                .get(*token)
                .copied()
                .unwrap_or(0);
            inner.post(channel, &text)
        }
        _ => (404, json!({"message": "404: Not Found", "code": 0})),
    };
    record(&inner, &method, &path, &request, status);
    let status = StatusCode::from_u16(status).unwrap();
    if answer.is_null() {
        status.into_response()
    } else {
        (status, axum::Json(answer)).into_response()
    }
}

/// Discord's 429: the body and the rate-limit headers it really sends.
fn rate_limited(retry_after: f64) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": false})),
    )
        .into_response();
    let h = response.headers_mut();
    h.insert(
        "retry-after",
        retry_after.ceil().to_string().parse().unwrap(),
    );
    h.insert("x-ratelimit-limit", "5".parse().unwrap());
    h.insert("x-ratelimit-remaining", "0".parse().unwrap());
    h.insert(
        "x-ratelimit-reset-after",
        retry_after.to_string().parse().unwrap(),
    );
    h.insert("x-ratelimit-bucket", "stand-in-bucket".parse().unwrap());
    h.insert("x-ratelimit-scope", "user".parse().unwrap());
    response
}
