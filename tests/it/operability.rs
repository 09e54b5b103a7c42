//! What an operator sees, through the real `serve`: `/metrics` parsed with a Prometheus text
//! parser as messages flow, the admin API's token rules, readiness as JSON, INFO logs free of
//! message bodies and secrets (and JSON logs on request), and the status page rendered by
//! headless Chromium with a running subagent tree.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, last_user, tool_results};
use crate::common::metrics::{scrape, value};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use prometheus_parse::Value as Metric;
use serde_json::{Value, json};
use std::time::Duration;

const HOOK_SECRET: &str = "hook-secret-XYZZY";
const ADMIN: &str = "admin-token-PLUGH";

fn cfg(llm: &str) -> String {
    config_with_llm(llm, "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n").replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    )
}

const ENV: &[(&str, &str)] = &[("FC_HOOK", HOOK_SECRET), ("FC_ADMIN", ADMIN)];

async fn send(hook: &Hook, conversation: &str, id: &str, text: &str) {
    let (status, body) = hook.send(conversation, None, id, text, "?wait=30").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_move_as_messages_flow_and_histograms_are_consistent() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&cfg(&llm.url));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    for i in 0..3 {
        send(&hook, "conv-secret-id", &format!("m{i}"), "hello").await;
    }
    let model = "standin/test-model";
    let channel = [("channel", "webhook:main")];
    let samples = wait_for("3 deliveries counted", Duration::from_secs(10), || async {
        let s = scrape(&service.base).await;
        (value(&s, "ferroclaw_outbound_messages_total", &channel) >= 3.0).then_some(s)
    })
    .await;
    assert_eq!(
        value(&samples, "ferroclaw_inbound_messages_total", &channel),
        3.0
    );
    assert_eq!(
        value(
            &samples,
            "ferroclaw_turns_total",
            &[("outcome", "answered")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &samples,
            "ferroclaw_model_calls_total",
            &[("model", model), ("outcome", "ok")]
        ),
        3.0
    );
    assert_eq!(value(&samples, "ferroclaw_outbox_backlog", &channel), 0.0);
    assert_eq!(value(&samples, "ferroclaw_lane_queue_depth", &[]), 0.0);
    // Histogram buckets never decrease and the last one is the count.
    let turn = samples
        .iter()
        .find(|s| s.metric == "ferroclaw_turn_duration_seconds")
        .expect("the turn latency histogram");
    let Metric::Histogram(buckets) = &turn.value else {
        panic!("not a histogram: {:?}", turn.value)
    };
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].less_than < w[1].less_than && w[0].count <= w[1].count)
    );
    assert_eq!(buckets.last().unwrap().count, 3.0, "+Inf holds every turn");
    assert!(
        samples
            .iter()
            .any(|s| s.metric == "ferroclaw_time_to_first_token_seconds"),
        "time to first token is measured"
    );
    // Labels of bounded cardinality only: no conversation, session or user id.
    for s in &samples {
        let labels = format!("{:?}", s.labels);
        assert!(
            !labels.contains("conv-secret-id")
                && !labels.contains("agent:main")
                && !labels.contains("u-7"),
            "{} carries an id: {labels}",
            s.metric
        );
    }
    send(&hook, "conv-secret-id", "m3", "again").await;
    let samples = scrape(&service.base).await;
    assert_eq!(
        value(&samples, "ferroclaw_inbound_messages_total", &channel),
        4.0,
        "counters move"
    );
    assert_eq!(
        value(
            &samples,
            "ferroclaw_turns_total",
            &[("outcome", "answered")]
        ),
        4.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_wants_the_right_token_and_is_absent_without_one() {
    let llm = LlmStandIn::echo().await;
    // No admin token configured: the whole prefix (and the status page) do not exist.
    let bare = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    ));
    let service = Service::start(&bare, &[("FC_HOOK", HOOK_SECRET)]).await;
    let client = reqwest::Client::new();
    for path in ["/v1/admin/sessions", "/v1/admin/outbox", "/"] {
        let r = client
            .get(format!("{}{path}", service.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path} without a configured token");
    }
    drop(service);

    let work = Workdir::new(&cfg(&llm.url));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    send(&hook, "alpha", "m1", "hello admin").await;
    let url = |p: &str| format!("{}{p}", service.base);
    let admin_json = |path: &str| {
        let request = client.get(url(path)).bearer_auth(ADMIN).send();
        async move { request.await.unwrap().json::<Value>().await.unwrap() }
    };
    let get = |path: &str, token: Option<&str>| {
        let mut request = client.get(url(path));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        request.send()
    };
    assert_eq!(get("/v1/admin/sessions", None).await.unwrap().status(), 401);
    assert_eq!(
        get("/v1/admin/sessions", Some("wrong"))
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(get("/", Some("wrong")).await.unwrap().status(), 401);
    let sessions: Value = admin_json("/v1/admin/sessions?channel=webhook:main").await;
    let key = "agent:main:webhook:main:alpha";
    assert_eq!(sessions["sessions"][0]["key"], key, "{sessions}");
    let other: Value = admin_json("/v1/admin/sessions?channel=telegram").await;
    assert_eq!(other["sessions"], json!([]), "filtered by channel");
    let one: Value = admin_json(&format!("/v1/admin/sessions/{key}")).await;
    let transcript = one["transcript"].as_array().unwrap();
    assert_eq!(transcript[0]["content"], "hello admin");
    assert_eq!(transcript[1]["content"], "echo: hello admin");
    assert!(one["usage"]["tokens_in"].as_i64().is_some());
    let missing = get("/v1/admin/sessions/agent:main:nope", Some(ADMIN))
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let outbox: Value = admin_json("/v1/admin/outbox").await;
    assert_eq!(outbox["messages"], json!([]), "nothing waiting: {outbox}");
    let runs = get("/v1/admin/subagents", Some(ADMIN)).await.unwrap();
    assert_eq!(runs.status(), 200);

    // Pairing, as the CLI does it: a pending code is approved, then the user revoked.
    let store = ferroclaw::storage::connect(&format!(
        "sqlite://{}",
        work.path().join("ferroclaw.db").display()
    ))
    .await
    .unwrap();
    let request = ferroclaw::storage::PairingRequest {
        channel: "telegram".into(),
        user_id: "77".into(),
        user_name: "Zed".into(),
        code: "ABC123".into(),
        now_ms: ferroclaw::clock::now_ms(),
        expires_at: ferroclaw::clock::now_ms() + 3_600_000,
    };
    store.pairing_request(&request, 10).await.unwrap();
    let listed: Value = admin_json("/v1/admin/pairing").await;
    assert_eq!(listed["pairing"][0]["state"], "pending", "{listed}");
    let post = |path: &str| client.post(url(path)).bearer_auth(ADMIN).send();
    assert_eq!(
        post("/v1/admin/pairing/approve/abc123")
            .await
            .unwrap()
            .status(),
        200
    );
    let listed: Value = admin_json("/v1/admin/pairing").await;
    assert_eq!(listed["pairing"][0]["state"], "approved");
    assert_eq!(
        post("/v1/admin/pairing/approve/ABC123")
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        post("/v1/admin/pairing/revoke/77").await.unwrap().status(),
        200
    );
    assert_eq!(
        post("/v1/admin/pairing/revoke/77").await.unwrap().status(),
        404
    );
    let unauthorised = client
        .post(url("/v1/admin/pairing/revoke/77"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn info_logs_carry_one_line_per_turn_and_no_body_or_secret_and_json_logs_parse() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&cfg(&llm.url));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    send(&hook, "c", "m1", "the private words BODY-QWERTY").await;
    let (_, logs) = service.terminate().await;
    let turn = logs
        .lines()
        .find(|l| l.contains(" turn ") || l.ends_with(" turn"))
        .unwrap_or_else(|| panic!("no per-turn line in:\n{logs}"));
    for field in [
        "model=\"standin/test-model\"",
        "tokens_in=",
        "duration_ms=",
        "outcome=\"answered\"",
    ] {
        assert!(turn.contains(field), "{field} in {turn}");
    }
    assert!(
        turn.contains("agent:main:webhook:main:c"),
        "the session is named: {turn}"
    );
    for secret in ["BODY-QWERTY", HOOK_SECRET, ADMIN] {
        assert!(
            !logs.contains(secret),
            "`{secret}` reached the INFO log:\n{logs}"
        );
    }

    let mut env: Vec<(&str, &str)> = ENV.to_vec();
    env.push(("FERROCLAW_LOG_FORMAT", "json"));
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    send(&hook, "c", "m2", "json please").await;
    let (_, logs) = service.terminate().await;
    let lines: Vec<Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "turn"
            && l["fields"]["outcome"] == "answered"
            && l["span"]["session"] == "agent:main:webhook:main:c"),
        "a JSON turn line with its session span"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_shows_a_running_subagent_tree_in_a_real_browser() {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok()
        })
        .expect("headless Chromium is needed (Debian's chromium package; .ci/run installs it)");
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "dig deep" {
            return if tool_results(body).is_empty() {
                Behaviour::tool(
                    "sessions_spawn",
                    json!({"task": "dig deeper", "label": "grandchild"}),
                )
            } else {
                Behaviour::Hang
            };
        }
        if user == "dig deeper" {
            return Behaviour::Hang;
        }
        if tool_results(body).is_empty() && user == "start digging" {
            Behaviour::tool(
                "sessions_spawn",
                json!({"task": "dig deep", "label": "digger"}),
            )
        } else {
            Behaviour::reply("started")
        }
    })
    .await;
    let work = Workdir::new(&cfg(&llm.url).replace(
        "[channels.webhook.main]",
        "[subagents]\nmax_depth = 2\n[channels.webhook.main]",
    ));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    send(&hook, "dig", "m1", "start digging").await;
    wait_for(
        "the grandchild running",
        Duration::from_secs(20),
        || async {
            (llm.requests()
                .iter()
                .any(|r| last_user(&r.body) == "dig deeper"))
            .then_some(())
        },
    )
    .await;
    let page = format!("{}/?token={ADMIN}", service.base);
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            &page,
        ])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("<h1>ferroclaw</h1>"),
        "rendered page:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parent = dom
        .find("agent:main:webhook:main:dig")
        .expect("the parent session heads the tree");
    let digger = dom.find("<b>digger</b>").expect("the child is listed");
    let grandchild = dom
        .find("<b>grandchild</b>")
        .expect("the grandchild is listed");
    assert!(
        parent < digger && digger < grandchild,
        "nested in order:\n{dom}"
    );
    let digger_item = &dom[digger..grandchild];
    assert!(digger_item.contains("running"), "{digger_item}");
    assert!(
        digger_item.contains("<ul>"),
        "the grandchild is nested under the child"
    );
    assert!(
        dom.contains("http-equiv=\"refresh\""),
        "it refreshes itself"
    );
}

/// The service runs with glibc's per-thread caches off (memory after a burst goes back,
/// src/heap.rs): it starts itself again once with `GLIBC_TUNABLES` naming
/// `tcache_count=0` and a fixed `trim_threshold` beside what the operator set, and the
/// programs it starts (an MCP server here) see the operator's variable as it was.
#[tokio::test(flavor = "multi_thread")]
async fn the_service_runs_without_thread_caches_and_its_children_see_the_operators_tunables() {
    let llm = LlmStandIn::echo().await;
    let probe = tempfile::tempdir().unwrap();
    let seen = probe.path().join("env");
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!(
            "[mcp.servers.probe]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"env > {}.part && mv {}.part {}; sleep 30\"]\n",
            seen.display(),
            seen.display(),
            seen.display()
        ),
    ));
    let operators = "glibc.malloc.arena_max=4";
    let service = Service::start(&work, &[("GLIBC_TUNABLES", operators)]).await;
    // The started-again process's first environment (glibc's loader splits the tunables'
    // text where it parses it, so it is searched as bytes).
    let environ = std::fs::read(format!("/proc/{}/environ", service.pid())).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains("glibc.malloc.tcache_count=0")
            && environ.contains("glibc.malloc.trim_threshold=131072")
            && environ.contains(&format!("FERROCLAW_GLIBC_TUNABLES_BEFORE={operators}\0")),
        "the service was not started again with the caches off: {environ:?}"
    );
    // Started again as itself: `ps`, `top` and `pgrep ferroclaw` still name it.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", service.pid())).unwrap();
    assert_eq!(comm.trim(), "ferroclaw");
    wait_for(
        "the MCP server to write its environment",
        Duration::from_secs(20),
        || {
            let seen = seen.clone();
            async move { seen.exists().then_some(()) }
        },
    )
    .await;
    let child = std::fs::read_to_string(&seen).unwrap();
    let tunables: Vec<&str> = child
        .lines()
        .filter(|l| l.starts_with("GLIBC_TUNABLES=") || l.starts_with("FERROCLAW_GLIBC"))
        .collect();
    assert_eq!(tunables, [format!("GLIBC_TUNABLES={operators}")]);
    // An operator who chose the caches' size keeps it, and nothing is started again.
    let (code, _) = service.terminate().await;
    assert_eq!(code, Some(0));
    let chosen = "glibc.malloc.tcache_count=3";
    let service = Service::start(&work, &[("GLIBC_TUNABLES", chosen)]).await;
    let environ = std::fs::read(format!("/proc/{}/environ", service.pid())).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains(&format!("GLIBC_TUNABLES={chosen}\0")),
        "{environ}"
    );
    assert!(
        !environ.contains("FERROCLAW_GLIBC_TUNABLES_BEFORE"),
        "{environ}"
    );
}
