//! An LLM stand-in speaking both the OpenAI chat-completions and the Anthropic Messages
//! protocols: streams SSE in small pieces and records every request with its start and end.

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
    /// Stream tool calls `(name, JSON arguments)` (with optional text first).
    Tools {
        text: String,
        calls: Vec<(String, String)>,
    },
    /// Answer with an HTTP error status, body and optional Retry-After seconds.
    Fail {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// Stream `text`, then break the stream with a protocol error.
    BreakAfter { text: String },
    /// Stream `text` (OpenAI protocol) in `pieces` deltas, `gap` apart.
    Trickle {
        text: String,
        pieces: usize,
        gap: Duration,
    },
    /// Never answer.
    Hang,
    /// Hold the answer until `open` requests are open at once (then stream `text`): a
    /// client that cannot keep that many calls open never gets an answer.
    Gate { text: String, open: usize },
    /// Answer 200 with this content type and body, as is (malformed streams, HTML pages).
    Raw { content_type: String, body: String },
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
    pub fn tool(name: &str, args: Value) -> Self {
        Behaviour::Tools {
            text: String::new(),
            calls: vec![(name.into(), args.to_string())],
        }
    }
    pub fn tools(calls: &[(&str, Value)]) -> Self {
        Behaviour::Tools {
            text: String::new(),
            calls: calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
        }
    }
    pub fn fail(status: u16, body: &str) -> Self {
        Behaviour::Fail {
            status,
            body: body.into(),
            retry_after: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub protocol: Protocol,
    pub body: Value,
    pub authorization: Option<String>,
    pub last_user: String,
    pub started: Instant,
    pub finished: Option<Instant>,
    /// HTTP/1.1, or HTTP/2 (a provider with `http2 = true`, or over TLS by ALPN).
    pub version: axum::http::Version,
    /// The client's address (a new port: a new connection).
    pub peer: std::net::SocketAddr,
}

impl Recorded {
    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or_default()
    }
    pub fn system(&self) -> String {
        match self.protocol {
            Protocol::Anthropic => self.body["system"].as_str().unwrap_or_default().to_string(),
            Protocol::OpenAi => self.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }
}

type Script = dyn Fn(&Value, usize) -> Behaviour + Send + Sync;

pub struct LlmStandIn {
    /// OpenAI-compatible base URL (`.../v1`).
    pub url: String,
    /// Anthropic base URL (the provider appends `/v1/messages`).
    pub anthropic_url: String,
    state: Arc<Inner>,
    /// Served over TLS ([`LlmStandIn::start_tls`]): the server and its authority.
    pub tls: Option<super::tls::TlsServer>,
}

/// Decides by the request's key (`Authorization` or `x-api-key` value) before the script.
type KeyRule = dyn Fn(&str) -> Option<Behaviour> + Send + Sync;

struct Inner {
    script: Box<Script>,
    key_rule: Option<Box<KeyRule>>,
    requests: Mutex<Vec<Recorded>>,
    /// Texts the embeddings endpoint was asked for, in order.
    embedded: Mutex<Vec<String>>,
    piece: usize,
    /// Report cached prompt tokens (OpenAI protocol) for the longest byte-identical prefix a
    /// request shares with an earlier one, as a provider's prompt cache would.
    prompt_cache: bool,
    /// A `Gate` saw its number of requests open at once: every gated request answers now.
    gate_open: std::sync::atomic::AtomicBool,
}

impl Inner {
    /// `script` answering every request, streamed in pieces of `piece` bytes.
    fn scripted(script: Box<Script>, piece: usize) -> Self {
        Inner {
            script,
            key_rule: None,
            requests: Mutex::new(Vec::new()),
            embedded: Mutex::new(Vec::new()),
            piece,
            prompt_cache: false,
            gate_open: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl LlmStandIn {
    /// A model whose first answer trickles for half a minute (the test kills the service
    /// meanwhile) and whose later answers stream `echo: <last user message>` quickly.
    pub async fn killed_mid_stream_then_echo() -> LlmStandIn {
        LlmStandIn::start(|body, index| Behaviour::Trickle {
            text: if index == 0 {
                "half a thought that never finishes because the process dies".into()
            } else {
                format!("echo: {}", last_user(body))
            },
            pieces: 8,
            gap: Duration::from_millis(if index == 0 { 3000 } else { 30 }),
        })
        .await
    }

    /// Start a stand-in whose answer to each request comes from `script(body, index)`.
    pub async fn start(
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        Self::start_with_pieces(7, script).await
    }

    /// As [`start`], cutting every stream into pieces of `piece` bytes.
    pub async fn start_with_pieces(
        piece: usize,
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        Self::serve(Inner::scripted(Box::new(script), piece)).await
    }

    /// As [`start`], reporting prompt and cached tokens the way a provider's prompt cache
    /// does: a token per 4 bytes of the request's tools and messages, cached as far as its
    /// bytes match an earlier request's from the start (see [`prompt_text`]).
    pub async fn start_caching(
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        Self::serve(Inner {
            prompt_cache: true,
            ..Inner::scripted(Box::new(script), 7)
        })
        .await
    }

    /// As [`start`], with `key_rule(key)` answering first where it returns a behaviour.
    pub async fn start_keyed(
        key_rule: impl Fn(&str) -> Option<Behaviour> + Send + Sync + 'static,
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        Self::serve(Inner {
            key_rule: Some(Box::new(key_rule)),
            ..Inner::scripted(Box::new(script), 7)
        })
        .await
    }

    /// As [`start`], over TLS with a certificate from a throwaway authority (trusted by a
    /// service given `SSL_CERT_FILE`), offering `offers` by ALPN.
    pub async fn start_tls(
        offers: super::tls::Offers,
        script: impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        let state = Arc::new(Inner::scripted(Box::new(script), 7));
        let server = super::tls::serve(Self::router(&state), offers).await;
        LlmStandIn {
            url: format!("https://{}/v1", server.addr),
            anthropic_url: format!("https://{}", server.addr),
            state,
            tls: Some(server),
        }
    }

    /// A TLS stand-in's server replaced on the same address (its connections closed), now
    /// offering `offers`: a provider that changed what it speaks.
    pub async fn replace_tls(&mut self, offers: super::tls::Offers) {
        let router = Self::router(&self.state);
        let tls = self.tls.as_mut().expect("a TLS stand-in");
        tls.replace(router, offers).await;
    }

    fn router(state: &Arc<Inner>) -> Router {
        Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/embeddings", post(embeddings))
            .with_state(state.clone())
    }

    async fn serve(inner: Inner) -> Self {
        let state = Arc::new(inner);
        let app = Self::router(&state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
            )
            .await
            .unwrap()
        });
        LlmStandIn {
            url: format!("http://{addr}/v1"),
            anthropic_url: format!("http://{addr}"),
            state,
            tls: None,
        }
    }

    /// Echo stand-in: replies "echo: <last user message>".
    pub async fn echo() -> Self {
        Self::start(|body, _| Behaviour::reply(format!("echo: {}", last_user(body)))).await
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Texts the embeddings endpoint was asked for.
    pub fn embedded(&self) -> Vec<String> {
        self.state.embedded.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// Requests whose body names `model`.
    pub fn count_for(&self, model: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.model() == model)
            .count()
    }
}

/// The contents of the tool results in a request (the whole history).
/// A model that, for a user message `run <json list of [tool, args]>`, makes those calls one
/// per step, then answers with the results joined.
pub fn calls_from_the_message() -> impl Fn(&Value, usize) -> Behaviour {
    |body, _| {
        let user = last_user(body);
        let Some(list) = user.strip_prefix("run ") else {
            return Behaviour::reply(format!("model read: {user}"));
        };
        let calls: Vec<(String, Value)> = serde_json::from_str(list).unwrap();
        let done = fresh_results(body);
        match calls.get(done.len()) {
            Some((name, args)) => Behaviour::tool(name, args.clone()),
            None => Behaviour::reply(done.join("\n=====\n")),
        }
    }
}

/// A model that plans "Greet" in one step ("Say hi"), marks it done with the `plan` tool,
/// then answers "all done".
pub fn one_step_plan() -> impl Fn(&Value, usize) -> Behaviour {
    |body, _| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        if system.contains("## Planning") {
            Behaviour::reply(
                r#"{"goal":"Greet","steps":[{"action":"Say hi","expected_outcome":"hi said"}]}"#,
            )
        } else if tool_results(body).is_empty() {
            Behaviour::tool(
                "plan",
                json!({"action": "update", "step": 1, "status": "done", "actual": "said hi"}),
            )
        } else {
            Behaviour::reply("all done")
        }
    }
}

pub fn tool_results(body: &Value) -> Vec<String> {
    tool_results_from(body, 0)
}

/// Whether `message` is a person's (a user message other than the one the engine adds to
/// show the images tool results brought).
fn from_a_person(message: &Value) -> bool {
    let shows_tool_images = message["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("[The images the tool results"));
    message["role"] == "user" && !shows_tool_images
}

/// Tool results that answer calls of this turn (after the person's last message).
pub fn fresh_results(body: &Value) -> Vec<String> {
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rposition(from_a_person))
        .unwrap_or(0);
    tool_results_from(body, last_user)
}

fn tool_results_from(body: &Value, start: usize) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .skip(start)
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// What a provider's prompt cache compares: the tools, then the messages, as sent.
pub fn prompt_text(body: &Value) -> String {
    format!("{}{}", body["tools"], body["messages"])
}

/// (prompt tokens, cached tokens) of `text` after `earlier` prompts: a token per 4 bytes,
/// cached as far as the longest byte-identical prefix shared with an earlier prompt.
pub fn cached_tokens<'a>(text: &str, earlier: impl Iterator<Item = &'a str>) -> (usize, usize) {
    let shared = earlier
        .map(|e| {
            e.bytes()
                .zip(text.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (text.len() / 4, shared / 4)
}

pub fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .rev()
                .find(|m| m["role"] == "user" && m["content"].is_string())
        })
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The concepts the embeddings stand-in knows: each word's dimension and weight. Texts that
/// mean the same share dimensions whatever their words, as a real model's vectors would:
/// "animal" and "cat" are one concept; "home" only leans towards the house one.
const CONCEPTS: &[(&str, usize, f32)] = &[
    ("cat", 0, 1.0),
    ("cats", 0, 1.0),
    ("kitten", 0, 1.0),
    ("animal", 0, 1.0),
    ("pet", 0, 1.0),
    ("dog", 0, 1.0),
    ("home", 1, 0.3),
    ("house", 1, 0.3),
    ("insurance", 2, 1.0),
    ("renewal", 2, 1.0),
    ("bill", 2, 1.0),
    ("allergic", 3, 1.0),
    ("peanuts", 3, 1.0),
];

/// A stand-in embedding: the weights of the concepts `text` mentions, and a small constant.
pub fn concept_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; 5];
    v[4] = 0.01;
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        for (w, dim, weight) in CONCEPTS {
            if *w == word {
                v[*dim] += weight;
            }
        }
    }
    v
}

/// `POST /v1/embeddings` (OpenAI protocol): one concept vector per input, with its index.
async fn embeddings(State(state): State<Arc<Inner>>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => return (StatusCode::BAD_REQUEST, "input is missing").into_response(),
    };
    state
        .embedded
        .lock()
        .unwrap()
        .extend(inputs.iter().cloned());
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": concept_vector(t)}))
        .collect();
    axum::Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
}

type Peer = axum::extract::ConnectInfo<std::net::SocketAddr>;

async fn openai(
    state: State<Arc<Inner>>,
    peer: Peer,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    handle(state, (peer, version, headers), body, Protocol::OpenAi).await
}

async fn anthropic(
    state: State<Arc<Inner>>,
    peer: Peer,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    handle(state, (peer, version, headers), body, Protocol::Anthropic).await
}

async fn handle(
    State(state): State<Arc<Inner>>,
    (axum::extract::ConnectInfo(peer), version, headers): (
        Peer,
        axum::http::Version,
        axum::http::HeaderMap,
    ),
    body: String,
    protocol: Protocol,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let auth = match protocol {
        Protocol::OpenAi => headers.get("authorization"),
        Protocol::Anthropic => headers.get("x-api-key"),
    };
    let usage = if state.prompt_cache && protocol == Protocol::OpenAi {
        let requests = state.requests.lock().unwrap();
        let earlier: Vec<String> = requests.iter().map(|r| prompt_text(&r.body)).collect();
        let (prompt, cached) =
            cached_tokens(&prompt_text(&body), earlier.iter().map(String::as_str));
        Some(format!(
            "\"prompt_tokens\":{prompt},\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}"
        ))
    } else {
        None
    };
    let index = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(Recorded {
            protocol,
            body: body.clone(),
            authorization: auth.and_then(|v| v.to_str().ok()).map(String::from),
            last_user: last_user(&body),
            started: Instant::now(),
            finished: None,
            version,
            peer,
        });
        requests.len() - 1
    };
    let key = auth.and_then(|v| v.to_str().ok()).unwrap_or_default();
    let behaviour = state
        .key_rule
        .as_ref()
        .and_then(|rule| rule(key))
        .unwrap_or_else(|| (state.script)(&body, index));
    let finish = {
        let state = state.clone();
        move || state.requests.lock().unwrap()[index].finished = Some(Instant::now())
    };
    let stream = |sse: String, tail_error: bool| {
        let sse = match &usage {
            Some(usage) => sse.replace("\"prompt_tokens\":11", usage),
            None => sse,
        };
        let mut pieces: Vec<Result<Vec<u8>, std::io::Error>> = sse
            .as_bytes()
            .chunks(state.piece)
            .map(|c| Ok(c.to_vec()))
            .collect();
        if tail_error {
            pieces.push(Err(std::io::Error::other("stream broken")));
        }
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures::stream::iter(pieces)))
            .unwrap()
    };
    match behaviour {
        Behaviour::Fail {
            status,
            body,
            retry_after,
        } => {
            finish();
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", seconds.to_string().parse().unwrap());
            }
            response
        }
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Behaviour::Gate { text, open } => {
            while !state.gate_open.load(std::sync::atomic::Ordering::SeqCst) {
                let now_open = state
                    .requests
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|r| r.finished.is_none())
                    .count();
                if now_open >= open {
                    state
                        .gate_open
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            finish();
            stream(encode(protocol, &text, &[], true), false)
        }
        Behaviour::Raw { content_type, body } => {
            finish();
            Response::builder()
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap()
        }
        Behaviour::Reply { text, delay } => {
            tokio::time::sleep(delay).await;
            finish();
            stream(encode(protocol, &text, &[], true), false)
        }
        Behaviour::Tools { text, calls } => {
            finish();
            stream(encode(protocol, &text, &calls, true), false)
        }
        Behaviour::Trickle { text, pieces, gap } => {
            finish();
            let chars: Vec<char> = text.chars().collect();
            let size = chars.len().div_ceil(pieces.max(1));
            let mut events: Vec<String> = chars
                .chunks(size.max(1))
                .map(|c| format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content": c.iter().collect::<String>()}}]})))
                .collect();
            events.push(format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}})
            ));
            let stream = futures::stream::unfold(
                (events.into_iter(), true),
                move |(mut it, first)| async move {
                    let next = it.next()?;
                    if !first {
                        tokio::time::sleep(gap).await;
                    }
                    Some((Ok::<_, std::io::Error>(next.into_bytes()), (it, false)))
                },
            );
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Behaviour::BreakAfter { text } => {
            finish();
            stream(encode(protocol, &text, &[], false), true)
        }
    }
}

fn event(out: &mut String, name: Option<&str>, data: Value) {
    if let Some(name) = name {
        out.push_str(&format!("event: {name}\n"));
    }
    out.push_str(&format!("data: {data}\n\n"));
}

/// A streaming body for `text` and tool calls in the given protocol.
pub fn encode(
    protocol: Protocol,
    text: &str,
    calls: &[(String, String)],
    complete: bool,
) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars.chunks(5).map(|p| p.iter().collect()).collect();
    match protocol {
        Protocol::OpenAi => {
            for s in &pieces {
                event(
                    &mut out,
                    None,
                    json!({"choices":[{"index":0,"delta":{"content": s}}]}),
                );
            }
            for (i, (name, args)) in calls.iter().enumerate() {
                event(
                    &mut out,
                    None,
                    json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":format!("call_{i}"),"type":"function","function":{"name":name,"arguments":""}}]}}]}),
                );
                let args: Vec<char> = args.chars().collect();
                for part in args.chunks(4) {
                    let part: String = part.iter().collect();
                    event(
                        &mut out,
                        None,
                        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"function":{"arguments":part}}]}}]}),
                    );
                }
            }
            if complete {
                event(
                    &mut out,
                    None,
                    json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}),
                );
                out.push_str("data: [DONE]\n\n");
            }
        }
        Protocol::Anthropic => {
            event(
                &mut out,
                Some("message_start"),
                json!({"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":11,"output_tokens":1}}}),
            );
            let mut index = 0;
            if !pieces.is_empty() {
                event(
                    &mut out,
                    Some("content_block_start"),
                    json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
                );
                for s in &pieces {
                    event(
                        &mut out,
                        Some("content_block_delta"),
                        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":s}}),
                    );
                }
                event(
                    &mut out,
                    Some("content_block_stop"),
                    json!({"type":"content_block_stop","index":0}),
                );
                index = 1;
            }
            for (i, (name, args)) in calls.iter().enumerate() {
                let block = index + i;
                event(
                    &mut out,
                    Some("content_block_start"),
                    json!({"type":"content_block_start","index":block,"content_block":{"type":"tool_use","id":format!("toolu_{i}"),"name":name,"input":{}}}),
                );
                let args: Vec<char> = args.chars().collect();
                for part in args.chunks(4) {
                    let part: String = part.iter().collect();
                    event(
                        &mut out,
                        Some("content_block_delta"),
                        json!({"type":"content_block_delta","index":block,"delta":{"type":"input_json_delta","partial_json":part}}),
                    );
                }
                event(
                    &mut out,
                    Some("content_block_stop"),
                    json!({"type":"content_block_stop","index":block}),
                );
            }
            if complete {
                event(
                    &mut out,
                    Some("message_delta"),
                    json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}),
                );
                event(
                    &mut out,
                    Some("message_stop"),
                    json!({"type":"message_stop"}),
                );
            }
        }
    }
    out
}
