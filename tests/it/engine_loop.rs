//! The tool loop, tools, compaction and /stop, through the real app with a scripted LLM.

use crate::common::inproc::{InProc, config};
use crate::common::llm::{Behaviour, LlmStandIn, Protocol, tool_results};
use ferroclaw_channel_core::OutboundKind;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn has_tool_results(body: &Value) -> bool {
    !tool_results(body).is_empty()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_iteration_cap_ends_the_turn_with_a_message_after_exactly_max_iterations_calls() {
    let llm = LlmStandIn::start(|_, _| Behaviour::tool("list_files", json!({}))).await;
    let app = InProc::start(&config(&llm.url, "max_iterations = 3", "")).await;
    app.say("c", "loop forever").await;
    let delivered = app.wait_delivered(1).await;
    assert_eq!(delivered[0].kind, OutboundKind::Error);
    assert!(
        delivered[0].text.contains("stopped after 3 model calls"),
        "{}",
        delivered[0].text
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(llm.count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_returned_together_run_concurrently() {
    // A slow HTTP endpoint the two web_fetch calls hit at the same time.
    let hits: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let recorded = hits.clone();
    let app_router = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let recorded = recorded.clone();
            async move {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(400)).await;
                recorded.lock().unwrap().push((start, Instant::now()));
                "slow body"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = format!("http://{}/slow", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app_router).await.unwrap() });

    let url = slow.clone();
    let llm = LlmStandIn::start(move |body, _| {
        if has_tool_results(body) {
            Behaviour::reply("both fetched")
        } else {
            Behaviour::tools(&[
                ("web_fetch", json!({"url": url})),
                ("web_fetch", json!({"url": url})),
            ])
        }
    })
    .await;
    let app = InProc::start(&config(
        &llm.url,
        "",
        "[tools]\nweb_fetch_allow_private = true",
    ))
    .await;
    app.say("c", "fetch twice").await;
    let delivered = app.wait_delivered(1).await;
    assert_eq!(delivered[0].text, "both fetched");
    let hits = hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 2);
    assert!(
        hits[0].0 < hits[1].1 && hits[1].0 < hits[0].1,
        "the two calls overlap in time"
    );
    let results = tool_results(&llm.requests()[1].body);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.contains("slow body")));
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_errors_and_invalid_arguments_go_back_to_the_model_naming_the_field() {
    let llm = LlmStandIn::start(|body, _| {
        if has_tool_results(body) {
            Behaviour::reply("noted")
        } else {
            Behaviour::tools(&[
                ("read_file", json!({})),
                ("write_file", json!({"path": 5, "content": "x"})),
                ("read_file", json!({"path": "../../etc/passwd"})),
                ("no_such_tool", json!({})),
            ])
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "try things").await;
    assert_eq!(
        app.wait_delivered(1).await[0].text,
        "noted",
        "a tool error never ends the turn"
    );
    let results = tool_results(&llm.requests()[1].body);
    assert!(
        results[0].starts_with("Error: invalid arguments") && results[0].contains("path"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("field `path`"), "{}", results[1]);
    assert!(results[2].contains("`..` is not allowed"), "{}", results[2]);
    assert!(results[3].contains("not available"), "{}", results[3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn file_tools_work_inside_the_session_workspace() {
    let llm = LlmStandIn::start(|body, _| match tool_results(body).len() {
        0 => Behaviour::tool(
            "write_file",
            json!({"path": "notes/a.txt", "content": "hello file"}),
        ),
        1 => Behaviour::tool("read_file", json!({"path": "notes/a.txt"})),
        2 => Behaviour::tool("list_files", json!({"path": "notes"})),
        _ => Behaviour::reply("done"),
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("files", "write then read").await;
    app.wait_delivered(1).await;
    let results = tool_results(&llm.requests()[3].body);
    assert_eq!(results[1], "hello file");
    assert_eq!(results[2], "a.txt");
    let on_disk = app
        .dir
        .path()
        .join("ws/agent_3Amain_3Arec_3Afiles/notes/a.txt");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "hello file");
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_refuses_loopback_and_private_addresses_by_default() {
    let hits = Arc::new(Mutex::new(0));
    let counter = hits.clone();
    let router = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            *counter.lock().unwrap() += 1;
            "should not be reached"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let targets = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        "http://10.0.0.1/".to_string(),
        "http://10.200.3.4:8080/x".to_string(),
        "http://[::1]/".to_string(),
        "http://169.254.169.254/latest/meta-data".to_string(),
        "file:///etc/passwd".to_string(),
    ];
    let calls: Vec<(&str, Value)> = targets
        .iter()
        .map(|t| ("web_fetch", json!({"url": t})))
        .collect();
    let llm = LlmStandIn::start(move |body, _| {
        if has_tool_results(body) {
            Behaviour::reply("ok")
        } else {
            Behaviour::tools(&calls)
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "fetch private things").await;
    app.wait_delivered(1).await;
    let results = tool_results(&llm.requests()[1].body);
    assert_eq!(results.len(), targets.len());
    for (target, result) in targets.iter().zip(&results) {
        assert!(
            result.starts_with("Error:"),
            "{target} must be refused: {result}"
        );
    }
    assert_eq!(
        *hits.lock().unwrap(),
        0,
        "no request reached the loopback server"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn history_is_compacted_before_the_limit_and_the_summary_is_used() {
    const SUMMARY: &str = "SUMMARY: the user sent three long messages about ferns.";
    let llm = LlmStandIn::start(|body, _| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        if system.starts_with("You summarise conversations") {
            Behaviour::reply(SUMMARY)
        } else {
            Behaviour::reply("short answer")
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "max_context_tokens = 1000", "")).await;
    let long = "fern ".repeat(200); // ~1000 characters, ~250 tokens
    for i in 0..4 {
        app.say("c", &format!("{i}: {long}")).await;
    }
    app.wait_delivered(4).await;
    let requests = llm.requests();
    let is_summary =
        |r: &crate::common::llm::Recorded| r.system().starts_with("You summarise conversations");
    let first_summary = requests
        .iter()
        .position(is_summary)
        .expect("a summarisation call happened");
    for r in &requests[..first_summary] {
        let chars = r.body["messages"].to_string().len();
        assert!(
            chars / 4 < 1000,
            "a call before compaction exceeded the limit ({chars} chars)"
        );
    }
    // The next call of the turn (compaction's memory reading runs beside the summary).
    let after = requests[first_summary + 1..]
        .iter()
        .find(|r| {
            !is_summary(r)
                && !r
                    .system()
                    .starts_with("You keep an assistant's long-term memory")
        })
        .expect("the turn went on after compacting");
    assert!(
        after.body["messages"].to_string().contains(SUMMARY),
        "the next call carries the summary"
    );
    assert!(
        after.body["messages"].to_string().len() / 4 < 1000,
        "and fits the limit"
    );
    let session = app.session("c").await;
    assert_eq!(
        session.summary.as_deref(),
        Some(SUMMARY),
        "the summary is stored"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_length_error_compacts_and_retries_once() {
    let llm = LlmStandIn::start(|body, _| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        let text = body["messages"].to_string();
        if system.starts_with("You summarise conversations") {
            Behaviour::reply("S")
        } else if text.contains("first") && !text.contains("[Summary") {
            Behaviour::fail(400, r#"{"error":{"code":"context_length_exceeded"}}"#)
        } else {
            Behaviour::reply("fits now")
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "first").await;
    app.wait_delivered(1).await;
    app.say("c", "second").await;
    let delivered = app.wait_delivered(2).await;
    assert_eq!(delivered[1].text, "fits now");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_ends_a_long_turn_within_a_second_and_the_session_goes_on() {
    let llm = LlmStandIn::start(|body, _| {
        if crate::common::llm::last_user(body) == "take forever" {
            Behaviour::Hang
        } else {
            Behaviour::reply("next answer")
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "take forever").await;
    crate::common::wait_for("the long call to start", Duration::from_secs(5), || async {
        (llm.count() == 1).then_some(())
    })
    .await;
    let sent = Instant::now();
    app.say("c", "/stop").await;
    let delivered = app.wait_delivered(1).await;
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "stopped in {:?}",
        sent.elapsed()
    );
    assert_eq!(delivered[0].text, "⏹ Stopped the running turn.");
    app.say("c", "and now?").await;
    let delivered = app.wait_delivered(2).await;
    assert_eq!(delivered[1].text, "next answer");
    // The transcript stays consistent: the stopped user message, then the next exchange.
    let history = llm.requests()[1].body["messages"].to_string();
    assert!(history.contains("take forever") && history.contains("and now?"));
}

#[tokio::test(flavor = "multi_thread")]
async fn model_switches_are_validated_and_status_shows_who_answered() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::reply(format!("I am {}", body["model"].as_str().unwrap()))
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "/model nope/x").await;
    app.say("c", "/model standin/other").await;
    app.say("c", "who?").await;
    app.say("c", "/status").await;
    let d = app.wait_delivered(4).await;
    assert_eq!(d[0].kind, OutboundKind::Error);
    assert!(d[0].text.contains("Unknown provider `nope`"));
    assert!(d[1].text.contains("standin/other"));
    assert_eq!(d[2].text, "I am other");
    assert!(
        d[3].text.contains("Model: standin/other")
            && d[3].text.contains("Last answer from: standin/other"),
        "{}",
        d[3].text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_provider_runs_the_tool_loop_too() {
    let llm = LlmStandIn::start(|body, _| {
        let has_result = body["messages"].to_string().contains("tool_result");
        if has_result {
            Behaviour::reply("listed")
        } else {
            Behaviour::tool("list_files", json!({}))
        }
    })
    .await;
    let cfg = format!(
        "[agent]\nmodel = \"claude/sonnet\"\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{}\"\n[fallback]\nretries_per_model = 0\n",
        llm.anthropic_url
    );
    let app = InProc::start(&cfg).await;
    app.say("c", "list").await;
    assert_eq!(app.wait_delivered(1).await[0].text, "listed");
    let requests = llm.requests();
    assert!(requests.iter().all(|r| r.protocol == Protocol::Anthropic));
    let second = requests[1].body["messages"].to_string();
    assert!(
        second.contains("tool_use") && second.contains("tool_result"),
        "{second}"
    );
    let deltas = app.recorder.deltas.lock().unwrap().concat();
    assert_eq!(deltas, "listed", "the reply streamed to the channel");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_message_tool_posts_an_interim_message_before_the_reply() {
    let llm = LlmStandIn::start(|body, _| {
        if has_tool_results(body) {
            Behaviour::reply("final answer")
        } else {
            Behaviour::tool("message", json!({"text": "working on it…"}))
        }
    })
    .await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    app.say("c", "do a long thing").await;
    let d = app.wait_delivered(2).await;
    assert_eq!(d[0].text, "working on it…");
    assert_eq!(d[0].route, InProc::route("c"), "in the same chat");
    assert_eq!(d[1].text, "final answer");
    assert!(d[0].id < d[1].id);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_panics_is_answered_with_an_error_and_the_session_goes_on() {
    let llm = LlmStandIn::echo().await;
    let app = InProc::start(&config(&llm.url, "", "")).await;
    let route = InProc::route("c");
    let key = route.session_key();
    let store = &app.app.store;
    store.session_get_or_create(&key, &route, 1).await.unwrap();
    // Corrupt state (a model name that never passed validation) makes the turn panic.
    store
        .session_set_model(&key, Some("no-slash-here"))
        .await
        .unwrap();
    app.say("c", "hello").await;
    let d = app.wait_delivered(1).await;
    assert_eq!(d[0].kind, OutboundKind::Error);
    assert!(d[0].text.contains("Something went wrong"), "{}", d[0].text);
    // The lane is not wedged: the next messages are handled.
    app.say("c", "/model standin/m").await;
    app.say("c", "again").await;
    let d = app.wait_delivered(3).await;
    assert_eq!(d[2].text, "echo: again");
    let pending = store.journal_pending().await.unwrap();
    assert!(
        pending.is_empty(),
        "the crashed message is answered, not retried forever"
    );
}
