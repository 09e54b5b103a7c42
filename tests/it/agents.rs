//! Configured agents, bindings, skills and delegation (SPEC section 12) through the real
//! service, the signed webhook and the LLM stand-in: what each agent is sent (prompt, model,
//! tools) is read from the stand-in's recorded requests.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

const SECRET: &str = "agents-secret";
const WEBHOOK: &str = "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n";

/// The names of the tools a request offered.
fn tool_names(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The parameters schema of one offered tool.
fn tool_schema(request: &Recorded, name: &str) -> Value {
    request.body["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["function"]["name"] == name))
        .map(|t| t["function"]["parameters"].clone())
        .unwrap_or(Value::Null)
}

/// The text of the turn's answer (status messages of subagents may come before it).
fn answer(body: &Value) -> String {
    body["replies"]
        .as_array()
        .and_then(|r| {
            r.iter()
                .find(|m| m["kind"] == "reply" || m["kind"] == "error")
        })
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The first request whose last user message is `text`.
fn request_for(llm: &LlmStandIn, text: &str) -> Recorded {
    llm.requests()
        .into_iter()
        .find(|r| r.last_user == text)
        .unwrap_or_else(|| panic!("no model request for {text:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn bindings_route_chats_and_a_thread_to_agents_with_their_own_prompt_and_model() {
    let llm =
        LlmStandIn::start(|body, _| Behaviour::reply(format!("re: {}", last_user(body)))).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!(
            "{WEBHOOK}\
             [agents.support]\nsystem_prompt = \"You are the support desk.\"\nmodel = \"standin/support-model\"\n\
             [agents.research]\nsystem_prompt = \"You are the research desk.\"\nmodel = \"standin/research-model\"\n\
             [[bindings]]\nagent = \"support\"\nchannel = \"webhook:main\"\nchat = \"c1\"\n\
             [[bindings]]\nagent = \"research\"\nchannel = \"webhook:main\"\nchat = \"c1\"\nthread = \"t9\"\n\
             [[bindings]]\nagent = \"research\"\nchat = \"c2\"\n"
        ),
    ));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);

    let cases = [
        (
            "c1",
            None,
            "hello support",
            "support",
            "standin/support-model",
            "You are the support desk.",
        ),
        (
            "c1",
            Some("t9"),
            "hello thread",
            "research",
            "standin/research-model",
            "You are the research desk.",
        ),
        (
            "c2",
            None,
            "hello research",
            "research",
            "standin/research-model",
            "You are the research desk.",
        ),
        (
            "c3",
            None,
            "hello main",
            "main",
            "test-model",
            "You are a helpful assistant.",
        ),
    ];
    for (i, (chat, thread, text, agent, model, prompt)) in cases.iter().enumerate() {
        let (status, body) = hook
            .send(chat, *thread, &format!("m{i}"), text, "?wait=20")
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer(&body), format!("re: {text}"), "{body}");
        let key = body["session_key"].as_str().unwrap_or_default();
        assert!(
            key.starts_with(&format!("agent:{agent}:webhook:main:{chat}")),
            "{text}: {key}"
        );
        let request = request_for(&llm, text);
        assert_eq!(request.model(), model.rsplit('/').next().unwrap(), "{text}");
        assert!(
            request.system().starts_with(prompt),
            "{text}: {}",
            request.system()
        );
    }

    // /status names the agent of the session.
    let (_, body) = hook
        .send("c1", Some("t9"), "s1", "/status", "?wait=10")
        .await;
    let status = body["replies"][0]["text"].as_str().unwrap_or_default();
    assert!(status.contains("Agent: research"), "{status}");
    assert!(status.contains("Model: standin/research-model"), "{status}");
}

/// Writes a skill folder under `root`.
fn skill(root: &std::path::Path, folder: &str, text: &str) {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_are_listed_read_on_demand_filtered_per_agent_and_a_broken_one_is_skipped() {
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        let results = fresh_results(body);
        if let Some(result) = results.last() {
            return Behaviour::reply(format!("read: {result}"));
        }
        match user.strip_prefix("read ") {
            Some(name) => Behaviour::tool("read_skill", json!({"name": name})),
            None => Behaviour::reply("ok"),
        }
    })
    .await;
    let work = Workdir::new("");
    let shared = work.dir.path().join("shared-skills");
    let own_workspace = work.dir.path().join("writer-space");
    skill(
        &shared,
        "summarise",
        "---\nname: summarise\ndescription: Summarise a long text in five bullets\n---\nStep 1: read all. Step 2: five bullets.\n",
    );
    skill(
        &shared,
        "translate",
        "---\nname: translate\ndescription: \"Translate into French\"\n---\nUse formal French.\n",
    );
    skill(&shared, "broken", "no front matter here\n");
    // The writer's own skill, in its workspace.
    skill(
        &own_workspace.join("skills"),
        "headline",
        "---\nname: headline\ndescription: Write a headline\n---\nAt most eight words.\n",
    );
    let config = config_with_llm(
        &llm.url,
        &format!(
            "{WEBHOOK}[skills]\ndir = \"{}\"\n\
             [agents.writer]\nsystem_prompt = \"You write.\"\nskills = [\"summarise\", \"headline\"]\nworkspace = \"{}\"\n\
             [agents.plain]\nsystem_prompt = \"You are plain.\"\nskills = []\n\
             [[bindings]]\nagent = \"writer\"\nchat = \"w\"\n\
             [[bindings]]\nagent = \"plain\"\nchat = \"p\"\n",
            shared.display(),
            own_workspace.display()
        ),
    )
    .replacen("[server]\n", "[server]\nadmin_token_env = \"FC_ADMIN\"\n", 1);
    std::fs::write(work.dir.path().join("config.toml"), config).unwrap();
    let service = Service::start(&work, &[("FC_HOOK", SECRET), ("FC_ADMIN", "admin-SKILLS")]).await;
    let hook = Hook::new(&service, SECRET);

    // main: the whole shared menu (names and descriptions, not the instructions).
    let (status, body) = hook
        .send("m", None, "1", "read translate", "?wait=20")
        .await;
    assert_eq!(status, 200, "{body}");
    let reply = answer(&body);
    assert!(
        reply.contains("Use formal French."),
        "read on demand: {body}"
    );
    let main = request_for(&llm, "read translate");
    let system = main.system();
    assert!(
        system.contains("- summarise: Summarise a long text in five bullets"),
        "{system}"
    );
    assert!(
        system.contains("- translate: Translate into French"),
        "{system}"
    );
    assert!(
        !system.contains("Step 1"),
        "only the menu is in the prompt: {system}"
    );
    assert!(
        !system.contains("broken") && !system.contains("headline"),
        "{system}"
    );
    assert!(tool_names(&main).contains(&"read_skill".to_string()));

    // writer: its filter and its own skill; a skill not on its menu cannot be read.
    let (_, body) = hook
        .send("w", None, "2", "read translate", "?wait=20")
        .await;
    let reply = answer(&body);
    assert!(reply.contains("no skill `translate`"), "{body}");
    let (_, body) = hook.send("w", None, "3", "read headline", "?wait=20").await;
    assert!(answer(&body).contains("At most eight words."), "{body}");
    let writer = request_for(&llm, "read headline");
    let system = writer.system();
    assert!(system.starts_with("You write."), "{system}");
    assert!(system.contains("- summarise:") && system.contains("- headline: Write a headline"));
    assert!(!system.contains("translate"), "filtered out: {system}");

    // `/status` shows each skill with its content hash, and says when a file changed.
    let hash = |text: &str| {
        use sha2::{Digest, Sha256};
        hex::encode(&Sha256::digest(text.as_bytes())[..6])
    };
    let headline_file = own_workspace
        .join("skills")
        .join("headline")
        .join("SKILL.md");
    let original = std::fs::read_to_string(&headline_file).unwrap();
    let status_of = |id: &'static str| {
        let hook = &hook;
        async move {
            let (_, body) = hook.send("w", None, id, "/status", "?wait=20").await;
            body["replies"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let status = status_of("s1").await;
    assert!(
        status.contains(&format!("headline (sha256 {})", hash(&original))),
        "{status}"
    );
    let changed = original.replace("eight", "six");
    std::fs::write(&headline_file, &changed).unwrap();
    let status = status_of("s2").await;
    assert!(
        status.contains(&format!(
            "headline (sha256 {} at start, {} now: changed)",
            hash(&original),
            hash(&changed)
        )),
        "{status}"
    );
    // The admin API says the same.
    let (_, skills) = service.get_json("/v1/admin/skills", "admin-SKILLS").await;
    let headline = skills["agents"]["writer"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "headline")
        .unwrap()
        .clone();
    assert_eq!(headline["sha256"], hash(&original), "{skills}");
    assert_eq!(headline["sha256_now"], hash(&changed));
    assert_eq!(headline["changed"], true);
    assert_eq!(skills["agents"]["main"][0]["changed"], false, "{skills}");

    // plain: no skills, so no menu and no read_skill tool.
    hook.send("p", None, "4", "hi", "?wait=20").await;
    let plain = request_for(&llm, "hi");
    assert!(!plain.system().contains("## Skills"), "{}", plain.system());
    assert!(!tool_names(&plain).contains(&"read_skill".to_string()));

    // The broken SKILL.md was named in a warning, and the service went on.
    let logs = service.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("skill skipped") && l.contains("broken/SKILL.md")),
        "{logs}"
    );
}

/// `main` may run `research` and `vault`; `loner` has no links. The hook refuses `vault`.
fn delegation_config(llm: &LlmStandIn) -> String {
    config_with_llm(
        &llm.url,
        &format!(
            "{WEBHOOK}[subagents]\nhook = \"if grep -q '\\\"agent\\\":\\\"vault\\\"'; then echo 'the vault is closed' >&2; exit 1; fi\"\n\
             [agents.main]\nmay_delegate = [\"research\", \"vault\"]\n\
             [agents.research]\nsystem_prompt = \"You are the research desk.\"\nmodel = \"standin/research-model\"\ntools = [\"read_file\", \"web_fetch\"]\n\
             [agents.vault]\nsystem_prompt = \"You guard the vault.\"\n\
             [agents.loner]\nsystem_prompt = \"You are alone.\"\n\
             [[bindings]]\nagent = \"loner\"\nchat = \"alone\"\n"
        ),
    )
}

/// Children answer their task; parents call the tool named by the message, then report
/// the tool's result (or summarise an outcome).
async fn delegation_standin() -> LlmStandIn {
    LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user.starts_with("dig ") {
            return Behaviour::reply(format!("found: {user}"));
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("noted the outcome");
        }
        if let Some(result) = fresh_results(body).last() {
            return Behaviour::reply(format!("tool said: {result}"));
        }
        let (tool, args) = match user.as_str() {
            "spawn research" => ("sessions_spawn", json!({"task": "dig spawn", "label": "r1", "agent_id": "research"})),
            "delegate research" => ("delegate", json!({"agent_id": "research", "task": "dig delegate"})),
            "delegate detached" => ("delegate", json!({"agent_id": "research", "task": "dig detached", "label": "r2", "wait": false})),
            "delegate vault" => ("delegate", json!({"agent_id": "vault", "task": "dig vault"})),
            "spawn anyway" => ("sessions_spawn", json!({"task": "dig lonely", "agent_id": "research"})),
            _ => return Behaviour::reply("ok"),
        };
        Behaviour::tool(tool, args)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn spawns_and_delegations_run_as_the_linked_agent_and_are_refused_without_a_link() {
    let llm = delegation_standin().await;
    let work = Workdir::new(&delegation_config(&llm));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);

    // main is linked: it is offered `delegate` and an agent choice naming its links.
    let (_, body) = hook
        .send("c", None, "1", "spawn research", "?wait=20")
        .await;
    assert!(answer(&body).contains("\"status\":\"accepted\""), "{body}");
    let parent = request_for(&llm, "spawn research");
    assert!(tool_names(&parent).contains(&"delegate".to_string()));
    assert_eq!(
        tool_schema(&parent, "sessions_spawn")["properties"]["agent_id"]["enum"],
        json!(["main", "research", "vault"])
    );
    assert_eq!(
        tool_schema(&parent, "delegate")["properties"]["agent_id"]["enum"],
        json!(["research", "vault"])
    );
    // The child ran as research: its prompt, its model, its own tools (not main's).
    let messages = wait_for(
        "the spawn's announcement",
        Duration::from_secs(20),
        || async {
            let m = hook.list("c", 0).await;
            m.iter()
                .any(|x| {
                    x["kind"] == "announce"
                        && x["text"].as_str().unwrap().contains("found: dig spawn")
                })
                .then_some(m)
        },
    )
    .await;
    assert!(!messages.is_empty());
    let child = request_for(&llm, "dig spawn");
    assert!(
        child.system().starts_with("You are the research desk."),
        "{}",
        child.system()
    );
    assert_eq!(child.model(), "research-model");
    let mut tools = tool_names(&child);
    tools.sort();
    assert_eq!(
        tools,
        ["read_file", "web_fetch"],
        "research's own allowlist"
    );

    // A delegation that waits: the result comes back as the tool's result, and it is not
    // also announced or turned into another turn of the parent.
    let (_, body) = hook
        .send("d", None, "2", "delegate research", "?wait=20")
        .await;
    let reply = answer(&body);
    assert!(reply.contains("found: dig delegate"), "{body}");
    let delegated = request_for(&llm, "dig delegate");
    assert!(delegated.system().starts_with("You are the research desk."));
    let listed = hook.list("d", 0).await;
    assert!(
        !listed.iter().any(|m| m["kind"] == "announce"),
        "a waited delegation is not announced: {listed:?}"
    );

    // A detached delegation is announced like a subagent.
    hook.send("e", None, "3", "delegate detached", "?wait=20")
        .await;
    wait_for(
        "the detached delegation's announcement",
        Duration::from_secs(20),
        || async {
            hook.list("e", 0)
                .await
                .iter()
                .any(|m| {
                    m["kind"] == "announce"
                        && m["text"].as_str().unwrap().contains("found: dig detached")
                })
                .then_some(())
        },
    )
    .await;
    // The waited one never started a parent turn (the detached one did).
    let outcomes: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| r.last_user.clone())
        .filter(|u| u.starts_with("[Subagent"))
        .collect();
    assert!(
        outcomes.iter().all(|u| !u.contains("dig delegate")),
        "{outcomes:?}"
    );

    // The spawn hook sees the target agent and refuses the vault.
    let (_, body) = hook
        .send("v", None, "4", "delegate vault", "?wait=20")
        .await;
    let reply = answer(&body);
    assert!(reply.contains("the vault is closed"), "{body}");
    assert!(!llm.requests().iter().any(|r| r.last_user == "dig vault"));

    // loner has no links: no `delegate`, no agent choice, and a call naming one is refused.
    let (_, body) = hook
        .send("alone", None, "5", "spawn anyway", "?wait=20")
        .await;
    let reply = answer(&body);
    assert!(
        reply.contains("may not run `research`"),
        "refused with a clear error: {body}"
    );
    let loner = request_for(&llm, "spawn anyway");
    assert!(loner.system().starts_with("You are alone."));
    assert!(!tool_names(&loner).contains(&"delegate".to_string()));
    assert!(tool_names(&loner).contains(&"sessions_spawn".to_string()));
    assert_eq!(
        tool_schema(&loner, "sessions_spawn")["properties"].get("agent_id"),
        None,
        "no agent choice without links"
    );
    assert!(!llm.requests().iter().any(|r| r.last_user == "dig lonely"));
}

#[tokio::test(flavor = "multi_thread")]
async fn config_check_refuses_bindings_and_links_naming_unknown_agents_or_channels() {
    let work = Workdir::new(
        "[agents.a]\nmay_delegate = [\"ghost\"]\ntools = [\"teleport\"]\n\
         [[bindings]]\nagent = \"nobody\"\nchannel = \"cli\"\n\
         [[bindings]]\nagent = \"a\"\nchannel = \"telegram\"\n",
    );
    let out = crate::common::service::run(work.path(), &["config", "check"], "", &[]);
    assert_ne!(out.code, Some(0));
    let err = format!("{}{}", out.stdout, out.stderr);
    for expected in [
        "agents.a.may_delegate[0]",
        "unknown agent `ghost`",
        "agents.a.tools[0]",
        "unknown tool `teleport`",
        "bindings[0].agent",
        "unknown agent `nobody`",
        "bindings[1].channel",
        "channel `telegram`",
    ] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waited_delegation_cut_by_kill_9_is_resumed_and_handed_to_the_redone_turn_once() {
    let resumed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let after_kill = resumed.clone();
    let llm = LlmStandIn::start(move |body, _| {
        let user = last_user(body);
        if user == "dig deep" {
            // Hangs in the first process; after the restart it answers, slowly enough that
            // the redone turn's `delegate` is waiting by then.
            return if after_kill.load(std::sync::atomic::Ordering::SeqCst) {
                Behaviour::slow("found: the bottom", Duration::from_millis(1500))
            } else {
                Behaviour::Hang
            };
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("noted the outcome");
        }
        if let Some(result) = fresh_results(body).last() {
            return Behaviour::reply(format!("tool said: {result}"));
        }
        Behaviour::tool(
            "delegate",
            json!({"agent_id": "research", "task": "dig deep", "label": "deep"}),
        )
    })
    .await;
    let work = Workdir::new(&delegation_config(&llm));
    let env = [("FC_HOOK", SECRET)];
    let service = Service::start(&work, &env).await;
    let (status, _) = Hook::new(&service, SECRET)
        .send("dd", None, "1", "delegate deep", "")
        .await;
    assert_eq!(status, 202);
    let digs = || {
        llm.requests()
            .iter()
            .filter(|r| last_user(&r.body) == "dig deep")
            .count()
    };
    wait_for(
        "the delegated run working",
        Duration::from_secs(10),
        || async { (digs() == 1).then_some(()) },
    )
    .await;
    service.kill();
    resumed.store(true, std::sync::atomic::Ordering::SeqCst);

    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);
    let messages = wait_for(
        "the redone turn's answer",
        Duration::from_secs(20),
        || async {
            let m = hook.list("dd", 0).await;
            m.iter()
                .any(|m| {
                    m["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("tool said:"))
                })
                .then_some(m)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let messages = [messages, hook.list("dd", 0).await].concat();
    let answers: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["text"].as_str())
        .filter(|t| t.starts_with("tool said:"))
        .collect();
    assert!(answers[0].contains("found: the bottom"), "{answers:?}");
    assert_eq!(digs(), 2, "resumed once, not delegated a second time");
    assert!(
        !messages.iter().any(|m| m["kind"] == "announce"),
        "handed to the waiting turn, not announced: {messages:?}"
    );
    assert!(
        !llm.requests()
            .iter()
            .any(|r| last_user(&r.body).starts_with("[Subagent")),
        "no extra parent turn for the outcome"
    );
    assert!(
        service
            .logs()
            .contains("a redone spawn call finds the run it started before")
    );
}
