//! `ferroclaw chat` with piped input against an OpenAI-compatible stand-in.

use crate::common::llm::{Behaviour, LlmStandIn};
use crate::common::service::{chat, config_with_llm, folder_with};

#[tokio::test(flavor = "multi_thread")]
async fn chat_answers_piped_lines_in_order_and_exits_zero() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::reply(format!("echo: {}", crate::common::llm::last_user(body)))
    })
    .await;
    let dir = folder_with(&config_with_llm(&llm.url, ""));
    let out = chat(
        dir.path(),
        "hello there
second line
/status
",
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let first = out.stdout.find("echo: hello there").expect(&out.stdout);
    let second = out.stdout.find("echo: second line").expect(&out.stdout);
    let status = out
        .stdout
        .find("Model: standin/test-model")
        .expect(&out.stdout);
    assert!(
        first < second && second < status,
        "replies come in input order: {}",
        out.stdout
    );
    assert!(out.stdout.contains("Last answer from: standin/test-model"));
    // #33.11: the terminal is the conversation's; no INFO lines interleave with it.
    assert!(
        !out.stderr.contains("INFO"),
        "chat logs warnings only by default: {}",
        out.stderr
    );
    assert!(
        out.stdout.contains("Tokens: 22 in, 14 out"),
        "{}",
        out.stdout
    );
    assert_eq!(llm.count(), 2);

    // The session persists: a new run of the same session sees the earlier turns.
    let again = chat(
        dir.path(),
        "third
",
        &[],
    )
    .await;
    assert!(again.stdout.contains("echo: third"));
    let history = llm.requests()[2].body["messages"].to_string();
    assert!(history.contains("hello there"), "{history}");

    // /new archives it.
    let fresh = chat(
        dir.path(),
        "/new
fourth
",
        &[],
    )
    .await;
    assert!(fresh.stdout.contains("Started a fresh session"));
    let history = llm.requests()[3].body["messages"].to_string();
    assert!(!history.contains("hello there"), "{history}");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_without_a_usable_provider_explains_what_to_configure() {
    let dir = tempfile::tempdir().unwrap();
    let out = chat(
        dir.path(),
        "hi
",
        &[("OPENAI_API_KEY", "")],
    )
    .await;
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("OPENAI_API_KEY"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_with_http2_is_called_over_http2_and_others_over_http1() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::reply(format!("echo: {}", crate::common::llm::last_user(body)))
    })
    .await;
    let plain = config_with_llm(&llm.url, "");
    let multiplexed = plain.replace(
        "kind = \"openai\"\nbase_url",
        "kind = \"openai\"\nhttp2 = true\nbase_url",
    );
    assert_ne!(plain, multiplexed);
    for (config, version, line) in [
        (plain, axum::http::Version::HTTP_11, "one"),
        (multiplexed, axum::http::Version::HTTP_2, "two"),
    ] {
        let dir = folder_with(&config);
        let out = chat(dir.path(), &format!("{line}\n"), &[]).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(
            out.stdout.contains(&format!("echo: {line}")),
            "{}",
            out.stdout
        );
        let last = llm.requests().pop().expect("a model call");
        assert_eq!(last.version, version, "the call for `{line}`");
    }
}
