//! Subagents with a scripted LLM: announcements in the origin thread in finishing order,
//! exactly once (also across kill -9), the parent reacting, limits, kill, steer, timeout and
//! the spawn hook.

use crate::common::hook::Hook;
use crate::common::inproc::{InProc, config};
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, last_user, tool_results};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::telegram::{TOKEN, TelegramStandIn, group};
use crate::common::wait_for;
use ferroclaw_channel_core::{OutboundKind, OutboundMessage};
use serde_json::{Value, json};
use std::time::Duration;

fn spawn(task: &str, label: &str) -> (&'static str, Value) {
    ("sessions_spawn", json!({"task": task, "label": label}))
}

/// Children answer `slow N` after N ms, hang on `hang`, and answer steer instructions.
fn child(task: &str) -> Behaviour {
    if task.starts_with("[New instruction") {
        return Behaviour::reply(format!(
            "steered: {}",
            task.rsplit("] ").next().unwrap_or_default()
        ));
    }
    if task == "count to three" {
        return Behaviour::reply("1 2 3");
    }
    if task == "report progress" {
        return Behaviour::tool("message", json!({"text": "halfway there"}));
    }
    if let Some(ms) = task.strip_prefix("slow ") {
        return Behaviour::slow(
            format!("result of {task}"),
            Duration::from_millis(ms.parse().unwrap()),
        );
    }
    Behaviour::Hang
}

fn is_child(body: &Value) -> bool {
    let user = last_user(body);
    user.starts_with("slow ")
        || user == "hang"
        || user.starts_with("[New instruction")
        || user == "count to three"
        || user == "report progress"
}

/// A parent that spawns `children` for "go", then summarises each report.
fn parent(body: &Value, children: &[(&'static str, Value)]) -> Behaviour {
    let user = last_user(body);
    if user.starts_with("[Subagent") {
        let label = user.split('"').nth(1).unwrap_or_default().to_string();
        return Behaviour::reply(format!("summary of {label}"));
    }
    if tool_results(body).is_empty() {
        Behaviour::tools(children)
    } else {
        Behaviour::reply("spawned")
    }
}

/// A stand-in where children follow [`child`] and the parent spawns `children` for "go".
async fn standin(children: Vec<(&'static str, Value)>) -> LlmStandIn {
    LlmStandIn::start(move |body, _| {
        if is_child(body) {
            child(&last_user(body))
        } else {
            parent(body, &children)
        }
    })
    .await
}

fn announcements(messages: &[OutboundMessage]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.kind == OutboundKind::Announce)
        .map(|m| m.text.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_children_are_announced_in_the_webhook_thread_in_finishing_order_once_each() {
    let llm = standin(vec![
        spawn("slow 900", "alpha"),
        spawn("slow 100", "beta"),
        spawn("slow 500", "gamma"),
    ])
    .await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let service = Service::start(&work, &[("FC_HOOK", "sub-secret")]).await;
    let hook = Hook::new(&service, "sub-secret");
    let (status, body) = hook.send("s", Some("t1"), "m1", "go", "?wait=30").await;
    assert_eq!(status, 200, "{body}");
    // The turn answers while the children still run (their status edits, which also
    // answer m1, may be listed before or after the reply).
    let replies = body["replies"].as_array().unwrap();
    assert!(
        replies.iter().any(|r| r["text"] == "spawned"),
        "the spawn returns at once: {body}"
    );
    assert!(
        !replies.iter().any(|r| r["kind"] == "announce"),
        "before any child is announced: {body}"
    );

    let messages = wait_for(
        "three announcements and three summaries",
        Duration::from_secs(30),
        || async {
            let m = hook.list("s", 0).await;
            let summaries = m
                .iter()
                .filter(|x| x["text"].as_str().unwrap().starts_with("summary of"))
                .count();
            (summaries == 3).then_some(m)
        },
    )
    .await;
    let announced: Vec<&str> = messages
        .iter()
        .filter(|m| m["kind"] == "announce")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        announced.len(),
        3,
        "each child announced once: {announced:?}"
    );
    assert!(announced[0].starts_with("🤖 beta — done\nresult of slow 100"));
    assert!(announced[1].starts_with("🤖 gamma — done"));
    assert!(announced[2].starts_with("🤖 alpha — done"));
    for m in messages
        .iter()
        .filter(|m| m["kind"] == "announce" || m["kind"] == "status")
    {
        assert_eq!(
            m["thread_id"], "t1",
            "announcements go to the origin thread"
        );
    }
    let statuses: Vec<&Value> = messages
        .iter()
        .filter(|m| m["kind"] == "status" && m["edit_of"].is_null())
        .collect();
    assert_eq!(statuses.len(), 3, "one status message per child");
    assert!(messages.iter().any(|m| m["kind"] == "status"
        && !m["edit_of"].is_null()
        && m["text"].as_str().unwrap().ends_with(": done")));

    // The parent's next calls carry the results; its summaries reach the chat in order.
    let reports: Vec<Recorded> = llm
        .requests()
        .into_iter()
        .filter(|r| last_user(&r.body).starts_with("[Subagent"))
        .collect();
    assert_eq!(reports.len(), 3);
    assert!(last_user(&reports[0].body).contains("result of slow 100"));
    let summaries: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["text"].as_str())
        .filter(|t| t.starts_with("summary of"))
        .collect();
    assert_eq!(
        summaries,
        ["summary of beta", "summary of gamma", "summary of alpha"]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hook.list("s", 0)
            .await
            .iter()
            .filter(|m| m["kind"] == "announce")
            .count(),
        3,
        "and never again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn announcements_land_in_the_telegram_topic_the_request_came_from() {
    let llm = standin(vec![spawn("slow 300", "one"), spawn("slow 50", "two")]).await;
    let tg = TelegramStandIn::start().await;
    let cfg = config_with_llm(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG\"\napi_url = \"{}\"\naccess = \"open\"\nstream_edit_interval_ms = 50\n",
            tg.url
        ),
    );
    let work = Workdir::new(&cfg);
    let _service = Service::start(&work, &[("FC_TG", TOKEN)]).await;
    tg.push_message(group(-500, 7, 1, "go", true, Some(42)));
    let texts = wait_for("two announcements", Duration::from_secs(30), || async {
        let t = tg.texts(-500);
        (t.iter().filter(|x| x.starts_with("summary of")).count() == 2).then_some(t)
    })
    .await;
    let announced: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("🤖") && t.contains(" — "))
        .collect();
    assert_eq!(announced.len(), 2, "{texts:?}");
    assert!(
        announced[0].starts_with("🤖 two — done") && announced[1].starts_with("🤖 one — done"),
        "{announced:?}"
    );
    let sends = tg.calls("sendMessage");
    assert!(
        sends.iter().all(|c| c.params["message_thread_id"] == 42),
        "every message in topic 42"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn depth_children_and_concurrency_limits_hold() {
    let llm = standin(vec![
        spawn("slow 300", "first"),
        spawn("slow 10", "second"),
        spawn("slow 10", "third"),
    ])
    .await;
    let cfg = config(
        &llm.url,
        "",
        "[subagents]\nmax_depth = 1\nmax_children = 2\nmax_concurrent = 1",
    );
    let app = InProc::start(&cfg).await;
    app.say("c", "go").await;
    wait_for("two announcements", Duration::from_secs(20), || async {
        (announcements(&app.delivered()).len() == 2).then_some(())
    })
    .await;

    let requests = llm.requests();
    let spawn_results = tool_results(
        &requests
            .iter()
            .find(|r| last_user(&r.body) == "go" && !tool_results(&r.body).is_empty())
            .unwrap()
            .body,
    );
    assert!(spawn_results[0].contains("\"status\":\"accepted\""));
    assert!(spawn_results[1].contains("\"status\":\"accepted\""));
    assert!(
        spawn_results[2].contains("max_children"),
        "the third is refused: {}",
        spawn_results[2]
    );

    let first = requests
        .iter()
        .find(|r| last_user(&r.body) == "slow 300")
        .unwrap();
    let second = requests
        .iter()
        .find(|r| last_user(&r.body) == "slow 10")
        .unwrap();
    // Two calls spawned together may take the one slot in either order; they never overlap.
    let (earlier, later) = if first.started <= second.started {
        (first, second)
    } else {
        (second, first)
    };
    assert!(
        later.started >= earlier.finished.unwrap(),
        "max_concurrent = 1: the queued child starts after the running one ends"
    );
    let child_tools: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        !child_tools.contains(&"sessions_spawn") && !child_tools.contains(&"plan"),
        "a child at max_depth cannot spawn: {child_tools:?}"
    );
    assert!(child_tools.contains(&"read_file"));
    // Either may have taken the slot first (see above), so either may end first.
    let mut announced = announcements(&app.delivered());
    announced.sort();
    assert!(
        announced.len() == 2
            && announced[0].starts_with("🤖 first — done")
            && announced[1].starts_with("🤖 second — done"),
        "{announced:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_steer_and_stop_work_on_running_children() {
    let llm = standin(vec![
        spawn("hang", "a"),
        spawn("hang", "b"),
        spawn("hang", "c"),
    ])
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "go").await;
    wait_for(
        "three children running",
        Duration::from_secs(10),
        || async {
            (llm.requests()
                .iter()
                .filter(|r| last_user(&r.body) == "hang")
                .count()
                == 3)
                .then_some(())
        },
    )
    .await;
    app.say("c", "/subagents kill a").await;
    wait_for("a killed", Duration::from_secs(10), || async {
        announcements(&app.delivered())
            .iter()
            .any(|t| t.starts_with("🤖 a — killed"))
            .then_some(())
    })
    .await;
    app.say("c", "/subagents steer b summarise the news instead")
        .await;
    wait_for("b steered", Duration::from_secs(10), || async {
        announcements(&app.delivered())
            .iter()
            .any(|t| t == "🤖 b — done\nsteered: summarise the news instead")
            .then_some(())
    })
    .await;
    app.say("c", "/subagents").await;
    wait_for("the listing", Duration::from_secs(10), || async {
        app.delivered()
            .iter()
            .any(|m| m.text.starts_with("Subagents:"))
            .then_some(())
    })
    .await;
    app.say("c", "/stop").await;
    let delivered = wait_for("c killed by /stop", Duration::from_secs(10), || async {
        let d = app.delivered();
        announcements(&d)
            .iter()
            .any(|t| t.starts_with("🤖 c — killed"))
            .then_some(d)
    })
    .await;
    assert!(
        delivered
            .iter()
            .any(|m| m.kind == OutboundKind::Status && m.text.contains("1 subagent(s)")),
        "/stop reports the kill"
    );
    let listing = delivered
        .iter()
        .find(|m| m.text.starts_with("Subagents:"))
        .expect("the /subagents list");
    assert!(
        listing.text.contains(" a — killed")
            && listing.text.contains(" b — done")
            && listing.text.contains(" c — running"),
        "{}",
        listing.text
    );
    assert_eq!(announcements(&delivered).len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_that_runs_too_long_is_announced_as_timed_out() {
    let llm = standin(vec![(
        "sessions_spawn",
        json!({"task": "hang", "label": "slowpoke", "timeout_secs": 1}),
    )])
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "go").await;
    let announced = wait_for("the timeout", Duration::from_secs(10), || async {
        let a = announcements(&app.delivered());
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(
        announced,
        ["🤖 slowpoke — timed out\nTimed out after 1 s without finishing."]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_hook_blocks_the_spawn_with_a_clear_tool_error() {
    let llm = standin(vec![spawn("slow 1", "nope")]).await;
    let app = InProc::start(&config(
        &llm.url,
        "",
        "[subagents]\nhook = \"cat > /dev/null; echo 'no spawning today' >&2; exit 1\"",
    ))
    .await;
    app.say("c", "go").await;
    app.wait_delivered(1).await;
    let requests = llm.requests();
    let result = &tool_results(&requests[1].body)[0];
    assert!(
        result.starts_with("Error:") && result.contains("no spawning today"),
        "{result}"
    );
    assert!(!requests.iter().any(|r| is_child(&r.body)), "no child ran");
}

/// A parent that spawns children `work x` and `work y`; each child first says it started
/// (the `message` tool, a side effect), then hangs until `done` is set and then answers.
async fn resumable_standin(done: std::sync::Arc<std::sync::atomic::AtomicBool>) -> LlmStandIn {
    LlmStandIn::start(move |body, _| {
        let user = last_user(body);
        if let Some(name) = user.strip_prefix("work ") {
            if tool_results(body).is_empty() {
                return Behaviour::tool("message", json!({"text": format!("started {name}")}));
            }
            if done.load(std::sync::atomic::Ordering::SeqCst) {
                return Behaviour::reply(format!("result of {name}"));
            }
            return Behaviour::Hang;
        }
        parent(body, &[spawn("work x", "x"), spawn("work y", "y")])
    })
    .await
}

fn texts_of(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_kill_9_a_restart_resumes_every_running_child_without_repeating_its_effects() {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let llm = resumable_standin(done.clone()).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let env = [("FC_HOOK", "k9-secret")];
    let service = Service::start(&work, &env).await;
    Hook::new(&service, "k9-secret")
        .send("k", None, "m1", "go", "?wait=30")
        .await;
    wait_for(
        "both children hanging after their first effect",
        Duration::from_secs(10),
        || async {
            (llm.requests()
                .iter()
                .filter(|r| {
                    last_user(&r.body).starts_with("work ") && !tool_results(&r.body).is_empty()
                })
                .count()
                == 2)
                .then_some(())
        },
    )
    .await;
    let hook = Hook::new(&service, "k9-secret");
    wait_for(
        "both effects delivered",
        Duration::from_secs(10),
        || async {
            let texts = texts_of(&hook.list("k", 0).await);
            (texts.iter().filter(|t| t.starts_with("started ")).count() == 2).then_some(())
        },
    )
    .await;
    service.kill();
    done.store(true, std::sync::atomic::Ordering::SeqCst);

    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, "k9-secret");
    let messages = wait_for(
        "both children resumed, announced and summarised",
        Duration::from_secs(20),
        || async {
            let m = hook.list("k", 0).await;
            (texts_of(&m)
                .iter()
                .filter(|t| t.starts_with("summary of"))
                .count()
                == 2)
                .then_some(m)
        },
    )
    .await;
    let mut announced: Vec<&str> = messages
        .iter()
        .filter(|m| m["kind"] == "announce")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    announced.sort();
    assert_eq!(
        announced,
        ["🤖 x — done\nresult of x", "🤖 y — done\nresult of y"],
        "resumed and finished, not interrupted"
    );
    let texts = texts_of(&messages);
    for name in ["x", "y"] {
        assert_eq!(
            texts
                .iter()
                .filter(|t| **t == format!("started {name}"))
                .count(),
            1,
            "the resumed step replays its recorded effect instead of sending it again: {texts:?}"
        );
    }
    assert!(service.logs().contains("subagent resumed"));
    drop(service);
    assert_eq!(
        announcements_after_a_restart(&work, &env).await,
        2,
        "a second restart announces nothing more"
    );
}

/// Start the service in `work` again and count the announcements in conversation `k` once
/// it had time to take over what it would.
async fn announcements_after_a_restart(work: &Workdir, env: &[(&str, &str)]) -> usize {
    let service = Service::start(work, env).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = Hook::new(&service, "k9-secret").list("k", 0).await;
    again.iter().filter(|m| m["kind"] == "announce").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_that_never_ends_is_given_up_after_three_starts_and_announced_once() {
    let llm = standin(vec![spawn("hang", "h")]).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let env = [("FC_HOOK", "k9-secret")];
    let hanging = || {
        llm.requests()
            .iter()
            .filter(|r| last_user(&r.body) == "hang")
            .count()
    };
    let mut service = Service::start(&work, &env).await;
    Hook::new(&service, "k9-secret")
        .send("k", None, "m1", "go", "?wait=30")
        .await;
    // Started once by the spawn, then resumed by the next two starts: each time it runs
    // until the process is killed.
    for starts in 1..=3 {
        wait_for("the child running", Duration::from_secs(10), || async {
            (hanging() == starts).then_some(())
        })
        .await;
        let announced = Hook::new(&service, "k9-secret")
            .list("k", 0)
            .await
            .iter()
            .filter(|m| m["kind"] == "announce")
            .count();
        assert_eq!(announced, 0, "start {starts}: not announced while it runs");
        service.kill();
        service = Service::start(&work, &env).await;
    }
    let hook = Hook::new(&service, "k9-secret");
    let announced = wait_for("the run given up", Duration::from_secs(20), || async {
        let m = hook.list("k", 0).await;
        let a: Vec<String> = m
            .iter()
            .filter(|m| m["kind"] == "announce")
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(
        announced[0].starts_with("🤖 h — interrupted") && announced[0].contains("3 times"),
        "{announced:?}"
    );
    assert_eq!(hanging(), 3, "not started a fourth time");
    drop(service);
    assert_eq!(
        announcements_after_a_restart(&work, &env).await,
        1,
        "announced once"
    );
    assert_eq!(hanging(), 3);
}
#[tokio::test(flavor = "multi_thread")]
async fn wait_blocks_for_a_child_and_session_mode_children_stay_for_steering() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if is_child(body) {
            return child(&user);
        }
        if user == "go" {
            return match tool_results(body).len() {
                0 => Behaviour::tools(&[
                    ("sessions_spawn", json!({"task": "slow 200", "label": "w"})),
                    (
                        "sessions_spawn",
                        json!({"task": "slow 10", "label": "keeper", "mode": "session"}),
                    ),
                ]),
                2 => Behaviour::tool(
                    "subagents",
                    json!({"action": "wait", "target": "w", "timeout_secs": 10}),
                ),
                _ => Behaviour::reply("waited"),
            };
        }
        Behaviour::reply("noted")
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "go").await;
    app.wait_text("waited", Duration::from_secs(20)).await;
    let waited = llm
        .requests()
        .into_iter()
        .find(|r| last_user(&r.body) == "go" && tool_results(&r.body).len() == 3)
        .unwrap();
    let result = &tool_results(&waited.body)[2];
    assert!(
        result.contains("\"status\":\"done\"") && result.contains("result of slow 200"),
        "{result}"
    );

    // The session-mode child finished its task but stays alive for instructions.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !announcements(&app.delivered())
            .iter()
            .any(|a| a.starts_with("🤖 keeper")),
        "a session child is not announced yet"
    );
    app.say("c", "/subagents steer keeper count to three").await;
    wait_for("the steered task", Duration::from_secs(10), || async {
        llm.requests()
            .iter()
            .any(|r| last_user(&r.body) == "count to three")
            .then_some(())
    })
    .await;
    app.say("c", "/subagents kill keeper").await;
    let announced = wait_for("keeper's announcement", Duration::from_secs(10), || async {
        let a = announcements(&app.delivered());
        a.iter().any(|x| x.starts_with("🤖 keeper")).then_some(a)
    })
    .await;
    assert!(
        announced
            .iter()
            .any(|a| a.starts_with("🤖 keeper — killed")),
        "{announced:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_waits_for_running_subagents_at_end_of_input() {
    let llm = standin(vec![spawn("slow 300", "helper")]).await;
    let dir = crate::common::service::folder_with(&config_with_llm(&llm.url, ""));
    let out = crate::common::service::chat(dir.path(), "go\n", &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("🤖 helper — done\nresult of slow 300"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("summary of helper"),
        "the parent's reaction is printed too: {}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_childs_interim_message_reaches_the_origin_chat() {
    let llm = LlmStandIn::start(|body, _| {
        if last_user(body) == "report progress" && !tool_results(body).is_empty() {
            return Behaviour::reply("finished");
        }
        if is_child(body) {
            child(&last_user(body))
        } else {
            parent(body, &[spawn("report progress", "reporter")])
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "go").await;
    let delivered = wait_for(
        "the child's message and announcement",
        Duration::from_secs(10),
        || async {
            let d = app.delivered();
            (!announcements(&d).is_empty()).then_some(d)
        },
    )
    .await;
    let interim = delivered
        .iter()
        .find(|m| m.text == "halfway there")
        .expect("the interim message");
    assert_eq!(
        interim.route,
        InProc::route("c"),
        "in the chat the parent was asked in"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grandchild_reports_to_the_subagent_that_spawned_it_which_waits_for_it() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        let fresh = crate::common::llm::fresh_results(body);
        match user.as_str() {
            "go" if fresh.is_empty() => Behaviour::tool(
                "sessions_spawn",
                json!({"task": "delegate further", "label": "middle"}),
            ),
            "delegate further" if fresh.is_empty() => Behaviour::tool(
                "sessions_spawn",
                json!({"task": "slow 200", "label": "leaf"}),
            ),
            "delegate further" => Behaviour::reply("middle: waiting for leaf"),
            "slow 200" => Behaviour::reply("leaf result 42"),
            u if u.starts_with("[Subagent \"leaf\"") => {
                Behaviour::reply("middle summary: leaf said 42")
            }
            u if u.starts_with("[Subagent \"middle\"") => Behaviour::reply("parent: all done"),
            _ => Behaviour::reply("spawned"),
        }
    })
    .await;
    let cfg = config(&llm.url, "", "[subagents]\nmax_depth = 2");
    let app = InProc::start(&cfg).await;
    app.say("c", "go").await;
    app.wait_text("parent: all done", Duration::from_secs(20))
        .await;
    let announced = announcements(&app.delivered());
    let middle = announced
        .iter()
        .find(|a| a.starts_with("🤖 middle — done"))
        .unwrap_or_else(|| panic!("{announced:?}"));
    assert!(
        middle.contains("middle summary: leaf said 42"),
        "the middle subagent waited for its child and used its report: {middle}"
    );
    // The report was a step of the middle subagent (its conversation holds its task).
    let report_step = llm
        .requests()
        .into_iter()
        .find(|r| last_user(&r.body).starts_with("[Subagent \"leaf\""))
        .expect("the leaf's outcome reached the middle subagent");
    assert!(report_step.body.to_string().contains("delegate further"));
    assert!(
        announced.iter().any(|a| a.starts_with("🤖 leaf — done")),
        "and was announced"
    );
}
