//! The OpenAI-compatible endpoint driven by the official `openai` Python SDK through the real
//! `serve`: models listed, a plain and a streamed answer (pieces arriving while the model
//! streams, usage at the end), a session's history kept across calls with the same `user`,
//! a one-off request answered from the messages it sent, a repeated `X-Request-Id` run once,
//! and OpenAI-shaped errors for a wrong token and an unknown model.

use crate::common::llm::{Behaviour, LlmStandIn, last_user};
use crate::common::python;
use crate::common::service::{Service, Workdir, config_with_llm};
use serde_json::Value;
use std::time::Duration;

const TOKEN: &str = "api-token-QUUX";

const CLIENT: &str = r#"
import json, sys, time
import openai

base, token = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key=token, max_retries=0)
out = {}
out["models"] = [m.id for m in client.models.list().data]

def ask(text, **kw):
    r = client.chat.completions.create(model="ferroclaw", messages=[{"role": "user", "content": text}], **kw)
    return r.choices[0].message.content, r.usage.total_tokens

out["plain"] = ask("hello there")
out["remember"] = ask("My name is Ada.", user="s1")
out["recall"] = ask("What is my name?", user="s1")
out["stranger"] = ask("What is my name?", user="s2")
once = client.chat.completions.create(model="ferroclaw:main", messages=[
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "My name is Ada."},
    {"role": "assistant", "content": "Hello Ada."},
    {"role": "user", "content": "What is my name?"}])
out["one_off"] = once.choices[0].message.content
out["repeat"] = [ask("only once", extra_headers={"X-Request-Id": "req-7"})[0] for _ in range(2)]

started = time.monotonic()
pieces, arrivals, usage = [], [], None
stream = client.chat.completions.create(model="ferroclaw", stream=True,
    stream_options={"include_usage": True},
    messages=[{"role": "user", "content": "stream please"}])
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
        arrivals.append(time.monotonic() - started)
    if chunk.usage is not None:
        usage = chunk.usage.total_tokens
out["stream"] = {"pieces": pieces, "spread": arrivals[-1] - arrivals[0], "usage": usage}

try:
    openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).models.list()
    out["bad_token"] = "accepted"
except openai.AuthenticationError as e:
    out["bad_token"] = [e.status_code, e.code]
try:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    out["bad_model"] = "accepted"
except openai.NotFoundError as e:
    out["bad_model"] = [e.status_code, e.code]
print(json.dumps(out))
"#;

const TRICKLED: &str = "one two three four five six seven eight";

#[tokio::test(flavor = "multi_thread")]
async fn the_official_openai_client_gets_answers_streams_sessions_and_errors() {
    let llm = LlmStandIn::start(|body, _| {
        let last = last_user(body);
        if last == "stream please" {
            return Behaviour::Trickle {
                text: TRICKLED.into(),
                pieces: 8,
                gap: Duration::from_millis(120),
            };
        }
        if last.ends_with("What is my name?") {
            // The name is known only if an earlier message (history or context) said it.
            let said = body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .any(|c| c.contains("My name is Ada."));
            return Behaviour::reply(if said {
                "Your name is Ada."
            } else {
                "I do not know."
            });
        }
        Behaviour::reply(format!("echo: {last}"))
    })
    .await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[api]\ntoken_env = \"FC_API\"\n",
    ));
    let service = Service::start(&work, &[("FC_API", TOKEN)]).await;
    let ran = python::run(CLIENT, &[&service.base, TOKEN], &[]).await;
    assert!(ran.ok, "{}", ran.stderr);
    let out: Value = serde_json::from_str(ran.stdout.trim()).unwrap();

    assert_eq!(
        out["models"],
        serde_json::json!(["ferroclaw", "ferroclaw:main"])
    );
    assert_eq!(out["plain"][0], "echo: hello there", "{out}");
    assert_eq!(out["plain"][1], 18, "one model call's usage (11 + 7)");
    assert_eq!(out["remember"][0], "echo: My name is Ada.");
    assert_eq!(
        out["recall"][0], "Your name is Ada.",
        "history kept for `user`"
    );
    assert_eq!(
        out["stranger"][0], "I do not know.",
        "another user's session is apart"
    );
    assert_eq!(
        out["one_off"], "Your name is Ada.",
        "a one-off request's own messages"
    );
    assert_eq!(
        out["repeat"],
        serde_json::json!(["echo: only once", "echo: only once"])
    );
    let runs = llm
        .requests()
        .iter()
        .filter(|r| last_user(&r.body) == "only once")
        .count();
    assert_eq!(
        runs, 1,
        "a repeated X-Request-Id is answered, not run again"
    );

    let stream = &out["stream"];
    let pieces: Vec<&str> = stream["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(pieces.concat(), TRICKLED);
    assert!(pieces.len() >= 4, "streamed in pieces: {pieces:?}");
    assert!(
        stream["spread"].as_f64().unwrap() > 0.3,
        "pieces arrived as the model streamed them, not all at the end: {stream}"
    );
    assert_eq!(stream["usage"], 18);

    assert_eq!(
        out["bad_token"],
        serde_json::json!([401, "invalid_api_key"])
    );
    assert_eq!(
        out["bad_model"],
        serde_json::json!([404, "model_not_found"])
    );
    assert!(!service.logs().contains(TOKEN), "the token is never logged");
    // The channel counts its requests (nine completions, the unknown model refused).
    let (_, ready) = service.get_json("/readyz?verbose", "").await;
    let api = &ready["channels"]["api"];
    assert_eq!(api["state"], "up", "{ready}");
    assert_eq!(api["requests"], 9, "{api}");
    assert_eq!(api["requests_refused"], 1, "{api}");
    assert_eq!(api["requests_failed"], 0, "{api}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_the_endpoint_is_not_there() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[api]\ntoken_env = \"FC_API\"\n",
    ));
    let service = Service::start(&work, &[]).await;
    let client = reqwest::Client::new();
    for path in ["/v1/models", "/v1/chat/completions"] {
        let status = client
            .get(format!("{}{path}", service.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{path}");
    }
}
