//! The chaos run (short form in CI; `FERROCLAW_CHAOS_SCALE=N` makes it N times longer):
//! webhook conversations sent to processes that are killed (-9) and restarted over and over,
//! an LLM that fails a share of requests (429 with Retry-After, 500, slow answers) and a
//! callback receiver that fails a share of deliveries. At the end every inbound message is
//! answered exactly once (one bot message per inbound message, never two, none lost) and
//! every bot message is delivered, in order per conversation. A message whose turn was
//! running at three kills is answered by the poison-message rule (an error saying it was
//! given up): under a loaded machine the victim's short lives may not be enough for a slow
//! turn (a 500's back-off) to end. The first message of each conversation spawns a
//! subagent, so kills also land on running children: each is announced exactly once
//! (resumed and done, or given up after three starts) and its outcome answered once; a
//! conversation whose first message was given up before the spawn has none. On SQLite
//! with one process and on PostgreSQL with two, one of them killed repeatedly. A report
//! line gives the figures.

use crate::common::llm::{Behaviour, LlmStandIn, last_user, tool_results};
use crate::common::pg::fresh_database;
use crate::common::receiver::Receiver;
use crate::common::service::{LogsOnFailure, Service, Workdir, config_with_llm};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "chaos-secret";

fn scale() -> usize {
    std::env::var("FERROCLAW_CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Post one message, retrying (against any live process) until it is journalled.
async fn send_until_journalled(
    bases: &Mutex<Vec<String>>,
    conversation: &str,
    id: &str,
    text: &str,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let body = json!({"conversation_id": conversation, "message_id": id,
        "sender": {"id": "u-1", "name": "Chaos"}, "text": text})
    .to_string();
    for attempt in 0usize.. {
        let targets = bases.lock().unwrap().clone();
        if let Some(base) = targets.get(attempt % targets.len().max(1)) {
            let ts = crate::common::hook::now();
            let sig = ferroclaw_channel_webhook::sign(SECRET.as_bytes(), ts, body.as_bytes());
            let sent = client
                .post(format!("{base}/v1/webhooks/main/messages"))
                .header("x-ferroclaw-timestamp", ts.to_string())
                .header("x-ferroclaw-signature", sig)
                .body(body.clone())
                .send()
                .await;
            if let Ok(r) = sent
                && matches!(r.status().as_u16(), 200 | 202)
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Report {
    sent: usize,
    kills: usize,
}

/// Run the chaos against `processes` workdirs (all sharing one database); the last one is
/// killed and restarted over and over while messages flow.
async fn chaos(cfg_for: impl Fn(&str) -> String, processes: usize, label: &str) -> Report {
    let llm = LlmStandIn::start(|body, n| {
        let user = last_user(body);
        match n % 9 {
            2 => Behaviour::Fail {
                status: 429,
                body: "{\"error\":{\"message\":\"slow down\"}}".into(),
                retry_after: Some(0),
            },
            5 => Behaviour::fail(500, "{\"error\":{\"message\":\"boom\"}}"),
            // A conversation's first message spawns a child that works a while.
            _ if user.ends_with(" message 0") && tool_results(body).is_empty() => {
                let conversation = user.split(' ').next().unwrap_or_default();
                Behaviour::tool(
                    "sessions_spawn",
                    json!({"task": format!("child of {conversation}"), "label": conversation}),
                )
            }
            _ if user.starts_with("child of ") => Behaviour::slow(
                format!("result of {user}"),
                Duration::from_millis(200 + (n % 5) as u64 * 100),
            ),
            _ => Behaviour::slow(
                format!("echo: {user}"),
                Duration::from_millis(20 + (n % 5) as u64 * 20),
            ),
        }
    })
    .await;
    let receiver = Receiver::failing_every(4).await;
    let cfg = cfg_for(&llm.url).replace("%CALLBACK%", &receiver.url);
    let env = [("FC_HOOK", SECRET)];
    let works: Vec<Workdir> = (0..processes).map(|_| Workdir::new(&cfg)).collect();
    // The victim starts first, so on PostgreSQL the first kill takes the leader (polling and
    // deliveries move to the other process); later kills take a follower.
    let victim_work = &works[processes - 1];
    let mut victim = Some(Service::start(victim_work, &env).await);
    let mut stable = Vec::new();
    for work in &works[..processes - 1] {
        stable.push(Service::start(work, &env).await);
    }
    // Every process's log (killed ones too), printed if a check below fails.
    let mut logs = LogsOnFailure(
        stable
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("stable process {i}"), s.log_handle()))
            .chain(
                victim
                    .iter()
                    .map(|s| ("victim 0".to_string(), s.log_handle())),
            )
            .collect(),
    );
    let bases = Arc::new(Mutex::new(
        stable
            .iter()
            .chain(victim.iter())
            .map(|s| s.base.clone())
            .collect::<Vec<_>>(),
    ));

    let conversations = 6 * scale();
    let per_conversation = 5 * scale();
    let min_kills = 3 * scale();
    let sending_done = Arc::new(AtomicBool::new(false));
    let sender = {
        let (bases, done) = (bases.clone(), sending_done.clone());
        tokio::spawn(async move {
            let mut all = Vec::new();
            for c in 0..conversations {
                let bases = bases.clone();
                all.push(tokio::spawn(async move {
                    for i in 0..per_conversation {
                        let conversation = format!("chaos-{c}");
                        let text = format!("{conversation} message {i}");
                        send_until_journalled(&bases, &conversation, &format!("m{i}"), &text).await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }));
            }
            for task in all {
                task.await.unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    // Kill and restart the victim while messages flow (and a little after).
    let mut kills = 0;
    let stable_bases: Vec<String> = stable.iter().map(|s| s.base.clone()).collect();
    while !sending_done.load(Ordering::SeqCst) || kills < min_kills {
        tokio::time::sleep(Duration::from_millis(700)).await;
        if let Some(service) = victim.take() {
            *bases.lock().unwrap() = stable_bases.clone();
            service.kill();
            kills += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let service = Service::start(victim_work, &env).await;
        logs.0
            .push((format!("victim {kills}"), service.log_handle()));
        let mut live = stable_bases.clone();
        live.push(service.base.clone());
        *bases.lock().unwrap() = live;
        victim = Some(service);
    }
    sender.await.unwrap();

    // Every inbound message answered and delivered.
    let sent = conversations * per_conversation;
    let deadline = Instant::now() + Duration::from_secs(60);
    let replies = loop {
        let bodies: Vec<Value> = receiver.received().into_iter().map(|r| r.body).collect();
        let replies = answers(&bodies, REPLIES, |r| r.starts_with('m'));
        // Every child announced, and its outcome answered by a turn of its parent. A first
        // message given up (its turn was under three kills) may have started no child.
        let expected = conversations - given_up_first(&bodies).len();
        let announced = answers(&bodies, &["announce"], |_| true).len();
        let outcomes = answers(&bodies, REPLIES, |r| r.starts_with("subagent:")).len();
        if (replies.len() >= sent && announced >= expected && outcomes >= announced)
            || Instant::now() > deadline
        {
            break replies;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Late arrivals (a redelivery, the child of a given-up first message) have time to come.
    let received: Vec<(Instant, Value)> = loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let received: Vec<(Instant, Value)> = receiver
            .received()
            .into_iter()
            .map(|r| (r.at, r.body))
            .collect();
        let bodies: Vec<Value> = received.iter().map(|(_, b)| b.clone()).collect();
        let announced = answers(&bodies, &["announce"], |_| true).len();
        let outcomes = answers(&bodies, REPLIES, |r| r.starts_with("subagent:")).len();
        if outcomes >= announced || Instant::now() > deadline {
            break received;
        }
    };
    let lost = sent - replies.len();
    let duplicates = replies.values().filter(|ids| ids.len() > 1).count();
    let bodies: Vec<Value> = received.iter().map(|(_, b)| b.clone()).collect();
    let announcements = answers(&bodies, &["announce"], |_| true);
    let outcomes = answers(&bodies, REPLIES, |r| r.starts_with("subagent:"));
    let texts = |ids: &HashSet<String>| -> Vec<String> {
        bodies
            .iter()
            .filter(|b| b["id"].as_str().is_some_and(|id| ids.contains(id)))
            .map(|b| b["text"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let children_done = announcements
        .values()
        .filter(|ids| texts(ids).iter().all(|t| t.contains(" — done")))
        .count();
    let distinct: HashSet<&str> = received
        .iter()
        .filter_map(|(_, b)| b["id"].as_str())
        .collect();
    let redeliveries = received.len() - distinct.len();
    // Per conversation, replies arrive in the order the messages were sent.
    let mut out_of_order = Vec::new();
    for c in 0..conversations {
        let conversation = format!("chaos-{c}");
        let mut seen = Vec::new();
        for (_, body) in &received {
            let reply = REPLIES.contains(&body["kind"].as_str().unwrap_or_default())
                && body["in_reply_to"]
                    .as_str()
                    .is_some_and(|r| r.starts_with('m'));
            if reply && body["conversation_id"] == conversation.as_str() {
                let r = body["in_reply_to"].as_str().unwrap_or_default().to_string();
                if !seen.contains(&r) {
                    seen.push(r);
                }
            }
        }
        let expected: Vec<String> = (0..per_conversation).map(|i| format!("m{i}")).collect();
        if seen != expected {
            out_of_order.push((conversation, seen));
        }
    }
    let longest_gap = received
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or_default();
    eprintln!(
        "chaos ({label}): sent {sent}, answered {} (given up after three kills during their turn {}), delivered {}, duplicates {duplicates}, lost {lost}, \
         redeliveries of one message {redeliveries}, kills survived {kills}, longest pause between deliveries {:.1} s, \
         subagents announced {} (done {children_done}, the rest failed or given up), their outcomes answered {}, \
         children's model calls {} (with retries and steps redone after a kill), \
         model calls {}, callback attempts {}",
        replies.len(),
        bodies.iter().filter(|b| given_up(b)).count(),
        distinct.len(),
        longest_gap.as_secs_f64(),
        announcements.len(),
        outcomes.len(),
        llm.requests()
            .iter()
            .filter(|r| last_user(&r.body).starts_with("child of "))
            .count(),
        llm.count(),
        receiver.attempts(),
    );
    assert_eq!(
        lost,
        0,
        "messages never answered: {:?}",
        missing(&replies, conversations, per_conversation)
    );
    assert_eq!(duplicates, 0, "messages answered twice");
    // A conversation's child is announced unless its first message was given up before the
    // spawn (three kills during that turn: the poison-message rule, answered with an error).
    let first_given_up = given_up_first(&bodies);
    let announced: HashSet<&str> = announcements.keys().map(|(c, _)| c.as_str()).collect();
    for c in 0..conversations {
        let conversation = format!("chaos-{c}");
        assert!(
            announced.contains(conversation.as_str()) || first_given_up.contains(&conversation),
            "{conversation}'s child never announced: {announcements:?}"
        );
    }
    for (key, ids) in &announcements {
        assert_eq!(
            ids.len(),
            1,
            "{key:?} announced more than once: {:?}",
            texts(ids)
        );
    }
    assert_eq!(
        outcomes.len(),
        announcements.len(),
        "each announced outcome answered"
    );
    for (key, ids) in &outcomes {
        assert_eq!(
            ids.len(),
            1,
            "{key:?} outcome answered twice: {:?}",
            texts(ids)
        );
    }
    assert!(
        out_of_order.is_empty(),
        "replies out of order: {out_of_order:?}"
    );
    drop(stable);
    drop(victim);
    Report { sent, kills }
}

/// A bot message answering a message given up (its turn was running at three kills).
fn given_up(body: &Value) -> bool {
    body["kind"] == "error"
        && body["text"]
            .as_str()
            .is_some_and(|t| t.contains("given up"))
}

/// Conversations whose first message was given up.
fn given_up_first(bodies: &[Value]) -> HashSet<String> {
    bodies
        .iter()
        .filter(|b| given_up(b) && b["in_reply_to"] == "m0")
        .filter_map(|b| b["conversation_id"].as_str().map(str::to_string))
        .collect()
}

/// The kinds of bot message that answer a message (one per message answered).
const REPLIES: &[&str] = &["reply", "error"];

/// Bot messages of `kinds` answering messages whose id passes `answered`, as the set of their
/// ids per (conversation, message answered).
fn answers(
    bodies: &[Value],
    kinds: &[&str],
    answered: impl Fn(&str) -> bool,
) -> BTreeMap<(String, String), HashSet<String>> {
    let mut found: BTreeMap<(String, String), HashSet<String>> = BTreeMap::new();
    for body in bodies {
        if let (Some(c), Some(r), Some(id), Some(kind)) = (
            body["conversation_id"].as_str(),
            body["in_reply_to"].as_str(),
            body["id"].as_str(),
            body["kind"].as_str(),
        ) && kinds.contains(&kind)
            && answered(r)
        {
            found
                .entry((c.to_string(), r.to_string()))
                .or_default()
                .insert(id.to_string());
        }
    }
    found
}

fn missing(
    replies: &BTreeMap<(String, String), HashSet<String>>,
    conversations: usize,
    per: usize,
) -> Vec<(String, String)> {
    let mut gone = Vec::new();
    for c in 0..conversations {
        for i in 0..per {
            let key = (format!("chaos-{c}"), format!("m{i}"));
            if !replies.contains_key(&key) {
                gone.push(key);
            }
        }
    }
    gone
}

fn base_config(llm: &str, storage: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "{storage}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\ncallback_url = \"%CALLBACK%\"\n"
        ),
    )
    .replace("retries_per_model = 0", "retries_per_model = 3")
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_on_sqlite_one_process_killed_repeatedly() {
    let report = chaos(|llm| base_config(llm, ""), 1, "SQLite, one process").await;
    assert!(report.kills >= 3 && report.sent >= 30);
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_on_postgres_two_processes_one_killed_repeatedly() {
    let database = fresh_database().await;
    let storage = format!("[storage]\nurl = \"{database}\"\nlease_secs = 2\n");
    let report = chaos(
        |llm| base_config(llm, &storage),
        2,
        "PostgreSQL, two processes",
    )
    .await;
    assert!(report.kills >= 3 && report.sent >= 30);
}
