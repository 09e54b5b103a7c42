//! The policy seam holds: a gate that refuses stops a tool call before it runs and a model
//! call before any model is asked, on the real engine over a real SQLite store with a
//! scripted model.

use super::{Engine, EngineParts, LiveFeedback, TurnInput};
use crate::policy::{CallKind, Gate, ModelCallFacts, ToolCallFacts, Verdict};
use crate::providers::{
    ChatRequest, ChatResponse, DeltaSink, FallbackChain, ModelProvider, ProviderError, Role,
    ToolCall, Usage,
};
use async_trait::async_trait;
use ferroclaw_channel_core::{ChatKind, ChatRoute, OutboundKind};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Asks to write `a.txt` first, then answers with the last tool result it was given.
#[derive(Default)]
struct Scripted {
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl ModelProvider for Scripted {
    async fn complete(
        &self,
        _model: &str,
        request: &ChatRequest,
        _on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        self.requests.lock().unwrap().push(request.clone());
        let last = request.messages.last().expect("a message");
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        };
        if last.role == Role::Tool {
            return Ok(ChatResponse {
                content: format!("tool said: {}", last.content),
                tool_calls: vec![],
                usage,
            });
        }
        Ok(ChatResponse {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "write_file".into(),
                arguments: r#"{"path":"a.txt","content":"written"}"#.into(),
            }],
            usage,
        })
    }
}

/// Refuses the named tool and (when set) every model call; records what it saw.
#[derive(Default)]
struct Refusing {
    tool: Option<&'static str>,
    models: bool,
    seen: Mutex<Vec<String>>,
}

#[async_trait]
impl Gate for Refusing {
    async fn before_tool(&self, call: &ToolCallFacts<'_>) -> Verdict {
        self.seen.lock().unwrap().push(format!(
            "before_tool {} for {} at {}",
            call.tool, call.scope.agent, call.arguments["path"]
        ));
        match self.tool {
            Some(tool) if tool == call.tool => Verdict::Refuse(format!("{tool} is not allowed")),
            _ => Verdict::Allow,
        }
    }
    async fn after_tool(&self, call: &ToolCallFacts<'_>, result: &mut String) {
        self.seen
            .lock()
            .unwrap()
            .push(format!("after_tool {}", call.tool));
        result.push_str(" [seen by the gate]");
    }
    async fn before_model(&self, call: &ModelCallFacts<'_>) -> Verdict {
        self.seen.lock().unwrap().push(format!(
            "before_model {} {}",
            call.kind.as_str(),
            call.model
        ));
        if self.models {
            Verdict::Refuse("the daily budget is spent".into())
        } else {
            Verdict::Allow
        }
    }
    async fn after_model(
        &self,
        call: &ModelCallFacts<'_>,
        outcome: crate::policy::ModelOutcome<'_>,
    ) {
        assert_eq!(call.kind, CallKind::UserTurn);
        assert!(call.estimated_input_tokens > 0, "the request was estimated");
        let crate::policy::ModelOutcome::Answered { by, usage } = outcome else {
            self.seen.lock().unwrap().push("after_model failed".into());
            return;
        };
        self.seen.lock().unwrap().push(format!(
            "after_model {by} {}+{}",
            usage.input_tokens, usage.output_tokens
        ));
    }
}

struct Quiet;

struct NoTeams;

impl crate::policy::Teammates for NoTeams {
    fn in_team(&self, _agent: &str, _team: &str) -> bool {
        false
    }
}

#[async_trait]
impl LiveFeedback for Quiet {
    fn live(&self, _route: &ChatRoute) -> bool {
        false
    }
    async fn delta(&self, _route: &ChatRoute, _in_reply_to: &str, _delta: &str) {}
    async fn typing(&self, _route: &ChatRoute) {}
}

/// One user turn "hello" on a fresh store, with `gate`; the reply and the workspace folder.
async fn turn_with(
    gate: Arc<Refusing>,
    model: Arc<Scripted>,
) -> (Vec<(OutboundKind, String)>, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let store = crate::storage::connect(&format!("sqlite://{}/db.sqlite?mode=rwc", dir.display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let mut config = crate::config::Config::default();
    config.agent.model = "scripted/m".into();
    config.agent.fallbacks = vec![];
    config.agent.workspace = dir.join("ws").display().to_string();
    let config = Arc::new(config);
    let providers: std::collections::HashMap<String, Arc<dyn ModelProvider>> =
        [("scripted".to_string(), model as Arc<dyn ModelProvider>)].into();
    let chain = Arc::new(FallbackChain::new(
        providers,
        Default::default(),
        vec![],
        0,
        Duration::from_secs(1),
        Duration::from_secs(5),
    ));
    let egress = Arc::new(crate::egress::Guarded::new(false, ""));
    let outbox = crate::outbox::OutboxNotifier::new(["cli"]);
    // The tool the scripted model calls, registered as the composition root would.
    let tools = Arc::new(crate::tools::ToolRegistry::new(vec![Arc::new(
        crate::tools::WriteFile,
    )]));
    let personas = crate::policy::Personas::new(
        &config,
        crate::policy::PersonaParts {
            agents: Arc::new(crate::agents::Agents::from_config(&config)),
            teams: Arc::new(NoTeams),
            tools: tools.clone(),
            chain: chain.clone(),
            sandbox: None,
        },
    );
    let engine = Engine::new(EngineParts {
        store: store.clone(),
        chain,
        config,
        feedback: Arc::new(Quiet),
        outbox,
        tools,
        egress,
        personas,
        components: Vec::new(),
        gate,
        transcriber: Default::default(),
    });
    let route = ChatRoute {
        channel: "cli".into(),
        kind: ChatKind::Direct,
        chat_id: "me".into(),
        thread_id: None,
    };
    let key = route.session_key();
    let mut session = store.session_get_or_create(&key, &route, 0).await.unwrap();
    let input = TurnInput {
        route: &route,
        message_id: "m1",
        effects: None,
        sender: Some("me"),
        attachments: &[],
        images: &[],
        mention_names: &[],
        job: None,
        heartbeat: false,
        for_tool: false,
        reports_run: None,
    };
    let out = engine
        .run_turn(
            &input,
            &mut session,
            "hello",
            &CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    let workspace = super::context::workspace_for(&dir.join("ws").display().to_string(), &key);
    (out.outbound, workspace)
}

#[tokio::test]
async fn a_refused_tool_call_does_not_run_and_the_model_hears_why() {
    let gate = Arc::new(Refusing {
        tool: Some("write_file"),
        ..Default::default()
    });
    let model = Arc::new(Scripted::default());
    let (outbound, workspace) = turn_with(gate.clone(), model.clone()).await;
    let (kind, reply) = outbound.last().unwrap();
    assert_eq!(*kind, OutboundKind::Reply);
    assert_eq!(reply, "tool said: Error: write_file is not allowed");
    assert!(!workspace.join("a.txt").exists(), "the refused write ran");
    let seen = gate.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "before_model user_turn scripted/m",
            "after_model scripted/m 10+2",
            "before_tool write_file for main at \"a.txt\"",
            "before_model user_turn scripted/m",
            "after_model scripted/m 10+2",
        ],
        "a refused call is not reported as run"
    );
}

#[tokio::test]
async fn an_allowed_tool_call_runs_and_the_gate_sees_its_result() {
    let gate = Arc::new(Refusing::default());
    let model = Arc::new(Scripted::default());
    let (outbound, workspace) = turn_with(gate.clone(), model).await;
    let (_, reply) = outbound.last().unwrap();
    assert!(reply.ends_with("[seen by the gate]"), "{reply}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "written"
    );
    assert!(
        gate.seen
            .lock()
            .unwrap()
            .contains(&"after_tool write_file".to_string())
    );
}

#[tokio::test]
async fn a_refused_model_call_asks_no_model_and_says_why_in_the_chat() {
    let gate = Arc::new(Refusing {
        models: true,
        ..Default::default()
    });
    let model = Arc::new(Scripted::default());
    let (outbound, _) = turn_with(gate, model.clone()).await;
    assert_eq!(
        outbound,
        [(OutboundKind::Error, "the daily budget is spent".to_string())]
    );
    assert!(
        model.requests.lock().unwrap().is_empty(),
        "a model was asked"
    );
}
