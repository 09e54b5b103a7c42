//! What an adversarial run broke (issue 11), each reproduced against the real service: a full
//! disk, malformed and cut-off model streams, a message that keeps killing the process, slow
//! clients, a crash in the middle of a turn with side effects, a receiver that is down,
//! runaway spawning, `web_fetch` through a system proxy, and the smaller ones.

use crate::common::hook::{Hook, now};
use crate::common::inproc::{InProc, config};
use crate::common::llm::{Behaviour, LlmStandIn, fresh_results, last_user, tool_results};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "whsec-hardening";

fn webhook(llm: &str, extra: &str) -> String {
    config_with_llm(
        llm,
        &format!("{extra}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"),
    )
}

const ENV: &[(&str, &str)] = &[("FC_HOOK", SECRET)];

async fn texts(hook: &Hook, conversation: &str) -> Vec<String> {
    hook.list(conversation, 0)
        .await
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn wait_texts(
    hook: &Hook,
    conversation: &str,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    wait_for(what, Duration::from_secs(30), || async {
        let t = texts(hook, conversation).await;
        done(&t).then_some(t)
    })
    .await
}

async fn readyz(base: &str) -> u16 {
    reqwest::get(format!("{base}/readyz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// A small tmpfs mounted for one test (needs root, as CI has; fails loudly otherwise).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "the full-disk test mounts a small tmpfs and needs root (CAP_SYS_ADMIN)"
        );
        SmallDisk { dir }
    }

    /// Fill the disk; returns the filler's path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![7u8; 16 * 1024];
        while file.write_all(&chunk).is_ok() {}
        while file.write_all(&chunk[..512]).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_refuses_messages_instead_of_losing_them_and_recovers_when_space_returns() {
    let disk = SmallDisk::mount("3m");
    let llm = LlmStandIn::echo().await;
    let db = disk.dir.path().join("ferroclaw.db");
    let work = Workdir::new(&webhook(
        &llm.url,
        &format!("[storage]\nurl = \"sqlite://{}\"", db.display()),
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    assert_eq!(hook.send("c", None, "m-1", "one", "").await.0, 202);
    wait_texts(&hook, "c", "the first reply", |t| t.len() == 1).await;

    let filler = disk.fill();
    // Large messages, so they need space the database cannot reuse (SQLite keeps going for a
    // while in room its WAL already has, and what it writes there is durable).
    let big = "x".repeat(200_000);
    let mut acknowledged = vec!["m-1".to_string()];
    let mut refused = Vec::new();
    for i in 2..=8 {
        let id = format!("m-{i}");
        let (status, body) = hook.send("c", None, &id, &format!("{i} {big}"), "").await;
        match status {
            202 => acknowledged.push(id),
            503 => refused.push(id),
            other => panic!("a post on a full disk got {other}: {body}"),
        }
    }
    assert!(
        !refused.is_empty(),
        "a full disk refuses posts with 503; logs:\n{}",
        service.logs()
    );
    assert_eq!(
        readyz(&service.base).await,
        503,
        "not ready while it cannot write"
    );

    std::fs::remove_file(filler).unwrap();
    wait_for(
        "ready again once space returns",
        Duration::from_secs(30),
        || async { (readyz(&service.base).await == 200).then_some(()) },
    )
    .await;
    // A refused message was never stored: its retry is new, not a duplicate.
    let (status, body) = hook.send("c", None, &refused[0], "retried", "").await;
    assert_eq!(
        (status, &body["status"]),
        (202, &json!("accepted")),
        "{body}"
    );
    acknowledged.push(refused[0].clone());
    assert_eq!(hook.send("c", None, "m-9", "after", "").await.0, 202);
    acknowledged.push("m-9".into());

    let answered = |list: &[Value]| -> Vec<String> {
        list.iter()
            .map(|m| m["in_reply_to"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let got = wait_for(
        "every acknowledged message answered",
        Duration::from_secs(30),
        || async {
            let list = hook.list("c", 0).await;
            (list.len() >= acknowledged.len()).then_some(list)
        },
    )
    .await;
    assert_eq!(
        answered(&got),
        acknowledged,
        "each acknowledged message answered once, in order"
    );

    service.kill();
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    // A sentinel on the same lane: anything redone after the restart is answered before it.
    assert_eq!(hook.send("c", None, "m-10", "sentinel", "").await.0, 202);
    acknowledged.push("m-10".into());
    let after = wait_for("the sentinel's answer", Duration::from_secs(30), || async {
        let list = hook.list("c", 0).await;
        (list.len() >= acknowledged.len()).then_some(list)
    })
    .await;
    assert_eq!(
        answered(&after),
        acknowledged,
        "nothing lost or repeated by a restart"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_cut_off_and_html_answers_are_errors_not_crashes_or_replies() {
    let llm = LlmStandIn::start(|body, _| match last_user(body).as_str() {
        "malformed" => Behaviour::Raw {
            content_type: "text/event-stream".into(),
            body: "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":18446744073709551615,\"id\":\"x\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n".into(),
        },
        "cut off" => Behaviour::Raw {
            content_type: "text/event-stream".into(),
            body: "data: {\"choices\":[{\"delta\":{\"content\":\"half an ans\"}}]}\n\n".into(),
        },
        "html" => Behaviour::Raw {
            content_type: "text/html".into(),
            body: "<html><body>502 Bad Gateway</body></html>".into(),
        },
        "empty" => Behaviour::Raw {
            content_type: "text/event-stream".into(),
            body: String::new(),
        },
        other => Behaviour::reply(format!("echo: {other}")),
    })
    .await;
    let work = Workdir::new(&webhook(&llm.url, ""));
    let mut env = ENV.to_vec();
    env.push(("FERROCLAW__FALLBACK__COOLDOWN_SECS", "0"));
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);
    for (i, text) in ["malformed", "cut off", "html", "empty", "still here?"]
        .iter()
        .enumerate()
    {
        assert_eq!(
            hook.send("c", None, &format!("m-{i}"), text, "").await.0,
            202
        );
    }
    let got = wait_texts(&hook, "c", "five answers", |t| t.len() == 5).await;
    for answer in &got[..4] {
        assert!(
            answer.starts_with("⚠️ The model could not answer"),
            "an unusable answer is reported as an error: {got:?}"
        );
    }
    assert!(!got.iter().any(|t| t.contains("half an ans")), "{got:?}");
    assert_eq!(got[4], "echo: still here?", "the service keeps running");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_whose_turn_keeps_killing_the_process_is_given_up_with_a_reply() {
    let llm = LlmStandIn::start(|body, _| match last_user(body).as_str() {
        "poison" => Behaviour::Hang,
        other => Behaviour::reply(format!("echo: {other}")),
    })
    .await;
    let ops = crate::common::receiver::Receiver::start(0).await;
    let work = Workdir::new(&webhook(
        &llm.url,
        &format!("[alerts]\nwebhook_url = \"{}\"\n", ops.url),
    ));
    for run in 1..=3 {
        let service = Service::start(&work, ENV).await;
        if run == 1 {
            let hook = Hook::new(&service, SECRET);
            assert_eq!(hook.send("p", None, "m-1", "poison", "").await.0, 202);
        }
        wait_for(
            "the turn to reach the model",
            Duration::from_secs(20),
            || async { (llm.count() == run).then_some(()) },
        )
        .await;
        service.kill(); // as an abort in the turn would
    }
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    let got = wait_texts(&hook, "p", "the give-up reply", |t| !t.is_empty()).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].contains("given up"), "{got:?}");
    assert_eq!(
        llm.count(),
        3,
        "the fourth start does not call the model again"
    );
    assert_eq!(hook.send("p", None, "m-2", "hello", "").await.0, 202);
    wait_texts(&hook, "p", "the next message answered", |t| t.len() == 2).await;
    // The operator is told.
    let told = wait_for("the alert", Duration::from_secs(15), || async {
        let got = ops.received();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(told[0].body["key"], "given_up", "{:?}", told[0].body);
    assert!(
        told[0].body["text"]
            .as_str()
            .unwrap()
            .contains("1 message(s) given up"),
        "{:?}",
        told[0].body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_are_cut_off_and_do_not_starve_the_server() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&webhook(&llm.url, ""));
    let mut env = ENV.to_vec();
    env.push(("FERROCLAW__SERVER__HEADER_TIMEOUT_SECS", "1"));
    env.push(("FERROCLAW__SERVER__MAX_CONNECTIONS", "64"));
    let service = Service::start(&work, &env).await;
    let addr = service.base.trim_start_matches("http://").to_string();

    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(b"POST /v1/webhooks/main/messages HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // A body that stops halfway.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(b"POST /v1/webhooks/main/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"conv")
        .await
        .unwrap();

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let healthz = format!("{}/healthz", service.base);
    wait_for(
        "/healthz to answer past the slow clients",
        Duration::from_secs(30),
        || crate::common::answers_200(&client, &healthz),
    )
    .await;
    let hook = Hook::new(&service, SECRET);
    assert_eq!(hook.send("c", None, "m-1", "hi", "").await.0, 202);

    // Every slow connection is closed by the server (EOF or reset), none left hanging.
    for (i, stream) in slow
        .iter_mut()
        .chain(std::iter::once(&mut stalled))
        .enumerate()
    {
        let mut buf = vec![0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue, // e.g. a 408 before the close
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "slow connection {i} was never closed");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_a_side_effect_does_not_repeat_it_when_the_turn_is_redone() {
    let finished_steps = Arc::new(AtomicUsize::new(0));
    let steps = finished_steps.clone();
    let llm = LlmStandIn::start(move |body, _| {
        let user = last_user(body);
        if user == "child task" {
            return Behaviour::reply("child result");
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("noted");
        }
        if user == "sentinel" {
            return Behaviour::reply("pong");
        }
        if tool_results(body).is_empty() {
            return Behaviour::tools(&[
                ("message", json!({"text": "interim note"})),
                (
                    "sessions_spawn",
                    json!({"task": "child task", "label": "kid"}),
                ),
            ]);
        }
        // The second model call of the turn: the first time, the process dies here.
        if steps.fetch_add(1, Ordering::SeqCst) == 0 {
            Behaviour::Hang
        } else {
            Behaviour::reply("all done")
        }
    })
    .await;
    let work = Workdir::new(&webhook(&llm.url, ""));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    assert_eq!(hook.send("s", None, "m-1", "do it", "").await.0, 202);
    wait_for(
        "the second model call and the child's",
        Duration::from_secs(20),
        || async {
            let child = llm
                .requests()
                .iter()
                .any(|r| last_user(&r.body) == "child task");
            (finished_steps.load(Ordering::SeqCst) == 1 && child).then_some(())
        },
    )
    .await;
    service.kill();

    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    let got = wait_texts(&hook, "s", "the redone turn's reply", |t| {
        t.iter().any(|x| x == "all done")
    })
    .await;
    // A sentinel on the same lane: the parent's turn for the child's report and anything
    // repeated are answered before it.
    assert_eq!(hook.send("s", None, "m-2", "sentinel", "").await.0, 202);
    let got_now = wait_texts(&hook, "s", "the sentinel's answer", |t| {
        t.iter().any(|x| x == "pong")
    })
    .await;
    let count = |s: &str| got_now.iter().filter(|t| t.as_str() == s).count();
    assert_eq!(
        count("interim note"),
        1,
        "the interim message is not sent twice: {got_now:?}"
    );
    assert_eq!(count("all done"), 1, "{got:?}");
    // A second spawn would post a second "queued" status message; the one child may have
    // been resumed by the restart (its step redone), which posts none.
    assert_eq!(
        count("🤖 kid: queued"),
        1,
        "the subagent is not spawned again: {got_now:?}"
    );
    let children = llm
        .requests()
        .iter()
        .filter(|r| last_user(&r.body) == "child task")
        .count();
    assert!(
        children <= 2,
        "started once, resumed at most once: {children}"
    );
    let announced = got_now
        .iter()
        .filter(|t| t.starts_with("🤖 kid — "))
        .count();
    assert_eq!(announced, 1, "one announcement: {got_now:?}");
}

/// A channel whose receiver is down: every delivery asks to be retried after `retry_after`;
/// with `rate_limits`, the first that many deliveries are answered 429 (wait `retry_after`)
/// and the rest succeed.
struct Down {
    calls: AtomicUsize,
    retry_after: Duration,
    rate_limits: usize,
}

#[async_trait::async_trait]
impl ferroclaw_channel_core::Channel for Down {
    fn name(&self) -> &str {
        "down"
    }
    async fn deliver(
        &self,
        _message: &ferroclaw_channel_core::OutboundMessage,
    ) -> Result<ferroclaw_channel_core::Delivered, ferroclaw_channel_core::DeliveryError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.rate_limits > 0 {
            return if n < self.rate_limits {
                Err(ferroclaw_channel_core::DeliveryError::RateLimited {
                    reason: "429".into(),
                    retry_after: self.retry_after,
                })
            } else {
                Ok(ferroclaw_channel_core::Delivered::default())
            };
        }
        Err(ferroclaw_channel_core::DeliveryError::Retry {
            reason: "receiver down".into(),
            retry_after: Some(self.retry_after),
        })
    }
}

/// A fresh SQLite store with `replies` queued per conversation of channel `down`, and a
/// delivery worker running over it into a [`Down`] receiver that asks for `retry_after`.
struct DownReceiver {
    store: Arc<dyn ferroclaw::storage::Store>,
    channel: Arc<Down>,
    cancel: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl DownReceiver {
    async fn start(conversations: &[(String, Vec<&str>)], retry_after: Duration) -> Self {
        Self::start_with(conversations, retry_after, 0).await
    }

    async fn start_with(
        conversations: &[(String, Vec<&str>)],
        retry_after: Duration,
        rate_limits: usize,
    ) -> Self {
        use ferroclaw::outbox::{DeliveryWorker, OutboxNotifier};
        use ferroclaw::storage::{NewOutbound, SqliteStore, Store};
        use ferroclaw_channel_core::{ChatKind, ChatRoute, OutboundKind};
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("o.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        for (chat, replies) in conversations {
            let route = ChatRoute {
                channel: "down".into(),
                kind: ChatKind::Conversation,
                chat_id: chat.clone(),
                thread_id: None,
            };
            let messages: Vec<NewOutbound> = replies
                .iter()
                .map(|text| NewOutbound {
                    route: route.clone(),
                    kind: OutboundKind::Reply,
                    text: text.to_string(),
                    in_reply_to: None,
                    edit_of: None,
                    file: None,
                    approval: None,
                })
                .collect();
            store
                .outbox_push(&route.session_key(), &messages, 1)
                .await
                .unwrap();
        }
        let channel = Arc::new(Down {
            calls: AtomicUsize::new(0),
            retry_after,
            rate_limits,
        });
        let notifier = OutboxNotifier::new(["down"]);
        let worker = Arc::new(DeliveryWorker::new(
            store.clone(),
            channel.clone(),
            &notifier,
        ));
        let cancel = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(worker.run(cancel.clone(), Duration::from_secs(3600)));
        DownReceiver {
            store,
            channel,
            cancel,
            task,
            _dir: dir,
        }
    }

    fn calls(&self) -> usize {
        self.channel.calls.load(Ordering::SeqCst)
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_is_down_gets_every_message_tried_once_and_no_busy_loop() {
    let conversations: Vec<(String, Vec<&str>)> = (0..600)
        .map(|i| (format!("c{i}"), vec!["first", "second"]))
        .collect();
    let down = DownReceiver::start(&conversations, Duration::from_secs(60)).await;
    wait_for(
        "every conversation tried",
        Duration::from_secs(20),
        || async { (down.calls() >= 600).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        down.calls(),
        600,
        "the first message of each of the 600 conversations (past the 512 batch) is tried \
         once; nothing is tried again before its retry time, and the second of each waits"
    );
    down.stop().await;
}

/// #33.11: 80 rate-limited answers in a row (more than the 50 attempts a failing message
/// gets) neither give the message up nor lose it: 429s are pacing, not failures.
#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_do_not_count_towards_giving_a_message_up() {
    let paced = DownReceiver::start_with(
        &[("c".into(), vec!["patient"])],
        Duration::from_millis(5),
        80,
    )
    .await;
    let rows = wait_for("the message delivered", Duration::from_secs(30), || async {
        let rows = paced
            .store
            .outbox_conversation("down", "c", 0, 10)
            .await
            .unwrap();
        rows.iter()
            .all(|r| r.state == ferroclaw::storage::OutboxState::Delivered)
            .then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(paced.calls(), 81);
    paced.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_that_can_never_be_delivered_is_marked_failed_after_its_attempts() {
    let down = DownReceiver::start(&[("c".into(), vec!["never", "next"])], Duration::ZERO).await;
    let rows = wait_for(
        "both messages given up",
        Duration::from_secs(30),
        || async {
            let rows = down
                .store
                .outbox_conversation("down", "c", 0, 10)
                .await
                .unwrap();
            rows.iter()
                .all(|r| r.state == ferroclaw::storage::OutboxState::Rejected)
                .then_some(rows)
        },
    )
    .await;
    let calls = down.calls();
    let pending = down
        .store
        .outbox_pending("down", 10, i64::MAX)
        .await
        .unwrap();
    down.stop().await;
    assert_eq!(calls, 100, "50 attempts each, then no more");
    assert!(pending.is_empty());
    assert_eq!(rows.len(), 2);
}

fn spawner(body: &Value) -> Behaviour {
    let user = last_user(body);
    if user.starts_with("child") {
        return Behaviour::reply(format!("result of {user}"));
    }
    if user == "hang child" {
        return Behaviour::Hang;
    }
    if !fresh_results(body).is_empty() {
        return Behaviour::reply("spawned them");
    }
    if user == "go" {
        let calls: Vec<(&str, Value)> = (0..20)
            .map(|i| {
                (
                    "sessions_spawn",
                    json!({"task": format!("child {i}"), "label": format!("c{i}")}),
                )
            })
            .collect();
        return Behaviour::tools(&calls);
    }
    if user == "start one" {
        return Behaviour::tool(
            "sessions_spawn",
            json!({"task": "hang child", "label": "h"}),
        );
    }
    // Every report of a child: spawn another one (the runaway model).
    Behaviour::tool(
        "sessions_spawn",
        json!({"task": "child again", "label": "again"}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn spawning_is_capped_per_turn_and_chained_turns_per_session() {
    let llm = LlmStandIn::start(|body, _| spawner(body)).await;
    let cfg = config(
        &llm.url,
        "",
        "[subagents]\nmax_depth = 1\nmax_children = 50\nmax_spawns_per_turn = 3\nmax_chained_turns = 2",
    );
    let app = InProc::start(&cfg).await;
    app.say("c", "go").await;
    let count_children = || {
        llm.requests()
            .iter()
            .filter(|r| last_user(&r.body).starts_with("child"))
            .count()
    };
    wait_for("five children", Duration::from_secs(20), || async {
        (count_children() >= 5).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let first = llm
        .requests()
        .iter()
        .find(|r| !fresh_results(&r.body).is_empty() && last_user(&r.body) == "go")
        .map(|r| fresh_results(&r.body))
        .unwrap();
    assert_eq!(first.iter().filter(|r| r.contains("accepted")).count(), 3);
    assert!(first[3].contains("max_spawns_per_turn"), "{}", first[3]);
    assert_eq!(
        count_children(),
        5,
        "3 from the user's turn, 1 from each of the 2 chained turns, then no more"
    );
    let chained_turns = llm
        .requests()
        .iter()
        .filter(|r| {
            last_user(&r.body).starts_with("[Subagent") && fresh_results(&r.body).is_empty()
        })
        .count();
    assert_eq!(chained_turns, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_ends_a_chain_of_subagent_turns() {
    let llm = LlmStandIn::start(|body, _| spawner(body)).await;
    let app = InProc::start(&config(&llm.url, "", "[subagents]\nmax_depth = 1")).await;
    app.say("c", "start one").await;
    wait_for("the child to start", Duration::from_secs(20), || async {
        llm.requests()
            .iter()
            .any(|r| last_user(&r.body) == "hang child")
            .then_some(())
    })
    .await;
    app.say("c", "/stop").await;
    app.wait_delivered(3).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let reacting = llm
        .requests()
        .iter()
        .filter(|r| last_user(&r.body).starts_with("[Subagent"))
        .count();
    assert_eq!(
        reacting, 0,
        "after /stop the killed child's report starts no turn"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_ignores_the_system_proxy_variables() {
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let proxied = Arc::new(AtomicUsize::new(0));
    let seen = proxied.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = proxy.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nfrom a proxy")
                .await;
        }
    });
    let llm = LlmStandIn::start(|body, _| {
        if tool_results(body).is_empty() {
            Behaviour::tool("web_fetch", json!({"url": "http://1.1.1.1:9/metadata"}))
        } else {
            Behaviour::reply(format!("fetched: {}", tool_results(body)[0]))
        }
    })
    .await;
    let work = Workdir::new(&webhook(&llm.url, ""));
    let mut env = ENV.to_vec();
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        env.push((var, proxy_url.as_str()));
    }
    // The model provider may use the system proxy (an operator's choice); the stand-in is
    // reached directly. web_fetch's target is not exempted.
    env.push(("NO_PROXY", "127.0.0.1,localhost"));
    env.push(("no_proxy", "127.0.0.1,localhost"));
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);
    assert_eq!(hook.send("w", None, "m-1", "fetch it", "").await.0, 202);
    let got = wait_texts(&hook, "w", "the fetch result", |t| !t.is_empty()).await;
    assert!(!got[0].contains("from a proxy"), "{got:?}");
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "the proxy was never contacted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_obeys_the_input_limit() {
    let llm = LlmStandIn::echo().await;
    let app = InProc::start(&config(&llm.url, "max_input_chars = 20", "")).await;
    app.say("c", &format!("/plan {}", "x".repeat(100))).await;
    let delivered = app.wait_delivered(1).await;
    assert!(
        delivered[0].text.contains("too long"),
        "{}",
        delivered[0].text
    );
    assert_eq!(llm.count(), 0, "the model never sees it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_in_the_workspace_and_a_hanging_tool_do_not_stall_the_session() {
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_url = format!("http://{}/", hang.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hang.accept().await {
            held.push(stream); // accept, never answer
        }
    });
    let llm = LlmStandIn::start(move |body, _| {
        if tool_results(body).is_empty() {
            Behaviour::tools(&[
                ("read_file", json!({"path": "pipe"})),
                ("write_file", json!({"path": "pipe", "content": "x"})),
                ("web_fetch", json!({"url": hang_url})),
            ])
        } else {
            Behaviour::reply(tool_results(body).join(" | "))
        }
    })
    .await;
    let app = InProc::start(&config(
        &llm.url,
        "",
        "[tools]\nweb_fetch_allow_private = true\ntimeout_secs = 1",
    ))
    .await;
    let key = InProc::route("f").session_key();
    let root = app.dir.path().join("ws");
    let folder = ferroclaw::engine::workspace_for(&root.display().to_string(), &key);
    std::fs::create_dir_all(&folder).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(folder.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    app.say("f", "read the pipe").await;
    let delivered = app.wait_delivered(1).await;
    let reply = &delivered[0].text;
    assert_eq!(reply.matches("not a regular file").count(), 2, "{reply}");
    assert!(reply.contains("did not finish within 1 s"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn model_calls_in_flight_are_capped() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::slow(
            format!("echo: {}", last_user(body)),
            Duration::from_millis(300),
        )
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "max_concurrent_requests = 1")).await;
    app.say("a", "one").await;
    app.say("b", "two").await;
    app.wait_delivered(2).await;
    let mut requests = llm.requests();
    requests.sort_by_key(|r| r.started);
    assert!(
        requests[1].started >= requests[0].finished.unwrap(),
        "the second call waits for the first (fallback.max_concurrent_requests = 1)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timestamp_near_the_end_of_time_is_refused_not_a_crash() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&webhook(&llm.url, ""));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, SECRET);
    let body =
        json!({"conversation_id": "t", "message_id": "m", "sender": {"id": "u"}, "text": "hi"})
            .to_string();
    for ts in [
        now().wrapping_sub(i64::MAX).wrapping_sub(1),
        i64::MIN,
        i64::MAX,
    ] {
        let (status, _) = hook
            .post_raw("/v1/webhooks/main/messages", &body, ts, SECRET)
            .await;
        assert_eq!(status, 401, "timestamp {ts}");
    }
    assert_eq!(
        hook.send("t", None, "m", "hi", "").await.0,
        202,
        "still serving"
    );
}
