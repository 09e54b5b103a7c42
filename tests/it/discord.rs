//! The Discord channel through the real `serve` and the real serenity client, against a
//! Discord REST + gateway stand-in on loopback: DMs with typing, guild mention gating,
//! threads (replies and subagent announcements), splitting at 2000, throttled streaming
//! edits and a 429, slash commands deferred and answered by follow-up, a dropped gateway
//! connection (resume, readiness, exactly-once) and kill -9 mid-turn.

use crate::common::discord::{
    APP_ID, CHANNEL, DM_CHANNEL, DiscordStandIn, GUILD, MESSAGE_CONTENT, THREAD, TOKEN,
};
use crate::common::llm::{Behaviour, LlmStandIn, last_user, tool_results};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::json;
use std::time::Duration;

fn config(llm: &str, dc: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.discord]\nenabled = true\ntoken_env = \"FC_DC_TOKEN\"\napi_url = \"{dc}\"\naccess = \"open\"\n{extra}\n"
        ),
    )
}

const ENV: &[(&str, &str)] = &[("FC_DC_TOKEN", TOKEN)];

async fn texts_settle(
    dc: &DiscordStandIn,
    channel: u64,
    expect: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    wait_for(
        &format!("the bot's messages in channel {channel}"),
        Duration::from_secs(20),
        || async {
            let t = dc.texts(channel);
            expect(&t).then_some(t)
        },
    )
    .await
}

fn posts_to(dc: &DiscordStandIn, channel: u64) -> usize {
    dc.calls_to("POST", &format!("channels/{channel}/messages"))
        .len()
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_guild_mentions_and_threads_are_answered_in_the_right_place() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let service = Service::start(&work, ENV).await;
    let identify = &dc.identifies()[0];
    assert!(
        identify["intents"].as_u64().unwrap() & MESSAGE_CONTENT != 0,
        "the MESSAGE_CONTENT intent is requested: {identify}"
    );
    assert!(identify["token"].as_str().unwrap().ends_with(TOKEN));
    let registered = wait_for("application commands", Duration::from_secs(10), || async {
        dc.calls_to("PUT", &format!("applications/{APP_ID}/commands"))
            .pop()
    })
    .await;
    let names: Vec<&str> = registered
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for name in [
        "plan",
        "stop",
        "status",
        "new",
        "model",
        "subagents",
        "help",
    ] {
        assert!(names.contains(&name), "/{name} registered: {names:?}");
    }
    let plan = registered
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "plan")
        .unwrap();
    assert_eq!(
        plan["options"][0]["type"], 3,
        "/plan takes its task as a string option"
    );

    // A DM: answered in the DM channel, with typing first.
    dc.message(DM_CHANNEL, None, 7, 5001, "hello");
    assert_eq!(
        texts_settle(&dc, DM_CHANNEL, |t| t == ["echo: hello"]).await,
        ["echo: hello"]
    );
    let typing = dc.calls_to("POST", &format!("channels/{DM_CHANNEL}/typing"));
    let reply = &dc.calls_to("POST", &format!("channels/{DM_CHANNEL}/messages"))[0];
    assert!(
        typing.first().is_some_and(|t| t.at <= reply.at),
        "typing ran before the reply"
    );

    // A guild channel: ignored without a mention, answered with one (in reply to it).
    dc.message(CHANNEL, Some(GUILD), 7, 5002, "nobody asked you");
    dc.mention(CHANNEL, 7, 5003, "what now?");
    texts_settle(&dc, CHANNEL, |t| t == ["echo: what now?"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        dc.texts(CHANNEL),
        ["echo: what now?"],
        "only the mention, stripped"
    );
    let reply = &dc.calls_to("POST", &format!("channels/{CHANNEL}/messages"))[0];
    assert_eq!(reply.body["message_reference"]["message_id"], "5003");

    // A reply to the bot counts as a mention.
    let bot_message = dc
        .calls_to("POST", &format!("channels/{CHANNEL}/messages"))
        .len();
    assert_eq!(bot_message, 1);
    dc.message_with(
        CHANNEL,
        Some(GUILD),
        8,
        5004,
        "and you?",
        json!({"message_reference": {"message_id": "10001", "channel_id": CHANNEL.to_string()},
            "referenced_message": {"id": "10001", "channel_id": CHANNEL.to_string(),
                "author": {"id": "900", "username": "ferro", "discriminator": "0", "bot": true},
                "content": "echo", "timestamp": "2026-11-30T10:00:00.000000+00:00", "tts": false,
                "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": false, "type": 0}}),
    );
    texts_settle(&dc, CHANNEL, |t| t.len() == 2 && t[1] == "echo: and you?").await;

    // A thread: its own session, answered in the thread.
    dc.mention(THREAD, 7, 5005, "in the thread");
    assert_eq!(
        texts_settle(&dc, THREAD, |t| t == ["echo: in the thread"]).await,
        ["echo: in the thread"]
    );
    assert_eq!(posts_to(&dc, CHANNEL), 2, "nothing leaked into the parent");
    assert!(
        !dc.calls_to("POST", &format!("channels/{THREAD}/typing"))
            .is_empty()
    );
    assert_eq!(llm.count(), 4);

    let (_, logs) = service.terminate().await;
    assert!(
        !logs.contains("TEST-discord-token"),
        "the token never reaches the logs"
    );
    assert!(dc.wrong_tokens().is_empty(), "{:?}", dc.wrong_tokens());
}

#[tokio::test(flavor = "multi_thread")]
async fn thread_sessions_are_keyed_under_their_parent_channel() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let service = Service::start(&work, ENV).await;
    dc.mention(THREAD, 7, 6001, "/status");
    let status = texts_settle(&dc, THREAD, |t| !t.is_empty()).await;
    assert!(
        status[0].contains(&format!(
            "agent:main:discord:group:{CHANNEL}:thread:{THREAD}"
        )),
        "{status:?}"
    );
    drop(service);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_five_thousand_character_reply_streams_by_throttled_edits_and_lands_in_pieces_of_2000() {
    let paragraph = "The quick brown fox jumps over the lazy dog again and again. ".repeat(5);
    let reply: String = (0..17)
        .map(|i| format!("Paragraph {i}. {paragraph}"))
        .collect::<Vec<_>>()
        .join("\n\n");
    assert!(reply.chars().count() >= 5_000);
    let full = reply.clone();
    let llm = LlmStandIn::start(move |_, _| Behaviour::Trickle {
        text: full.clone(),
        pieces: 25,
        gap: Duration::from_millis(60),
    })
    .await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, "stream_edit_interval_ms = 250"));
    let _service = Service::start(&work, ENV).await;
    dc.message(DM_CHANNEL, None, 7, 7001, "write a lot");
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let texts = texts_settle(&dc, DM_CHANNEL, |t| squash(&t.concat()) == squash(&reply)).await;
    assert!(texts.len() >= 3, "{} pieces", texts.len());
    for piece in &texts {
        assert!(
            piece.chars().count() <= 2000,
            "a piece has {} characters",
            piece.chars().count()
        );
    }
    // One message streamed and edited, at most once per interval.
    let first = &dc.calls_to("POST", &format!("channels/{DM_CHANNEL}/messages"))[0];
    let edits = dc.calls_to("PATCH", &format!("channels/{DM_CHANNEL}/messages/"));
    assert!(edits.len() >= 2, "{} edits", edits.len());
    let mut previous = first.at;
    for e in &edits {
        assert!(
            e.at - previous >= Duration::from_millis(240),
            "edits {:?} apart",
            e.at - previous
        );
        previous = e.at;
    }
    // The stand-in numbers messages from 10000: every edit is of the streamed message.
    assert!(
        edits.iter().all(|e| e.path.ends_with("/messages/10000")),
        "{edits:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_with_discords_headers_delays_the_reply_which_still_arrives_once() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let _service = Service::start(&work, ENV).await;
    dc.rate_limit_next_messages(&[1.0]);
    dc.message(DM_CHANNEL, None, 7, 7101, "hello");
    texts_settle(&dc, DM_CHANNEL, |t| t == ["echo: hello"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(dc.texts(DM_CHANNEL), ["echo: hello"]);
    let posts = dc.calls_to("POST", &format!("channels/{DM_CHANNEL}/messages"));
    assert_eq!(
        posts.iter().map(|c| c.status).collect::<Vec<_>>(),
        [429, 200]
    );
    assert!(
        posts[1].at - posts[0].at >= Duration::from_millis(950),
        "the wait was honoured: {:?}",
        posts[1].at - posts[0].at
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slash_command_is_deferred_and_answered_by_follow_up_and_typed_commands_work() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let _service = Service::start(&work, ENV).await;
    dc.slash(CHANNEL, Some(GUILD), 7, 8001, "help", None);
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!("CALLS {:#?}\nLOGS {}", dc.calls(), _service.logs());
    let answer = texts_settle(&dc, CHANNEL, |t| !t.is_empty()).await;
    assert!(answer[0].starts_with("Commands:"), "{answer:?}");
    let callback = &dc.calls_to("POST", "interactions/8001/itoken-8001/callback")[0];
    assert_eq!(callback.body["type"], 5, "deferred");
    let follow_up = &dc.calls_to("POST", &format!("webhooks/{APP_ID}/itoken-8001"))[0];
    assert!(callback.at <= follow_up.at);
    assert_eq!(
        posts_to(&dc, CHANNEL),
        0,
        "the answer is the follow-up, not a new message"
    );

    // A slash command with text reaches the model as the command line; so does typed text.
    dc.slash(DM_CHANNEL, None, 7, 8002, "model", Some("nope/none"));
    let answer = texts_settle(&dc, DM_CHANNEL, |t| !t.is_empty()).await;
    assert!(answer[0].contains("`nope`"), "{answer:?}");
    dc.message(DM_CHANNEL, None, 7, 8003, "/help");
    let answers = texts_settle(&dc, DM_CHANNEL, |t| t.len() == 2).await;
    assert!(answers[1].starts_with("Commands:"));
    assert_eq!(llm.count(), 0, "commands need no model call");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_spawned_from_a_thread_is_announced_in_that_thread() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "count to three" {
            Behaviour::reply("1 2 3")
        } else if user.starts_with("[Subagent") {
            Behaviour::reply("summary: counted")
        } else if tool_results(body).is_empty() {
            Behaviour::tool(
                "sessions_spawn",
                json!({"task": "count to three", "label": "counter"}),
            )
        } else {
            Behaviour::reply("spawned")
        }
    })
    .await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, "stream_edit_interval_ms = 50"));
    let _service = Service::start(&work, ENV).await;
    dc.mention(THREAD, 7, 9001, "go");
    let texts = texts_settle(&dc, THREAD, |t| t.iter().any(|x| x == "summary: counted")).await;
    assert!(
        texts.iter().any(|t| t.starts_with("🤖 counter — done")),
        "announced in the thread: {texts:?}"
    );
    let elsewhere: Vec<_> = dc
        .calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/messages"))
        .filter(|c| !c.path.contains(&format!("channels/{THREAD}/")))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "every message in the thread: {elsewhere:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_gateway_drops_it_resumes_readiness_follows_and_messages_are_answered_once() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let service = Service::start(&work, ENV).await;
    dc.message(DM_CHANNEL, None, 7, 9101, "one");
    texts_settle(&dc, DM_CHANNEL, |t| t == ["echo: one"]).await;

    // Discord unreachable: the connection drops and cannot come back yet.
    dc.gateway_down(true);
    dc.drop_connection();
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!("LOGS {}", service.logs());
    let (status, body) = wait_for("/readyz to turn 503", Duration::from_secs(20), || async {
        let r = service.readyz().await;
        (r.0 == 503).then_some(r)
    })
    .await;
    assert_eq!(status, 503);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["not_ready"], json!(["discord"]), "{body}");
    assert_eq!(body["channels"]["discord"], "not connected");

    // Back: the shard resumes (or identifies again) by itself; the stand-in replays the last
    // event it had already delivered, which must not be answered twice.
    dc.resume_replays_last(true);
    dc.gateway_down(false);
    wait_for(
        "/readyz to answer 200 again",
        Duration::from_secs(60),
        || async { (service.readyz().await.0 == 200).then_some(()) },
    )
    .await;
    dc.message(DM_CHANNEL, None, 7, 9102, "two");
    texts_settle(&dc, DM_CHANNEL, |t| t.len() >= 2 && t[1] == "echo: two").await;
    // And a plain drop with an immediate resume.
    dc.drop_connection();
    wait_for("a resume", Duration::from_secs(30), || async {
        (!dc.resumes().is_empty() && dc.connected()).then_some(())
    })
    .await;
    dc.message(DM_CHANNEL, None, 7, 9103, "three");
    texts_settle(&dc, DM_CHANNEL, |t| t.len() >= 3 && t[2] == "echo: three").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        dc.texts(DM_CHANNEL),
        ["echo: one", "echo: two", "echo: three"]
    );
    assert_eq!(llm.count(), 3, "no message was handled twice");
    assert!(dc.connections() >= 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_message_content_intent_is_said_plainly_and_the_channel_is_not_ready() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    dc.refuse_message_content(true);
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let service = Service::spawn(&work, ENV).await;
    wait_for(
        "the intent line in the log",
        Duration::from_secs(20),
        || async {
            service
                .logs()
                .contains("Message Content Intent")
                .then_some(())
        },
    )
    .await;
    let (status, body) = service.readyz().await;
    assert_eq!((status, body.contains("discord")), (503, true), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_turn_and_restart_answers_once() {
    let llm = LlmStandIn::start(|body, _| {
        if last_user(body) == "slow question" {
            Behaviour::slow("the answer", Duration::from_millis(1500))
        } else {
            Behaviour::reply("other")
        }
    })
    .await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, ""));
    let service = Service::start(&work, ENV).await;
    dc.message(DM_CHANNEL, None, 7, 9201, "slow question");
    wait_for("the model call", Duration::from_secs(10), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    service.kill();
    assert!(dc.texts(DM_CHANNEL).is_empty());
    let _service = Service::start(&work, ENV).await;
    texts_settle(&dc, DM_CHANNEL, |t| !t.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(dc.texts(DM_CHANNEL), ["the answer"], "answered once");
    assert!(
        !dc.calls_to("POST", "users/@me/channels").is_empty(),
        "the restarted process opened the user's DM channel itself"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_streaming_when_the_process_is_killed_ends_as_one_message() {
    let llm = LlmStandIn::killed_mid_stream_then_echo().await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &dc.url, "stream_edit_interval_ms = 50"));
    let service = Service::start(&work, ENV).await;
    dc.message(DM_CHANNEL, None, 7, 9301, "stream then die");
    let preview = texts_settle(&dc, DM_CHANNEL, |t| t.len() == 1).await;
    assert_ne!(preview[0], "echo: stream then die", "still streaming");
    // The preview's id is recorded just after the platform answered the send; a kill inside
    // that window (microseconds) is the one case left that shows two messages.
    tokio::time::sleep(Duration::from_millis(300)).await;
    service.kill();
    let _service = Service::start(&work, ENV).await;
    texts_settle(&dc, DM_CHANNEL, |t| {
        t.iter().any(|x| x == "echo: stream then die")
    })
    .await;
    dc.message(DM_CHANNEL, None, 7, 9302, "sentinel");
    assert_eq!(
        texts_settle(&dc, DM_CHANNEL, |t| t.iter().any(|x| x == "echo: sentinel")).await,
        ["echo: stream then die", "echo: sentinel"],
        "the dead attempt's preview became the reply instead of staying beside it"
    );
    assert_eq!(posts_to(&dc, DM_CHANNEL), 2, "one message per answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_allowlist_takes_numeric_discord_user_ids() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    let cfg = config(&llm.url, &dc.url, "").replace(
        "access = \"open\"",
        "access = \"allowlist\"\nallowed_users = [7]",
    );
    let work = Workdir::new(&cfg);
    let _service = Service::start(&work, ENV).await;
    dc.mention(CHANNEL, 8, 9301, "let me in");
    dc.mention(CHANNEL, 7, 9302, "hello from seven");
    texts_settle(&dc, CHANNEL, |t| t == ["echo: hello from seven"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dc.texts(CHANNEL), ["echo: hello from seven"]);
    assert_eq!(llm.count(), 1, "user 8 never reached the model");
}
