//! A running subagent's inbox (steer instructions, its own children's outcomes) is kept in
//! the store until one of its steps takes it: a kill -9 between the message and the step
//! neither loses it nor hands it over twice.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const SECRET: &str = "inbox-secret";

fn texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn announced(messages: &[Value]) -> Vec<String> {
    let mut a: Vec<String> = messages
        .iter()
        .filter(|m| m["kind"] == "announce")
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect();
    a.sort();
    a
}

async fn start(llm: &LlmStandIn, subagents: &str) -> (Workdir, [(&'static str, &'static str); 1]) {
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!("[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n[subagents]\n{subagents}\n"),
    ));
    (work, [("FC_HOOK", SECRET)])
}

/// Send "go" in conversation `k`.
async fn go(service: &Service) -> Hook {
    let hook = Hook::new(service, SECRET);
    hook.send("k", None, "m1", "go", "").await;
    hook
}

/// Kill `service` with SIGKILL, let the stand-in's hanging step finish from now on, and
/// start the service again on the same database.
async fn kill_9_and_restart(
    service: Service,
    work: &Workdir,
    env: &[(&str, &str)],
    released: &AtomicBool,
) -> Service {
    service.kill();
    released.store(true, Ordering::SeqCst);
    Service::start(work, env).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grandchilds_outcome_that_arrived_mid_step_survives_kill_9_and_is_taken_once() {
    // `middle` spawns `leaf` and its step then hangs (until `released`); `leaf` ends at once,
    // so its outcome waits for `middle`'s step to end when the process is killed.
    let released = Arc::new(AtomicBool::new(false));
    let llm = {
        let released = released.clone();
        LlmStandIn::start(move |body, _| {
            let user = last_user(body);
            let fresh = fresh_results(body);
            match user.as_str() {
                "go" if fresh.is_empty() => Behaviour::tool(
                    "sessions_spawn",
                    json!({"task": "delegate further", "label": "middle"}),
                ),
                "delegate further" if fresh.is_empty() => Behaviour::tool(
                    "sessions_spawn",
                    json!({"task": "leaf work", "label": "leaf"}),
                ),
                "delegate further" if !released.load(Ordering::SeqCst) => Behaviour::Hang,
                "delegate further" => Behaviour::reply("middle: waiting for leaf"),
                "leaf work" => Behaviour::reply("leaf result 42"),
                u if u.starts_with("[Subagent \"leaf\"") => {
                    Behaviour::reply("middle summary: leaf said 42")
                }
                u if u.starts_with("[Subagent \"middle\"") => Behaviour::reply("parent: all done"),
                _ => Behaviour::reply("spawned"),
            }
        })
        .await
    };
    let (work, env) = start(&llm, "max_depth = 2").await;
    let service = Service::start(&work, &env).await;
    let hook = go(&service).await;
    wait_for(
        "the leaf announced while middle's step hangs",
        Duration::from_secs(20),
        || async {
            announced(&hook.list("k", 0).await)
                .iter()
                .any(|a| a.starts_with("🤖 leaf — done"))
                .then_some(())
        },
    )
    .await;
    let service = kill_9_and_restart(service, &work, &env, &released).await;
    let hook = Hook::new(&service, SECRET);
    let messages = wait_for("the parent's summary", Duration::from_secs(30), || async {
        let m = hook.list("k", 0).await;
        texts(&m)
            .iter()
            .any(|t| t == "parent: all done")
            .then_some(m)
    })
    .await;
    let announced = announced(&messages);
    assert_eq!(
        announced.len(),
        2,
        "leaf and middle, once each: {announced:?}"
    );
    assert!(
        announced[1].starts_with("🤖 middle — done")
            && announced[1].contains("middle summary: leaf said 42"),
        "the resumed middle took its child's outcome from its inbox: {announced:?}"
    );
    let report_steps = llm
        .requests()
        .iter()
        .filter(|r| last_user(&r.body).starts_with("[Subagent \"leaf\""))
        .count();
    assert_eq!(report_steps, 1, "the outcome became one step of middle");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steer_for_a_queued_child_survives_kill_9_and_is_taken_once() {
    // One slot: `a` holds it (hanging until `released`), `b` waits for it; `b` is steered,
    // then the process is killed before `b` ever ran.
    let released = Arc::new(AtomicBool::new(false));
    let llm = {
        let released = released.clone();
        LlmStandIn::start(move |body, _| {
            let user = last_user(body);
            let fresh = fresh_results(body);
            match user.as_str() {
                "go" if fresh.is_empty() => Behaviour::tools(&[
                    (
                        "sessions_spawn",
                        json!({"task": "hold the slot", "label": "a"}),
                    ),
                    (
                        "sessions_spawn",
                        json!({"task": "first task", "label": "b"}),
                    ),
                ]),
                "hold the slot" if !released.load(Ordering::SeqCst) => Behaviour::Hang,
                "hold the slot" => Behaviour::reply("a is done"),
                "first task" => Behaviour::reply("b did its first task"),
                u if u.starts_with("[New instruction from the parent agent] ") => {
                    Behaviour::reply(format!("b now: {}", u.rsplit("] ").next().unwrap()))
                }
                u if u.starts_with("[Subagent") => Behaviour::reply("noted"),
                _ => Behaviour::reply("spawned"),
            }
        })
        .await
    };
    let (work, env) = start(&llm, "max_concurrent = 1").await;
    let service = Service::start(&work, &env).await;
    let hook = go(&service).await;
    wait_for(
        "a running and b queued",
        Duration::from_secs(20),
        || async {
            texts(&hook.list("k", 0).await)
                .iter()
                .any(|t| t == "🤖 b: queued")
                .then_some(())
        },
    )
    .await;
    wait_for("a running", Duration::from_secs(10), || async {
        llm.requests()
            .iter()
            .any(|r| last_user(&r.body) == "hold the slot")
            .then_some(())
    })
    .await;
    hook.send("k", None, "m2", "/subagents steer b count the stars", "")
        .await;
    // 30 s: under the full suite's load on two cores the answer once took longer than 10.
    wait_for(
        "the steer acknowledged",
        Duration::from_secs(30),
        || async {
            texts(&hook.list("k", 0).await)
                .iter()
                .any(|t| t == "Steered b.")
                .then_some(())
        },
    )
    .await;
    let service = kill_9_and_restart(service, &work, &env, &released).await;
    let hook = Hook::new(&service, SECRET);
    let messages = wait_for(
        "both children announced",
        Duration::from_secs(30),
        || async {
            let m = hook.list("k", 0).await;
            (announced(&m).len() == 2).then_some(m)
        },
    )
    .await;
    assert_eq!(
        announced(&messages),
        [
            "🤖 a — done\na is done",
            "🤖 b — done\nb now: count the stars"
        ],
        "b ran its task, then the instruction given before the kill"
    );
    let steered_steps = llm
        .requests()
        .iter()
        .filter(|r| last_user(&r.body).starts_with("[New instruction"))
        .count();
    assert_eq!(steered_steps, 1, "the instruction became one step of b");
}
