//! Teams (SPEC section 12) through the real service, the webhook and the LLM stand-in: a lead
//! and two members work a board with a dependency (the blocked task starts only once its
//! blocker is complete), the inbox carries a message between members, the board survives a
//! restart, and an agent outside the team sees neither tool.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

const SECRET: &str = "team-secret";

fn system(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The task id in a member's task text (`Team task #N ...`).
fn task_id(user: &str) -> i64 {
    user.split("Team task #")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn script(body: &Value, _: usize) -> Behaviour {
    let sys = system(body);
    let user = last_user(body);
    let results = fresh_results(body);
    if sys.starts_with("You are the researcher.") {
        return match results.len() {
            0 => Behaviour::tool(
                "team_message",
                json!({"action": "send", "to": "writer", "text": "the facts are 42"}),
            ),
            1 => Behaviour::tool(
                "team_tasks",
                json!({"action": "complete", "task_id": task_id(&user), "result": "facts: 42"}),
            ),
            _ => Behaviour::reply("research done"),
        };
    }
    if sys.starts_with("You are the writer.") {
        return match results.len() {
            0 => Behaviour::tool("team_message", json!({"action": "read"})),
            1 => Behaviour::tool(
                "team_tasks",
                json!({"action": "complete", "task_id": task_id(&user), "result": "article about 42"}),
            ),
            _ => Behaviour::reply("writing done"),
        };
    }
    if user == "start the project" {
        return match results.first() {
            None => Behaviour::tool(
                "team_tasks",
                json!({"action": "create", "title": "research", "description": "find the facts", "assignee": "researcher"}),
            ),
            Some(first) if results.len() == 1 => {
                let created: Value = serde_json::from_str(first).unwrap_or_default();
                Behaviour::tool(
                    "team_tasks",
                    json!({"action": "create", "title": "write", "description": "write it up",
                        "assignee": "writer", "blocked_by": [created["task"]["id"]]}),
                )
            }
            Some(_) => Behaviour::reply("board set up"),
        };
    }
    Behaviour::reply("noted")
}

fn tool_names(request: &Recorded) -> String {
    request.body["tools"].to_string()
}

fn config(llm: &LlmStandIn) -> String {
    config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\
         [agents.researcher]\nsystem_prompt = \"You are the researcher.\"\n\
         [agents.writer]\nsystem_prompt = \"You are the writer.\"\n\
         [agents.loner]\nsystem_prompt = \"You are alone.\"\n\
         [teams.docs]\nlead = \"main\"\nmembers = [\"researcher\", \"writer\"]\n\
         [[bindings]]\nagent = \"loner\"\nchat = \"alone\"\n",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_works_a_board_with_a_dependency_and_an_inbox_and_the_board_survives_a_restart() {
    let llm = LlmStandIn::start(script).await;
    let work = Workdir::new(&config(&llm));
    let env = [("FC_HOOK", SECRET), ("FERROCLAW_ADMIN_TOKEN", "adm")];
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);

    let (status, body) = hook
        .send("c", None, "m1", "start the project", "?wait=30")
        .await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for("both tasks announced", Duration::from_secs(30), || async {
        let messages = hook.list("c", 0).await;
        let announced = |label: &str| {
            messages.iter().any(|m| {
                m["kind"] == "announce" && m["text"].as_str().unwrap_or_default().contains(label)
            })
        };
        (announced("docs #1 — done") && announced("docs #2 — done")).then_some(messages)
    })
    .await;
    assert_eq!(
        done.iter().filter(|m| m["kind"] == "announce").count(),
        2,
        "each task's run announced once: {done:?}"
    );

    let requests = llm.requests();
    let is = |r: &Recorded, who: &str| system(&r.body).starts_with(who);
    // The writer's task started only after the researcher completed its blocker.
    let completing = requests
        .iter()
        .position(|r| is(r, "You are the researcher.") && fresh_results(&r.body).len() == 1)
        .expect("the researcher completed its task");
    let writer_first = requests
        .iter()
        .position(|r| is(r, "You are the writer."))
        .expect("the writer ran");
    assert!(
        writer_first > completing,
        "the blocked task started after its blocker was completed ({writer_first} > {completing})"
    );
    let writer = &requests[writer_first];
    assert!(
        writer
            .last_user
            .contains("Result of task #1 (research): facts: 42"),
        "{}",
        writer.last_user
    );
    // The inbox: the researcher's message reached the writer.
    let read = requests
        .iter()
        .find(|r| is(r, "You are the writer.") && fresh_results(&r.body).len() == 1)
        .unwrap();
    assert!(
        fresh_results(&read.body)[0].contains("the facts are 42"),
        "{:?}",
        fresh_results(&read.body)
    );
    // Members and the lead have the team tools; the loner has neither.
    assert!(tool_names(writer).contains("team_tasks"));
    hook.send("alone", None, "m2", "hello", "?wait=20").await;
    let loner = llm
        .requests()
        .into_iter()
        .find(|r| is(r, "You are alone."))
        .unwrap();
    assert!(
        !tool_names(&loner).contains("team_tasks") && !tool_names(&loner).contains("team_message"),
        "{}",
        tool_names(&loner)
    );

    // The board, in the chat and after a restart.
    let board = |body: Value| {
        body["replies"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (_, body) = hook.send("c", None, "m3", "/team", "?wait=20").await;
    let before = board(body);
    assert!(
        before.contains("✅ #1 research (researcher) — facts: 42"),
        "{before}"
    );
    assert!(
        before.contains("✅ #2 write (writer) — article about 42"),
        "{before}"
    );
    drop(service);
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);
    let (_, body) = hook.send("c", None, "m4", "/team", "?wait=20").await;
    assert_eq!(board(body), before, "the board is stored");
    let (_, admin) = service.get_json("/v1/admin/teams/docs/tasks", "adm").await;
    let tasks = admin["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{admin}");
    assert_eq!(tasks[1]["blocked_by"], json!([1]));
    assert!(tasks.iter().all(|t| t["status"] == "done"), "{admin}");
}
