//! Secrets never leave and egress is under control (SPEC section 18), through the real
//! `serve`: a model that echoes the provider's key — raw, base64, hex, URL-encoded, and
//! streamed in pieces so the key is split across preview edits — reaches Telegram, the
//! webhook's callbacks and polling, and the OpenAI endpoint (streamed and whole) only as
//! `[redacted:FC_LLM_KEY]`, checked by scanning every byte each stand-in received; a
//! `web_fetch` URL carrying the key is redacted before the request; in allowlist mode a
//! listed host is fetched at once and an unlisted one becomes an approval request; a
//! redirect to a denied host is refused; `send_file` refuses a file holding the key.

use crate::common::hook::{Hook, now};
use crate::common::llm::{Behaviour, LlmStandIn, calls_from_the_message, last_user};
use crate::common::metrics::{scrape, value};
use crate::common::receiver::Receiver;
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::telegram::{TOKEN, TelegramStandIn, dm};
use crate::common::wait_for;
use base64::Engine as _;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider's key: 30 bytes (its base64 has no padding), with `+` and `/` so its
/// URL-encoded form differs from it.
const KEY: &str = "sk-live+Zq81/xYw7Kp3Tr9Lm2Nb5V";
const MARK: &str = "[redacted:FC_LLM_KEY]";
const HOOK_SECRET: &str = "hook-secret-LEAKS-0001";
const API_TOKEN: &str = "api-token-LEAKS-0001";

fn env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("FC_LLM_KEY", KEY),
        ("FC_HOOK", HOOK_SECRET),
        ("FC_API", API_TOKEN),
        ("FC_TG_TOKEN", TOKEN),
    ]
}

/// Every form of the key a leak would take (and its first 12 bytes: a piece of a split one).
fn forms() -> Vec<(&'static str, String)> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    vec![
        ("raw", KEY.to_string()),
        ("prefix", KEY[..12].to_string()),
        ("base64", STANDARD.encode(KEY)),
        ("base64url", URL_SAFE.encode(KEY)),
        ("hex", hex::encode(KEY)),
        ("HEX", hex::encode_upper(KEY)),
        (
            "url-encoded",
            url::form_urlencoded::byte_serialize(KEY.as_bytes()).collect(),
        ),
    ]
}

/// Panics naming the sink and the form when `received` holds any form of the key.
fn assert_clean(sink: &str, received: &str) {
    for (form, text) in forms() {
        assert!(
            !received.contains(&text),
            "{sink} received the key ({form}): {received}"
        );
    }
}

/// What the model says for `say <form>`: the key in that form, streamed in small pieces.
fn echoing_model(body: &Value, _: usize) -> Behaviour {
    let asked = last_user(body);
    let form = asked.rsplit(' ').next().unwrap_or_default();
    let shown = match form {
        "raw" => KEY.to_string(),
        "base64" => base64::engine::general_purpose::STANDARD.encode(KEY),
        "hex" => hex::encode(KEY),
        "url" => url::form_urlencoded::byte_serialize(KEY.as_bytes()).collect(),
        _ => return Behaviour::reply(format!("model read: {asked}")),
    };
    Behaviour::Trickle {
        text: format!("Here it is: {shown} — done."),
        pieces: 14,
        gap: Duration::from_millis(40),
    }
}

fn with_key(config: String) -> String {
    config.replacen(
        "kind = \"openai\"\n",
        "kind = \"openai\"\napi_key_env = \"FC_LLM_KEY\"\n",
        1,
    )
}

async fn completions(service: &Service, text: &str, stream: bool) -> String {
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", service.base))
        .bearer_auth(API_TOKEN)
        .json(
            &json!({"model": "ferroclaw", "stream": stream, "user": format!("u-{stream}"),
                      "messages": [{"role": "user", "content": text}]}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_echoing_the_key_in_any_form_reaches_no_sink_with_it() {
    let llm = LlmStandIn::start(echoing_model).await;
    let tg = TelegramStandIn::start().await;
    let callbacks = Receiver::start(0).await;
    let extra = format!(
        "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\n\
         access = \"open\"\nstream_edit_interval_ms = 30\n\n\
         [channels.webhook.main]\nsecret_env = \"FC_HOOK\"\ncallback_url = \"{}\"\n\n\
         [api]\ntoken_env = \"FC_API\"\n",
        tg.url, callbacks.url
    );
    let work = Workdir::new(&with_key(config_with_llm(&llm.url, &extra)));
    let service = Service::start(&work, &env()).await;
    let hook = Hook::new(&service, HOOK_SECRET);

    // Telegram: every form, each streamed as edits of a preview.
    for (n, form) in ["raw", "base64", "hex", "url"].into_iter().enumerate() {
        tg.push_message(dm(7, n as i64 + 1, &format!("say {form}")));
    }
    wait_for(
        "four redacted answers on Telegram",
        Duration::from_secs(30),
        || async {
            let texts = tg.texts(7);
            (texts
                .iter()
                .filter(|t| t.contains("done.") && t.contains(MARK))
                .count()
                == 4)
                .then_some(())
        },
    )
    .await;
    assert!(
        tg.calls("editMessageText").len() >= 4,
        "the answers were streamed as edits"
    );

    // The webhook: a callback for each answer, and the same messages when polled.
    for (n, form) in ["raw", "hex"].into_iter().enumerate() {
        let (status, body) = hook
            .send("c-1", None, &format!("w{n}"), &format!("say {form}"), "")
            .await;
        assert_eq!(status, 202, "{body}");
    }
    wait_for(
        "two redacted callbacks",
        Duration::from_secs(30),
        || async {
            let got = callbacks.received();
            (got.iter().filter(|r| r.raw.contains("done.")).count() >= 2).then_some(())
        },
    )
    .await;
    let polled = serde_json::to_string(&hook.list("c-1", 0).await).unwrap();
    assert!(polled.contains(MARK), "{polled}");

    // The OpenAI endpoint, streamed and whole.
    let streamed = completions(&service, "say base64", true).await;
    let whole = completions(&service, "say url", false).await;
    assert!(streamed.contains("done."), "{streamed}");
    assert!(whole.contains(MARK), "{whole}");
    // The streamed pieces add up to the redacted answer.
    let mut text = String::new();
    for line in streamed.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if let Ok(chunk) = serde_json::from_str::<Value>(line) {
            text.push_str(
                chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap_or(""),
            );
        }
    }
    assert_eq!(text, format!("Here it is: {MARK} — done."));

    for raw in tg.all_raw() {
        assert_clean("telegram", &raw);
    }
    for got in callbacks.received() {
        assert_clean("webhook callback", &got.raw);
    }
    assert_clean("webhook polling", &polled);
    assert_clean("openai stream", &streamed);
    assert_clean("openai answer", &whole);

    let samples = scrape(&service.base).await;
    for sink in ["chat", "stream", "log"] {
        assert!(
            value(
                &samples,
                "ferroclaw_secret_redactions_total",
                &[("name", "FC_LLM_KEY"), ("sink", sink)]
            ) >= 1.0,
            "redactions counted for sink {sink}"
        );
    }
    let logs = service.logs();
    assert!(
        logs.contains("redacted") && logs.contains("FC_LLM_KEY"),
        "each redaction is logged by name"
    );
    assert_clean("the service's log", &logs);
}

/// A loopback web server that records the paths and queries it is asked for. `/page` is a
/// page, `/echo` answers with what it was asked, `/to?url=U` redirects to `U`.
struct Site {
    url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

async fn site(ip: &str) -> Site {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let seen = seen.clone();
        async move {
            let text = uri.to_string();
            seen.lock().unwrap().push(text.clone());
            if let Some(to) = uri.query().and_then(|q| q.strip_prefix("url=")) {
                let to = url::form_urlencoded::parse(format!("u={to}").as_bytes())
                    .next()
                    .unwrap()
                    .1
                    .into_owned();
                return axum::response::Redirect::temporary(&to).into_response_boxed();
            }
            if uri.path() == "/page" {
                return "the page body".into_response_boxed();
            }
            format!("asked for {text}").into_response_boxed()
        }
    });
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Site { url, asked }
}

trait Boxed {
    fn into_response_boxed(self) -> axum::response::Response;
}

impl<T: axum::response::IntoResponse> Boxed for T {
    fn into_response_boxed(self) -> axum::response::Response {
        self.into_response()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fetches_are_redacted_allowlisted_asked_about_and_never_redirected_to_a_denied_host() {
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let listed = site("127.0.0.1").await;
    let denied = site("127.0.0.2").await;
    let extra = "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n\
                 [tools]\nweb_fetch_allow_private = true\n\n\
                 [egress]\nmode = \"allowlist\"\nallow = [\"127.0.0.1\"]\ndeny = [\"127.0.0.2\"]\n";
    let work = Workdir::new(&with_key(config_with_llm(&llm.url, extra)));
    let service = Service::start(&work, &env()).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let send = |id: &'static str, calls: Value| {
        let hook = &hook;
        async move {
            let (status, body) = hook
                .send("c-2", None, id, &format!("run {calls}"), "")
                .await;
            assert_eq!(status, 202, "{body}");
        }
    };

    // A listed host, with the key in the URL: fetched at once, the key never sent.
    let url = format!("{}/echo?key={KEY}", listed.url);
    send("m1", json!([["web_fetch", {"url": url}]])).await;
    let answer = hook.reply_containing("c-2", "asked for /echo").await;
    assert!(answer.contains("redacted"), "{answer}");
    for asked in listed.asked.lock().unwrap().iter() {
        assert_clean("the fetched site", asked);
    }

    // A redirect from a listed host to a denied one is refused; the denied host hears
    // nothing.
    let hop = format!("{}/to?url={}/page", listed.url, denied.url);
    send("m2", json!([["web_fetch", {"url": hop}]])).await;
    let refused = hook.reply_containing("c-2", "egress.deny").await;
    assert!(refused.contains("127.0.0.2"), "{refused}");
    assert!(denied.asked.lock().unwrap().is_empty());
    // Named directly, it is refused before any request.
    send(
        "m3",
        json!([["web_fetch", {"url": format!("{}/page", denied.url)}]]),
    )
    .await;
    hook.reply_containing("c-2", "refused: egress.deny lists `127.0.0.2`")
        .await;
    assert!(denied.asked.lock().unwrap().is_empty());

    // An unlisted host asks first; approved, it is fetched.
    let port = listed.url.rsplit(':').next().unwrap();
    send(
        "m4",
        json!([["web_fetch", {"url": format!("http://localhost:{port}/page")}]]),
    )
    .await;
    let prompt = wait_for("an approval prompt", Duration::from_secs(20), || async {
        hook.list("c-2", 0)
            .await
            .into_iter()
            .find(|m| m["kind"] == "approval")
    })
    .await;
    let reason = prompt["approval"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("`localhost` is not on the egress allowlist"),
        "{prompt}"
    );
    let before = listed.asked.lock().unwrap().len();
    let id = prompt["approval"]["id"].as_str().unwrap();
    let body = json!({"decision": "approve", "user": "u-7"}).to_string();
    let (status, decided) = hook
        .post_raw(
            &format!("/v1/webhooks/main/approvals/{id}"),
            &body,
            now(),
            HOOK_SECRET,
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    hook.reply_containing("c-2", "the page body").await;
    assert_eq!(listed.asked.lock().unwrap().len(), before + 1);

    // A file holding the key is not sent.
    send(
        "m5",
        json!([["write_file", {"path": "notes.txt", "content": format!("key={KEY}\n")}],
               ["send_file", {"path": "notes.txt"}]]),
    )
    .await;
    let refusal = hook.reply_containing("c-2", "was not sent").await;
    assert!(refusal.contains("FC_LLM_KEY"), "{refusal}");
    let files = hook
        .list("c-2", 0)
        .await
        .into_iter()
        .filter(|m| !m["file"].is_null())
        .count();
    assert_eq!(files, 0, "no file message was queued");
}
