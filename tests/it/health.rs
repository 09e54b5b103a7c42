//! Channels that tell the truth (SPEC section 21), through the real `serve` and the real
//! teloxide client against a Bot API stand-in that accepts long polls and never answers
//! them: Telegram turns `down` by its rule while still "connected", `/readyz?verbose`, the
//! admin API, the metrics and `ferroclaw status` say so, one alert reaches the alert chat
//! through another channel (a webhook conversation) and one "resolved" follows, and a
//! message sent while it was down is answered once when polls come back.

use crate::common::discord::{DM_CHANNEL, DiscordStandIn};
use crate::common::hook::Hook;
use crate::common::llm::LlmStandIn;
use crate::common::metrics::{scrape, value};
use crate::common::receiver::Receiver;
use crate::common::service::{Service, Workdir, config_with_llm, run};
use crate::common::slack::{APP_TOKEN, BOT_TOKEN, SlackStandIn};
use crate::common::telegram::{TOKEN, TelegramStandIn, dm, texts_settle};
use crate::common::wait_for;
use serde_json::Value;
use std::time::Duration;

const HOOK_SECRET: &str = "hook-secret-HEALTH";
const ADMIN: &str = "admin-token-HEALTH";
const ENV: &[(&str, &str)] = &[
    ("FC_HOOK", HOOK_SECRET),
    ("FC_ADMIN", ADMIN),
    ("FC_TG_TOKEN", TOKEN),
];

/// The config with the admin token's variable set (`FC_ADMIN`).
fn with_admin(config: String) -> String {
    config.replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    )
}

/// `name`'s entry in `GET /v1/admin/channels`.
async fn channel_state(service: &Service, name: &str) -> Value {
    let (status, body) = service.get_json("/v1/admin/channels", ADMIN).await;
    assert_eq!(status, 200, "{body}");
    body["channels"][name].clone()
}

async fn telegram_state(service: &Service) -> Value {
    channel_state(service, "telegram").await
}

async fn alerts(hook: &Hook) -> Vec<String> {
    hook.list("ops", 0)
        .await
        .into_iter()
        .filter_map(|m| m["text"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stuck_long_poll_is_down_alerted_once_and_resolved_with_nothing_lost() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let config = with_admin(config_with_llm(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\n\
             access = \"open\"\npoll_timeout_secs = 1\n\n\
             [channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n\
             [alerts]\nchats = [\"telegram:7\", \"webhook:main:ops\"]\nchannel_down_secs = 2\n",
            tg.url
        ),
    ));
    let work = Workdir::new(&config);
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    wait_for("a completed long poll", Duration::from_secs(10), || async {
        let t = telegram_state(&service).await;
        (t["state"] == "up" && t["last_receive_age_secs"].is_u64()).then_some(())
    })
    .await;

    // Polls are accepted and never answered: connected, yet down by the rule (3 × 1 s).
    tg.hang_polls(true);
    tg.push_message(dm(7, 1, "sent while it is stuck"));
    wait_for("telegram down", Duration::from_secs(15), || async {
        (telegram_state(&service).await["state"] == "down").then_some(())
    })
    .await;
    let (status, ready) = service.get_json("/readyz?verbose", ADMIN).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["channels"]["telegram"]["state"], "down");
    assert!(
        ready["channels"]["telegram"]["last_receive_age_secs"]
            .as_u64()
            .unwrap()
            >= 3
    );
    assert_eq!(ready["channels"]["webhook:main"]["state"], "up");
    // The status page's channel table says so too.
    let page = reqwest::Client::new()
        .get(format!("{}/", service.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let row = page
        .split("<tr data-channel=\"telegram\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no telegram row: {page}"));
    assert!(row.contains(">down<"), "{row}");
    // Down is acted on: the stuck poll is abandoned and the receiver started again on a new
    // connection, saying why.
    let stuck = wait_for("a restarted receiver", Duration::from_secs(15), || async {
        let t = telegram_state(&service).await;
        (t["restarts"].as_u64().unwrap_or(0) >= 1).then_some(t)
    })
    .await;
    assert!(
        stuck["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no long poll completed"),
        "{stuck}"
    );
    wait_for(
        "a poll on a new connection",
        Duration::from_secs(10),
        || async { (tg.poll_connections() >= 2).then_some(()) },
    )
    .await;
    let samples = scrape(&service.base).await;
    assert_eq!(
        value(&samples, "ferroclaw_channel_up", &[("channel", "telegram")]),
        0.0
    );
    assert!(
        value(
            &samples,
            "ferroclaw_channel_last_receive_age_seconds",
            &[("channel", "telegram")]
        ) >= 3.0
    );
    let status_cli = run(
        work.path(),
        &["status", "--url", &service.base, "-c", "config.toml"],
        "",
        ENV,
    );
    assert!(
        status_cli.stdout.contains("telegram") && status_cli.stdout.contains("down"),
        "{}",
        status_cli.stdout
    );

    // One alert, in the first chat whose channel is up (not Telegram's own).
    let told = wait_for("the alert", Duration::from_secs(15), || async {
        let texts = alerts(&hook).await;
        (!texts.is_empty()).then_some(texts)
    })
    .await;
    assert!(told[0].contains("telegram is down"), "{told:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(alerts(&hook).await.len(), 1, "one alert per incident");

    // Polls answer again: up, one "resolved", and the message sent meanwhile answered once.
    tg.hang_polls(false);
    texts_settle(&tg, 7, |t| {
        t.iter().any(|x| x == "echo: sent while it is stuck")
    })
    .await;
    let told = wait_for("the resolution", Duration::from_secs(20), || async {
        let texts = alerts(&hook).await;
        (texts.len() == 2).then_some(texts)
    })
    .await;
    assert!(
        told[1].contains("resolved") && told[1].contains("telegram"),
        "{told:?}"
    );
    assert_eq!(telegram_state(&service).await["state"], "up");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        tg.texts(7),
        ["echo: sent while it is stuck"],
        "answered once"
    );
    assert_eq!(alerts(&hook).await.len(), 2);
}

fn telegram_config(llm: &str, tg: &TelegramStandIn) -> String {
    with_admin(config_with_llm(
        llm,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\n\
             access = \"open\"\npoll_timeout_secs = 1\n",
            tg.url
        ),
    ))
}

/// Up after a completed poll, with the trouble it had cleared.
async fn up_again(service: &Service) -> Value {
    wait_for("telegram up again", Duration::from_secs(20), || async {
        let t = telegram_state(service).await;
        (t["state"] == "up" && t["detail"].is_null()).then_some(t)
    })
    .await
}

async fn answered_once(tg: &TelegramStandIn, chat: i64, text: &str) {
    let expected = format!("echo: {text}");
    wait_for(&expected, Duration::from_secs(40), || async {
        tg.texts(chat).contains(&expected).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        tg.texts(chat).iter().filter(|t| **t == expected).count(),
        1,
        "{:?}",
        tg.texts(chat)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_gateway_and_a_conflict_are_shown_and_outlived_with_nothing_lost() {
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&telegram_config(&llm.url, &tg));
    let service = Service::start(&work, ENV).await;
    wait_for("a completed long poll", Duration::from_secs(10), || async {
        (telegram_state(&service).await["state"] == "up").then_some(())
    })
    .await;

    // Telegram's front end answers 502 pages: down, restarted, and back when it recovers.
    // (teloxide itself waits 10 s before it reports a 5xx: to the watchdog that is a poll
    // with no answer.)
    tg.fail_polls(502);
    let down = wait_for("down on 502s", Duration::from_secs(15), || async {
        let t = telegram_state(&service).await;
        (t["state"] == "down" && t["restarts"].as_u64().unwrap_or(0) >= 1).then_some(t)
    })
    .await;
    assert!(down["detail"].is_string(), "{down}");
    tg.push_message(dm(7, 1, "sent during the outage"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    tg.fail_polls(0);
    answered_once(&tg, 7, "sent during the outage").await;
    up_again(&service).await;

    // Another process polls the same token: said as such, not retried in silence.
    tg.fail_polls(409);
    let conflict = wait_for("the conflict shown", Duration::from_secs(15), || async {
        let t = telegram_state(&service).await;
        t["detail"]
            .as_str()
            .is_some_and(|d| d.contains("409 Conflict"))
            .then_some(t)
    })
    .await;
    assert!(
        conflict["detail"]
            .as_str()
            .unwrap()
            .contains("another process is polling this bot token"),
        "{conflict}"
    );
    let (_, ready) = service.get_json("/readyz?verbose", ADMIN).await;
    assert!(
        ready["channels"]["telegram"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("409")),
        "{ready}"
    );
    tg.push_message(dm(7, 2, "sent during the conflict"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(tg.texts(7).len() == 1, "not received while in conflict");
    tg.fail_polls(0);
    answered_once(&tg, 7, "sent during the conflict").await;
    let t = up_again(&service).await;
    assert!(t["last_receive_age_secs"].as_u64().unwrap() <= 3, "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_gateway_that_stops_acknowledging_heartbeats_is_down_and_restarted() {
    let llm = LlmStandIn::echo().await;
    let dc = DiscordStandIn::start().await;
    // Any interval the server announces is followed; a short one keeps the test short.
    dc.heartbeat_interval_ms(1000);
    let config = with_admin(config_with_llm(
        &llm.url,
        &format!(
            "[channels.discord]\nenabled = true\ntoken_env = \"FC_DC_TOKEN\"\napi_url = \"{}\"\n\
             access = \"open\"\ndegraded_after_secs = 2\ndown_after_secs = 5\n",
            dc.url
        ),
    ));
    let env = &[
        ("FC_DC_TOKEN", crate::common::discord::TOKEN),
        ("FC_ADMIN", ADMIN),
    ];
    let work = Workdir::new(&config);
    let service = Service::start(&work, env).await;
    let discord = || channel_state(&service, "discord");
    wait_for(
        "acknowledged heartbeats",
        Duration::from_secs(15),
        || async {
            let d = discord().await;
            (d["state"] == "up" && d["last_receive_age_secs"].is_u64()).then_some(())
        },
    )
    .await;
    dc.message(DM_CHANNEL, None, 7, 9201, "before");
    wait_for("the first answer", Duration::from_secs(20), || async {
        (dc.texts(DM_CHANNEL) == ["echo: before"]).then_some(())
    })
    .await;

    // The gateway still sends, but acknowledges no heartbeat: connected, not alive. (The
    // message goes out on the connection that is open now.)
    dc.withhold_acks(true);
    dc.message(DM_CHANNEL, None, 7, 9202, "while unacknowledged");
    let late = wait_for("degraded", Duration::from_secs(15), || async {
        let d = discord().await;
        (d["state"] != "up").then_some(d)
    })
    .await;
    assert!(late["detail"].is_string(), "{late}");
    let down = wait_for("down and restarted", Duration::from_secs(40), || async {
        let d = discord().await;
        (d["restarts"].as_u64().unwrap_or(0) >= 1).then_some(d)
    })
    .await;
    assert!(
        down["detail"]
            .as_str()
            .is_some_and(|d| d.contains("heartbeat")),
        "{down}"
    );
    let (status, ready) = service.get_json("/readyz?verbose", ADMIN).await;
    assert!(
        status == 503 || ready["channels"]["discord"]["state"] != "up",
        "{ready}"
    );
    wait_for(
        "a new client identifying",
        Duration::from_secs(15),
        || async { (dc.identifies().len() >= 2).then_some(()) },
    )
    .await;

    // Acknowledged again: up, and every message answered once.
    dc.withhold_acks(false);
    wait_for("up again", Duration::from_secs(60), || async {
        (discord().await["state"] == "up").then_some(())
    })
    .await;
    dc.message(DM_CHANNEL, None, 7, 9203, "after");
    wait_for("every answer", Duration::from_secs(30), || async {
        (dc.texts(DM_CHANNEL).len() >= 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        dc.texts(DM_CHANNEL),
        ["echo: before", "echo: while unacknowledged", "echo: after"]
    );
    assert_eq!(llm.count(), 3, "nothing handled twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_slack_socket_is_down_and_replaced_with_nothing_lost_or_doubled() {
    let llm = LlmStandIn::echo().await;
    let slack = SlackStandIn::start().await;
    let config = with_admin(config_with_llm(
        &llm.url,
        &format!(
            "[channels.slack]\nenabled = true\nmode = \"socket\"\nbot_token_env = \"FC_SLACK_BOT\"\n\
             app_token_env = \"FC_SLACK_APP\"\napi_url = \"{}\"\naccess = \"open\"\n\
             ping_interval_secs = 1\n",
            slack.api_url
        ),
    ));
    let env = &[
        ("FC_SLACK_BOT", BOT_TOKEN),
        ("FC_SLACK_APP", APP_TOKEN),
        ("FC_ADMIN", ADMIN),
    ];
    let work = Workdir::new(&config);
    let service = Service::start(&work, env).await;
    let state = || channel_state(&service, "slack");
    wait_for("slack up", Duration::from_secs(15), || async {
        let s = state().await;
        (s["state"] == "up" && s["last_receive_age_secs"].is_u64()).then_some(())
    })
    .await;

    // The socket stays open and says nothing, not even a pong.
    slack.freeze(true);
    slack.message("D1", "U1", "7.1", "while frozen");
    let replaced = wait_for("a new connection", Duration::from_secs(20), || async {
        let s = state().await;
        (s["restarts"].as_u64().unwrap_or(0) >= 1).then_some(s)
    })
    .await;
    assert!(
        replaced["detail"]
            .as_str()
            .is_some_and(|d| d.contains("nothing from Slack")),
        "{replaced}"
    );
    wait_for("a new connection", Duration::from_secs(15), || async {
        (slack.connections() >= 2).then_some(())
    })
    .await;
    slack.freeze(false);
    wait_for("the answer", Duration::from_secs(30), || async {
        slack
            .texts("D1")
            .contains(&"echo: while frozen".to_string())
            .then_some(())
    })
    .await;
    wait_for("slack up again", Duration::from_secs(15), || async {
        (state().await["state"] == "up").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(slack.texts("D1"), ["echo: while frozen"], "answered once");
    assert_eq!(llm.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callback_receiver_that_is_down_is_one_failing_alert_and_one_resolved() {
    let llm = LlmStandIn::echo().await;
    // Down for its first six attempts (about 16 s of the outbox's back-off).
    let callbacks = Receiver::start(6).await;
    let ops = Receiver::start(0).await;
    let config = with_admin(config_with_llm(
        &llm.url,
        &format!(
            "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\ncallback_url = \"{}\"\n\n\
             [alerts]\nwebhook_url = \"{}\"\nwebhook_secret_env = \"FC_ALERT\"\n\
             delivery_pending_secs = 2\n",
            callbacks.url, ops.url
        ),
    ));
    let env = &[
        ("FC_HOOK", HOOK_SECRET),
        ("FC_ADMIN", ADMIN),
        ("FC_ALERT", "alert-signing-HEALTH"),
    ];
    let work = Workdir::new(&config);
    let service = Service::start(&work, env).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let (status, body) = hook.send("c1", None, "m1", "hello", "").await;
    assert!(status == 200 || status == 202, "{body}");

    let failing = wait_for("the failing alert", Duration::from_secs(30), || async {
        let got = ops.received();
        (!got.is_empty()).then_some(got)
    })
    .await;
    let alert = &failing[0];
    assert_eq!(
        alert.body["key"], "deliveries:webhook:main",
        "{:?}",
        alert.body
    );
    assert_eq!(alert.body["state"], "failing");
    assert!(
        alert.body["text"]
            .as_str()
            .unwrap()
            .contains("deliveries to webhook:main are failing"),
        "{:?}",
        alert.body
    );
    let signed = ferroclaw_channel_webhook::sign(
        b"alert-signing-HEALTH",
        alert.timestamp.parse().unwrap(),
        alert.raw.as_bytes(),
    );
    assert_eq!(alert.signature, signed, "signed like callbacks");
    // The channel itself says its callbacks fail (degraded, never down: requests still come in).
    let main = channel_state(&service, "webhook:main").await;
    if callbacks.received().is_empty() {
        assert_eq!(main["state"], "degraded", "{main}");
        assert!(main["callbacks_failed"].as_u64().unwrap() >= 1, "{main}");
    }

    // The receiver comes back: the reply arrives once and one "resolved" follows.
    wait_for("the delivery", Duration::from_secs(40), || async {
        (!callbacks.received().is_empty()).then_some(())
    })
    .await;
    let resolved = wait_for("the resolution", Duration::from_secs(20), || async {
        let got = ops.received();
        (got.len() >= 2).then_some(got)
    })
    .await;
    assert_eq!(
        resolved[1].body["state"], "resolved",
        "{:?}",
        resolved[1].body
    );
    assert_eq!(resolved[1].body["key"], "deliveries:webhook:main");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(ops.received().len(), 2, "one alert, one resolved");
    let replies: Vec<_> = callbacks
        .received()
        .into_iter()
        .filter(|r| r.body["text"] == "echo: hello")
        .collect();
    assert_eq!(replies.len(), 1, "delivered once");
    let main = channel_state(&service, "webhook:main").await;
    assert_eq!(main["state"], "up", "{main}");
    assert_eq!(main["callbacks_failing"], 0, "{main}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_alert_once_across_a_leader_change_and_the_follower_shows_the_leaders_view() {
    let database = crate::common::pg::fresh_database().await;
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let ops = Receiver::start(0).await;
    let config = with_admin(config_with_llm(
        &llm.url,
        &format!(
            "[storage]\nurl = \"{database}\"\n\
             [channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\n\
             access = \"open\"\npoll_timeout_secs = 1\n\n\
             [alerts]\nwebhook_url = \"{}\"\nchannel_down_secs = 2\n",
            tg.url, ops.url
        ),
    ));
    let (work_a, work_b) = (Workdir::new(&config), Workdir::new(&config));
    let leader = Service::start(&work_a, ENV).await;
    let follower = Service::start(&work_b, ENV).await;
    wait_for("the leader polling", Duration::from_secs(15), || async {
        (telegram_state(&leader).await["state"] == "up").then_some(())
    })
    .await;
    // The follower runs no Telegram receiver: it shows what the leader reports.
    let seen = wait_for("the leader's report", Duration::from_secs(15), || async {
        let t = telegram_state(&follower).await;
        t["reported_secs_ago"].is_u64().then_some(t)
    })
    .await;
    assert_eq!(seen["state"], "up", "{seen}");
    assert_eq!(seen["received_by"], "the leading process");

    tg.hang_polls(true);
    wait_for(
        "the follower showing down",
        Duration::from_secs(20),
        || async { (telegram_state(&follower).await["state"] == "down").then_some(()) },
    )
    .await;
    wait_for("the alert", Duration::from_secs(20), || async {
        (!ops.received().is_empty()).then_some(())
    })
    .await;
    assert_eq!(ops.received()[0].body["state"], "down");

    // The leader dies mid-incident: the new leader finds it told already and tells nothing
    // until the channel is back, then one "resolved".
    leader.kill();
    wait_for("the follower polling", Duration::from_secs(20), || async {
        follower
            .logs()
            .contains("channel enabled: telegram (long polling)")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        ops.received().len(),
        1,
        "not alerted again by the new leader"
    );
    tg.hang_polls(false);
    let told = wait_for("the resolution", Duration::from_secs(30), || async {
        let got = ops.received();
        (got.len() >= 2).then_some(got)
    })
    .await;
    assert_eq!(told[1].body["state"], "resolved", "{:?}", told[1].body);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ops.received().len(), 2, "one alert and one resolved in all");
}
