//! The Slack channel through the real `serve`, against a stand-in that speaks the Web API
//! and the Socket Mode protocol, and through signed Events API requests: DMs, mention
//! gating, threads (replies and the plan card in the thread), mrkdwn, streaming edits within
//! the interval and a 429 honoured, files both ways, slash commands, a refresh and a dropped
//! socket that lose and double nothing, kill -9 between journal and ack, approvals by button,
//! and unsigned or stale requests refused.

use crate::common::llm::{Behaviour, LlmStandIn, calls_from_the_message, last_user, one_step_plan};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::slack::{APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, SlackStandIn};
use crate::common::wait_for;
use hmac::{Hmac, Mac};
use serde_json::json;
use std::time::Duration;

const ENV: &[(&str, &str)] = &[
    ("FC_SLACK_BOT", BOT_TOKEN),
    ("FC_SLACK_APP", APP_TOKEN),
    ("FC_SLACK_SIGN", SIGNING_SECRET),
];

fn config(llm: &str, slack: &SlackStandIn, mode: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.slack]\nenabled = true\nmode = \"{mode}\"\nbot_token_env = \"FC_SLACK_BOT\"\n\
             app_token_env = \"FC_SLACK_APP\"\nsigning_secret_env = \"FC_SLACK_SIGN\"\n\
             api_url = \"{}\"\naccess = \"open\"\nstream_edit_interval_ms = 200\n{extra}",
            slack.api_url
        ),
    )
}

/// Wait until `channel`'s messages satisfy `check`.
async fn texts_until(
    slack: &SlackStandIn,
    channel: &str,
    check: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    wait_for(
        &format!("Slack messages in {channel}"),
        Duration::from_secs(20),
        || async {
            let texts = slack.texts(channel);
            check(&texts).then_some(texts)
        },
    )
    .await
}

async fn connected(slack: &SlackStandIn, n: u64) {
    wait_for(
        "a Socket Mode connection",
        Duration::from_secs(15),
        || async { (slack.connections() >= n).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_mentions_and_threads_are_answered_in_place_and_every_envelope_is_acked() {
    let llm = LlmStandIn::echo().await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;

    slack.message("D1", "U1", "1.1", "**bold** move & <stuff>");
    // Markdown as mrkdwn (the streamed preview is edited into the final text).
    texts_until(&slack, "D1", |t| {
        t == ["echo: *bold* move &amp; &lt;stuff&gt;"]
    })
    .await;

    slack.message("C1", "U1", "1.2", "not for the bot");
    slack.message("C1", "U1", "1.3", "<@UBOT> what now?");
    // Only the mention, the mention stripped.
    texts_until(&slack, "C1", |t| t == ["echo: what now?"]).await;
    assert_eq!(slack.posted("C1")[0].thread, None);

    slack.event(json!({"type": "app_mention", "channel": "C1", "user": "U2",
        "text": "<@UBOT> in the thread", "ts": "1.5", "thread_ts": "1.3"}));
    texts_until(&slack, "C1", |t| {
        t.len() == 2 && t[1] == "echo: in the thread"
    })
    .await;
    let reply = &slack.posted("C1")[1];
    assert_eq!(reply.text, "echo: in the thread");
    assert_eq!(
        reply.thread.as_deref(),
        Some("1.3"),
        "answered in the thread"
    );

    // The bot's own message, another bot's and an edit are no turns; all are acked.
    slack.event(json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "UBOT", "text": "me", "ts": "1.6"}));
    slack.event(json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U3", "bot_id": "B1", "text": "beep", "ts": "1.7"}));
    slack.event(json!({"type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im", "ts": "1.8",
        "message": {"user": "U1", "text": "edited"}}));
    wait_for("every envelope acked", Duration::from_secs(10), || async {
        (slack.unacked() == 0 && slack.acks().len() == 7).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(llm.count(), 3, "three turns, no more");
    assert_eq!(slack.texts("D1").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_card_and_its_answer_stay_in_the_thread() {
    let llm = LlmStandIn::start(one_step_plan()).await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;
    slack.event(json!({"type": "app_mention", "channel": "C2", "user": "U1",
        "text": "<@UBOT> /plan greet everyone", "ts": "2.1", "thread_ts": "2.0"}));
    let texts = texts_until(&slack, "C2", |t| {
        t.iter().any(|x| x == "all done") && t.iter().any(|x| x.contains("Plan finished"))
    })
    .await;
    let card = texts
        .iter()
        .find(|t| t.contains("Plan: Greet"))
        .expect("the card");
    assert!(
        card.contains("✅ 1. Say hi"),
        "the card was edited in place: {card}"
    );
    assert!(
        slack
            .posted("C2")
            .iter()
            .all(|p| p.thread.as_deref() == Some("2.0")),
        "everything in the thread: {:?}",
        slack.posted("C2")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_edits_keep_the_interval_and_wait_out_a_429() {
    let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    let answer = words.join(" ");
    let text = answer.clone();
    let llm = LlmStandIn::start(move |_, _| Behaviour::Trickle {
        text: text.clone(),
        pieces: 30,
        gap: Duration::from_millis(100),
    })
    .await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;
    slack.update_retry_after(&[2]);
    slack.message("D1", "U1", "3.1", "stream please");
    texts_until(&slack, "D1", |t| t == [answer.clone()]).await;
    let updates = slack.calls("chat.update");
    assert!(
        updates.len() >= 3,
        "the reply was streamed by edits: {}",
        updates.len()
    );
    for pair in updates.windows(2) {
        let gap = pair[1].at - pair[0].at;
        if pair[0].status == 429 {
            assert!(
                gap >= Duration::from_millis(1900),
                "Retry-After waited out: {gap:?}"
            );
        } else {
            assert!(
                gap >= Duration::from_millis(150),
                "edits at most one per interval: {gap:?}"
            );
        }
    }
    assert_eq!(updates[0].status, 429);
    assert_eq!(
        slack.calls("chat.postMessage").len(),
        1,
        "one message, edited"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn files_go_both_ways_and_a_slash_command_is_answered() {
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;

    // In: a text file shared in a DM reaches the model.
    let url = slack.add_file("notes.txt", b"the secret word is parsnip");
    slack.event(json!({"type": "message", "subtype": "file_share", "channel": "D1", "channel_type": "im",
        "user": "U1", "text": "read this", "ts": "4.1",
        "files": [{"id": "F9", "name": "notes.txt", "mimetype": "text/plain", "size": 26, "url_private": url}]}));
    texts_until(&slack, "D1", |t| !t.is_empty()).await;
    assert!(
        llm.requests()
            .iter()
            .any(|r| last_user(&r.body).contains("parsnip")),
        "the file's text was given to the model"
    );

    // Out: a file the agent wrote, uploaded into the thread it was asked in.
    let ask = format!(
        "<@UBOT> run {}",
        json!([["write_file", {"path": "out.txt", "content": "file body 42"}],
               ["send_file", {"path": "out.txt", "caption": "here it is"}]])
    );
    slack.event(json!({"type": "app_mention", "channel": "C5", "user": "U1", "text": ask, "ts": "4.3", "thread_ts": "4.2"}));
    wait_for("the upload shared", Duration::from_secs(20), || async {
        (!slack.shares().is_empty()).then_some(())
    })
    .await;
    let share = &slack.shares()[0];
    assert_eq!(share["channel_id"], "C5");
    assert_eq!(share["thread_ts"], "4.2");
    assert_eq!(share["initial_comment"], "here it is");
    let id = share["files"][0]["id"].as_str().unwrap();
    assert_eq!(slack.uploads()[id], b"file body 42");

    // A slash command, answered in its channel.
    slack.slash("C6", "U1", "/status", "");
    let texts = texts_until(&slack, "C6", |t| !t.is_empty()).await;
    assert!(texts[0].to_lowercase().contains("model"), "{texts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_and_a_dropped_socket_lose_and_double_nothing() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "slow one" {
            Behaviour::Trickle {
                text: "a slow answer in pieces".into(),
                pieces: 10,
                gap: Duration::from_millis(200),
            }
        } else {
            Behaviour::reply(format!("echo: {user}"))
        }
    })
    .await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;

    // A refresh: the next connection is open before the old one closes.
    slack.disconnect();
    connected(&slack, 2).await;
    slack.message("D1", "U1", "5.1", "after refresh");
    texts_until(&slack, "D1", |t| {
        t.iter().any(|x| x == "echo: after refresh")
    })
    .await;
    let (opened, closed) = slack.connection_times();
    assert!(
        opened[1] < closed[0],
        "opened the next before closing the old"
    );

    // Dropped mid-stream; a message sent meanwhile arrives after the reconnect.
    slack.message("D2", "U1", "5.2", "slow one");
    wait_for("the stream started", Duration::from_secs(10), || async {
        (!slack.texts("D2").is_empty()).then_some(())
    })
    .await;
    slack.drop_connection();
    slack.message("D2", "U1", "5.3", "while down");
    connected(&slack, 3).await;
    let texts = texts_until(&slack, "D2", |t| {
        t.iter().any(|x| x == "a slow answer in pieces")
            && t.iter().any(|x| x == "echo: while down")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(slack.texts("D2"), texts, "nothing doubled");
    assert_eq!(texts.len(), 2);
    assert_eq!(slack.unacked(), 0);
    let asked = |text: &str| {
        llm.requests()
            .iter()
            .filter(|r| last_user(&r.body) == text)
            .count()
    };
    assert_eq!((asked("slow one"), asked("while down")), (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_between_journal_and_ack_answers_once_after_redelivery() {
    let llm = LlmStandIn::start(|body, index| {
        if index == 0 {
            Behaviour::Hang
        } else {
            Behaviour::reply(format!("echo: {}", last_user(body)))
        }
    })
    .await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;
    let envelope = slack.next_envelope_id();
    slack.lose_ack(&envelope);
    slack.message("D1", "U1", "6.1", "crash test");
    wait_for("the turn started", Duration::from_secs(10), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    assert!(slack.unacked() == 1, "Slack has no ack for it");
    service.kill();

    let _service = Service::start(&work, ENV).await;
    texts_until(&slack, "D1", |t| !t.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(slack.texts("D1"), ["echo: crash test"], "answered once");
    assert!(slack.acks().contains(&envelope), "the redelivery was acked");
    assert_eq!(slack.unacked(), 0);
}

/// A signed Events API request.
async fn post_signed(
    base: &str,
    path: &str,
    body: &str,
    content_type: &str,
    age_secs: i64,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let ts = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - age_secs)
        .to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    let signature = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("content-type", content_type)
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", signature)
        .body(body.to_string());
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_events_api_takes_signed_requests_once_and_approvals_by_button() {
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &slack,
        "events",
        "\n[approvals]\ntools = [\"write_file\"]\n",
    ));
    let service = Service::start(&work, ENV).await;
    let json_type = "application/json";

    let (status, body) = post_signed(
        &service.base,
        "/v1/slack/events",
        r#"{"type":"url_verification","challenge":"ch-123"}"#,
        json_type,
        0,
        &[],
    )
    .await;
    assert_eq!((status, body.contains("ch-123")), (200, true), "{body}");

    // Unsigned, stale, wrongly signed: refused before anything is read.
    let unsigned = reqwest::Client::new()
        .post(format!("{}/v1/slack/events", service.base))
        .body(r#"{"type":"url_verification","challenge":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let (status, _) = post_signed(
        &service.base,
        "/v1/slack/events",
        r#"{"type":"url_verification","challenge":"x"}"#,
        json_type,
        600,
        &[],
    )
    .await;
    assert_eq!(status, 401, "older than 5 minutes");
    let forged = reqwest::Client::new()
        .post(format!("{}/v1/slack/events", service.base))
        .header(
            "x-slack-request-timestamp",
            (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs())
            .to_string(),
        )
        .header("x-slack-signature", "v0=00ff")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let (status, body) = post_signed(
        &service.base,
        "/v1/slack/events",
        r#"{"type":"event_callback"}"#,
        json_type,
        0,
        &[],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("`event`"), "{body}");

    // A DM, then Slack's retry of it: answered once.
    let event = json!({"type": "event_callback", "event_id": "Ev1", "event": {"type": "message",
        "channel": "D9", "channel_type": "im", "user": "U9", "text": "hello events", "ts": "7.1"}})
    .to_string();
    let (status, _) =
        post_signed(&service.base, "/v1/slack/events", &event, json_type, 0, &[]).await;
    assert_eq!(status, 200);
    let (status, _) = post_signed(
        &service.base,
        "/v1/slack/events",
        &event,
        json_type,
        0,
        &[
            ("x-slack-retry-num", "1"),
            ("x-slack-retry-reason", "http_timeout"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    texts_until(&slack, "D9", |t| {
        t.iter().any(|x| x == "model read: hello events")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        slack.texts("D9").len(),
        1,
        "the retry was not a second turn"
    );

    // An approval prompt with buttons; a press through the interactive endpoint decides it.
    let ask = format!(
        "run {}",
        json!([["write_file", {"path": "a.txt", "content": "approved"}]])
    );
    let event = json!({"type": "event_callback", "event_id": "Ev2", "event": {"type": "message",
        "channel": "D9", "channel_type": "im", "user": "U9", "text": ask, "ts": "7.2"}})
    .to_string();
    post_signed(&service.base, "/v1/slack/events", &event, json_type, 0, &[]).await;
    let prompt = wait_for("the approval prompt", Duration::from_secs(20), || async {
        slack
            .posted("D9")
            .into_iter()
            .find(|p| p.blocks.is_array() && p.blocks != json!([]))
    })
    .await;
    let buttons = prompt.blocks[1]["elements"].as_array().unwrap();
    assert_eq!(buttons.len(), 3);
    let approve = buttons[0]["value"].as_str().unwrap();
    let payload = json!({"type": "block_actions", "user": {"id": "U9"}, "trigger_id": "tr1",
        "actions": [{"action_id": approve, "value": approve, "action_ts": "7.3"}]});
    let form = serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap();
    let (status, _) = post_signed(
        &service.base,
        "/v1/slack/interactive",
        &form,
        "application/x-www-form-urlencoded",
        0,
        &[],
    )
    .await;
    assert_eq!(status, 200);
    wait_for("the tool ran", Duration::from_secs(20), || async {
        (llm.count() >= 3).then_some(())
    })
    .await;
    texts_until(&slack, "D9", |t| {
        t.iter().any(|x| x.contains("wrote 8 bytes to a.txt"))
    })
    .await;
    wait_for(
        "the answered prompt without its buttons",
        Duration::from_secs(10),
        || async {
            slack
                .posted("D9")
                .into_iter()
                .find(|p| p.ts == prompt.ts && p.blocks == json!([]))
        },
    )
    .await;

    // A slash command over HTTP.
    let form = serde_urlencoded::to_string([
        ("command", "/status"),
        ("text", ""),
        ("channel_id", "C9"),
        ("user_id", "U9"),
        ("user_name", "nine"),
        ("trigger_id", "tr2"),
    ])
    .unwrap();
    let (status, _) = post_signed(
        &service.base,
        "/v1/slack/commands",
        &form,
        "application/x-www-form-urlencoded",
        0,
        &[],
    )
    .await;
    assert_eq!(status, 200);
    texts_until(&slack, "C9", |t| !t.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_asked_for_in_a_thread_is_announced_in_that_thread() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "slow 50" {
            return Behaviour::slow("result of slow 50", Duration::from_millis(50));
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("summary of one");
        }
        if crate::common::llm::tool_results(body).is_empty() {
            Behaviour::tool("sessions_spawn", json!({"task": "slow 50", "label": "one"}))
        } else {
            Behaviour::reply("spawned")
        }
    })
    .await;
    let slack = SlackStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &slack, "socket", ""));
    let _service = Service::start(&work, ENV).await;
    connected(&slack, 1).await;
    slack.event(json!({"type": "app_mention", "channel": "C7", "user": "U1",
        "text": "<@UBOT> go", "ts": "8.1", "thread_ts": "8.0"}));
    let texts = texts_until(&slack, "C7", |t| t.iter().any(|x| x == "summary of one")).await;
    assert!(
        texts.iter().any(|t| t.starts_with("🤖 one — done")),
        "the announcement: {texts:?}"
    );
    assert!(
        slack
            .posted("C7")
            .iter()
            .all(|p| p.thread.as_deref() == Some("8.0")),
        "everything in the thread: {:?}",
        slack.posted("C7")
    );
}
