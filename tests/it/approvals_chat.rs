//! Approvals in the chat apps' own buttons. Telegram, through the real teloxide client and
//! the Bot API stand-in: the prompt carries inline buttons, a press arrives as a real
//! `callback_query` update (which the stand-in delivers only when `allowed_updates` asks for
//! it) and is answered with `answerCallbackQuery`; the prompt is edited to say who decided;
//! in a group only an approver may decide. Discord, through the real serenity client and the
//! gateway + REST stand-in: message components, a component interaction answered with an
//! ephemeral interaction response, the buttons removed by the prompt's edit.

use crate::common::llm::{LlmStandIn, calls_from_the_message};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::telegram::{TOKEN, TelegramStandIn, dm, group};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const ENV: &[(&str, &str)] = &[("FC_TG_TOKEN", TOKEN)];

fn config(llm: &str, tg: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{tg}\"\n\
             access = \"open\"\n\n[tools]\nhost_exec = true\n\n{extra}\n"
        ),
    )
}

fn run_exec(file: &Path, line: &str) -> String {
    let command = format!("echo {line} >> {0} && cat {0}", file.display());
    format!("run {}", json!([["exec", {"command": command}]]))
}

fn lines_in(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The prompt sent to `chat` with buttons: its message id and its buttons' payloads.
async fn prompt(tg: &TelegramStandIn, chat: i64) -> (i64, Vec<String>) {
    let call = wait_for(
        "an approval prompt with buttons",
        Duration::from_secs(20),
        || async {
            tg.calls("sendMessage").into_iter().find(|c| {
                c.params["chat_id"] == chat
                    && c.params["reply_markup"]["inline_keyboard"].is_array()
            })
        },
    )
    .await;
    let buttons: Vec<String> = call.params["reply_markup"]["inline_keyboard"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["callback_data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(buttons.len(), 3, "{:?}", call.params);
    let labels: Vec<&str> = call.params["reply_markup"]["inline_keyboard"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Approve once", "Always for this chat", "Deny"]);
    let text = call.params["text"].as_str().unwrap().to_string();
    assert!(text.contains("🔐 Approval needed"), "{text}");
    (message_id_of(tg, chat, &text), buttons)
}

/// The stand-in's id of the bot message in `chat` that was first sent with `text`.
fn message_id_of(tg: &TelegramStandIn, chat: i64, text: &str) -> i64 {
    let sends = tg.calls("sendMessage");
    let index = sends
        .iter()
        .position(|c| c.params["chat_id"] == chat && c.params["text"] == text)
        .unwrap();
    // Every send (to any chat) took the next id from 1000 on; files take ids too, but none
    // are sent here.
    1000 + index as i64
}

/// The texts `answerCallbackQuery` answered for query `query`.
fn answers(tg: &TelegramStandIn, query: &str) -> Vec<String> {
    tg.calls("answerCallbackQuery")
        .into_iter()
        .filter(|c| c.params["callback_query_id"] == query)
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn answered(tg: &TelegramStandIn, query: &str) -> String {
    wait_for(
        &format!("the answer to press {query}"),
        Duration::from_secs(20),
        || async { answers(tg, query).into_iter().next() },
    )
    .await
}

async fn text_containing(tg: &TelegramStandIn, chat: i64, part: &str) -> String {
    wait_for(
        &format!("a message containing {part:?}"),
        Duration::from_secs(30),
        || async { tg.texts(chat).into_iter().find(|t| t.contains(part)) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_button_press_approves_once_and_a_second_press_has_no_effect() {
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(&llm.url, &tg.url, ""));
    let ran = work.path().join("ran.txt");
    let _service = Service::start(&work, ENV).await;

    tg.push_message(dm(7, 1, &run_exec(&ran, "pressed")));
    let (prompt_id, buttons) = prompt(&tg, 7).await;
    assert!(
        buttons[0].starts_with("ap:") && buttons[0].ends_with(":a"),
        "{buttons:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lines_in(&ran), 0, "nothing runs before the press");

    tg.press("q1", 7, 7, prompt_id, &buttons[0]);
    assert_eq!(answered(&tg, "q1").await, "✅ Approved.");
    text_containing(&tg, 7, "exit code 0").await;
    assert_eq!(lines_in(&ran), 1);
    // The prompt now says who decided (its edit sends no keyboard: the buttons are gone).
    let edited = text_containing(&tg, 7, "approved by telegram:7").await;
    assert!(edited.contains("<code>exec</code>"), "{edited}");
    let edit: Value = tg
        .calls("editMessageText")
        .into_iter()
        .find(|c| c.params["message_id"] == prompt_id)
        .unwrap()
        .params;
    assert!(edit.get("reply_markup").is_none(), "{edit}");

    // A second press (another query) and a redelivered one (the same query id): one effect.
    tg.press("q2", 7, 7, prompt_id, &buttons[2]);
    assert_eq!(answered(&tg, "q2").await, "Already approved by telegram:7.");
    tg.press("q1", 7, 7, prompt_id, &buttons[0]);
    wait_for(
        "the redelivered press answered",
        Duration::from_secs(20),
        || async { (answers(&tg, "q1").len() == 2).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lines_in(&ran), 1, "the tool ran once");
    assert_eq!(llm.count(), 2, "one call before the tool, one after");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_group_only_an_approver_decides() {
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&config(
        &llm.url,
        &tg.url,
        "[approvals]\napprovers = [\"telegram:9\"]",
    ));
    let ran = work.path().join("ran.txt");
    let _service = Service::start(&work, ENV).await;

    tg.push_message(group(-100, 7, 1, &run_exec(&ran, "group"), true, None));
    let (prompt_id, buttons) = prompt(&tg, -100).await;
    // The member who asked is not an approver: the press is refused and nothing runs.
    tg.press("g1", 7, -100, prompt_id, &buttons[0]);
    assert_eq!(
        answered(&tg, "g1").await,
        "You may not decide this request."
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lines_in(&ran), 0);
    // Typing the command does not help either.
    let id = buttons[0].split(':').nth(1).unwrap().to_string();
    tg.push_message(group(-100, 7, 2, &format!("/approve {id}"), true, None));
    text_containing(&tg, -100, "You may not decide this request.").await;
    assert_eq!(lines_in(&ran), 0);
    // The approver's press runs it.
    tg.press("g2", 9, -100, prompt_id, &buttons[0]);
    assert_eq!(answered(&tg, "g2").await, "✅ Approved.");
    text_containing(&tg, -100, "exit code 0").await;
    assert_eq!(lines_in(&ran), 1);
}

fn discord_config(llm: &str, dc: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[channels.discord]\nenabled = true\ntoken_env = \"FC_DC_TOKEN\"\napi_url = \"{dc}\"\n\
             access = \"open\"\n\n[tools]\nhost_exec = true\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_button_press_approves_through_a_component_interaction() {
    use crate::common::discord::{DM_CHANNEL, DiscordStandIn, TOKEN as DC_TOKEN};
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    let dc = DiscordStandIn::start().await;
    let work = Workdir::new(&discord_config(&llm.url, &dc.url));
    let ran = work.path().join("ran.txt");
    let _service = Service::start(&work, &[("FC_DC_TOKEN", DC_TOKEN)]).await;
    wait_for(
        "the gateway connection",
        Duration::from_secs(20),
        || async { dc.connected().then_some(()) },
    )
    .await;

    dc.message(DM_CHANNEL, None, 7, 5001, &run_exec(&ran, "discord"));
    let sent = wait_for("a prompt with buttons", Duration::from_secs(20), || async {
        dc.calls_to("POST", &format!("channels/{DM_CHANNEL}/messages"))
            .into_iter()
            .find(|c| c.body["components"].is_array())
    })
    .await;
    let buttons = sent.body["components"][0]["components"]
        .as_array()
        .unwrap()
        .clone();
    let labels: Vec<&str> = buttons
        .iter()
        .map(|b| b["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Approve once", "Always for this chat", "Deny"]);
    let approve = buttons[0]["custom_id"].as_str().unwrap().to_string();
    let deny = buttons[2]["custom_id"].as_str().unwrap().to_string();
    let prompt_id = wait_for("the prompt's id", Duration::from_secs(5), || async {
        dc.messages(DM_CHANNEL)
            .into_iter()
            .find(|(_, t)| t.contains("🔐 Approval needed"))
            .map(|(id, _)| id)
    })
    .await;
    assert_eq!(lines_in(&ran), 0);

    dc.press(DM_CHANNEL, None, 7, 7001, prompt_id, &approve);
    let callback = wait_for(
        "the interaction's answer",
        Duration::from_secs(20),
        || async {
            dc.calls_to("POST", "interactions/7001/itoken-7001/callback")
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(callback.body["type"], 4, "{:?}", callback.body);
    assert_eq!(callback.body["data"]["content"], "✅ Approved.");
    assert_eq!(
        callback.body["data"]["flags"], 64,
        "only the presser sees it"
    );
    wait_for("the command's output", Duration::from_secs(30), || async {
        dc.texts(DM_CHANNEL)
            .into_iter()
            .find(|t| t.contains("exit code 0"))
    })
    .await;
    assert_eq!(lines_in(&ran), 1);
    // The prompt is edited to say who decided, and its buttons are gone.
    let edit = wait_for("the prompt's edit", Duration::from_secs(20), || async {
        dc.calls_to("PATCH", &format!("messages/{prompt_id}"))
            .into_iter()
            .next()
    })
    .await;
    assert!(
        edit.body["content"]
            .as_str()
            .unwrap()
            .contains("approved by discord:7"),
        "{:?}",
        edit.body
    );
    assert_eq!(edit.body["components"], json!([]));

    // A second press is answered and has no effect.
    dc.press(DM_CHANNEL, None, 7, 7002, prompt_id, &deny);
    let second = wait_for("the second answer", Duration::from_secs(20), || async {
        dc.calls_to("POST", "interactions/7002/itoken-7002/callback")
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        second.body["data"]["content"],
        "Already approved by discord:7."
    );
    assert_eq!(lines_in(&ran), 1);
}
