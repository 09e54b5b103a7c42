//! Scheduled jobs through the real service, the webhook and the LLM stand-in, with short
//! intervals: a reminder fires once into the origin thread, cancel works, a cron job fires on
//! schedule, a restart before the due time still fires once, two processes on PostgreSQL
//! fire once, a heartbeat with nothing to say posts nothing, a job that schedules itself
//! forever stops at the cap, and a missed run follows its policy.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

const SECRET: &str = "sched-secret";
const WEBHOOK: &str = "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n";

/// The user's message `schedule <json args>` creates a job with those arguments and the
/// answer is the tool's result; a job's turn answers `JOB: <prompt>` (or what `job` says).
fn script(
    job: impl Fn(&str) -> Behaviour + Send + Sync + 'static,
) -> impl Fn(&Value, usize) -> Behaviour {
    move |body, _| {
        let user = last_user(body);
        if user.starts_with("[Scheduled job") {
            let prompt = user.rsplit("] ").next().unwrap_or_default();
            let prompt = prompt.lines().next().unwrap_or_default();
            return match fresh_results(body).last() {
                Some(result) => Behaviour::reply(format!("after scheduling: {result}")),
                None => job(prompt),
            };
        }
        if let Some(args) = user.strip_prefix("schedule ") {
            return match fresh_results(body).last() {
                None => {
                    let mut args: Value = serde_json::from_str(args).unwrap();
                    args["action"] = json!("create");
                    Behaviour::tool("schedule", args)
                }
                Some(result) => Behaviour::reply(format!("scheduled: {result}")),
            };
        }
        Behaviour::reply("ok")
    }
}

fn reply_job(prompt: &str) -> Behaviour {
    Behaviour::reply(format!("JOB: {prompt}"))
}

/// The stored job a `scheduled: {...}` answer carries.
fn created(body: &Value) -> Value {
    let text = body["replies"]
        .as_array()
        .and_then(|r| r.iter().find(|m| m["kind"] == "reply"))
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default();
    let json = text
        .strip_prefix("scheduled: ")
        .unwrap_or_else(|| panic!("not scheduled: {body}"));
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not a job: {json}"))
}

/// Messages of a conversation whose text starts with `prefix`.
async fn posted(hook: &Hook, conversation: &str, prefix: &str) -> Vec<Value> {
    hook.list(conversation, 0)
        .await
        .into_iter()
        .filter(|m| m["text"].as_str().unwrap_or_default().starts_with(prefix))
        .collect()
}

fn job_turns(llm: &LlmStandIn, prompt: &str) -> usize {
    llm.requests()
        .iter()
        .filter(|r| r.last_user.starts_with("[Scheduled job") && r.last_user.contains(prompt))
        .map(|r| r.last_user.clone())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// The service with jobs allowed to run every second (the default minimum is a minute).
async fn start(llm: &LlmStandIn, extra: &str) -> (Workdir, Service) {
    let fast = "[schedules]\nmin_interval_secs = 1\n";
    let extra = if extra.contains("[schedules]\n") {
        extra.replace("[schedules]\n", fast)
    } else {
        format!("{extra}{fast}")
    };
    let work = Workdir::new(&config_with_llm(&llm.url, &format!("{WEBHOOK}{extra}")));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    (work, service)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_fires_once_into_the_origin_thread_and_a_cancelled_one_never_does() {
    let llm = LlmStandIn::start(script(reply_job)).await;
    let (_work, service) = start(&llm, "").await;
    let hook = Hook::new(&service, SECRET);

    let (_, body) = hook
        .send(
            "r",
            Some("t1"),
            "m1",
            r#"schedule {"prompt": "stretch", "in": "2 seconds"}"#,
            "?wait=20",
        )
        .await;
    let job = created(&body);
    assert_eq!(job["kind"], "once");
    assert_eq!(job["state"], "active");
    assert!(job["next_run"].as_str().unwrap().ends_with("UTC"), "{job}");
    let (_, body) = hook
        .send(
            "r",
            Some("t1"),
            "m2",
            r#"schedule {"prompt": "never", "in": "3 seconds"}"#,
            "?wait=20",
        )
        .await;
    let cancelled = created(&body)["id"].as_str().unwrap().to_string();
    let (_, body) = hook
        .send("r", Some("t1"), "m3", "/schedules", "?wait=20")
        .await;
    let listed = body["replies"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        listed.contains(&cancelled) && listed.contains("stretch"),
        "{listed}"
    );
    let (_, body) = hook
        .send(
            "r",
            Some("t1"),
            "m4",
            &format!("/schedules cancel {cancelled}"),
            "?wait=20",
        )
        .await;
    assert_eq!(
        body["replies"][0]["text"],
        format!("Cancelled job {cancelled}.")
    );

    let fired = wait_for("the reminder", Duration::from_secs(15), || async {
        let m = posted(&hook, "r", "JOB: stretch").await;
        (!m.is_empty()).then_some(m)
    })
    .await;
    assert_eq!(
        fired[0]["thread_id"], "t1",
        "into the origin thread: {fired:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(posted(&hook, "r", "JOB: stretch").await.len(), 1, "once");
    assert!(
        posted(&hook, "r", "JOB: never").await.is_empty(),
        "cancelled"
    );
    assert_eq!(job_turns(&llm, "never"), 0);
    let (_, body) = hook
        .send("r", Some("t1"), "m5", "/schedules", "?wait=20")
        .await;
    assert_eq!(
        body["replies"][0]["text"],
        "No reminders or jobs in this chat."
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cron_job_fires_on_schedule_in_its_own_session() {
    let llm = LlmStandIn::start(script(reply_job)).await;
    let (_work, service) = start(&llm, "").await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook
        .send(
            "c",
            None,
            "m1",
            r#"schedule {"prompt": "tick", "cron": "*/2 * * * * *"}"#,
            "?wait=20",
        )
        .await;
    let job = created(&body);
    assert_eq!(job["kind"], "cron");
    let id = job["id"].as_str().unwrap().to_string();
    let ticks = wait_for("three ticks", Duration::from_secs(20), || async {
        let m = posted(&hook, "c", "JOB: tick").await;
        (m.len() >= 3).then_some(m)
    })
    .await;
    // Every two seconds, on the second.
    let seqs: Vec<i64> = ticks.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    let turns: Vec<String> = llm
        .requests()
        .iter()
        .filter(|r| r.last_user.starts_with("[Scheduled job"))
        .map(|r| r.last_user.clone())
        .collect();
    assert!(turns.len() >= 3);
    // Its own session: the job's turns do not see the chat (or each other's turns).
    for r in llm
        .requests()
        .iter()
        .filter(|r| r.last_user.starts_with("[Scheduled job"))
    {
        let messages = r.body["messages"].to_string();
        assert!(!messages.contains("schedule {"), "{messages}");
    }
    hook.send(
        "c",
        None,
        "m2",
        &format!("/schedules cancel {id}"),
        "?wait=20",
    )
    .await;
    let count = posted(&hook, "c", "JOB: tick").await.len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        posted(&hook, "c", "JOB: tick").await.len() <= count + 1,
        "stopped"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_before_the_due_time_still_fires_once() {
    let llm = LlmStandIn::start(script(reply_job)).await;
    let (work, service) = start(&llm, "").await;
    let hook = Hook::new(&service, SECRET);
    hook.send(
        "k",
        None,
        "m1",
        r#"schedule {"prompt": "after restart", "in": "4 seconds"}"#,
        "?wait=20",
    )
    .await;
    service.kill();
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    wait_for(
        "the reminder after the restart",
        Duration::from_secs(20),
        || async { (!posted(&hook, "k", "JOB: after restart").await.is_empty()).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted(&hook, "k", "JOB: after restart").await.len(), 1);
    assert_eq!(job_turns(&llm, "after restart"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_on_postgres_fire_a_job_once() {
    let llm = LlmStandIn::start(script(reply_job)).await;
    let database = crate::common::pg::fresh_database().await;
    let extra = format!("[storage]\nurl = \"{database}\"\nlease_secs = 2\n");
    let (_a_work, a) = start(&llm, &extra).await;
    let (_b_work, b) = start(&llm, &extra).await;
    let hook = Hook::new(&a, SECRET);
    // A cron job: each tick is a chance for both processes to fire it.
    let (_, body) = hook
        .send(
            "p",
            None,
            "m1",
            r#"schedule {"prompt": "shared", "cron": "*/2 * * * * *"}"#,
            "?wait=20",
        )
        .await;
    let id = created(&body)["id"].as_str().unwrap().to_string();
    wait_for("three ticks", Duration::from_secs(20), || async {
        (posted(&hook, "p", "JOB: shared").await.len() >= 3).then_some(())
    })
    .await;
    hook.send(
        "p",
        None,
        "m2",
        &format!("/schedules cancel {id}"),
        "?wait=20",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ticks = posted(&Hook::new(&b, SECRET), "p", "JOB: shared")
        .await
        .len();
    let turns = llm
        .requests()
        .iter()
        .filter(|r| r.last_user.starts_with("[Scheduled job") && r.last_user.contains("shared"))
        .count();
    assert_eq!(
        turns, ticks,
        "each due time fired by one process, answered once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_with_nothing_to_say_posts_nothing() {
    let llm = LlmStandIn::start(script(|prompt| {
        if prompt == "check the disk" {
            Behaviour::reply("NOTHING_TO_REPORT")
        } else {
            reply_job(prompt)
        }
    }))
    .await;
    let (_work, service) = start(&llm, "").await;
    let hook = Hook::new(&service, SECRET);
    hook.send(
        "h",
        None,
        "m1",
        r#"schedule {"prompt": "check the disk", "cron": "*/2 * * * * *", "heartbeat": true}"#,
        "?wait=20",
    )
    .await;
    wait_for("two heartbeats", Duration::from_secs(20), || async {
        (job_turns(&llm, "check the disk") >= 2).then_some(())
    })
    .await;
    let heartbeat = llm
        .requests()
        .into_iter()
        .find(|r| {
            r.last_user.starts_with("[Scheduled job") && r.last_user.contains("check the disk")
        })
        .unwrap();
    assert!(
        heartbeat
            .last_user
            .contains("answer exactly NOTHING_TO_REPORT")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let messages = hook.list("h", 0).await;
    assert!(
        messages.iter().all(|m| !m["text"]
            .as_str()
            .unwrap_or_default()
            .contains("NOTHING_TO_REPORT")),
        "nothing posted: {messages:?}"
    );
    assert_eq!(
        messages.len(),
        1,
        "only the answer that scheduled it: {messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_schedules_itself_forever_stops_at_the_cap() {
    let llm = LlmStandIn::start(script(|prompt| {
        Behaviour::tool(
            "schedule",
            json!({"action": "create", "prompt": prompt, "in": "1 second"}),
        )
    }))
    .await;
    let (_work, service) = start(&llm, "[schedules]\nmax_chain = 2\n").await;
    let hook = Hook::new(&service, SECRET);
    hook.send(
        "e",
        None,
        "m1",
        r#"schedule {"prompt": "again", "in": "1 second"}"#,
        "?wait=20",
    )
    .await;
    let refused = wait_for("the refusal", Duration::from_secs(20), || async {
        let m = posted(&hook, "e", "after scheduling: Error: refused").await;
        (!m.is_empty()).then_some(m)
    })
    .await;
    assert!(
        refused[0]["text"]
            .as_str()
            .unwrap()
            .contains("schedules.max_chain"),
        "{refused:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The person's job, then two chained ones; the third is refused and nothing follows.
    assert_eq!(job_turns(&llm, "again"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missed_run_follows_its_policy() {
    let llm = LlmStandIn::start(script(reply_job)).await;
    let (work, service) = start(&llm, "[schedules]\nmissed_after_secs = 1\n").await;
    let hook = Hook::new(&service, SECRET);
    hook.send(
        "x",
        None,
        "m1",
        r#"schedule {"prompt": "late but once", "in": "2 seconds"}"#,
        "?wait=20",
    )
    .await;
    hook.send(
        "x",
        None,
        "m2",
        r#"schedule {"prompt": "skip if late", "in": "2 seconds", "missed": "skip"}"#,
        "?wait=20",
    )
    .await;
    service.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    wait_for("the run_once job", Duration::from_secs(15), || async {
        (!posted(&hook, "x", "JOB: late but once").await.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted(&hook, "x", "JOB: late but once").await.len(), 1);
    assert_eq!(job_turns(&llm, "skip if late"), 0, "skipped");
    let (_, body) = hook.send("x", None, "m3", "/schedules", "?wait=20").await;
    assert_eq!(
        body["replies"][0]["text"],
        "No reminders or jobs in this chat."
    );
}

/// #33.8: recurring jobs cannot amplify. A cron job more frequent than
/// `schedules.min_interval_secs` is refused; a job whose turn takes 3 s while it is due every
/// second runs one turn at a time (the runs meanwhile are skipped, not queued); and job turns
/// per minute are capped in total.
#[tokio::test(flavor = "multi_thread")]
async fn recurring_jobs_neither_overlap_nor_exceed_the_rate() {
    let llm = LlmStandIn::start(script(|prompt| {
        if prompt == "slow" {
            Behaviour::slow("JOB: slow", Duration::from_secs(3))
        } else {
            reply_job(prompt)
        }
    }))
    .await;
    // The default minimum interval (a minute) refuses a job every second.
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook
        .send(
            "f",
            None,
            "m1",
            r#"schedule {"prompt": "flood", "cron": "* * * * * *"}"#,
            "?wait=20",
        )
        .await;
    let text = body["replies"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("schedules.min_interval_secs"), "{text}");
    drop(service);

    let (_work, service) = start(&llm, "[schedules]\nmax_turns_per_minute = 4\n").await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook
        .send(
            "o",
            None,
            "m1",
            r#"schedule {"prompt": "slow", "cron": "* * * * * *"}"#,
            "?wait=20",
        )
        .await;
    let id = created(&body)["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(8)).await;
    // 8 runs were due; one turn at a time, 3 s each: at most 3 started.
    let slow = job_turns(&llm, "slow");
    assert!(
        (1..=3).contains(&slow),
        "{slow} turns of a 3 s job due every second"
    );
    hook.send(
        "o",
        None,
        "m2",
        &format!("/schedules cancel {id}"),
        "?wait=20",
    )
    .await;

    let (_, body) = hook
        .send(
            "q",
            None,
            "m1",
            r#"schedule {"prompt": "quick", "cron": "* * * * * *"}"#,
            "?wait=20",
        )
        .await;
    created(&body);
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Four job turns per minute in total, the slow job's included.
    let total = job_turns(&llm, "slow") + job_turns(&llm, "quick");
    assert!(total <= 4, "{total} job turns in a minute with a cap of 4");
    assert!(
        job_turns(&llm, "quick") >= 1,
        "the cap left room for the quick job"
    );
}

/// #33.8: cancelling a job drops its runs already queued: a job's turn waiting behind a slow
/// turn in its origin session never starts once an operator cancels the job (admin API).
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_job_drops_its_queued_turns() {
    let jobs = script(reply_job);
    let llm = LlmStandIn::start(move |body, i| {
        if last_user(body) == "slow please" {
            Behaviour::slow("slow done", Duration::from_secs(4))
        } else {
            jobs(body, i)
        }
    })
    .await;
    let config = config_with_llm(
        &llm.url,
        &format!("{WEBHOOK}[schedules]\nmin_interval_secs = 1\n"),
    )
    .replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    );
    let work = Workdir::new(&config);
    let service = Service::start(&work, &[("FC_HOOK", SECRET), ("FC_ADMIN", "adm")]).await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook
        .send(
            "z",
            None,
            "m1",
            r#"schedule {"prompt": "queued", "cron": "* * * * * *", "session": "origin"}"#,
            "?wait=20",
        )
        .await;
    let id = created(&body)["id"].as_str().unwrap().to_string();
    assert_eq!(hook.send("z", None, "m2", "slow please", "").await.0, 202);
    // The slow turn holds the lane; the job's next run queues behind it.
    wait_for("the slow turn running", Duration::from_secs(10), || async {
        llm.requests()
            .iter()
            .any(|r| r.last_user == "slow please")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cancelled = reqwest::Client::new()
        .post(format!("{}/v1/admin/jobs/{id}/cancel", service.base))
        .bearer_auth("adm")
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let started = job_turns(&llm, "queued");
    wait_for(
        "the slow turn answered",
        Duration::from_secs(15),
        || async { (!posted(&hook, "z", "slow done").await.is_empty()).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        job_turns(&llm, "queued"),
        started,
        "no run of the cancelled job starts after the cancel"
    );
    assert!(
        service.logs().contains("its queued turn is dropped"),
        "a queued run was there to drop"
    );
}
