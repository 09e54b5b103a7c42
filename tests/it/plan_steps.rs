//! `steps` plans and the `plan_and_execute` tool (SPEC section 12) through the real service
//! and the webhook: each step's model requests carry only the goal, the step and earlier
//! results; a failing step is retried once and then the user decides; a 50-step plan keeps
//! every request under a fixed size; the agent plans by itself, never inside a step.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use serde_json::{Value, json};

const SECRET: &str = "steps-secret";
const WEBHOOK: &str = "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n";

fn system(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A plan of `n` steps named `part 1`…`part n`.
fn plan_json(n: usize) -> String {
    let steps: Vec<Value> = (1..=n)
        .map(|i| json!({"action": format!("part {i}"), "expected_outcome": format!("part {i} done")}))
        .collect();
    json!({"goal": "Build the thing", "steps": steps}).to_string()
}

/// The step a request works on (`Your step (k of n): part k`), if it is a step request.
fn step_of(body: &Value) -> Option<usize> {
    let user = last_user(body);
    let rest = user.split("Your step (").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

fn answer(body: &Value) -> String {
    body["replies"]
        .as_array()
        .and_then(|r| r.iter().rev().find(|m| m["kind"] == "reply"))
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Plans `n` steps; step `failing` always fails; the others answer `result k` padded to
/// `pad` characters (step 1 after one tool call); the final call answers `FINAL` with how
/// many done steps it saw.
fn script(n: usize, pad: usize, failing: Option<usize>) -> impl Fn(&Value, usize) -> Behaviour {
    move |body, _| {
        let sys = system(body);
        if sys.contains("## Planning") {
            return Behaviour::reply(plan_json(n));
        }
        if sys.contains("## Plan finished") {
            let seen = last_user(body).matches("[done]").count();
            return Behaviour::reply(format!("FINAL: {seen} steps done"));
        }
        if let Some(k) = step_of(body) {
            if Some(k) == failing {
                return Behaviour::reply("STEP FAILED: the disk is read-only");
            }
            // One tool call in step 1, to show a step runs its own loop.
            if k == 1 && fresh_results(body).is_empty() {
                return Behaviour::tool("list_files", json!({}));
            }
            let text = format!("result {k} ");
            return Behaviour::reply(format!(
                "{text}{}",
                "x".repeat(pad.saturating_sub(text.len()))
            ));
        }
        Behaviour::reply(format!("chat: {}", last_user(body)))
    }
}

fn step_requests(llm: &LlmStandIn, k: usize) -> Vec<Recorded> {
    llm.requests()
        .into_iter()
        .filter(|r| step_of(&r.body) == Some(k))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_step_runs_with_a_fresh_context_and_the_answer_summarises_all_steps() {
    let llm = LlmStandIn::start(script(3, 0, None)).await;
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    // Earlier conversation that a step must not see.
    hook.send("c", None, "m0", "my secret earlier chat", "?wait=20")
        .await;
    let (status, body) = hook
        .send("c", None, "m1", "/plan --steps build the thing", "?wait=30")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(answer(&body), "FINAL: 3 steps done", "{body}");

    for k in 1..=3 {
        let requests = step_requests(&llm, k);
        assert!(!requests.is_empty(), "step {k} ran");
        for request in &requests {
            let text = request.body["messages"].to_string();
            assert!(!text.contains("my secret earlier chat"), "step {k}: {text}");
            assert!(
                !text.contains("chat: "),
                "no transcript in step {k}: {text}"
            );
            let user = &request.last_user;
            assert!(user.starts_with("Goal: Build the thing"), "{user}");
            assert!(
                user.contains(&format!("Your step ({k} of 3): part {k}")),
                "{user}"
            );
            // Earlier results, and only those.
            for earlier in 1..k {
                assert!(user.contains(&format!("result {earlier}")), "{user}");
            }
            assert!(!user.contains(&format!("result {k}")), "{user}");
            // Not offered inside a step: planning does not recurse.
            let tools = request.body["tools"].to_string();
            assert!(
                !tools.contains("plan_and_execute") && !tools.contains("\"plan\""),
                "{tools}"
            );
            assert!(system(&request.body).contains("## Plan step"));
            assert!(!system(&request.body).contains("## Active Plan"));
        }
    }
    // Step 1's own loop: the tool call and its result stayed inside the step.
    assert_eq!(step_requests(&llm, 1).len(), 2);
    // The card was edited step by step and ends with every step done.
    let cards: Vec<String> = hook
        .list("c", 0)
        .await
        .iter()
        .filter(|m| m["kind"] == "plan")
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        cards.iter().any(|c| c.contains("✅ 3. part 3")),
        "{cards:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_failing_twice_asks_the_user_and_skip_goes_on() {
    let llm = LlmStandIn::start(script(3, 0, Some(2))).await;
    // `agent.plan_mode = "steps"`: a plain `/plan` runs in steps.
    let config = config_with_llm(&llm.url, WEBHOOK).replace(
        "model = \"standin/test-model\"",
        "model = \"standin/test-model\"\nplan_mode = \"steps\"",
    );
    let work = Workdir::new(&config);
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);

    let (_, body) = hook
        .send("f", None, "m1", "/plan build it", "?wait=30")
        .await;
    let asked = answer(&body);
    assert!(
        asked.contains("Step 2 (part 2) failed twice: the disk is read-only")
            && asked.contains("/plan continue")
            && asked.contains("/plan skip")
            && asked.contains("/plan stop"),
        "{body}"
    );
    assert_eq!(
        step_requests(&llm, 2).len(),
        2,
        "tried once more, then asked"
    );
    assert!(step_requests(&llm, 3).is_empty(), "waits for the user");

    // Skip: step 3 runs with step 2 marked skipped; the answer summarises.
    let (_, body) = hook.send("f", None, "m2", "/plan skip", "?wait=30").await;
    assert_eq!(answer(&body), "FINAL: 2 steps done", "{body}");
    let step3 = &step_requests(&llm, 3)[0].last_user;
    assert!(step3.contains("2. part 2 [skipped]"), "{step3}");
    // Nothing waits any more.
    let (_, body) = hook.send("f", None, "m3", "/plan skip", "?wait=30").await;
    assert_eq!(
        body["replies"][0]["text"], "No plan is waiting for a decision.",
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifty_step_plan_keeps_every_model_request_under_a_fixed_size() {
    // Each step answers 1,000 characters: 50 KB of results in all.
    let llm = LlmStandIn::start(script(50, 1_000, None)).await;
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let (status, body) = hook
        .send("big", None, "m1", "/plan --steps build it all", "?wait=120")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(answer(&body), "FINAL: 50 steps done", "{body}");
    let sizes: Vec<usize> = llm
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string().len())
        .collect();
    let largest = *sizes.iter().max().unwrap();
    // The bound: the step's goal and text plus 4,000 characters of earlier results (the
    // final call: 8,000), whatever the number of steps.
    assert!(largest < 12_000, "largest request {largest} bytes");
    assert!(
        step_requests(&llm, 50)[0]
            .last_user
            .contains("earlier steps not shown")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_plans_by_itself_with_the_tool_and_gets_the_step_results() {
    let steps = script(2, 0, None);
    let llm = LlmStandIn::start(move |body, i| {
        let sys = system(body);
        let user = last_user(body);
        if user == "do the big job" && !sys.contains("## Plan") {
            return match fresh_results(body).last() {
                None => Behaviour::tool("plan_and_execute", json!({"task": "the big job"})),
                Some(result) => Behaviour::reply(format!("done: {result}")),
            };
        }
        steps(body, i)
    })
    .await;
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook
        .send("t", None, "m1", "do the big job", "?wait=30")
        .await;
    assert_eq!(answer(&body), "done: FINAL: 2 steps done", "{body}");
    // The agent's own turn was offered the tool; its steps were not.
    let first = llm
        .requests()
        .into_iter()
        .find(|r| r.last_user == "do the big job")
        .unwrap();
    assert!(first.body["tools"].to_string().contains("plan_and_execute"));
    assert!(!step_requests(&llm, 1).is_empty() && !step_requests(&llm, 2).is_empty());
    for k in 1..=2 {
        for r in step_requests(&llm, k) {
            assert!(!r.body["tools"].to_string().contains("plan_and_execute"));
        }
    }
    // The plan card was shown in the chat.
    assert!(
        hook.list("t", 0)
            .await
            .iter()
            .any(|m| m["kind"] == "plan" && m["text"].as_str().unwrap().contains("Build the thing")),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_refused_by_the_message_limits_pauses_the_plan_at_once() {
    let llm = LlmStandIn::start(script(3, 0, None)).await;
    // Planning (1) and step 1's two calls (2, 3) fit; step 2's first call is the fourth.
    let extra = format!("{WEBHOOK}\n[limits]\nmax_model_calls_per_message = 3\n");
    let work = Workdir::new(&config_with_llm(&llm.url, &extra));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let (status, body) = hook
        .send("c", None, "m1", "/plan --steps build the thing", "?wait=30")
        .await;
    assert_eq!(status, 200, "{body}");
    let text = answer(&body);
    assert!(
        text.contains("limits.max_model_calls_per_message") && text.contains("/plan continue"),
        "{text}"
    );
    assert!(
        !text.contains("failed twice"),
        "not retried as a failure: {text}"
    );
    assert_eq!(step_requests(&llm, 2).len(), 0, "step 2 asked no model");
    assert_eq!(llm.count(), 3);
}
