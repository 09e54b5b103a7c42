//! The Telegram channel through the real `serve` and the real teloxide client, against a Bot
//! API stand-in on loopback: routing (DM, group, forum topic), splitting, streaming edits,
//! retry_after, the HTML fallback, access modes with the pairing CLI, webhook mode, and the
//! crash test.

use crate::common::llm::{Behaviour, LlmStandIn, last_user, one_step_plan};
use crate::common::service::{Service, Workdir, config_with_llm, run};
use crate::common::telegram::{TOKEN, TelegramStandIn, dm, group, texts_settle};
use crate::common::wait_for;
use std::time::Duration;

fn config(llm: &str, tg: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{tg}\"\n{extra}\n"
        ),
    )
}

const ENV: &[(&str, &str)] = &[("FC_TG_TOKEN", TOKEN)];

#[tokio::test(flavor = "multi_thread")]
async fn direct_messages_groups_and_forum_topics_are_answered_in_the_right_place() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &tg.url, "access = \"open\""));
    let service = Service::start(&work, ENV).await;
    assert!(
        !tg.calls("setMyCommands").is_empty(),
        "commands are registered"
    );
    assert!(tg.calls("setMyCommands")[0].raw.contains("status"));

    tg.push_message(dm(7, 1, "hello"));
    assert_eq!(
        texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: hello")).await,
        ["echo: hello"]
    );

    tg.push_message(group(-100, 7, 2, "nobody asked you", false, None));
    tg.push_message(group(-100, 7, 3, "what now?", true, None));
    // Updates are handed over in order: once the mention is answered, the message before
    // it was already skipped (or would have been answered first on the same lane).
    texts_settle(&tg, -100, |t| t.iter().any(|x| x == "echo: what now?")).await;
    assert_eq!(
        tg.texts(-100),
        ["echo: what now?"],
        "only the mention is answered, with the mention stripped"
    );
    assert_eq!(llm.count(), 2);

    tg.push_message(group(-200, 7, 4, "topic question", true, Some(4)));
    texts_settle(&tg, -200, |t| t.iter().any(|x| x == "echo: topic question")).await;
    let sends: Vec<_> = tg
        .calls("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == -200)
        .collect();
    assert!(!sends.is_empty());
    assert!(
        sends.iter().all(|c| c.params["message_thread_id"] == 4),
        "replies carry the topic: {sends:?}"
    );
    let typing: Vec<_> = tg
        .calls("sendChatAction")
        .into_iter()
        .filter(|c| c.params["chat_id"] == -200)
        .collect();
    assert!(!typing.is_empty(), "a typing indicator ran");
    assert!(
        typing
            .iter()
            .all(|c| c.params["message_thread_id"] == 4 && c.params["action"] == "typing")
    );
    let session = llm.requests().last().unwrap().body.clone();
    assert_eq!(last_user(&session), "topic question");

    let (_, logs) = service.terminate().await;
    assert!(
        !logs.contains(TOKEN) && !logs.contains("TEST-telegram-token"),
        "the bot token never reaches the logs"
    );
    assert!(logs.contains("channel enabled: telegram"));
    assert!(tg.wrong_tokens().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ten_thousand_character_reply_is_split_into_pieces_of_at_most_4096() {
    let paragraph = "The quick brown fox jumps over the lazy dog again and again. ".repeat(8);
    let reply: String = (0..21)
        .map(|i| format!("Paragraph {i}. {paragraph}"))
        .collect::<Vec<_>>()
        .join("\n\n");
    assert!(reply.chars().count() >= 10_000);
    let expected = reply.clone();
    let llm = LlmStandIn::start(move |_, _| Behaviour::reply(expected.clone())).await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "access = \"open\"\nstream_edit_interval_ms = 100",
    ));
    let _service = Service::start(&work, ENV).await;
    tg.push_message(dm(7, 1, "write a lot"));
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let texts = texts_settle(&tg, 7, |t| squash(&t.concat()) == squash(&reply)).await;
    assert!(texts.len() >= 3, "{} pieces", texts.len());
    for piece in &texts {
        assert!(
            piece.chars().count() <= 4096,
            "a piece has {} characters",
            piece.chars().count()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_replies_edit_one_message_at_most_once_per_interval_and_honour_retry_after() {
    let text: String = (0..40).map(|i| format!("word{i} ")).collect();
    let full = text.clone();
    let llm = LlmStandIn::start(move |_, _| Behaviour::Trickle {
        text: full.clone(),
        pieces: 20,
        gap: Duration::from_millis(60),
    })
    .await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "access = \"open\"\nstream_edit_interval_ms = 250",
    ));
    let _service = Service::start(&work, ENV).await;
    tg.edit_retry_after(&[1]);
    tg.push_message(dm(7, 1, "stream please"));
    texts_settle(&tg, 7, |t| t.len() == 1 && t[0] == text.trim()).await;

    let sends: Vec<_> = tg
        .calls("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == 7)
        .collect();
    assert_eq!(sends.len(), 1, "one message, then edits");
    let edits = tg.calls("editMessageText");
    assert!(edits.len() >= 2, "{} edits", edits.len());
    let limited = edits
        .iter()
        .position(|e| e.status == 429)
        .expect("the stand-in sent a 429");
    let after = &edits[limited + 1];
    assert!(
        after.at - edits[limited].at >= Duration::from_millis(950),
        "retry_after 1 s honoured: {:?}",
        after.at - edits[limited].at
    );
    let accepted: Vec<_> = edits.iter().filter(|e| e.status == 200).collect();
    let mut previous = sends[0].at;
    for e in &accepted {
        assert!(
            e.at - previous >= Duration::from_millis(240),
            "edits {:?} apart",
            e.at - previous
        );
        previous = e.at;
    }
    for pair in accepted.windows(2) {
        assert_ne!(
            pair[0].params["text"], pair[1].params["text"],
            "no no-op edits"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_html_is_sent_again_as_plain_text() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &tg.url, "access = \"open\""));
    let _service = Service::start(&work, ENV).await;
    tg.reject_html(true);
    tg.push_message(dm(7, 1, "/help"));
    texts_settle(&tg, 7, |t| t.iter().any(|x| x.contains("/status"))).await;
    let sends = tg.calls("sendMessage");
    assert_eq!(sends.len(), 2);
    assert_eq!(
        (sends[0].params["parse_mode"].as_str(), sends[0].status),
        (Some("HTML"), 400)
    );
    assert!(
        sends[1]
            .params
            .get("parse_mode")
            .is_none_or(|p| p.is_null())
    );
    assert!(
        sends[1].params["text"]
            .as_str()
            .unwrap()
            .starts_with("Commands:")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn allowlist_answers_only_allowed_users_given_as_numbers_or_strings() {
    for allowed in ["[7]", "[\"7\"]"] {
        let llm = LlmStandIn::echo().await;
        let tg = TelegramStandIn::start().await;
        let work = Workdir::new(&config(
            &llm.url,
            &tg.url,
            &format!("access = \"allowlist\"\nallowed_users = {allowed}"),
        ));
        let _service = Service::start(&work, ENV).await;
        tg.push_message(dm(8, 1, "let me in"));
        tg.push_message(dm(7, 2, "hi"));
        // The stranger's update is handed over (and refused, at once) before the next one.
        texts_settle(&tg, 7, |t| !t.is_empty()).await;
        assert!(tg.texts(8).is_empty(), "{allowed}: a stranger gets nothing");
        assert_eq!(
            llm.count(),
            1,
            "{allowed}: a stranger's message never reaches the model"
        );
    }
}

/// The stand-in holds idle polls for the whole timeout, like Telegram. 18 s is longer than
/// teloxide's default 17 s client timeout, which used to fail every quiet poll.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_bot_is_ready_at_once_repeats_idle_polls_silently_and_answers_mid_poll() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "access = \"open\"\npoll_timeout_secs = 18",
    ));
    // Service::start waits for /readyz 200: nobody has written yet.
    let started = std::time::Instant::now();
    let service = Service::start(&work, ENV).await;
    let ready_after = started.elapsed();
    assert!(
        tg.calls("getUpdates").is_empty(),
        "ready before any poll returned (took {ready_after:?})"
    );

    let idle = crate::common::wait_for(
        "two idle polls answered with no updates",
        Duration::from_secs(60),
        || async {
            let polls = tg.calls("getUpdates");
            (polls.len() >= 2).then_some(polls)
        },
    )
    .await;
    for poll in &idle[..2] {
        assert_eq!(poll.status, 200);
        assert_eq!(
            poll.params["timeout"], 18,
            "the configured poll timeout is asked for"
        );
    }
    let held = idle[1].at - idle[0].at;
    assert!(
        held >= Duration::from_secs(17),
        "the second poll was held for the full timeout, not cut short and retried: {held:?}"
    );
    let logs = service.logs();
    assert!(
        !logs.contains("getUpdates failed"),
        "idle polls are not errors:\n{logs}"
    );
    let ready = reqwest::get(format!("{}/readyz", service.base))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "still ready after quiet polls");

    // The third poll is now held open; a message arriving meanwhile is answered at once,
    // long before the poll would have ended.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = std::time::Instant::now();
    tg.push_message(dm(7, 1, "are you there?"));
    crate::common::wait_for("the mid-poll answer", Duration::from_secs(8), || async {
        tg.texts(7)
            .iter()
            .any(|t| t == "echo: are you there?")
            .then_some(())
    })
    .await;
    eprintln!("answered {:?} after the message was sent", sent.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn pairing_gives_a_code_once_and_the_cli_approves_and_revokes() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &tg.url, "access = \"pairing\""));
    let _service = Service::start(&work, ENV).await;
    tg.push_message(dm(9, 1, "hello?"));
    let first = texts_settle(&tg, 9, |t| !t.is_empty()).await;
    assert_eq!(first.len(), 1);
    let code: String = first[0]
        .split("pairing code is ")
        .nth(1)
        .unwrap()
        .chars()
        .take(6)
        .collect();
    tg.push_message(dm(9, 2, "hello again?"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        tg.texts(9).len(),
        1,
        "the code is sent once and nothing else"
    );
    assert_eq!(llm.count(), 0);

    let cli = |args: Vec<String>| {
        let dir = work.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&dir, &args, "", ENV)
        })
    };
    let list = cli(vec![
        "pairing".into(),
        "list".into(),
        "-c".into(),
        "config.toml".into(),
    ])
    .await
    .unwrap();
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(
        list.stdout.contains(&code) && list.stdout.contains("telegram user 9"),
        "{}",
        list.stdout
    );
    let bad = cli(vec![
        "pairing".into(),
        "approve".into(),
        "NOPE42".into(),
        "-c".into(),
        "config.toml".into(),
    ])
    .await
    .unwrap();
    assert_ne!(bad.code, Some(0));
    // Codes are shown in capitals; an operator typing them in lower case is understood.
    let approve = cli(vec![
        "pairing".into(),
        "approve".into(),
        code.to_lowercase(),
        "-c".into(),
        "config.toml".into(),
    ])
    .await
    .unwrap();
    assert_eq!(approve.code, Some(0), "{}", approve.stderr);

    tg.push_message(dm(9, 3, "now?"));
    texts_settle(&tg, 9, |t| t.iter().any(|x| x == "echo: now?")).await;
    assert_eq!(llm.count(), 1);

    let revoke = cli(vec![
        "pairing".into(),
        "revoke".into(),
        "9".into(),
        "-c".into(),
        "config.toml".into(),
    ])
    .await
    .unwrap();
    assert_eq!(revoke.code, Some(0), "{}", revoke.stderr);
    tg.push_message(dm(9, 4, "still there?"));
    let after = texts_settle(&tg, 9, |t| t.len() == 3).await;
    assert!(
        after[2].contains("pairing code is"),
        "a revoked user is a stranger again: {after:?}"
    );
    assert_eq!(llm.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_mode_checks_the_secret_token_header() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let extra = "access = \"open\"\nmode = \"webhook\"";
    let cfg = config(&llm.url, &tg.url, extra).replace(
        "[server]\n",
        "[server]\npublic_url = \"https://bot.example.org\"\n",
    );
    let work = Workdir::new(&cfg);
    let service = Service::start(&work, ENV).await;
    let set = tg.calls("setWebhook");
    assert_eq!(set.len(), 1);
    assert_eq!(
        set[0].params["url"],
        "https://bot.example.org/v1/telegram/webhook"
    );
    let secret = set[0].params["secret_token"].as_str().unwrap().to_string();
    assert!(
        tg.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );

    let update =
        serde_json::json!({"update_id": 1, "message": dm(7, 1, "via webhook")}).to_string();
    let post = |header: Option<String>| {
        let mut req = reqwest::Client::new()
            .post(format!("{}/v1/telegram/webhook", service.base))
            .body(update.clone());
        if let Some(h) = header {
            req = req.header("x-telegram-bot-api-secret-token", h);
        }
        req.send()
    };
    assert_eq!(post(None).await.unwrap().status(), 401);
    assert_eq!(post(Some("wrong".into())).await.unwrap().status(), 401);
    assert_eq!(llm.count(), 0);
    assert_eq!(post(Some(secret.clone())).await.unwrap().status(), 200);
    texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: via webhook")).await;
    assert_eq!(
        post(Some(secret.clone())).await.unwrap().status(),
        200,
        "a redelivery is accepted"
    );
    // A sentinel on the same lane: a redelivery that slipped through would be answered first.
    let sentinel = serde_json::json!({"update_id": 2, "message": dm(7, 2, "sentinel")}).to_string();
    let posted = reqwest::Client::new()
        .post(format!("{}/v1/telegram/webhook", service.base))
        .header("x-telegram-bot-api-secret-token", secret)
        .header("content-type", "application/json")
        .body(sentinel)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 200);
    assert_eq!(
        texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: sentinel")).await,
        ["echo: via webhook", "echo: sentinel"]
    );
    assert_eq!(llm.count(), 2, "and not processed twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_a_turn_then_restart_answers_exactly_once() {
    let llm = LlmStandIn::start(|body, index| {
        if index == 0 {
            Behaviour::Hang
        } else {
            Behaviour::reply(format!("echo: {}", last_user(body)))
        }
    })
    .await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &tg.url, "access = \"open\""));
    let service = Service::start(&work, ENV).await;
    tg.push_message(dm(7, 1, "do not lose me"));
    wait_for("the model call", Duration::from_secs(10), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    service.kill();
    let _service = Service::start(&work, ENV).await;
    texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: do not lose me")).await;
    // A sentinel on the same lane: a second answer would come before its reply.
    tg.push_message(dm(7, 2, "sentinel"));
    assert_eq!(
        texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: sentinel")).await,
        ["echo: do not lose me", "echo: sentinel"],
        "answered exactly once"
    );
    assert_eq!(llm.count(), 3);
    assert_eq!(tg.pending_updates(), 0, "the update was confirmed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_streaming_when_the_process_is_killed_ends_as_one_message() {
    let llm = LlmStandIn::killed_mid_stream_then_echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "access = \"open\"\nstream_edit_interval_ms = 50",
    ));
    let service = Service::start(&work, ENV).await;
    tg.push_message(dm(7, 1, "stream then die"));
    let preview = texts_settle(&tg, 7, |t| t.len() == 1).await;
    assert_ne!(preview[0], "echo: stream then die", "still streaming");
    // The preview's id is recorded just after the platform answered the send; a kill inside
    // that window (microseconds) is the one case left that shows two messages.
    tokio::time::sleep(Duration::from_millis(300)).await;
    service.kill();
    let _service = Service::start(&work, ENV).await;
    texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: stream then die")).await;
    tg.push_message(dm(7, 2, "sentinel"));
    assert_eq!(
        texts_settle(&tg, 7, |t| t.iter().any(|x| x == "echo: sentinel")).await,
        ["echo: stream then die", "echo: sentinel"],
        "the dead attempt's preview became the reply instead of staying beside it"
    );
    let sends = tg
        .calls("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == 7)
        .count();
    assert_eq!(sends, 2, "one message per answer, across the restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_card_is_edited_in_place_in_the_topic() {
    let llm = LlmStandIn::start(one_step_plan()).await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "access = \"open\"\nstream_edit_interval_ms = 50",
    ));
    let _service = Service::start(&work, ENV).await;
    tg.push_message(group(-300, 7, 1, "/plan greet everyone", true, Some(9)));
    let texts = texts_settle(&tg, -300, |t| {
        t.iter().any(|x| x == "all done") && t.iter().any(|x| x.starts_with("📋 Plan finished"))
    })
    .await;
    let card = texts
        .iter()
        .find(|t| t.starts_with("📋 Plan: Greet"))
        .expect("the card");
    assert!(
        card.contains("✅ 1. Say hi"),
        "the card was edited in place: {card}"
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.starts_with("📋 Plan: Greet"))
            .count(),
        1,
        "edited, not re-sent"
    );
    let card_edits: Vec<_> = tg
        .calls("editMessageText")
        .into_iter()
        .filter(|c| {
            c.params["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Say hi")
        })
        .collect();
    assert_eq!(card_edits.len(), 1);
    let sends = tg.calls("sendMessage");
    assert!(
        sends
            .iter()
            .filter(|c| c.params["chat_id"] == -300)
            .all(|c| c.params["message_thread_id"] == 9)
    );
}
