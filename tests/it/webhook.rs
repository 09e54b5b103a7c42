//! The signed webhook channel end to end through the real `serve`: every rule of SPEC
//! section 5 (Webhook) against a loopback LLM stand-in and callback receiver.

use crate::common::hook::{Hook, now};
use crate::common::llm::{Behaviour, LlmStandIn};
use crate::common::receiver::Receiver;
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

const SECRET: &str = "whsec-webhook-tests";

async fn echo_service(callback: &str, extra: &str) -> (LlmStandIn, Workdir, Service) {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!(
            "{extra}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\ncallback_url = \"{callback}\"\n"
        ),
    ));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    (llm, work, service)
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_the_right_status_and_a_json_error() {
    let (llm, work, service) = echo_service("", "").await;
    let _ = &work;
    let hook = Hook::new(&service, SECRET);
    let good =
        json!({"conversation_id": "c", "message_id": "m", "sender": {"id": "u"}, "text": "hi"})
            .to_string();
    let path = "/v1/webhooks/main/messages";

    let (status, body) = hook.post_raw(path, &good, now(), "wrong-secret").await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (401, "signature does not match")
    );
    let (status, body) = hook.post_raw(path, &good, now() - 301, SECRET).await;
    assert_eq!(status, 401);
    assert!(body["error"].as_str().unwrap().contains("300 s"));
    let (status, _) = hook.post_raw(path, &good, now() + 301, SECRET).await;
    assert_eq!(
        status, 401,
        "a timestamp too far in the future is refused too"
    );
    let unsigned = hook
        .client
        .post(format!("{}{path}", hook.base))
        .body(good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);

    let (status, body) = hook
        .post_raw(
            path,
            r#"{"conversation_id":"c","message_id":"m","sender":{"id":"u"}}"#,
            now(),
            SECRET,
        )
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("`text`"), "{body}");
    let (status, body) = hook.post_raw(path, "{not json", now(), SECRET).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("malformed JSON"));
    let (status, body) = hook
        .post_raw(&format!("{path}?wait=soon"), &good, now(), SECRET)
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("`wait`"));

    let big = json!({"conversation_id": "c", "message_id": "big", "sender": {"id": "u"}, "text": "x".repeat(300_000)}).to_string();
    let (status, body) = hook.post_raw(path, &big, now(), SECRET).await;
    assert_eq!(status, 413);
    assert!(body["error"].as_str().unwrap().contains("262144"));

    let (status, body) = hook
        .post_raw("/v1/webhooks/nope/messages", &good, now(), SECRET)
        .await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("nope"));

    let list = |auth: Option<&'static str>| {
        let mut req = hook.client.get(format!(
            "{}/v1/webhooks/main/conversations/c/messages",
            hook.base
        ));
        if let Some(token) = auth {
            req = req.bearer_auth(token);
        }
        req.send()
    };
    assert_eq!(list(None).await.unwrap().status(), 401);
    assert_eq!(list(Some("wrong")).await.unwrap().status(), 401);
    assert_eq!(list(Some(SECRET)).await.unwrap().status(), 200);
    assert_eq!(llm.count(), 0, "nothing refused reached the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_fails_the_first_three_deliveries_still_gets_every_message_once_in_order() {
    let receiver = Receiver::start(3).await;
    let (_llm, _work, service) = echo_service(&receiver.url, "").await;
    let hook = Hook::new(&service, SECRET);
    for i in 1..=3 {
        assert_eq!(
            hook.send("conv", None, &format!("m{i}"), &format!("msg {i}"), "")
                .await
                .0,
            202
        );
    }
    let received = wait_for("three callbacks", Duration::from_secs(20), || async {
        let r = receiver.received();
        (r.len() >= 3).then_some(r)
    })
    .await;
    // A sentinel in the same conversation: callbacks go out in order, so a duplicate from
    // the retries would arrive before it.
    assert_eq!(hook.send("conv", None, "m4", "sentinel", "").await.0, 202);
    let received_now = wait_for(
        "the sentinel's callback",
        Duration::from_secs(20),
        || async {
            let r = receiver.received();
            (r.len() >= 4).then_some(r)
        },
    )
    .await;
    let texts_now: Vec<&str> = received_now
        .iter()
        .map(|r| r.body["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts_now,
        [
            "echo: msg 1",
            "echo: msg 2",
            "echo: msg 3",
            "echo: sentinel"
        ],
        "no duplicates after the retries"
    );
    let texts: Vec<&str> = received
        .iter()
        .take(3)
        .map(|r| r.body["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["echo: msg 1", "echo: msg 2", "echo: msg 3"]);
    assert!(
        receiver.attempts() >= 6,
        "three failures, then three successes"
    );
    for r in &received {
        let ts: i64 = r.timestamp.parse().unwrap();
        assert!((now() - ts).abs() < 60);
        assert_eq!(
            r.signature,
            ferroclaw_channel_webhook::sign(SECRET.as_bytes(), ts, r.raw.as_bytes()),
            "callbacks are signed"
        );
        assert_eq!(r.body["conversation_id"], "conv");
        assert_eq!(r.body["kind"], "reply");
        assert!(r.body["thread_id"].is_null());
    }
    let seqs: Vec<i64> = received
        .iter()
        .map(|r| r.body["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_conversations_never_mix_and_threads_keep_their_id() {
    let receiver = Receiver::start(0).await;
    let (_llm, _work, service) = echo_service(&receiver.url, "").await;
    let hook = Hook::new(&service, SECRET);
    let (_, x) = hook.send("x", None, "1", "for x", "").await;
    let (_, y) = hook.send("y", Some("t-9"), "1", "for y", "").await;
    assert_eq!(x["session_key"], "agent:main:webhook:main:x");
    assert_eq!(y["session_key"], "agent:main:webhook:main:y:thread:t-9");
    wait_for("two callbacks", Duration::from_secs(20), || async {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    for r in receiver.received() {
        match r.body["conversation_id"].as_str().unwrap() {
            "x" => assert_eq!(
                (r.body["text"].as_str(), r.body["thread_id"].as_str()),
                (Some("echo: for x"), None)
            ),
            "y" => assert_eq!(
                (r.body["text"].as_str(), r.body["thread_id"].as_str()),
                (Some("echo: for y"), Some("t-9"))
            ),
            other => panic!("unexpected conversation {other}"),
        }
    }
    let x_list = hook.list("x", 0).await;
    assert_eq!(x_list.len(), 1);
    assert_eq!(x_list[0]["text"], "echo: for x");
    let after = hook.list("x", x_list[0]["seq"].as_i64().unwrap()).await;
    assert!(after.is_empty(), "?after= skips what was read");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_returns_the_reply_text() {
    let (_llm, _work, service) = echo_service("", "").await;
    let hook = Hook::new(&service, SECRET);
    let (status, body) = hook.send("w", None, "m1", "hello there", "?wait=30").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "done");
    assert_eq!(body["replies"].as_array().unwrap().len(), 1);
    assert_eq!(body["replies"][0]["text"], "echo: hello there");
    assert!(body["replies"][0]["id"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_during_a_running_turn_is_answered_after_it() {
    let llm = LlmStandIn::start(|body, _| {
        let text = crate::common::llm::last_user(body);
        Behaviour::slow(
            format!("echo: {text}"),
            if text == "slow" {
                Duration::from_millis(600)
            } else {
                Duration::ZERO
            },
        )
    })
    .await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    hook.send("q", None, "1", "slow", "").await;
    wait_for("the slow turn to start", Duration::from_secs(5), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    let (status, body) = hook.send("q", None, "2", "fast", "?wait=30").await;
    assert_eq!(status, 200);
    assert_eq!(body["replies"][0]["text"], "echo: fast");
    let texts: Vec<String> = hook
        .list("q", 0)
        .await
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["echo: slow", "echo: fast"]);
}

async fn next_event(
    stream: &mut (
             impl futures::Stream<Item = Result<eventsource_stream::Event, impl std::fmt::Debug>> + Unpin
         ),
) -> eventsource_stream::Event {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let event = stream
                .next()
                .await
                .expect("stream ended")
                .expect("stream error");
            if event.event == "message" {
                return event;
            }
        }
    })
    .await
    .expect("no event within 20 s")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_event_stream_delivers_replies_and_resumes_after_a_reconnect_without_repeats() {
    let (_llm, _work, service) = echo_service("", "").await;
    let hook = Hook::new(&service, SECRET);
    let url = format!("{}/v1/webhooks/main/events", hook.base);
    assert_eq!(
        hook.client.get(&url).send().await.unwrap().status(),
        401,
        "events need the bearer token"
    );

    let response = hook
        .client
        .get(&url)
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    hook.send("s", None, "1", "one", "").await;
    let first = next_event(&mut events).await;
    let data: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(data["text"], "echo: one");
    assert_eq!(first.id, data["seq"].as_i64().unwrap().to_string());
    drop(events);

    // While disconnected, two more replies arrive.
    hook.send("s", None, "2", "two", "?wait=30").await;
    hook.send("s", None, "3", "three", "?wait=30").await;
    let response = hook
        .client
        .get(&url)
        .bearer_auth(SECRET)
        .header("last-event-id", &first.id)
        .send()
        .await
        .unwrap();
    let mut events = response.bytes_stream().eventsource();
    let second: Value = serde_json::from_str(&next_event(&mut events).await.data).unwrap();
    let third: Value = serde_json::from_str(&next_event(&mut events).await.data).unwrap();
    assert_eq!(
        second["text"], "echo: two",
        "resumes right after the last seen event, no repeat"
    );
    assert_eq!(third["text"], "echo: three");
    // Shutting down ends the stream instead of hanging the server.
    let (code, _) = service.terminate().await;
    assert_eq!(code, Some(0));
}
