//! Channels that tell the truth (SPEC section 21), through the real `serve` and the real
//! teloxide client against a Bot API stand-in that accepts long polls and never answers
//! them: Telegram turns `down` by its rule while still "connected", `/readyz?verbose`, the
//! admin API, the metrics and `ferroclaw status` say so, one alert reaches the alert chat
//! through another channel (a webhook conversation) and one "resolved" follows, and a
//! message sent while it was down is answered once when polls come back.

use crate::common::hook::Hook;
use crate::common::llm::LlmStandIn;
use crate::common::metrics::{scrape, value};
use crate::common::service::{Service, Workdir, config_with_llm, run};
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

async fn telegram_state(service: &Service) -> Value {
    let (status, body) = service.get_json("/v1/admin/channels", ADMIN).await;
    assert_eq!(status, 200, "{body}");
    body["channels"]["telegram"].clone()
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
    let config = config_with_llm(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\n\
             access = \"open\"\npoll_timeout_secs = 1\n\n\
             [channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n\
             [alerts]\nchats = [\"telegram:7\", \"webhook:main:ops\"]\nchannel_down_secs = 2\n",
            tg.url
        ),
    )
    .replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    );
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
