//! A Telegram Bot API stand-in on loopback, driven by the real teloxide client: answers
//! `/bot<TOKEN>/<Method>` (method names matched case-insensitively, JSON or multipart
//! bodies), re-delivers updates until a later offset confirms them, and records every call.
//! Like the real server it holds an idle `getUpdates` open for the whole requested `timeout`
//! (and answers at once when an update arrives meanwhile).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub const TOKEN: &str = "123456:TEST-telegram-token-SECRET";

#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub params: Value,
    pub raw: String,
    pub at: Instant,
    /// What the stand-in answered (HTTP status).
    pub status: u16,
}

pub struct TelegramStandIn {
    pub url: String,
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    updates: Mutex<Vec<Value>>,
    next_update: AtomicI64,
    new_update: Notify,
    calls: Mutex<Vec<Call>>,
    next_message: AtomicI64,
    /// (chat id, message id) → current text.
    texts: Mutex<HashMap<(i64, i64), String>>,
    reject_html: AtomicBool,
    /// Long polls are accepted and never answered (until switched off).
    hang_polls: AtomicBool,
    unhang: Notify,
    /// Long polls answer this status at once (502 as nginx's HTML page, 409 as the Bot
    /// API's conflict), until switched off (0).
    fail_polls: std::sync::atomic::AtomicU16,
    /// The client address of every `getUpdates` as it arrived (a new port: a new connection).
    poll_peers: Mutex<Vec<SocketAddr>>,
    edit_retry_after: Mutex<VecDeque<u64>>,
    wrong_token: Mutex<Vec<String>>,
    /// file id → (file path, bytes), for `getFile` and `/file/bot<TOKEN>/<path>`.
    files: Mutex<HashMap<String, (String, Vec<u8>)>>,
}

impl TelegramStandIn {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        inner.next_update.store(100, Ordering::SeqCst);
        inner.next_message.store(1000, Ordering::SeqCst);
        let app = Router::new()
            .route("/{*path}", axum::routing::any(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap()
        });
        TelegramStandIn { url, inner }
    }

    /// Queue a message update; returns its update id.
    pub fn push_message(&self, message: Value) -> i64 {
        self.push_update("message", message)
    }

    /// Queue an update of `kind` (`message`, `callback_query`); returns its update id.
    pub fn push_update(&self, kind: &str, payload: Value) -> i64 {
        let id = self.inner.next_update.fetch_add(1, Ordering::SeqCst);
        let mut update = json!({"update_id": id});
        update[kind] = payload;
        self.inner.updates.lock().unwrap().push(update);
        self.inner.new_update.notify_waiters();
        id
    }

    /// A press by `user` of the inline button carrying `data` under the bot's message
    /// `message_id` in `chat`; `query` is the callback query's id. Returns the update id.
    pub fn press(&self, query: &str, user: i64, chat: i64, message_id: i64, data: &str) -> i64 {
        let chat_json = if chat > 0 {
            json!({"id": chat, "type": "private", "first_name": "U"})
        } else {
            json!({"id": chat, "type": "supergroup", "title": "Group"})
        };
        let from = json!({"id": user, "is_bot": false, "first_name": format!("User{user}")});
        let bot_message = json!({"message_id": message_id, "date": 1700000000, "chat": chat_json,
            "from": {"id": 1, "is_bot": true, "first_name": "Ferro", "username": "ferro_bot"},
            "text": "prompt"});
        self.push_update(
            "callback_query",
            json!({"id": query, "from": from, "message": bot_message,
                "chat_instance": format!("ci{chat}"), "data": data}),
        )
    }

    /// A file the bot can fetch with `getFile` and download.
    pub fn add_file(&self, id: &str, path: &str, bytes: &[u8]) {
        self.inner
            .files
            .lock()
            .unwrap()
            .insert(id.to_string(), (path.to_string(), bytes.to_vec()));
    }

    /// Accept long polls and never answer them (as a stuck Bot API does); off: the held
    /// polls answer at once.
    pub fn hang_polls(&self, on: bool) {
        self.inner.hang_polls.store(on, Ordering::SeqCst);
        if !on {
            self.inner.unhang.notify_waiters();
        }
    }

    /// Answer every long poll with `status` (502: nginx's HTML page, as when Telegram's
    /// front end is down; 409: another poller on this token); 0 switches it off.
    pub fn fail_polls(&self, status: u16) {
        self.inner.fail_polls.store(status, Ordering::SeqCst);
    }

    /// How many client connections (ports) have sent `getUpdates` so far.
    pub fn poll_connections(&self) -> usize {
        let peers = self.inner.poll_peers.lock().unwrap();
        let mut seen: Vec<&SocketAddr> = peers.iter().collect();
        seen.sort();
        seen.dedup();
        seen.len()
    }

    pub fn reject_html(&self, on: bool) {
        self.inner.reject_html.store(on, Ordering::SeqCst);
    }

    /// The next edits answer 429 with these retry_after values.
    pub fn edit_retry_after(&self, seconds: &[u64]) {
        self.inner.edit_retry_after.lock().unwrap().extend(seconds);
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        let m = method.to_ascii_lowercase();
        self.inner
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == m)
            .cloned()
            .collect()
    }

    /// Every call's raw request body, in order (what the bot sent to the platform).
    pub fn all_raw(&self) -> Vec<String> {
        let calls = self.inner.calls.lock().unwrap();
        calls.iter().map(|c| c.raw.clone()).collect()
    }

    /// Current texts of the bot's messages in `chat`, oldest first.
    pub fn texts(&self, chat: i64) -> Vec<String> {
        let texts = self.inner.texts.lock().unwrap();
        let mut ids: Vec<(i64, String)> = texts
            .iter()
            .filter(|((c, _), _)| *c == chat)
            .map(|((_, id), t)| (*id, t.clone()))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, t)| t).collect()
    }

    pub fn pending_updates(&self) -> usize {
        self.inner.updates.lock().unwrap().len()
    }

    pub fn wrong_tokens(&self) -> Vec<String> {
        self.inner.wrong_token.lock().unwrap().clone()
    }
}

/// A private-chat message from user `user`.
pub fn dm(user: i64, message_id: i64, text: &str) -> Value {
    json!({"message_id": message_id, "date": 1700000000, "chat": {"id": user, "type": "private", "first_name": "U"},
           "from": {"id": user, "is_bot": false, "first_name": format!("User{user}")}, "text": text})
}

/// A group message; `mention` prefixes "@ferro_bot " with its entity; `thread` makes it a topic message.
pub fn group(
    chat: i64,
    user: i64,
    message_id: i64,
    text: &str,
    mention: bool,
    thread: Option<i64>,
) -> Value {
    let body = if mention {
        format!("@ferro_bot {text}")
    } else {
        text.to_string()
    };
    let mut m = json!({"message_id": message_id, "date": 1700000000,
        "chat": {"id": chat, "type": "supergroup", "title": "Group", "is_forum": thread.is_some()},
        "from": {"id": user, "is_bot": false, "first_name": format!("User{user}")}, "text": body});
    if mention {
        m["entities"] = json!([{"type": "mention", "offset": 0, "length": 10}]);
    }
    if let Some(t) = thread {
        m["message_thread_id"] = json!(t);
        m["is_topic_message"] = json!(true);
    }
    m
}

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

fn fail(status: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(s) = retry_after {
        body["parameters"] = json!({"retry_after": s});
    }
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

/// Fields of a multipart body (text parts only).
fn multipart_fields(raw: &str) -> Value {
    let mut fields = serde_json::Map::new();
    for part in raw.split("Content-Disposition: form-data; name=\"").skip(1) {
        if let Some((name, rest)) = part.split_once('"')
            && let Some((_, value)) = rest.split_once("\r\n\r\n")
        {
            let value = value.split("\r\n--").next().unwrap_or_default();
            fields.insert(name.to_string(), Value::String(value.to_string()));
        }
    }
    Value::Object(fields)
}

fn message(id: i64, chat: i64, text: &str, thread: Option<&Value>) -> Value {
    let mut m = json!({"message_id": id, "date": 1700000000, "chat": {"id": chat, "type": "private", "first_name": "X"},
        "from": {"id": 1, "is_bot": true, "first_name": "Ferro", "username": "ferro_bot"}, "text": text});
    if let Some(t) = thread.filter(|t| !t.is_null()) {
        m["message_thread_id"] = t.clone();
    }
    m
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A file download: `/file/bot<TOKEN>/<file path>`.
    if let Some(rest) = path.strip_prefix("file/") {
        let Some(file_path) = rest.strip_prefix(&format!("bot{TOKEN}/")) else {
            return fail(401, "Unauthorized", None);
        };
        let files = inner.files.lock().unwrap();
        return match files.values().find(|(p, _)| p == file_path) {
            Some((_, bytes)) => bytes.clone().into_response(),
            None => fail(404, "Not Found", None),
        };
    }
    let (bot, method) = path.rsplit_once('/').unwrap_or(("", &path));
    if bot != format!("bot{TOKEN}") {
        inner.wrong_token.lock().unwrap().push(bot.to_string());
        return fail(401, "Unauthorized", None);
    }
    let method = method.to_ascii_lowercase();
    let raw = String::from_utf8_lossy(&body).to_string();
    let multipart = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("multipart/"));
    let params: Value = if multipart {
        multipart_fields(&raw)
    } else {
        serde_json::from_str(&raw).unwrap_or(json!({}))
    };
    if method == "getupdates" {
        inner.poll_peers.lock().unwrap().push(peer);
    }
    let response = answer(&inner, &method, &params).await;
    inner.calls.lock().unwrap().push(Call {
        method,
        params,
        raw,
        at: Instant::now(),
        status: response.status().as_u16(),
    });
    response
}

async fn answer(inner: &Inner, method: &str, params: &Value) -> Response {
    match method {
        "getme" => ok(
            json!({"id": 1, "is_bot": true, "first_name": "Ferro", "username": "ferro_bot", "can_join_groups": true,
            "can_read_all_group_messages": false, "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false}),
        ),
        "getwebhookinfo" => {
            ok(json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0}))
        }
        "deletewebhook" | "setwebhook" | "setmycommands" | "sendchataction" => ok(json!(true)),
        "answercallbackquery" => {
            if params["callback_query_id"]
                .as_str()
                .is_none_or(str::is_empty)
            {
                return fail(
                    400,
                    "Bad Request: query is too old and response timeout expired or query ID is invalid",
                    None,
                );
            }
            ok(json!(true))
        }
        "getfile" => {
            let id = params["file_id"].as_str().unwrap_or_default();
            match inner.files.lock().unwrap().get(id) {
                Some((path, bytes)) => {
                    ok(json!({"file_id": id, "file_unique_id": format!("u-{id}"),
                    "file_size": bytes.len(), "file_path": path}))
                }
                None => fail(400, "Bad Request: invalid file_id", None),
            }
        }
        "sendphoto" | "senddocument" | "sendvoice" => {
            let id = inner.next_message.fetch_add(1, Ordering::SeqCst);
            let chat = params["chat_id"]
                .as_i64()
                .or_else(|| params["chat_id"].as_str().and_then(|c| c.parse().ok()))
                .unwrap_or_default();
            let caption = params["caption"].as_str().unwrap_or_default();
            let mut m = message(id, chat, "", params.get("message_thread_id"));
            m.as_object_mut().unwrap().remove("text");
            m["caption"] = json!(caption);
            ok(m)
        }
        "getupdates" => {
            match inner.fail_polls.load(Ordering::SeqCst) {
                0 => {}
                409 => {
                    return fail(
                        409,
                        "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
                        None,
                    );
                }
                status => {
                    let page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n";
                    return (
                        StatusCode::from_u16(status).unwrap(),
                        [("content-type", "text/html")],
                        page,
                    )
                        .into_response();
                }
            }
            while inner.hang_polls.load(Ordering::SeqCst) {
                let unhung = inner.unhang.notified();
                if !inner.hang_polls.load(Ordering::SeqCst) {
                    break;
                }
                unhung.await;
            }
            let offset = params["offset"].as_i64().unwrap_or(0);
            let timeout = params["timeout"].as_u64().unwrap_or(0);
            let deadline = Instant::now() + Duration::from_secs(timeout);
            loop {
                let notified = inner.new_update.notified();
                // Like the real server: only the kinds in `allowed_updates` are delivered
                // (the others are dropped).
                let allowed: Option<Vec<String>> = params["allowed_updates"]
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .map(|a| {
                        a.iter()
                            .filter_map(|k| k.as_str().map(String::from))
                            .collect()
                    });
                let pending: Vec<Value> = {
                    let mut updates = inner.updates.lock().unwrap();
                    updates.retain(|u| {
                        u["update_id"].as_i64().unwrap() >= offset
                            && allowed
                                .as_ref()
                                .is_none_or(|kinds| kinds.iter().any(|k| u.get(k).is_some()))
                    });
                    updates.clone()
                };
                if !pending.is_empty() || Instant::now() >= deadline {
                    return ok(Value::Array(pending));
                }
                let _ = tokio::time::timeout(deadline - Instant::now(), notified).await;
            }
        }
        "sendmessage" => {
            if inner.reject_html.load(Ordering::SeqCst) && params["parse_mode"] == "HTML" {
                return fail(
                    400,
                    "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0",
                    None,
                );
            }
            let id = inner.next_message.fetch_add(1, Ordering::SeqCst);
            let chat = params["chat_id"].as_i64().unwrap_or_default();
            let text = params["text"].as_str().unwrap_or_default();
            inner
                .texts
                .lock()
                .unwrap()
                .insert((chat, id), text.to_string());
            ok(message(id, chat, text, params.get("message_thread_id")))
        }
        "editmessagetext" => {
            if let Some(seconds) = inner.edit_retry_after.lock().unwrap().pop_front() {
                return fail(
                    429,
                    &format!("Too Many Requests: retry after {seconds}"),
                    Some(seconds),
                );
            }
            if inner.reject_html.load(Ordering::SeqCst) && params["parse_mode"] == "HTML" {
                return fail(
                    400,
                    "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0",
                    None,
                );
            }
            let chat = params["chat_id"].as_i64().unwrap_or_default();
            let id = params["message_id"].as_i64().unwrap_or_default();
            let text = params["text"].as_str().unwrap_or_default().to_string();
            let mut texts = inner.texts.lock().unwrap();
            match texts.get(&(chat, id)) {
                None => fail(400, "Bad Request: message to edit not found", None),
                Some(current) if *current == text => fail(
                    400,
                    "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
                    None,
                ),
                Some(_) => {
                    texts.insert((chat, id), text.clone());
                    ok(message(id, chat, &text, None))
                }
            }
        }
        other => fail(404, &format!("Not Found: method {other}"), None),
    }
}

/// The bot's messages in `chat` once `expect` holds (20 s at most).
pub async fn texts_settle(
    tg: &TelegramStandIn,
    chat: i64,
    expect: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    crate::common::wait_for(
        &format!("the bot's messages in chat {chat}"),
        Duration::from_secs(20),
        || async {
            let t = tg.texts(chat);
            expect(&t).then_some(t)
        },
    )
    .await
}

/// The bot's messages in `chat` once they are `expected` (a streamed reply's preview edited
/// into its final text), and still exactly those 1.5 s later: each answered once.
pub async fn texts_settle_once(tg: &TelegramStandIn, chat: i64, expected: &[&str]) {
    texts_settle(tg, chat, |t| t == expected).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(tg.texts(chat), expected, "each answered once");
}
