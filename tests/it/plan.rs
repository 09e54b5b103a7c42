//! `/plan` and the Active Plan tracker with a scripted LLM: planning restrictions, the
//! fallback plan, the system prompt of every later call, card edits, restarts, and the
//! terminal and webhook channels.

use crate::common::hook::Hook;
use crate::common::inproc::{InProc, config};
use crate::common::llm::{Behaviour, LlmStandIn, Recorded};
use crate::common::service::{Service, Workdir, chat, config_with_llm, folder_with};
use crate::common::wait_for;
use ferroclaw_channel_core::OutboundKind;
use serde_json::{Value, json};
use std::time::Duration;

const PLAN_JSON: &str = r#"{"goal":"Tidy the repo","steps":[
  {"action":"List the files","expected_outcome":"A list of files"},
  {"action":"Fix the build","expected_outcome":"The build passes"},
  {"action":"Write notes","expected_outcome":"notes.md exists"}]}"#;

fn tool_results(body: &Value) -> usize {
    crate::common::llm::tool_results(body).len()
}

/// What a call's instructions say: its system prompt, then what it shows after the
/// history (the Active Plan rides there, outside the cached prefix).
fn system(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The stable prefix a provider caches: the system prompt (the first message).
fn stable_prefix(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn last_user(body: &Value) -> String {
    crate::common::llm::last_user(body)
}

/// Planning answers PLAN_JSON after one read-only look; execution follows a script.
fn script(body: &Value, _: usize) -> Behaviour {
    let sys = system(body);
    if sys.contains("## Planning") {
        return if tool_results(body) == 0 {
            Behaviour::tool("list_files", json!({}))
        } else {
            Behaviour::reply(format!("```json\n{PLAN_JSON}\n```"))
        };
    }
    if last_user(body) == "skip the rest" {
        return if tool_results(body) == 4 {
            Behaviour::tool(
                "plan",
                json!({"action": "update", "step": 3, "status": "skipped", "actual": "not needed"}),
            )
        } else {
            Behaviour::reply("skipped")
        };
    }
    match tool_results(body) {
        0 => Behaviour::tools(&[
            (
                "plan",
                json!({"action": "update", "step": 1, "status": "in_progress"}),
            ),
            ("list_files", json!({})),
        ]),
        2 => Behaviour::tool(
            "plan",
            json!({"action": "update", "step": 1, "status": "done", "actual": "listed 0 files"}),
        ),
        3 => Behaviour::tool(
            "plan",
            json!({"action": "update", "step": 2, "status": "failed", "actual": "the build broke"}),
        ),
        _ => Behaviour::reply("Step 2 failed; shall I continue?"),
    }
}

fn execution_calls(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .map(|r| system(&r.body))
        .filter(|s| !s.contains("## Planning"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_tracks_steps_in_every_prompt_edits_its_card_and_survives_a_restart() {
    let llm = LlmStandIn::start(script).await;
    let cfg = config(&llm.url, "", "");
    let app = InProc::start(&cfg).await;
    app.say("c", "/plan tidy the repo").await;
    let delivered = wait_for("the turn's reply", Duration::from_secs(20), || async {
        let d = app.delivered();
        d.iter()
            .any(|m| m.text.contains("shall I continue"))
            .then_some(d)
    })
    .await;

    // The planning call was offered read-only tools only.
    let requests = llm.requests();
    for r in requests
        .iter()
        .filter(|r| system(&r.body).contains("## Planning"))
    {
        let names: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(!names.is_empty());
        assert!(
            names
                .iter()
                .all(|n| ["read_file", "list_files", "web_fetch", "memory_search"].contains(n)),
            "planning tools: {names:?}"
        );
    }

    // The card, then one edit per update, in the request's chat.
    let card = delivered
        .iter()
        .find(|m| m.kind == OutboundKind::Plan && m.edit_of.is_none())
        .expect("a plan card");
    assert!(
        card.text.starts_with("📋 Plan: Tidy the repo"),
        "{}",
        card.text
    );
    assert!(
        card.text.contains("→ 1. List the files")
            && card.text.contains("○ 2. Fix the build (pending)")
    );
    let edits: Vec<_> = delivered
        .iter()
        .filter(|m| m.edit_of == Some(card.id))
        .collect();
    assert_eq!(edits.len(), 3, "one edit per step update");
    assert!(edits[1].text.contains("✅ 1. List the files"));
    assert!(
        edits[2]
            .text
            .contains("❌ 2. Fix the build — the build broke")
    );

    // Every execution call carries the Active Plan with the right markers and results,
    // after the history: the system prompt before it is byte-identical from step to step.
    let calls = execution_calls(&llm.requests());
    assert_eq!(calls.len(), 4);
    let prefixes: std::collections::HashSet<String> = llm
        .requests()
        .iter()
        .filter(|r| !system(&r.body).contains("## Planning"))
        .map(|r| stable_prefix(&r.body))
        .collect();
    assert_eq!(prefixes.len(), 1, "the cached prefix changed: {prefixes:?}");
    assert!(!prefixes.iter().next().unwrap().contains("## Active Plan"));
    for r in llm
        .requests()
        .iter()
        .filter(|r| system(&r.body).contains("## Active Plan"))
    {
        let last = r.body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["role"], "system", "the Active Plan comes last: {last}");
    }
    assert!(
        calls
            .iter()
            .all(|s| s.contains("## Active Plan\nGoal: Tidy the repo"))
    );
    assert!(calls[0].contains("→ 1. List the files\n   Expected: A list of files\n"));
    assert!(calls[0].contains("○ 2. Fix the build (pending)"));
    assert!(
        calls[1].contains("→ 1. List the files")
            && calls[1].contains("Actual (provisional, latest tool result): (empty)"),
        "{}",
        calls[1]
    );
    assert!(
        calls[2].contains(
            "✅ 1. List the files\n   Expected: A list of files\n   Actual: listed 0 files"
        )
    );
    assert!(calls[2].contains("→ 2. Fix the build"));
    assert!(
        calls[3].contains(
            "❌ 2. Fix the build\n   Expected: The build passes\n   Actual: the build broke"
        ),
        "{}",
        calls[3]
    );
    assert!(calls[3].contains("→ 3. Write notes"));
    assert!(calls[3].contains("compare the step's Actual result with its Expected outcome"));

    let session = app.session("c").await;
    assert!(
        session.plan.as_deref().unwrap().contains("Tidy the repo"),
        "the plan is stored with the session"
    );

    // A restart keeps the tracker; finishing the last step posts a summary and ends the plan.
    let app = app.restart(&cfg).await;
    app.say("c", "/status").await;
    app.say("c", "skip the rest").await;
    let delivered = wait_for("the summary", Duration::from_secs(20), || async {
        let d = app.delivered();
        d.iter().any(|m| m.text == "skipped").then_some(d)
    })
    .await;
    assert!(
        delivered[0]
            .text
            .contains("Plan: Tidy the repo — 2/3 steps finished"),
        "{}",
        delivered[0].text
    );
    let calls = execution_calls(&llm.requests());
    assert!(
        calls[4].contains("❌ 2. Fix the build") && calls[4].contains("→ 3. Write notes"),
        "after restart: {}",
        calls[4]
    );
    assert!(
        !calls[5].contains("## Active Plan"),
        "a finished plan is no longer active"
    );
    let summary = delivered
        .iter()
        .find(|m| m.text.starts_with("📋 Plan finished"))
        .expect("a summary");
    assert!(
        summary
            .text
            .contains("✅ 1 done · ❌ 1 failed · ⤼ 1 skipped"),
        "{}",
        summary.text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn planning_output_that_does_not_validate_becomes_a_one_step_plan() {
    let llm = LlmStandIn::start(|body, _| {
        if system(body).contains("## Planning") {
            Behaviour::reply("Sure! I'd start by thinking hard.")
        } else {
            Behaviour::reply("done")
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "/plan write a haiku about rust").await;
    let d = app.wait_delivered(2).await;
    assert_eq!(d[0].kind, OutboundKind::Plan);
    assert_eq!(
        d[0].text,
        "📋 Plan: write a haiku about rust\n→ 1. write a haiku about rust"
    );
    assert_eq!(d[1].text, "done");
    let calls = execution_calls(&llm.requests());
    assert!(calls[0].contains(
        "→ 1. write a haiku about rust\n   Expected: The task is done as the user asked."
    ));
    app.say("c", "/plan").await;
    let d = app.wait_delivered(3).await;
    assert!(d[2].text.contains("Usage: /plan"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_can_create_a_plan_with_the_plan_tool_and_new_ends_it() {
    let llm = LlmStandIn::start(|body, _| match tool_results(body) {
        0 if last_user(body) == "organise my week" => {
            Behaviour::tool("plan", json!({"action": "create", "goal": "Week", "steps": [{"action": "Mon", "expected_outcome": "m"}]}))
        }
        _ => Behaviour::reply("ok"),
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "organise my week").await;
    app.wait_delivered(2).await;
    assert!(system(&llm.requests()[1].body).contains("## Active Plan\nGoal: Week"));
    app.say("c", "/new").await;
    app.say("c", "hello").await;
    app.wait_delivered(4).await;
    assert!(
        !system(&llm.requests()[2].body).contains("## Active Plan"),
        "/new ends the plan"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_through_the_terminal_prints_the_card_and_its_changes() {
    let llm = LlmStandIn::start(script).await;
    let dir = folder_with(&config_with_llm(&llm.url, ""));
    let out = chat(
        dir.path(),
        "/plan tidy the repo
",
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("📋 Plan: Tidy the repo\n→ 1. List the files\n○ 2. Fix the build (pending)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("✅ 1. List the files\n"),
        "changed lines are reprinted: {}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("❌ 2. Fix the build — the build broke\n")
    );
    assert!(
        out.stdout.contains("Step 2 failed; shall I continue?"),
        "the final answer: {}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_through_the_webhook_posts_a_plan_card_and_edits_it() {
    let llm = LlmStandIn::start(script).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let service = Service::start(&work, &[("FC_HOOK", "plan-secret")]).await;
    let hook = Hook::new(&service, "plan-secret");
    let (status, body) = hook
        .send("p", Some("t1"), "m1", "/plan tidy the repo", "?wait=30")
        .await;
    assert_eq!(status, 200, "{body}");
    let messages = hook.list("p", 0).await;
    let card = messages
        .iter()
        .find(|m| m["kind"] == "plan" && m["edit_of"].is_null())
        .expect("a plan card");
    assert_eq!(card["thread_id"], "t1", "in the request's thread");
    let edits: Vec<_> = messages
        .iter()
        .filter(|m| m["edit_of"] == card["id"])
        .collect();
    assert_eq!(edits.len(), 3);
    assert!(
        edits
            .iter()
            .all(|e| e["kind"] == "plan" && e["thread_id"] == "t1")
    );
    let replies: Vec<&str> = body["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert!(replies.contains(&"Step 2 failed; shall I continue?"));
}
