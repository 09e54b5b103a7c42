//! Long-term memory through the real `serve`: people in one Telegram group kept apart (each
//! recalled only their own facts in a DM, the group prompt carrying neither), `/memory` and
//! `/memory forget`, `/link`, facts saved before compaction and recalled after it (and a
//! `NOTHING` answer saving nothing), hybrid search with an embeddings stand-in, the admin
//! export and erase, a redone turn saving once, and two instances on PostgreSQL.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, fresh_results, last_user};
use crate::common::pg::fresh_database;
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::telegram::{TOKEN, TelegramStandIn, dm, group, texts_settle};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

const HOOK_SECRET: &str = "hook-secret-MEMORY";
const ADMIN: &str = "admin-token-MEMORY";
const ENV: &[(&str, &str)] = &[
    ("FC_HOOK", HOOK_SECRET),
    ("FC_ADMIN", ADMIN),
    ("FC_TG_TOKEN", TOKEN),
];
const FLUSH: &str = "You keep an assistant's long-term memory";

/// A model that saves "remember <fact>" with `memory_save`, answers "noted" to the tool's
/// result, answers compaction's fact-reading call with `flush(conversation)` and echoes
/// everything else.
fn model(
    flush: impl Fn(&str) -> String + Send + Sync + 'static,
) -> impl Fn(&Value, usize) -> Behaviour + Send + Sync + 'static {
    move |body, _| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        if system.starts_with(FLUSH) {
            return Behaviour::reply(flush(&body["messages"].to_string()));
        }
        if system.starts_with("You summarise conversations") {
            return Behaviour::reply("SUMMARY of earlier talk");
        }
        if !fresh_results(body).is_empty() {
            return Behaviour::reply("noted");
        }
        let user = last_user(body);
        match user.strip_prefix("remember ") {
            Some(fact) => Behaviour::tool("memory_save", json!({"text": fact})),
            None => Behaviour::reply(format!("echo: {user}")),
        }
    }
}

/// What a request was shown of memory: its system messages after the first (the prompt's
/// changing part, after the history).
fn recalled(request: &Recorded) -> String {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The request whose person's message was `text`.
fn request_for(llm: &LlmStandIn, text: &str) -> Recorded {
    llm.requests()
        .into_iter()
        .find(|r| last_user(&r.body) == text)
        .unwrap_or_else(|| panic!("no model request for {text:?}"))
}

fn cfg(llm: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!("[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n{extra}"),
    )
    .replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    )
}

/// The webhook user's memories, as the admin API exports them.
async fn exported(service: &Service) -> Vec<Value> {
    let (status, body) = service
        .get_json("/v1/admin/memory?user=webhook:main:u-7", ADMIN)
        .await;
    assert_eq!(status, 200, "{body}");
    body["memories"].as_array().unwrap().clone()
}

async fn said(tg: &TelegramStandIn, chat: i64, text: &str) -> Vec<String> {
    texts_settle(tg, chat, |t| t.iter().any(|x| x.contains(text))).await
}

#[tokio::test(flavor = "multi_thread")]
async fn people_in_one_group_get_only_their_own_facts_and_the_group_gets_none() {
    let llm = LlmStandIn::start(model(|_| "NOTHING".into())).await;
    let tg = TelegramStandIn::start().await;
    let work = Workdir::new(&cfg(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n",
            tg.url
        ),
    ));
    let service = Service::start(&work, ENV).await;

    // Two people tell the bot a fact each, in one group.
    tg.push_message(group(
        -100,
        7,
        1,
        "remember Ana is allergic to peanuts",
        true,
        None,
    ));
    said(&tg, -100, "noted").await;
    tg.push_message(group(
        -100,
        8,
        2,
        "remember Ben drives a green tractor",
        true,
        None,
    ));
    texts_settle(&tg, -100, |t| {
        t.iter().filter(|x| *x == "noted").count() == 2
    })
    .await;

    // The group asks about both: its prompt recalls neither person's fact.
    tg.push_message(group(-100, 7, 3, "group: peanuts or tractor?", true, None));
    said(&tg, -100, "echo: group: peanuts or tractor?").await;
    assert_eq!(
        recalled(&request_for(&llm, "group: peanuts or tractor?")),
        ""
    );

    // Each, in a DM, gets their own fact and not the other's.
    tg.push_message(dm(7, 4, "dm7: peanuts or tractor?"));
    said(&tg, 7, "echo: dm7").await;
    let seven = recalled(&request_for(&llm, "dm7: peanuts or tractor?"));
    assert!(seven.contains("Ana is allergic to peanuts"), "{seven}");
    assert!(!seven.contains("tractor"), "{seven}");
    tg.push_message(dm(8, 5, "dm8: peanuts or tractor?"));
    said(&tg, 8, "echo: dm8").await;
    let eight = recalled(&request_for(&llm, "dm8: peanuts or tractor?"));
    assert!(eight.contains("Ben drives a green tractor"), "{eight}");
    assert!(!eight.contains("peanuts"), "{eight}");

    // In every request the stand-in received, a fact is recalled only for its own person.
    for request in llm.requests() {
        let shown = recalled(&request);
        let asker = last_user(&request.body);
        if shown.contains("Ana is allergic") {
            assert!(asker.starts_with("dm7"), "Ana's fact shown to {asker:?}");
        }
        if shown.contains("Ben drives") {
            assert!(asker.starts_with("dm8"), "Ben's fact shown to {asker:?}");
        }
    }

    // `/memory` in the group lists no one's personal facts; in a DM it lists one's own.
    tg.push_message(group(-100, 7, 6, "/memory", true, None));
    let listed = said(&tg, -100, "What I remember here").await;
    let listing = listed
        .iter()
        .find(|t| t.contains("What I remember here"))
        .unwrap();
    assert!(
        !listing.contains("Ana") && !listing.contains("Ben"),
        "{listing}"
    );
    tg.push_message(dm(7, 7, "/memory"));
    let listed = said(&tg, 7, "What I remember here").await;
    let listing = listed
        .iter()
        .find(|t| t.contains("What I remember here"))
        .unwrap();
    let line = listing
        .lines()
        .find(|l| l.contains("Ana is allergic to peanuts"))
        .unwrap_or_else(|| panic!("{listing}"));
    let id: i64 = line[1..line.find(' ').unwrap()].parse().unwrap();

    // Someone else cannot forget it; its person can, and it leaves every later prompt.
    tg.push_message(dm(8, 8, &format!("/memory forget {id}")));
    said(&tg, 8, &format!("no memory #{id}")).await;
    tg.push_message(dm(7, 9, &format!("/memory forget {id}")));
    said(&tg, 7, &format!("Forgot memory #{id}.")).await;
    tg.push_message(dm(7, 10, "dm7 again: peanuts?"));
    said(&tg, 7, "echo: dm7 again").await;
    assert_eq!(recalled(&request_for(&llm, "dm7 again: peanuts?")), "");

    // `/link`: user 9's code, claimed by user 8, makes them one person with Ben's memories.
    tg.push_message(dm(9, 11, "/link"));
    let offered = said(&tg, 9, "/link ").await;
    let offer = offered.iter().find(|t| t.contains("/link ")).unwrap();
    let code: String = offer
        .split("/link ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert_eq!(code.len(), 8, "{offer}");
    tg.push_message(dm(8, 12, &format!("/link {code}")));
    said(&tg, 8, "Linked").await;
    tg.push_message(dm(9, 13, "dm9: my tractor?"));
    said(&tg, 9, "echo: dm9").await;
    let nine = recalled(&request_for(&llm, "dm9: my tractor?"));
    assert!(nine.contains("Ben drives a green tractor"), "{nine}");
    drop(service);
}

#[tokio::test(flavor = "multi_thread")]
async fn facts_saved_before_compaction_are_recalled_after_it_and_nothing_saves_nothing() {
    let llm = LlmStandIn::start(model(|conversation| {
        if conversation.contains("Biscuit") {
            "- The user's dog is called Biscuit\n- The user lives in Lisbon".into()
        } else {
            "NOTHING".into()
        }
    }))
    .await;
    let work = Workdir::new(&cfg(&llm.url, "").replacen(
        "[agent]\n",
        "[agent]\nmax_context_tokens = 1000\n",
        1,
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let long = "fern ".repeat(150);
    hook.ask("c1", "m0", &format!("my dog Biscuit says hi {long}"))
        .await;
    for i in 1..5 {
        hook.ask("c1", &format!("m{i}"), &format!("{i}: {long}"))
            .await;
    }
    let flushes = |llm: &LlmStandIn| {
        llm.requests()
            .iter()
            .filter(|r| r.system().starts_with(FLUSH))
            .count()
    };
    assert!(flushes(&llm) >= 1, "compaction read the dropped history");
    let saved = exported(&service).await;
    let texts: Vec<&str> = saved.iter().filter_map(|m| m["text"].as_str()).collect();
    assert!(
        texts.contains(&"The user's dog is called Biscuit"),
        "{texts:?}"
    );
    assert!(texts.contains(&"The user lives in Lisbon"), "{texts:?}");
    let count = saved.len();

    // A later conversation recalls it (the history that said it is gone).
    let reply = hook.ask("c2", "q1", "what is my dog called?").await;
    assert_eq!(reply, "echo: what is my dog called?");
    let shown = recalled(&request_for(&llm, "what is my dog called?"));
    assert!(
        shown.contains("The user's dog is called Biscuit"),
        "{shown}"
    );

    // History with nothing worth keeping: the reading call answers NOTHING, nothing is saved.
    let before = flushes(&llm);
    for i in 0..5 {
        hook.ask("c3", &format!("n{i}"), &format!("{i}: {long}"))
            .await;
    }
    assert!(
        flushes(&llm) > before,
        "the second compaction read its history too"
    );
    assert_eq!(
        exported(&service).await.len(),
        count,
        "NOTHING saved nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hybrid_search_ranks_a_paraphrase_above_a_word_match() {
    let llm = LlmStandIn::start(model(|_| "NOTHING".into())).await;
    let work = Workdir::new(&cfg(
        &llm.url,
        "[memory]\nrecall_k = 1\nembedding_model = \"standin/embed-small\"\n",
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    assert_eq!(
        hook.ask("c1", "m1", "remember I have a cat called Tom")
            .await,
        "noted"
    );
    assert_eq!(
        hook.ask(
            "c1",
            "m2",
            "remember Home insurance renewal is due in March"
        )
        .await,
        "noted"
    );
    // "home" is the only word the question shares with a memory, and it is the wrong one.
    hook.ask("c2", "q1", "which animal do I keep at home?")
        .await;
    let shown = recalled(&request_for(&llm, "which animal do I keep at home?"));
    assert!(shown.contains("I have a cat called Tom"), "{shown}");
    assert!(!shown.contains("insurance"), "{shown}");
    // Each memory was embedded once when saved, and the question when asked.
    let embedded = llm.embedded();
    assert!(
        embedded.contains(&"I have a cat called Tom".to_string()),
        "{embedded:?}"
    );
    assert!(
        embedded.contains(&"which animal do I keep at home?".to_string()),
        "{embedded:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_redone_after_a_crash_saves_once_and_the_admin_api_exports_and_erases() {
    // The first attempt saves, then its next model call hangs until the process is killed;
    // the redone turn calls the same save again and then answers.
    let llm = LlmStandIn::start(|body, index| match index {
        0 | 2 => Behaviour::tool("memory_save", json!({"text": "My locker is number 12"})),
        1 => Behaviour::Hang,
        _ => {
            assert!(!fresh_results(body).is_empty());
            Behaviour::reply("noted")
        }
    })
    .await;
    let work = Workdir::new(&cfg(&llm.url, ""));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let (status, _) = hook.send("c1", None, "m1", "my locker is 12", "").await;
    assert_eq!(status, 202);
    wait_for(
        "the save and the hanging call",
        Duration::from_secs(20),
        || async { (llm.count() == 2).then_some(()) },
    )
    .await;
    assert_eq!(exported(&service).await.len(), 1);
    service.kill();

    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    hook.reply_containing("c1", "noted").await;
    assert_eq!(llm.count(), 4, "the turn was redone");
    let saved = exported(&service).await;
    assert_eq!(saved.len(), 1, "saved once: {saved:?}");
    assert_eq!(saved[0]["text"], "My locker is number 12");

    // The admin API: a malformed person is a 400 naming the field; erase removes them all.
    let (status, body) = service
        .get_json("/v1/admin/memory?user=nobody", ADMIN)
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("`user`"), "{body}");
    let client = reqwest::Client::new();
    let erased: Value = client
        .delete(format!(
            "{}/v1/admin/memory?user=webhook:main:u-7",
            service.base
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(erased["deleted"], 1, "{erased}");
    assert!(exported(&service).await.is_empty());
    let unauthorised = client
        .delete(format!(
            "{}/v1/admin/memory?user=webhook:main:u-7",
            service.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_postgres_share_memories_that_survive_a_restart() {
    let llm = LlmStandIn::start(model(|_| "NOTHING".into())).await;
    let database = fresh_database().await;
    let config = cfg(&llm.url, &format!("[storage]\nurl = \"{database}\"\n"));
    let (work_a, work_b) = (Workdir::new(&config), Workdir::new(&config));
    let a = Service::start(&work_a, ENV).await;
    let b = Service::start(&work_b, ENV).await;
    let hook_a = Hook::new(&a, HOOK_SECRET);
    assert_eq!(
        hook_a
            .ask("c1", "m1", "remember the wifi password is on the fridge")
            .await,
        "noted"
    );
    let hook_b = Hook::new(&b, HOOK_SECRET);
    hook_b
        .ask("c2", "q1", "b: where is the wifi password?")
        .await;
    let shown = recalled(&request_for(&llm, "b: where is the wifi password?"));
    assert!(
        shown.contains("the wifi password is on the fridge"),
        "{shown}"
    );

    // Both stop; a new one recalls it.
    drop(a);
    b.terminate().await;
    let a = Service::start(&work_a, ENV).await;
    let hook_a = Hook::new(&a, HOOK_SECRET);
    hook_a.ask("c3", "q2", "a again: wifi password?").await;
    let shown = recalled(&request_for(&llm, "a again: wifi password?"));
    assert!(
        shown.contains("the wifi password is on the fridge"),
        "{shown}"
    );
}
