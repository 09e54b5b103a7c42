//! The durable message path through the real `serve`: in order per session, concurrent across
//! sessions, deduplicated, and exactly once across a kill -9.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn};
use crate::common::receiver::Receiver;
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::Value;
use std::time::Duration;

const SECRET: &str = "whsec-test-0001";

fn webhook_config(llm: &str, callback: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.webhook.main]\nsecret_env = \"FC_HOOK_SECRET\"\ncallback_url = \"{callback}\"\n"
        ),
    )
}

fn env() -> Vec<(&'static str, &'static str)> {
    vec![("FC_HOOK_SECRET", SECRET)]
}

async fn send(base: &str, conversation: &str, message_id: &str, text: &str) -> (u16, Value) {
    client(base)
        .send(conversation, None, message_id, text, "")
        .await
}

fn client(base: &str) -> Hook {
    Hook::for_base(base, SECRET)
}

async fn replies(base: &str, conversation: &str) -> Vec<String> {
    client(base)
        .list(conversation, 0)
        .await
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_replies(base: &str, conversation: &str, n: usize) -> Vec<String> {
    wait_for(
        &format!("{n} replies in {conversation}"),
        Duration::from_secs(20),
        || async {
            let r = replies(base, conversation).await;
            (r.len() >= n).then_some(r)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_session_runs_in_order_while_two_sessions_run_concurrently() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::slow(
            format!("echo: {}", crate::common::llm::last_user(body)),
            Duration::from_millis(400),
        )
    })
    .await;
    let work = Workdir::new(&webhook_config(&llm.url, ""));
    let service = Service::start(&work, &env()).await;

    assert_eq!(send(&service.base, "a", "a1", "first").await.0, 202);
    assert_eq!(send(&service.base, "a", "a2", "second").await.0, 202);
    assert_eq!(send(&service.base, "b", "b1", "other").await.0, 202);

    assert_eq!(
        wait_replies(&service.base, "a", 2).await,
        ["echo: first", "echo: second"]
    );
    assert_eq!(wait_replies(&service.base, "b", 1).await, ["echo: other"]);

    let requests = llm.requests();
    let find = |text: &str| {
        requests
            .iter()
            .find(|r| r.last_user == text)
            .unwrap()
            .clone()
    };
    let (first, second, other) = (find("first"), find("second"), find("other"));
    assert!(
        first.finished.unwrap() <= second.started,
        "the second message of a session waits for the first turn"
    );
    assert!(
        other.started < first.finished.unwrap(),
        "another session runs concurrently"
    );
    let history: Vec<&str> = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        history.contains(&"first") && history.contains(&"echo: first"),
        "the second turn sees the first: {history:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_message_id_is_answered_once() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&webhook_config(&llm.url, ""));
    let service = Service::start(&work, &env()).await;
    let (status, body) = send(&service.base, "c", "m-1", "hello").await;
    assert_eq!(status, 202);
    assert_eq!(body["status"], "accepted");
    assert_eq!(body["session_key"], "agent:main:webhook:main:c");
    let (status, body) = send(&service.base, "c", "m-1", "hello").await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "duplicate");
    assert_eq!(wait_replies(&service.base, "c", 1).await, ["echo: hello"]);
    // A sentinel on the same lane: once it is answered, a duplicate that slipped through
    // would have been answered before it (lanes are ordered).
    assert_eq!(send(&service.base, "c", "m-2", "sentinel").await.0, 202);
    assert_eq!(
        wait_replies(&service.base, "c", 2).await,
        ["echo: hello", "echo: sentinel"]
    );
    assert_eq!(llm.count(), 2, "the model is called once per message");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_interrupted_by_kill_is_answered_exactly_once_after_restart() {
    let llm = LlmStandIn::start(|body, index| {
        if index == 0 {
            Behaviour::Hang
        } else {
            Behaviour::reply(format!("echo: {}", crate::common::llm::last_user(body)))
        }
    })
    .await;
    let receiver = Receiver::start(0).await;
    let work = Workdir::new(&webhook_config(&llm.url, &receiver.url));

    let service = Service::start(&work, &env()).await;
    assert_eq!(send(&service.base, "k", "m-1", "survive this").await.0, 202);
    wait_for(
        "the model call to start",
        Duration::from_secs(10),
        || async { (llm.count() == 1).then_some(()) },
    )
    .await;
    service.kill();
    assert!(receiver.received().is_empty());

    let service = Service::start(&work, &env()).await;
    assert_eq!(
        wait_replies(&service.base, "k", 1).await,
        ["echo: survive this"]
    );
    wait_for("the callback", Duration::from_secs(10), || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    // A redelivery of the same platform message after restart is still a duplicate.
    assert_eq!(
        send(&service.base, "k", "m-1", "survive this").await.1["status"],
        "duplicate"
    );
    assert_eq!(send(&service.base, "k", "m-2", "sentinel").await.0, 202);
    assert_eq!(
        wait_replies(&service.base, "k", 2).await,
        ["echo: survive this", "echo: sentinel"],
        "answered exactly once (the sentinel behind it on the same lane)"
    );
    let received = wait_for("both callbacks", Duration::from_secs(20), || async {
        let r = receiver.received();
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(received.len(), 2, "delivered exactly once");
    assert_eq!(received[0].body["text"], "echo: survive this");
    assert_eq!(received[0].body["kind"], "reply");
    assert_eq!(received[0].body["in_reply_to"], "m-1");
    assert_eq!(llm.count(), 3);

    // A graceful stop exits 0; a restart then repeats nothing.
    let (code, logs) = service.terminate().await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(
        !logs.contains(SECRET),
        "the webhook secret must never be logged"
    );
    let service = Service::start(&work, &env()).await;
    assert_eq!(
        send(&service.base, "k", "m-3", "after restart").await.0,
        202
    );
    let received = wait_for(
        "the sentinel's callback",
        Duration::from_secs(20),
        || async {
            let r = receiver.received();
            (r.len() >= 3).then_some(r)
        },
    )
    .await;
    assert_eq!(
        received.len(),
        3,
        "nothing before the sentinel was sent again"
    );
    assert_eq!(received[2].body["text"], "echo: after restart");
    assert_eq!(llm.count(), 4);
    drop(service);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_key_is_sent_to_the_provider_and_never_logged() {
    let llm = LlmStandIn::echo().await;
    let config = webhook_config(&llm.url, "").replace(
        "kind = \"openai\"",
        "kind = \"openai\"\napi_key_env = \"FC_LLM_KEY\"",
    );
    let work = Workdir::new(&config);
    let mut env = env();
    env.push(("FC_LLM_KEY", "sk-very-secret-key-42"));
    let service = Service::start(&work, &env).await;
    send(&service.base, "s", "m-1", "hi").await;
    wait_replies(&service.base, "s", 1).await;
    assert_eq!(
        llm.requests()[0].authorization.as_deref(),
        Some("Bearer sk-very-secret-key-42")
    );
    let (_, logs) = service.terminate().await;
    assert!(!logs.contains("sk-very-secret-key-42"));
    assert!(
        logs.contains("channel enabled"),
        "serve logs one line per channel: {logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_a_running_turn_finish_flushes_its_reply_and_exits_zero() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::slow(
            format!("echo: {}", crate::common::llm::last_user(body)),
            Duration::from_millis(800),
        )
    })
    .await;
    let receiver = Receiver::start(0).await;
    let work = Workdir::new(&webhook_config(&llm.url, &receiver.url));
    let service = Service::start(&work, &env()).await;
    assert_eq!(send(&service.base, "g", "m-1", "finish me").await.0, 202);
    wait_for("the model call", Duration::from_secs(10), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    let (code, logs) = service.terminate().await;
    assert_eq!(code, Some(0), "{logs}");
    let received = receiver.received();
    assert_eq!(
        received.len(),
        1,
        "the reply was delivered before exit: {logs}"
    );
    assert_eq!(received[0].body["text"], "echo: finish me");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_longer_than_the_grace_period_is_redone_after_restart() {
    let llm = LlmStandIn::start(|body, index| {
        if index == 0 {
            Behaviour::Hang
        } else {
            Behaviour::reply(format!("echo: {}", crate::common::llm::last_user(body)))
        }
    })
    .await;
    let receiver = Receiver::start(0).await;
    let work = Workdir::new(
        &webhook_config(&llm.url, &receiver.url)
            .replace("shutdown_grace_secs = 5", "shutdown_grace_secs = 1"),
    );
    let service = Service::start(&work, &env()).await;
    send(&service.base, "h", "m-1", "slow one").await;
    wait_for("the model call", Duration::from_secs(10), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    let (code, logs) = service.terminate().await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after the 1 s grace"
    );
    assert!(receiver.received().is_empty());
    let _service = Service::start(&work, &env()).await;
    wait_for(
        "the reply after restart",
        Duration::from_secs(10),
        || async { (!receiver.received().is_empty()).then_some(()) },
    )
    .await;
    assert_eq!(receiver.received()[0].body["text"], "echo: slow one");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_message_path_runs_on_postgresql() {
    let url = crate::common::pg::fresh_database().await;
    let llm = LlmStandIn::echo().await;
    let receiver = Receiver::start(1).await;
    let config = webhook_config(&llm.url, &receiver.url)
        .replace("[agent]", &format!("[storage]\nurl = \"{url}\"\n\n[agent]"));
    let work = Workdir::new(&config);
    let service = Service::start(&work, &env()).await;
    assert_eq!(send(&service.base, "pg", "m-1", "on postgres").await.0, 202);
    assert_eq!(
        send(&service.base, "pg", "m-1", "on postgres").await.1["status"],
        "duplicate"
    );
    assert_eq!(
        wait_replies(&service.base, "pg", 1).await,
        ["echo: on postgres"]
    );
    wait_for("the callback", Duration::from_secs(10), || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    assert!(
        !work.path().join("ferroclaw.db").exists(),
        "no SQLite file was used"
    );
    let (code, _) = service.terminate().await;
    assert_eq!(code, Some(0));
}
