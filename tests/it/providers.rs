//! Providers and the fallback chain against OpenAI- and Anthropic-protocol stand-ins on
//! loopback: stream reassembly, and what each error class does (SPEC section 9).

use crate::common::llm::{Behaviour, LlmStandIn};
use ferroclaw::providers::{
    AnthropicProvider, ChainError, ChatMessage, ChatRequest, FallbackChain, ModelProvider,
    ModelRef, OpenAiProvider, ProviderError, Role, ToolSpec,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn request() -> ChatRequest {
    ChatRequest {
        system: "be brief".into(),
        messages: vec![ChatMessage::text(Role::User, "hi")],
        volatile: Some("step 2 of 3".into()),
        tools: std::sync::Arc::new([ToolSpec {
            name: "lookup".into(),
            description: "d".into(),
            parameters: json!({"type":"object"}).into(),
        }]),
        affinity: None,
    }
}

async fn run(provider: &dyn ModelProvider) -> (ferroclaw::providers::ChatResponse, String) {
    let deltas = Mutex::new(String::new());
    let response = provider
        .complete("m", &request(), &|d| deltas.lock().unwrap().push_str(d))
        .await
        .unwrap();
    (response, deltas.into_inner().unwrap())
}

#[tokio::test]
async fn text_and_tool_call_streams_cut_into_three_byte_pieces_are_reassembled_in_both_protocols() {
    let text = "Héllo — wörld, let me look that up. ✅";
    let llm = LlmStandIn::start_with_pieces(3, move |_, _| Behaviour::Tools {
        text: text.into(),
        calls: vec![
            (
                "lookup".into(),
                r#"{"query":"ferro \"claw\"","n":3}"#.into(),
            ),
            ("read_file".into(), r#"{"path":"a/b.txt"}"#.into()),
        ],
    })
    .await;
    let openai = OpenAiProvider::new(ferroclaw::http::Transport::Http1, &llm.url, None);
    let anthropic =
        AnthropicProvider::new(ferroclaw::http::Transport::Http1, &llm.anthropic_url, None);
    for provider in [&openai as &dyn ModelProvider, &anthropic] {
        let (response, streamed) = run(provider).await;
        assert_eq!(response.content, text);
        assert_eq!(streamed, text, "deltas add up to the text");
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].name, "lookup");
        let args: serde_json::Value =
            serde_json::from_str(&response.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"query": "ferro \"claw\"", "n": 3}));
        assert_eq!(response.tool_calls[1].arguments, r#"{"path":"a/b.txt"}"#);
        assert_ne!(response.tool_calls[0].id, response.tool_calls[1].id);
        assert_eq!(
            (response.usage.input_tokens, response.usage.output_tokens),
            (11, 7)
        );
    }
    let requests = llm.requests();
    assert_eq!(
        requests[0].body["tools"][0]["function"]["name"], "lookup",
        "OpenAI tools format"
    );
    assert_eq!(
        requests[1].body["tools"][0]["name"], "lookup",
        "Anthropic tools format"
    );
    // The stable prefix first, marked for Anthropic's prompt cache; what changes per call
    // (`volatile`) after the history, outside it.
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(
        requests[0].body["messages"][2],
        json!({"role": "system", "content": "step 2 of 3"})
    );
    assert_eq!(requests[1].body["system"][0]["text"], "be brief");
    assert_eq!(requests[1].body["system"][0]["cache_control"], ephemeral);
    assert_eq!(requests[1].body["tools"][0]["cache_control"], ephemeral);
    let last = &requests[1].body["messages"][0]["content"];
    assert_eq!(
        last[0],
        json!({"type": "text", "text": "hi", "cache_control": ephemeral})
    );
    assert_eq!(last[1], json!({"type": "text", "text": "step 2 of 3"}));
}

#[tokio::test]
async fn an_anthropic_error_event_after_http_200_is_classified() {
    let llm = LlmStandIn::start(|_, _| Behaviour::reply("unused")).await;
    // Drive the error event through a raw stand-in: overloaded after 200.
    let app = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(|| async {
            let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
                        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
            ([("content-type", "text/event-stream")], body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let provider = AnthropicProvider::new(ferroclaw::http::Transport::Http1, &base, None);
    let err = provider
        .complete("m", &request(), &|_| {})
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Overloaded { retry_after: None });
    drop(llm);
}

struct Chain {
    llm: LlmStandIn,
    chain: FallbackChain,
}

/// A chain `p/a` → `p/b` where model `a` behaves as `a_does` and `b` answers "from b".
async fn chain(a_does: Behaviour, retries: u32, cooldown: Duration, timeout: Duration) -> Chain {
    let llm = LlmStandIn::start(move |body, _| {
        if body["model"] == "a" {
            a_does.clone()
        } else {
            Behaviour::reply("from b")
        }
    })
    .await;
    let chain = chain_over(&llm, &["p/b"], retries, cooldown, timeout);
    Chain { llm, chain }
}

/// A chain whose provider `p` is the stand-in, with the given fallbacks.
fn chain_over(
    llm: &LlmStandIn,
    fallbacks: &[&str],
    retries: u32,
    cooldown: Duration,
    timeout: Duration,
) -> FallbackChain {
    let mut providers: HashMap<String, Arc<dyn ModelProvider>> = HashMap::new();
    providers.insert(
        "p".into(),
        Arc::new(OpenAiProvider::new(
            ferroclaw::http::Transport::Http1,
            &llm.url,
            None,
        )),
    );
    let fallbacks = fallbacks
        .iter()
        .map(|m| ModelRef::parse(m).unwrap())
        .collect();
    FallbackChain::new(
        providers,
        HashMap::new(),
        fallbacks,
        retries,
        cooldown,
        timeout,
    )
}

async fn complete(c: &Chain) -> Result<(String, String), ChainError> {
    c.chain
        .complete_from(&ModelRef::parse("p/a").unwrap(), &request(), &|_| {})
        .await
        .map(|(r, m)| (r.content, m.to_string()))
}

#[tokio::test]
async fn each_error_class_retries_moves_on_or_stops_as_the_spec_says() {
    let fail = |status: u16, body: &str| Behaviour::Fail {
        status,
        body: body.into(),
        retry_after: Some(0),
    };
    // (behaviour of a, requests to a, requests to b, answered by b?)
    let cases = [
        ("429 rate limit", fail(429, "{}"), 3, 1, true),
        ("500", fail(500, ""), 3, 1, true),
        ("502", fail(502, ""), 3, 1, true),
        ("503", fail(503, ""), 3, 1, true),
        ("504", fail(504, ""), 3, 1, true),
        (
            "529 overloaded",
            fail(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
            ),
            3,
            1,
            true,
        ),
        ("401", fail(401, ""), 1, 1, true),
        ("403", fail(403, ""), 1, 1, true),
        ("402", fail(402, ""), 1, 1, true),
        (
            "429 insufficient_quota",
            fail(429, r#"{"error":{"code":"insufficient_quota"}}"#),
            1,
            1,
            true,
        ),
        (
            "404 model not found",
            fail(404, r#"{"error":{"code":"model_not_found"}}"#),
            1,
            1,
            true,
        ),
        (
            "400 invalid request",
            fail(400, r#"{"error":{"message":"bad tool schema"}}"#),
            1,
            0,
            false,
        ),
        (
            "400 context length",
            fail(400, r#"{"error":{"code":"context_length_exceeded"}}"#),
            1,
            0,
            false,
        ),
    ];
    for (name, behaviour, to_a, to_b, answered) in cases {
        let c = chain(
            behaviour,
            2,
            Duration::from_secs(60),
            Duration::from_secs(10),
        )
        .await;
        let result = complete(&c).await;
        assert_eq!(c.llm.count_for("a"), to_a, "{name}: requests to a");
        assert_eq!(c.llm.count_for("b"), to_b, "{name}: requests to b");
        if answered {
            assert_eq!(
                result.unwrap(),
                ("from b".to_string(), "p/b".to_string()),
                "{name}"
            );
        } else {
            match result {
                Err(ChainError::Final { error, .. }) => {
                    if name.contains("context") {
                        assert_eq!(error, ProviderError::ContextTooLong);
                    } else {
                        assert!(
                            matches!(error, ProviderError::InvalidRequest(_)),
                            "{name}: {error:?}"
                        );
                    }
                }
                other => panic!("{name}: expected a final error, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_timeout_is_retried_then_falls_back() {
    let c = chain(
        Behaviour::Hang,
        1,
        Duration::from_secs(60),
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(complete(&c).await.unwrap().1, "p/b");
    assert_eq!(c.llm.count_for("a"), 2);
}

#[tokio::test]
async fn retry_after_is_honoured_on_the_same_model() {
    let llm = LlmStandIn::start(|_, i| {
        if i == 0 {
            Behaviour::Fail {
                status: 429,
                body: "{}".into(),
                retry_after: Some(1),
            }
        } else {
            Behaviour::reply("ok")
        }
    })
    .await;
    let chain = chain_over(
        &llm,
        &[],
        2,
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let (response, model) = chain
        .complete_from(&ModelRef::parse("p/a").unwrap(), &request(), &|_| {})
        .await
        .unwrap();
    assert_eq!(
        (response.content.as_str(), model.to_string().as_str()),
        ("ok", "p/a")
    );
    let r = llm.requests();
    let gap = r[1].started - r[0].started;
    assert!(
        gap >= Duration::from_millis(950),
        "waited {gap:?}, Retry-After said 1 s"
    );
}

#[tokio::test]
async fn the_chain_never_switches_model_after_streaming_began() {
    let c = chain(
        Behaviour::BreakAfter {
            text: "partial answer".into(),
        },
        2,
        Duration::from_secs(60),
        Duration::from_secs(10),
    )
    .await;
    let err = complete(&c).await.unwrap_err();
    assert!(matches!(err, ChainError::AfterStreaming { .. }), "{err:?}");
    assert_eq!(c.llm.count_for("a"), 1, "no retry once the user saw text");
    assert_eq!(
        c.llm.count_for("b"),
        0,
        "no fallback once the user saw text"
    );
}

#[tokio::test]
async fn a_failed_model_cools_down_and_is_tried_again_after_the_cooldown() {
    let c = chain(
        Behaviour::fail(401, ""),
        2,
        Duration::from_millis(700),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(complete(&c).await.unwrap().1, "p/b");
    assert_eq!(complete(&c).await.unwrap().1, "p/b");
    assert_eq!(c.llm.count_for("a"), 1, "a is skipped while cooling down");
    assert_eq!(c.llm.count_for("b"), 2);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(750)).await;
    assert!(start.elapsed() >= Duration::from_millis(700));
    complete(&c).await.unwrap();
    assert_eq!(
        c.llm.count_for("a"),
        2,
        "a is tried again once the cooldown expired"
    );
}

#[tokio::test]
async fn no_usable_model_explains_what_to_configure() {
    let mut unusable = HashMap::new();
    unusable.insert(
        "openai".to_string(),
        "provider `openai` needs its API key in OPENAI_API_KEY".to_string(),
    );
    let chain = FallbackChain::new(
        HashMap::new(),
        unusable,
        vec![],
        2,
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let err = chain
        .complete_from(&ModelRef::parse("openai/gpt").unwrap(), &request(), &|_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chain_is_itself_a_provider_that_falls_back() {
    let llm = LlmStandIn::start(|body, _| {
        if body["model"] == "a" {
            Behaviour::fail(503, "down")
        } else {
            Behaviour::reply("from b")
        }
    })
    .await;
    let chain = chain_over(&llm, &["p/b"], 0, Duration::ZERO, Duration::from_secs(10));
    let provider: &dyn ModelProvider = &chain;
    let answer = provider.complete("p/a", &request(), &|_| {}).await.unwrap();
    assert_eq!(answer.content, "from b");
    assert!(matches!(
        provider.complete("no-slash", &request(), &|_| {}).await,
        Err(ferroclaw::providers::ProviderError::ModelNotFound)
    ));
}

/// 250 calls open at once over HTTP/2, against a server that allows 200 streams per
/// connection (hyper's default) and answers only when all 250 are open: one connection would
/// hold 50 back for ever; spread over connections of 100 calls each, all are answered.
#[tokio::test(flavor = "multi_thread")]
async fn http2_calls_beyond_a_connections_stream_limit_open_another_connection() {
    const CALLS: usize = 250;
    let llm = LlmStandIn::start(|_, _| Behaviour::Gate {
        text: "all open".into(),
        open: CALLS,
    })
    .await;
    let provider = Arc::new(OpenAiProvider::new(
        ferroclaw::http::Transport::Http2,
        &llm.url,
        None,
    ));
    let calls = (0..CALLS).map(|_| {
        let provider = provider.clone();
        tokio::spawn(async move { run(&*provider).await.1 })
    });
    let answers = tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(calls))
        .await
        .expect("every call answered (none queued behind one connection's stream limit)");
    assert!(answers.into_iter().all(|a| a.unwrap() == "all open"));
    let requests = llm.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.version == axum::http::Version::HTTP_2)
    );
    let mut peers: Vec<_> = requests.iter().map(|r| r.peer).collect();
    peers.sort();
    peers.dedup();
    assert_eq!(
        peers.len(),
        CALLS.div_ceil(ferroclaw::http::STREAMS_PER_CONNECTION),
        "a connection per {} calls",
        ferroclaw::http::STREAMS_PER_CONNECTION
    );
}
