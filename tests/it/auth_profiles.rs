//! Auth profiles (SPEC section 13): one provider with three API keys through the real
//! `serve`. The stand-in's request log shows the rotation off a rate-limited key, the
//! cooldown ending, stickiness of a session to its key, and the chain moving to the next
//! model only when every key is refused. Keys never reach the logs or `/status`.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, last_user};
use crate::common::service::{Service, Workdir};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SECRET: &str = "hook-secret";
const KEYS: [(&str, &str); 3] = [
    ("FC_K1", "key-one"),
    ("FC_K2", "key-two"),
    ("FC_K3", "key-three"),
];

fn config(llm: &str, backup: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"

[agent]
model = "multi/m"
fallbacks = ["backup/b"]

[providers.multi]
kind = "openai"
base_url = "{llm}"
api_key_envs = ["FC_K1", "FC_K2", "FC_K3"]

[providers.backup]
kind = "openai"
base_url = "{backup}"

[fallback]
retries_per_model = 0
cooldown_secs = 2

[channels.webhook.main]
secret_env = "FC_HOOK"
"#
    )
}

fn env() -> Vec<(&'static str, &'static str)> {
    let mut env = KEYS.to_vec();
    env.push(("FC_HOOK", SECRET));
    env
}

/// The key of each request the stand-in got, as "one", "two", "three".
fn keys_used(llm: &LlmStandIn) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|r| {
            let auth = r.authorization.clone().unwrap_or_default();
            auth.trim_start_matches("Bearer key-").to_string()
        })
        .collect()
}

async fn ask(hook: &Hook, conversation: &str, id: &str, text: &str) -> String {
    let (status, body) = hook.send(conversation, None, id, text, "?wait=20").await;
    assert_eq!(status, 200, "{body}");
    body["replies"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limited_key_rotates_cools_down_and_sessions_stick_to_their_key() {
    // The first key is rate-limited once (Retry-After 2 s), then healthy again.
    let limited = Arc::new(AtomicUsize::new(0));
    let seen = limited.clone();
    let llm = LlmStandIn::start_keyed(
        move |key| {
            (key == "Bearer key-one" && seen.fetch_add(1, Ordering::SeqCst) == 0).then(|| {
                Behaviour::Fail {
                    status: 429,
                    body: r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#.into(),
                    retry_after: Some(2),
                }
            })
        },
        |body, _| Behaviour::reply(format!("echo: {}", last_user(body))),
    )
    .await;
    let backup = LlmStandIn::start(|_, _| Behaviour::reply("from the backup")).await;
    let work = Workdir::new(&config(&llm.url, &backup.url));
    let service = Service::start(&work, &env()).await;
    let hook = Hook::new(&service, SECRET);

    // a: key one is rate-limited, the same model is tried at once with key two.
    assert_eq!(ask(&hook, "a", "a1", "first").await, "echo: first");
    assert_eq!(keys_used(&llm), ["one", "two"]);
    // b and c are new sessions: they take the next keys in turn; a stays on two.
    assert_eq!(ask(&hook, "b", "b1", "hello").await, "echo: hello");
    assert_eq!(ask(&hook, "c", "c1", "hello").await, "echo: hello");
    assert_eq!(ask(&hook, "a", "a2", "again").await, "echo: again");
    assert_eq!(keys_used(&llm)[2..], ["two", "three", "two"]);
    // Key one cools down for its Retry-After: a new session meanwhile skips it ...
    assert_eq!(ask(&hook, "d", "d1", "hello").await, "echo: hello");
    assert_eq!(keys_used(&llm)[5], "two", "key one is cooling down");
    // ... and once the cooldown is over it is back in the rotation of new sessions, while
    // the old ones stay put.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    for s in ["e", "f", "g"] {
        assert_eq!(
            ask(&hook, s, &format!("{s}1"), "hello").await,
            "echo: hello"
        );
    }
    assert_eq!(ask(&hook, "c", "c2", "again").await, "echo: again");
    assert_eq!(keys_used(&llm)[6..], ["two", "three", "one", "three"]);
    assert_eq!(backup.count(), 0, "the model never fell back");

    let status = ask(&hook, "a", "a3", "/status").await;
    assert!(status.contains("API key: profile #2 of 3"), "{status}");
    let logs = service.logs();
    for (_, key) in KEYS {
        assert!(!status.contains(key) && !logs.contains(key), "{key} leaked");
    }
    assert!(
        logs.contains("profile=1"),
        "the cooled key is named by index: {logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_model_is_used_only_when_every_key_is_refused() {
    let llm = LlmStandIn::start_keyed(
        |key| {
            (key != "Bearer key-three")
                .then(|| Behaviour::fail(401, r#"{"error":{"message":"bad key"}}"#))
        },
        |_, _| Behaviour::fail(429, r#"{"error":{"message":"quota"}}"#),
    )
    .await;
    let backup = LlmStandIn::start(|_, _| Behaviour::reply("from the backup")).await;
    let work = Workdir::new(&config(&llm.url, &backup.url));
    let service = Service::start(&work, &env()).await;
    let hook = Hook::new(&service, SECRET);
    // Keys one and two are refused, three is rate-limited: all are tried, then the backup.
    assert_eq!(ask(&hook, "x", "x1", "hi").await, "from the backup");
    let mut used = keys_used(&llm);
    used.sort();
    assert_eq!(used, ["one", "three", "two"], "each key tried once");
    assert_eq!(backup.count(), 1);
}
