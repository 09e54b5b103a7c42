//! `exec` in the Docker sandbox against the real engine on this machine (bollard), with the
//! local busybox image from `scripts/sandbox-image.sh` (`.ci/run` builds it). Each check
//! runs from inside the container: limits, no network, no capabilities, the workspace and
//! nothing else of the host, a timeout kill, capped output; containers gone after a reset,
//! after a subagent run and after kill -9 + restart; `exec` offered only where it can run; a
//! sandboxed child running `exec` while its parent cannot. No engine → a test failure, never
//! a skip.

use crate::common::hook::Hook;
use crate::common::inproc::{InProc, config};
use crate::common::llm::{Behaviour, LlmStandIn, fresh_results, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const IMAGE: &str = "ferroclaw-sandbox:busybox";

/// Fails loudly (never skips) when there is no engine or no image.
fn require_docker() {
    let out = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .expect("the docker command is needed for the sandbox tests");
    assert!(
        out.status.success(),
        "no Docker engine or no sandbox image `{IMAGE}` (run scripts/sandbox-image.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Containers carrying a label (`key` or `key=value`), running or not.
fn containers(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn sandbox_toml(extra: &str) -> String {
    format!(
        "[sandbox]\nenabled = true\nimage = \"{IMAGE}\"\nmemory_mb = 64\npids_limit = 50\ncpus = 0.5\n{extra}"
    )
}

fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A model that runs `calls` one per step (each an `exec` or another tool), then answers
/// with every result of this turn joined.
fn scripted(calls: Vec<(&'static str, Value)>) -> impl Fn(&Value, usize) -> Behaviour {
    move |body, _| {
        let done = fresh_results(body);
        match calls.get(done.len()) {
            Some((name, args)) => Behaviour::tool(name, args.clone()),
            None => Behaviour::reply(done.join("\n=====\n")),
        }
    }
}

async fn answer(app: &InProc, conversation: &str, text: &str, n: usize) -> String {
    app.say(conversation, text).await;
    let delivered = app.wait_delivered(n).await;
    delivered[n - 1].text.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_runs_in_a_locked_down_container_that_sees_the_workspace_and_nothing_else() {
    require_docker();
    let probe = "id -u; echo net:$(ls /sys/class/net); \
        echo pids:$(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max); \
        echo mem:$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes); \
        grep CapEff /proc/self/status; cat /workspace/hello.txt; echo; \
        echo mounts:$(cut -d' ' -f2 /proc/mounts | tr '\\n' ' '); \
        touch /etc/x 2>/dev/null && echo root-writable || echo root-read-only; \
        touch /tmp/x && echo tmp-writable; echo made > /workspace/made.txt";
    let llm = LlmStandIn::start(scripted(vec![
        (
            "write_file",
            json!({"path": "hello.txt", "content": "from the host side"}),
        ),
        ("exec", json!({"command": probe})),
    ]))
    .await;
    let app = InProc::start(&config(&llm.url, "", &sandbox_toml(""))).await;
    let result = answer(&app, "c", "probe the sandbox", 1).await;
    assert!(result.contains("exit code 0"), "{result}");
    let line = |prefix: &str| {
        result
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {result}"))
            .to_string()
    };
    assert_eq!(line("65534"), "65534", "a non-root user");
    assert_eq!(line("net:"), "net:lo", "no network interface but lo");
    assert_eq!(line("pids:"), "pids:50");
    assert_eq!(line("mem:"), format!("mem:{}", 64 * 1024 * 1024));
    assert!(
        line("CapEff:").ends_with("0000000000000000"),
        "no capabilities"
    );
    assert!(
        result.contains("from the host side"),
        "the workspace is mounted"
    );
    assert!(result.contains("root-read-only") && result.contains("tmp-writable"));
    // Every mount point is the container's own, the workspace, or Docker's three files.
    let mounts = line("mounts:");
    for point in mounts.trim_start_matches("mounts:").split_whitespace() {
        let known = ["/proc", "/dev", "/sys", "/tmp", "/workspace"]
            .iter()
            .any(|p| point == *p || point.starts_with(&format!("{p}/")))
            || ["/", "/etc/resolv.conf", "/etc/hostname", "/etc/hosts"].contains(&point);
        assert!(known, "a host path is visible in the container: {point}");
    }
    let session_dir = std::fs::read_dir(app.dir.path().join("ws"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_to_string(session_dir.join("made.txt")).unwrap(),
        "made\n",
        "what the command wrote is in the host workspace"
    );
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_kills_the_command_and_says_so_and_output_is_capped() {
    require_docker();
    let llm = LlmStandIn::start(scripted(vec![
        (
            "exec",
            json!({"command": "echo started; sleep 30; echo never", "timeout_secs": 2}),
        ),
        (
            "exec",
            json!({"command": "head -c 100000 /dev/zero | tr '\\\\0' a; echo done >&2"}),
        ),
        ("exec", json!({"command": "echo alive after the kill"})),
    ]))
    .await;
    let app = InProc::start(&config(&llm.url, "", &sandbox_toml(""))).await;
    let started = std::time::Instant::now();
    let result = answer(&app, "c", "go", 1).await;
    let parts: Vec<&str> = result.split("\n=====\n").collect();
    assert_eq!(parts.len(), 3, "{result}");
    assert!(
        parts[0].starts_with("timed out after 2 s; the command was killed"),
        "{}",
        parts[0]
    );
    assert!(parts[0].contains("started") && !parts[0].contains("never"));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "killed, not waited for"
    );
    let stdout = parts[1]
        .split("--- stdout ---\n")
        .nth(1)
        .unwrap()
        .split("\n--- stderr ---")
        .next()
        .unwrap();
    assert_eq!(stdout.len(), 16 * 1024, "stdout capped at 16 KiB");
    assert!(parts[1].contains("[output truncated"));
    assert!(parts[1].contains("done"), "stderr kept");
    assert!(
        parts[2].contains("alive after the kill"),
        "a fresh container"
    );
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_is_offered_only_where_it_can_run_and_a_sandboxed_child_runs_it_for_a_parent_that_cannot()
 {
    require_docker();
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "child task" {
            return if fresh_results(body).is_empty() {
                Behaviour::tool("exec", json!({"command": "id -u; echo in-the-box"}))
            } else {
                Behaviour::reply(format!("child saw: {}", fresh_results(body)[0]))
            };
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("parent summary");
        }
        if fresh_results(body).is_empty() {
            Behaviour::tool(
                "sessions_spawn",
                json!({"task": "child task", "label": "boxed", "sandbox": true}),
            )
        } else {
            Behaviour::reply("spawned")
        }
    })
    .await;
    // Neither sandbox.enabled nor host_exec: the parent has no exec.
    let extra = format!("[sandbox]\nimage = \"{IMAGE}\"\n");
    let app = InProc::start(&config(&llm.url, "", &extra)).await;
    app.say("c", "delegate").await;
    app.wait_text("parent summary", Duration::from_secs(30))
        .await;
    let requests = llm.requests();
    let parent = requests
        .iter()
        .find(|r| last_user(&r.body) == "delegate")
        .unwrap();
    assert!(
        !offered(&parent.body).contains(&"exec".to_string()),
        "the parent is not offered exec: {:?}",
        offered(&parent.body)
    );
    let child = requests
        .iter()
        .find(|r| last_user(&r.body) == "child task")
        .unwrap();
    assert!(offered(&child.body).contains(&"exec".to_string()));
    let child_done = requests
        .iter()
        .find(|r| last_user(&r.body) == "child task" && !fresh_results(&r.body).is_empty())
        .unwrap();
    let seen = &fresh_results(&child_done.body)[0];
    assert!(
        seen.contains("exit code 0") && seen.contains("65534") && seen.contains("in-the-box"),
        "{seen}"
    );
    let announced = app
        .delivered()
        .iter()
        .any(|m| m.text.contains("boxed") && m.text.contains("done"));
    assert!(announced, "announced as usual");
    let live = app.delivered().iter().any(|m| {
        m.kind == ferroclaw_channel_core::OutboundKind::Status
            && m.text.contains("running — exec")
            && m.text.contains("in-the-box")
    });
    assert!(
        live,
        "the command's output showed in the child's live status"
    );
    // The run's container went with it.
    wait_for(
        "no container left by the run",
        Duration::from_secs(10),
        || async {
            containers("ferroclaw.owner")
                .iter()
                .all(|id| !owner_of(id).starts_with("agent:main:subagent:"))
                .then_some(())
        },
    )
    .await;
    app.app.shutdown(Duration::from_secs(2)).await;
}

fn owner_of(container: &str) -> String {
    let out = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{ index .Config.Labels \"ferroclaw.owner\" }}",
            container,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_reset_removes_its_container() {
    require_docker();
    let llm = LlmStandIn::start(scripted(vec![("exec", json!({"command": "echo hi"}))])).await;
    let app = InProc::start(&config(&llm.url, "", &sandbox_toml(""))).await;
    let key = InProc::route("reset-me").session_key();
    let label = format!("ferroclaw.owner={key}");
    answer(&app, "reset-me", "run something", 1).await;
    assert_eq!(containers(&label).len(), 1, "one container for the session");
    answer(&app, "reset-me", "/new", 2).await;
    assert!(containers(&label).is_empty(), "removed by /new");
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_engine_means_no_exec_a_clear_line_and_status_says_so() {
    let llm = LlmStandIn::echo().await;
    let app = InProc::start(&config(
        &llm.url,
        "",
        &sandbox_toml("docker_host = \"unix:///nonexistent/docker.sock\"\n"),
    ))
    .await;
    app.app.sandbox_preparation().expect("enabled").await;
    let status = answer(&app, "c", "/status", 1).await;
    assert!(
        status.contains("Exec: unavailable — the sandbox is enabled but no Docker engine"),
        "{status}"
    );
    app.say("c", "hello").await;
    app.wait_delivered(2).await;
    let body = &llm.requests()[0].body;
    assert!(
        !offered(body).contains(&"exec".to_string()),
        "{:?}",
        offered(body)
    );
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_image_that_cannot_be_pulled_is_said_plainly() {
    require_docker();
    let llm = LlmStandIn::echo().await;
    let cfg = config(&llm.url, "", &sandbox_toml("")).replace(IMAGE, "ferroclaw-missing:none");
    let app = InProc::start(&cfg).await;
    app.app.sandbox_preparation().expect("enabled").await;
    let status = answer(&app, "c", "/status", 1).await;
    assert!(
        status.contains("`ferroclaw-missing:none` is not present and could not be pulled")
            && status.contains("scripts/sandbox-image.sh"),
        "{status}"
    );
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn host_exec_runs_in_the_workspace_on_the_host_and_times_out() {
    let llm = LlmStandIn::start(scripted(vec![
        ("exec", json!({"command": "pwd; echo $((6*7))"})),
        (
            "exec",
            json!({"command": "sleep 20 & sleep 20", "timeout_secs": 1}),
        ),
    ]))
    .await;
    let app = InProc::start(&config(&llm.url, "", "[tools]\nhost_exec = true\n")).await;
    app.say("c", "go").await;
    // Host `exec` always asks (SPEC section 17): the sender approves each call.
    app.approve("c", 1).await;
    app.approve("c", 2).await;
    let result = app.reply(1).await;
    let parts: Vec<&str> = result.split("\n=====\n").collect();
    assert!(
        parts[0].contains("exit code 0") && parts[0].contains("42"),
        "{result}"
    );
    let workspace = std::fs::canonicalize(app.dir.path().join("ws")).unwrap();
    assert!(
        parts[0].contains(&workspace.display().to_string()),
        "runs inside the workspace: {}",
        parts[0]
    );
    assert!(parts[1].starts_with("timed out after 1 s"), "{}", parts[1]);
    app.app.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_left_by_kill_9_is_removed_at_the_next_start() {
    require_docker();
    let llm = LlmStandIn::start(|body, _| {
        if fresh_results(body).is_empty() && last_user(body) == "make a container" {
            Behaviour::tool("exec", json!({"command": "echo up"}))
        } else {
            Behaviour::reply("ok")
        }
    })
    .await;
    let (work, service, hook) = sandboxed_webhook_service(&llm).await;
    let env = [("FC_HOOK", "hook-secret")];
    // A conversation of its own, so containers of other runs never count.
    let conversation = format!("kill9-{}", std::process::id());
    let (status, _) = hook
        .send(&conversation, None, "m1", "make a container", "?wait=30")
        .await;
    assert_eq!(status, 200);
    let label = &format!("ferroclaw.owner=agent:main:webhook:main:{conversation}");
    assert_eq!(containers(label).len(), 1);
    service.kill();
    assert_eq!(containers(label).len(), 1, "kill -9 leaves it behind");
    let service = Service::start(&work, &env).await;
    wait_for("the leftover removed", Duration::from_secs(20), || async {
        containers(label).is_empty().then_some(())
    })
    .await;
    assert!(
        service
            .logs()
            .contains("removed sandbox containers left by an earlier run")
    );
}

async fn sandboxed_webhook_service(llm: &LlmStandIn) -> (Workdir, Service, Hook) {
    let cfg = config_with_llm(
        &llm.url,
        &format!(
            "{}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
            sandbox_toml("")
        ),
    );
    let work = Workdir::new(&cfg);
    let service = Service::start(&work, &[("FC_HOOK", "hook-secret")]).await;
    let hook = Hook::new(&service, "hook-secret");
    (work, service, hook)
}

/// Issue #33.1: a sandboxed command swaps a sent file for a link to the service's environment
/// (and to a host file) after `send_file` queued it; the download still gives what was sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_sent_file_swapped_for_a_symlink_leaks_nothing() {
    require_docker();
    let llm = LlmStandIn::start(crate::common::llm::calls_from_the_message()).await;
    let (work, service, hook) = sandboxed_webhook_service(&llm).await;
    let host_secret = work.path().join("host-secret.txt");
    std::fs::write(&host_secret, "HOST-ONLY-MARKER").unwrap();
    let conversation = format!("swap-{}", std::process::id());
    let calls = json!([
        ["exec", {"command": "echo harmless > out.txt; echo harmless > two.txt"}],
        ["send_file", {"path": "out.txt"}],
        ["send_file", {"path": "two.txt"}],
        ["exec", {"command": format!(
            "ln -sf /proc/self/environ out.txt; ln -sf {} two.txt; ls -l", host_secret.display())}],
        // Sending through a planted link is refused outright.
        ["send_file", {"path": "two.txt"}],
    ]);
    let (status, body) = hook
        .send(
            &conversation,
            None,
            "m1",
            &format!("run {calls}"),
            "?wait=60",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The two files first, then the answer.
    let text = body["replies"][2]["text"].as_str().unwrap_or_default();
    let parts: Vec<&str> = text.split("\n=====\n").collect();
    assert_eq!(parts.len(), 5, "{body}");
    assert!(parts[3].contains("-> /proc/self/environ"), "{}", parts[3]);
    assert!(
        parts[4].starts_with("Error:") && parts[4].contains("symlink"),
        "{}",
        parts[4]
    );
    let listed = hook.list(&conversation, 0).await;
    let files: Vec<&Value> = listed.iter().filter(|m| !m["file"].is_null()).collect();
    assert_eq!(files.len(), 2, "{listed:?}");
    let client = reqwest::Client::new();
    for message in files {
        let url = format!(
            "{}{}",
            service.base,
            message["file"]["download"].as_str().unwrap()
        );
        let got = client
            .get(&url)
            .bearer_auth("hook-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
        let bytes = got.bytes().await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(text, "harmless\n", "the file as it was sent");
        assert!(!text.contains("hook-secret") && !text.contains("HOST-ONLY-MARKER"));
    }
    // A stop removes the session's container (a killed service would leave it running).
    service.terminate().await;
    assert!(
        containers(&format!(
            "ferroclaw.owner=agent:main:webhook:main:{conversation}"
        ))
        .is_empty()
    );
}

/// Issue #33.2: a sandboxed command replaces `inbox` with a link to a host folder, or plants
/// a dangling link where an upload's name would go: the next uploads never land outside.
#[tokio::test(flavor = "multi_thread")]
async fn uploads_are_never_written_through_planted_symlinks() {
    require_docker();
    use base64::Engine as _;
    let llm = LlmStandIn::start(crate::common::llm::calls_from_the_message()).await;
    let (work, service, hook) = sandboxed_webhook_service(&llm).await;
    let victim = work.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    let conversation = format!("plant-{}", std::process::id());
    let upload = |id: &str, name: &str| {
        json!({"conversation_id": conversation, "message_id": id, "text": "keep this",
            "sender": {"id": "u-7", "name": "Alice"},
            "attachments": [{"name": name, "mime": "text/plain",
                "base64": base64::engine::general_purpose::STANDARD.encode("* * * * * root id")}]})
    };
    let post = |body: Value| {
        let hook = &hook;
        async move {
            let body = hook.post_message(&body).await;
            body["replies"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let calls =
        json!([["exec", {"command": format!("rm -rf inbox; ln -s {} inbox", victim.display())}]]);
    hook.send(
        &conversation,
        None,
        "m1",
        &format!("run {calls}"),
        "?wait=60",
    )
    .await;
    let reply = post(upload("m2", "cron")).await;
    assert!(reply.contains("could not be stored"), "{reply}");
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing written outside"
    );

    let calls = json!([["exec", {"command": format!(
        "rm -f inbox; mkdir inbox; ln -s {}/planted inbox/evil.txt", victim.display())}]]);
    hook.send(
        &conversation,
        None,
        "m3",
        &format!("run {calls}"),
        "?wait=60",
    )
    .await;
    let reply = post(upload("m4", "evil.txt")).await;
    assert!(
        reply.contains("inbox/evil-2.txt"),
        "stored under another name: {reply}"
    );
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing written outside"
    );
    service.terminate().await;
}

/// #33.9: `sessions_spawn {sandbox: true}` gives the child only the exec and file tools the
/// agent's `tools` allowlist grants, and a spawn cannot pick a model outside the agent's own,
/// its fallbacks and `subagents.models`.
#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_spawn_keeps_the_agents_tool_allowlist_and_models() {
    require_docker();
    let llm = LlmStandIn::start(|body, _| {
        let user = last_user(body);
        if user == "child task" {
            return Behaviour::reply("child done");
        }
        if user.starts_with("[Subagent") {
            return Behaviour::reply("parent summary");
        }
        let results = fresh_results(body);
        match results.len() {
            0 => Behaviour::tool(
                "sessions_spawn",
                json!({"task": "elsewhere", "model": "standin/pricey-model", "sandbox": true}),
            ),
            1 => Behaviour::tool(
                "sessions_spawn",
                json!({"task": "child task", "label": "boxed", "sandbox": true}),
            ),
            _ => Behaviour::reply(format!("first: {}", results[0])),
        }
    })
    .await;
    let app = InProc::start(&config(
        &llm.url,
        "",
        &format!(
            "[sandbox]\nimage = \"{IMAGE}\"\n[agents.main]\ntools = [\"sessions_spawn\", \"read_file\"]\n"
        ),
    ))
    .await;
    app.say("c", "delegate").await;
    app.wait_text("parent summary", Duration::from_secs(30))
        .await;
    let first = app
        .delivered()
        .iter()
        .find(|m| m.text.starts_with("first: "))
        .map(|m| m.text.clone())
        .unwrap_or_default();
    assert!(
        first.contains("Error:") && first.contains("subagents.models"),
        "a model outside the agent's is refused: {first}"
    );
    assert!(
        llm.requests().iter().all(|r| r.model() != "pricey-model"),
        "never called"
    );
    let child = llm
        .requests()
        .into_iter()
        .find(|r| last_user(&r.body) == "child task")
        .unwrap();
    let tools = offered(&child.body);
    assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
    for denied in ["exec", "write_file", "list_files"] {
        assert!(
            !tools.contains(&denied.to_string()),
            "{denied} in {tools:?}"
        );
    }
    app.app.shutdown(Duration::from_secs(2)).await;
}
