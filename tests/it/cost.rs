//! Cost control through the real `serve` and its signed webhook: usage and cost per call from
//! the stand-in's reported usage and the configured prices, `/usage` and the admin API in
//! agreement, the metrics, spending caps that stop a call before it is made, a background
//! cap that leaves the person chatting, one message's tree stopped at its run limit, and a
//! rate limit answered with one line while the message stays in the journal.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, last_user};
use crate::common::metrics::{scrape, value};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

const HOOK_SECRET: &str = "hook-secret-COST";
const ADMIN: &str = "admin-token-COST";
const ENV: &[(&str, &str)] = &[("FC_HOOK", HOOK_SECRET), ("FC_ADMIN", ADMIN)];
const MODEL: &str = "standin/test-model";

/// A webhook service with an admin token, `extra` TOML and the stand-in's model priced at
/// $1,000 per million input tokens and $2,000 per million output tokens (so one call of the
/// stand-in's 11 + 7 tokens costs $0.025).
fn cfg(llm: &str, extra: &str) -> String {
    let extra = format!(
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n[prices.\"{MODEL}\"]\n\
         input_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n\n{extra}"
    );
    config_with_llm(llm, &extra).replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_and_cost_match_the_reported_usage_and_prices_everywhere() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&cfg(&llm.url, ""));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    for i in 0..3 {
        assert_eq!(
            hook.ask("c1", &format!("m{i}"), "hello").await,
            "echo: hello"
        );
    }
    assert_eq!(llm.count(), 3);

    // The admin API: three calls of 11 + 7 tokens at the configured prices.
    let (status, report) = service
        .get_json("/v1/admin/usage?group_by=user", ADMIN)
        .await;
    assert_eq!(status, 200, "{report}");
    let total = &report["total"];
    assert_eq!(total["calls"], 3);
    assert_eq!(total["input_tokens"], 33);
    assert_eq!(total["output_tokens"], 21);
    assert_eq!(total["unpriced_calls"], 0);
    let cost = total["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.075).abs() < 1e-9, "{cost}");
    assert_eq!(report["groups"][0]["key"], "webhook:main:u-7");
    assert_eq!(report["groups"][0]["calls"], 3);
    let (_, by_kind) = service
        .get_json("/v1/admin/usage?group_by=kind", ADMIN)
        .await;
    assert_eq!(by_kind["groups"][0]["key"], "user_turn");

    // `/usage` in the chat says the same (and is not itself a model call).
    let usage = hook.ask("c1", "m3", "/usage").await;
    assert!(
        usage.contains("You — today: 3 calls, 33 tokens in (0% from cache), 21 out, $0.0750"),
        "{usage}"
    );
    assert!(
        usage.contains("This chat — this month: 3 calls, 33 tokens in"),
        "{usage}"
    );
    assert!(usage.contains(&format!("• {MODEL} — 3 calls")), "{usage}");
    assert_eq!(llm.count(), 3);

    // The metrics count every call's tokens by direction and its cost.
    let samples = scrape(&service.base).await;
    let labels = |direction| {
        [
            ("model", MODEL),
            ("kind", "user_turn"),
            ("direction", direction),
        ]
    };
    assert_eq!(
        value(&samples, "ferroclaw_model_tokens_total", &labels("input")),
        33.0
    );
    assert_eq!(
        value(&samples, "ferroclaw_model_tokens_total", &labels("output")),
        21.0
    );
    let spent = value(
        &samples,
        "ferroclaw_cost_usd_total",
        &[("model", MODEL), ("kind", "user_turn")],
    );
    assert!((spent - 0.075).abs() < 1e-9, "{spent}");

    // Bad queries name the field.
    let (status, body) = service
        .get_json("/v1/admin/usage?from=yesterday", ADMIN)
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("`from`"), "{body}");
    let (status, body) = service
        .get_json("/v1/admin/usage?group_by=planet", ADMIN)
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("`group_by`"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_over_the_daily_cap_is_not_made_and_the_person_is_told() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&cfg(&llm.url, "[budgets]\nuser_daily_usd = 0.01\n"));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let answer = hook.ask("c1", "m1", "hello").await;
    assert!(
        answer.contains("Your daily budget (budgets.user_daily_usd = $0.0100) is spent")
            && answer.contains("resets at 00:00 UTC"),
        "{answer}"
    );
    assert_eq!(llm.count(), 0, "no model call was made");
    // Chat commands still answer.
    let usage = hook.ask("c1", "m2", "/usage").await;
    assert!(usage.contains("You — today: nothing yet"), "{usage}");
}

#[tokio::test(flavor = "multi_thread")]
async fn background_work_over_its_cap_stops_while_the_person_chats_on() {
    let llm = LlmStandIn::start(|body: &Value, _| {
        let last = last_user(body);
        if last == "research it" {
            Behaviour::tool(
                "sessions_spawn",
                json!({"task": "dig into it", "label": "digger"}),
            )
        } else if last == "dig into it" {
            Behaviour::reply("dug")
        } else {
            Behaviour::reply(format!("ok: {}", last.chars().take(40).collect::<String>()))
        }
    })
    .await;
    // Every call reserves at most a few dollars here; background work may not spend a cent.
    // The operator is told the background cap tripped.
    let ops = crate::common::receiver::Receiver::start(0).await;
    let work = Workdir::new(&cfg(
        &llm.url,
        &format!(
            "[budgets]\nbackground_daily_usd = 0.000001\nuser_daily_usd = 1000\n\n\
             [alerts]\nwebhook_url = \"{}\"\n",
            ops.url
        ),
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    hook.ask("c1", "m1", "research it").await;
    let announced = wait_for("the subagent's end", Duration::from_secs(30), || async {
        let texts: Vec<String> = hook
            .list("c1", 0)
            .await
            .iter()
            .filter_map(|m| m["text"].as_str().map(str::to_string))
            .collect();
        texts
            .iter()
            .find(|t| t.contains("background work"))
            .cloned()
    })
    .await;
    assert!(
        announced.contains("budgets.background_daily_usd"),
        "{announced}"
    );
    assert!(
        !llm.requests().iter().any(|r| r.last_user == "dig into it"),
        "the subagent's call was never made"
    );
    let answer = hook.ask("c1", "m2", "still there?").await;
    assert!(answer.contains("ok: still there?"), "{answer}");
    let told = wait_for("the budget alert", Duration::from_secs(15), || async {
        let got = ops.received();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(
        told[0].body["key"], "budget:background:daily",
        "{:?}",
        told[0].body
    );
    assert!(
        told[0].body["text"]
            .as_str()
            .unwrap()
            .contains("budgets.background_daily_usd tripped"),
        "{:?}",
        told[0].body
    );
    // The user's own cap is theirs to hear about, not the operator's: one alert only.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(ops.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_message_that_would_start_150_runs_stops_at_50() {
    let llm = LlmStandIn::start(|body: &Value, _| {
        let last = last_user(body);
        let done = crate::common::llm::tool_results(body).len();
        if last == "fan out" && done < 150 {
            // Three answers of 50 spawns each (an answer holds at most 64 tool calls).
            let calls: Vec<(&str, Value)> = (done..done + 50)
                .map(|i| ("sessions_spawn", json!({"task": format!("part {i}")})))
                .collect();
            Behaviour::tools(&calls)
        } else if last.starts_with("part ") {
            Behaviour::reply("done")
        } else {
            Behaviour::reply("reported")
        }
    })
    .await;
    let work = Workdir::new(&cfg(
        &llm.url,
        "[subagents]\nmax_spawns_per_turn = 500\nmax_children = 500\nmax_concurrent = 8\n",
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    hook.send("c1", None, "m1", "fan out", "").await;
    // The turn's second call sees 150 results: 50 started, 100 refused by the limit.
    let results = wait_for("the spawn results", Duration::from_secs(60), || async {
        llm.requests().into_iter().find_map(|r| {
            let results = crate::common::llm::tool_results(&r.body);
            (results.len() == 150).then_some(results)
        })
    })
    .await;
    let refused = results
        .iter()
        .filter(|r| r.contains("limits.max_runs_per_message"))
        .count();
    assert_eq!(refused, 100, "{:?}", &results[..3]);
    wait_for("50 runs answered", Duration::from_secs(60), || async {
        let parts = llm
            .requests()
            .iter()
            .filter(|r| r.last_user.starts_with("part "))
            .count();
        (parts >= 50).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let parts = llm
        .requests()
        .iter()
        .filter(|r| r.last_user.starts_with("part "))
        .count();
    assert_eq!(parts, 50, "exactly 50 runs were started");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_over_rate_message_gets_one_line_and_stays_in_the_journal() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&cfg(&llm.url, "[limits]\nmessages_per_minute = 2\n"));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    assert_eq!(hook.ask("c1", "m1", "one").await, "echo: one");
    // Another chat of the same person counts too.
    assert_eq!(hook.ask("c2", "m2", "two").await, "echo: two");
    let answer = hook.ask("c1", "m3", "three").await;
    assert!(
        answer.starts_with(
            "⏳ You are writing faster than this bot answers (2 per minute); try again in"
        ),
        "{answer}"
    );
    assert_eq!(llm.count(), 2);
    // Commands are not counted.
    let status = hook.ask("c1", "m4", "/status").await;
    assert!(status.contains("Spent today in this chat"), "{status}");
    service.terminate().await;
    let db = work.path().join("ferroclaw.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let journalled: Vec<(String, String)> =
        sqlx::query_as("SELECT platform_id, state FROM inbound WHERE chat_id = 'c1' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        journalled.contains(&("m3".to_string(), "done".to_string())),
        "{journalled:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_turns_on_two_instances_stay_within_one_reservation_of_the_cap() {
    let database = crate::common::pg::fresh_database().await;
    let llm = LlmStandIn::start(|_, _| Behaviour::slow("ok", Duration::from_millis(200))).await;
    // No tools and a short prompt: a call's worst case (input at $1,000 per million, output
    // free) is close to its real cost (11 input tokens: $0.011), so the cap is what stops.
    let extra = format!(
        "[storage]\nurl = \"{database}\"\n\n[agents.lean]\ntools = []\n\n[[bindings]]\nagent = \"lean\"\n\
         channel = \"webhook:main\"\n\n[budgets]\ntotal_daily_usd = 0.1\n"
    );
    let config = cfg(&llm.url, &extra).replace("output_per_mtok = 2000.0", "output_per_mtok = 0.0");
    let (work_a, work_b) = (Workdir::new(&config), Workdir::new(&config));
    let a = Service::start(&work_a, ENV).await;
    let b = Service::start(&work_b, ENV).await;
    let hooks = [Hook::new(&a, HOOK_SECRET), Hook::new(&b, HOOK_SECRET)];
    let answers = futures::future::join_all((0..20).map(|i| {
        let hook = &hooks[i % 2];
        async move { hook.ask(&format!("race-{i}"), &format!("m{i}"), "go").await }
    }))
    .await;
    let answered = answers.iter().filter(|a| a.as_str() == "ok").count();
    let refused = answers
        .iter()
        .filter(|a| {
            a.contains("The service's daily budget (budgets.total_daily_usd = $0.1000) is spent")
        })
        .count();
    assert_eq!(answered + refused, 20, "{answers:?}");
    assert!(answered >= 1 && refused >= 1, "{answers:?}");
    assert_eq!(llm.count(), answered, "a refused call reached no model");

    // What was spent: every answered call's real cost, within one reservation of the cap.
    let store = ferroclaw::storage::connect(&database).await.unwrap();
    let today = ferroclaw::clock::utc_day(ferroclaw::clock::now_ms());
    let filter = ferroclaw::storage::UsageFilter {
        from_day: today.clone(),
        to_day: today.clone(),
        user: None,
        chat: None,
    };
    let spent = store.usage_report(&filter, None).await.unwrap()[0].clone();
    assert_eq!(spent.calls as usize, answered);
    assert!(
        (spent.cost_usd - 0.011 * answered as f64).abs() < 1e-9,
        "{spent:?}"
    );
    let one_reservation = 0.05;
    assert!(spent.cost_usd <= 0.1 + one_reservation, "{spent:?}");
    // Nothing is held for calls that ended: the cap's record is what was spent.
    let held = store.budget_spent("total", &today).await.unwrap();
    assert!(
        (held - spent.cost_usd).abs() < 1e-9,
        "held {held} vs spent {spent:?}"
    );
}

/// The cache-hit rate of a 20-turn conversation with a plan running, against a stand-in that
/// reports cached tokens only for a byte-identical prefix: with the Active Plan after the
/// history (now) and, computed from the same requests, with it at the end of the system
/// prompt (before).
#[tokio::test(flavor = "multi_thread")]
async fn a_running_plan_keeps_the_cached_prefix() {
    use crate::common::llm::{cached_tokens, fresh_results, prompt_text};
    let llm = LlmStandIn::start_caching(|body: &Value, _| {
        let last = last_user(body);
        let turn: usize = last.trim_start_matches("turn ").parse().unwrap_or(0);
        let steps: Vec<Value> = (1..=10)
            .map(|i| json!({"action": format!("part {i}"), "expected_outcome": "done"}))
            .collect();
        if !fresh_results(body).is_empty() {
            Behaviour::reply(format!("ok {turn}"))
        } else if turn == 1 {
            Behaviour::tool("plan", json!({"action": "create", "goal": "Ten parts", "steps": steps}))
        } else if (2..=11).contains(&turn) {
            Behaviour::tool(
                "plan",
                json!({"action": "update", "step": turn - 1, "status": "done", "actual": format!("part {} built", turn - 1)}),
            )
        } else {
            Behaviour::reply(format!("ok {turn}"))
        }
    })
    .await;
    let work = Workdir::new(&cfg(&llm.url, ""));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    for turn in 1..=20 {
        // The plan card comes with the first answer; each answer ends with the reply.
        let answer = hook
            .ask("c1", &format!("m{turn}"), &format!("turn {turn}"))
            .await;
        assert!(answer.ends_with(&format!("ok {turn}")), "{answer}");
    }
    let requests = llm.requests();
    assert!(requests.len() >= 31, "{}", requests.len());
    // Now: what the stand-in reported, as the admin API sums it.
    let (_, report) = service.get_json("/v1/admin/usage", ADMIN).await;
    let now = report["total"]["cache_hit_rate"].as_f64().unwrap();
    // Before: the same requests with the Active Plan joined to the system prompt.
    let before_texts: Vec<String> = requests
        .iter()
        .map(|r| {
            let mut body = r.body.clone();
            let messages = body["messages"].as_array_mut().unwrap();
            if messages.len() > 1 && messages.last().unwrap()["role"] == "system" {
                let plan = messages.pop().unwrap()["content"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let system = messages[0]["content"].as_str().unwrap().to_string();
                messages[0]["content"] = json!(format!("{system}\n\n{plan}"));
            }
            prompt_text(&body)
        })
        .collect();
    let (mut prompt, mut cached) = (0, 0);
    for (i, text) in before_texts.iter().enumerate() {
        let (p, c) = cached_tokens(text, before_texts[..i].iter().map(String::as_str));
        prompt += p;
        cached += c;
    }
    let before = cached as f64 / prompt as f64;
    println!("cache-hit rate, 20 turns with a plan: before {before:.3}, now {now:.3}");
    // Measured: before 0.790, now 0.884 (uncached input 21.0% → 11.6%): every call whose
    // plan had just moved missed the whole history before.
    assert!(now > before + 0.05, "before {before:.3}, now {now:.3}");
    let usage = hook.ask("c1", "m21", "/usage").await;
    assert!(
        usage.contains(&format!("({:.0}% from cache)", now * 100.0)),
        "{usage}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_telegram_a_spent_cap_is_one_line_and_usage_is_a_registered_command() {
    use crate::common::telegram::{TOKEN, TelegramStandIn, dm, texts_settle};
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let extra = format!(
        "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n\n\
         [prices.\"{MODEL}\"]\ninput_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n\n\
         [budgets]\nuser_daily_usd = 0.01\n\n[limits]\nmessages_per_minute = 1\n",
        tg.url
    );
    let work = Workdir::new(&config_with_llm(&llm.url, &extra));
    let _service = Service::start(&work, &[("FC_TG_TOKEN", TOKEN)]).await;
    assert!(tg.calls("setMyCommands")[0].raw.contains("usage"));
    tg.push_message(dm(7, 1, "hello"));
    let texts = texts_settle(&tg, 7, |t| !t.is_empty()).await;
    assert!(
        texts[0].contains("Your daily budget (budgets.user_daily_usd = $0.0100) is spent"),
        "{texts:?}"
    );
    // The second message within the minute is over the rate: one line, no model call.
    tg.push_message(dm(7, 2, "hello again"));
    let texts = texts_settle(&tg, 7, |t| t.len() >= 2).await;
    assert!(
        texts[1].starts_with("⏳ You are writing faster"),
        "{texts:?}"
    );
    tg.push_message(dm(7, 3, "/usage"));
    let texts = texts_settle(&tg, 7, |t| t.len() >= 3).await;
    assert!(texts[2].contains("You — today: nothing yet"), "{texts:?}");
    assert_eq!(llm.count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_stopped_mid_answer_gives_its_reservation_back() {
    let llm = LlmStandIn::start(|body: &Value, _| {
        if last_user(body) == "think long" {
            Behaviour::Hang
        } else {
            Behaviour::reply("ok")
        }
    })
    .await;
    let work = Workdir::new(&cfg(&llm.url, "[budgets]\ntotal_daily_usd = 1000\n"));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let db = work.path().join("ferroclaw.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", db.display()))
        .await
        .unwrap();
    let held = || async {
        sqlx::query_scalar::<_, f64>("SELECT spent_usd FROM budget_spend WHERE budget = 'total'")
            .fetch_optional(&pool)
            .await
            .unwrap()
            .unwrap_or(0.0)
    };
    hook.send("c1", None, "m1", "think long", "").await;
    wait_for(
        "the call held against the cap",
        Duration::from_secs(20),
        || async { (llm.count() == 1 && held().await > 1.0).then_some(()) },
    )
    .await;
    let (status, _) = hook.send("c1", None, "m2", "/stop", "?wait=30").await;
    assert_eq!(status, 200);
    wait_for(
        "the reservation given back",
        Duration::from_secs(20),
        || async { (held().await.abs() < 1e-9).then_some(()) },
    )
    .await;
    assert_eq!(hook.ask("c1", "m3", "again").await, "ok");
    assert!(
        (held().await - 0.025).abs() < 1e-9,
        "only the answered call is spent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_telegram_a_busy_group_is_limited_as_a_whole() {
    use crate::common::telegram::{TOKEN, TelegramStandIn, group, texts_settle};
    let llm = LlmStandIn::echo().await;
    let tg = TelegramStandIn::start().await;
    let extra = format!(
        "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n\n\
         [limits]\nmessages_per_minute = 5\ngroup_messages_per_minute = 2\n",
        tg.url
    );
    let work = Workdir::new(&config_with_llm(&llm.url, &extra));
    let service = Service::start(&work, &[("FC_TG_TOKEN", TOKEN)]).await;
    // Three members, one message each, within the minute: the group's third is refused
    // although its sender wrote nothing before.
    tg.push_message(group(-100, 7, 1, "from seven", true, None));
    texts_settle(&tg, -100, |t| !t.is_empty()).await;
    tg.push_message(group(-100, 8, 2, "from eight", true, None));
    texts_settle(&tg, -100, |t| t.len() >= 2).await;
    tg.push_message(group(-100, 9, 3, "from nine", true, None));
    let texts = texts_settle(&tg, -100, |t| t.len() >= 3).await;
    assert!(
        texts[2].starts_with(
            "⏳ This group is writing faster than this bot answers (2 per minute); try again in"
        ),
        "{texts:?}"
    );
    assert_eq!(llm.count(), 2, "the refused message reached no model");
    // The same person in a DM is limited as a person only.
    tg.push_message(crate::common::telegram::dm(9, 4, "just me"));
    let texts = texts_settle(&tg, 9, |t| !t.is_empty()).await;
    assert!(texts[0].starts_with("echo"), "{texts:?}");
    assert_eq!(llm.count(), 3);
    // The refused message is in the journal, answered.
    service.terminate().await;
    let db = work.path().join("ferroclaw.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let state: String = sqlx::query_scalar(
        "SELECT state FROM inbound WHERE chat_id = '-100' AND platform_id = '3'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(state, "done");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_messages_call_limit_holds_across_a_kill_and_restart() {
    // Every answer asks for another tool call; the seventh request is never answered, so
    // the first attempt dies mid-turn with six calls answered.
    let llm = LlmStandIn::start(|_, index| {
        if index == 6 {
            Behaviour::Hang
        } else {
            Behaviour::tool("list_files", json!({}))
        }
    })
    .await;
    let work = Workdir::new(
        &cfg(&llm.url, "[limits]\nmax_model_calls_per_message = 12\n").replacen(
            "[agent]\n",
            "[agent]\nmax_iterations = 100\n",
            1,
        ),
    );
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    hook.send("c1", None, "m1", "keep going", "").await;
    wait_for("the hung call", Duration::from_secs(30), || async {
        (llm.count() >= 7).then_some(())
    })
    .await;
    service.kill();

    // Restarted, the turn is redone: it may make only what the message has left.
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let told = wait_for("the limit's line", Duration::from_secs(30), || async {
        hook.list("c1", 0).await.iter().find_map(|m| {
            m["text"]
                .as_str()
                .filter(|t| t.contains("limits.max_model_calls_per_message"))
                .map(str::to_string)
        })
    })
    .await;
    assert!(told.contains("12 model calls"), "{told}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let made = llm.count();
    assert!(
        (8..=12).contains(&made),
        "the redone turn made some calls and the message stayed within 12 in all: {made}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn delegations_team_tasks_and_plans_run_for_a_tool_are_background_work() {
    let llm = LlmStandIn::start(|body: &Value, _| {
        let last = last_user(body);
        let results = crate::common::llm::tool_results(body).len();
        match last.as_str() {
            "hand it over" if results == 0 => Behaviour::tool(
                "delegate",
                json!({"agent_id": "helper", "task": "helper work", "wait": true}),
            ),
            "helper work" => Behaviour::reply("helped"),
            _ => Behaviour::reply(format!("ok: {}", last.chars().take(30).collect::<String>())),
        }
    })
    .await;
    let work = Workdir::new(&cfg(
        &llm.url,
        &format!(
            "[agents.main]\nmay_delegate = [\"helper\"]\n\n[agents.helper]\nmodel = \"{MODEL}\"\n"
        ),
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let answer = hook.ask("c1", "m1", "hand it over").await;
    assert!(answer.contains("ok:"), "{answer}");
    let by_kind = wait_for("the delegate's usage", Duration::from_secs(15), || async {
        let (_, got) = service
            .get_json("/v1/admin/usage?group_by=kind", ADMIN)
            .await;
        let groups = got["groups"].as_array().cloned().unwrap_or_default();
        groups
            .iter()
            .any(|g| g["key"] == "delegate")
            .then_some(groups)
    })
    .await;
    let kinds: Vec<&str> = by_kind.iter().filter_map(|g| g["key"].as_str()).collect();
    assert!(kinds.contains(&"user_turn"), "{kinds:?}");
    assert!(
        !kinds.contains(&"subagent"),
        "a delegation is not a subagent: {kinds:?}"
    );
}
