//! MCP servers as tools (SPEC section 19) against real, published servers from PyPI (the
//! venv `scripts/py-clients.sh` fills): the reference `mcp-server-time` and `mcp-server-fetch`
//! over stdio, and a streamable-HTTP server written with the official Python SDK (`mcp`).
//! Through `ferroclaw mcp list|call` and the real `serve`: the model is offered their tools
//! (an agent without the server is not), calls round-trip into the chat, a killed server is
//! restarted and its tools come back (the model told meanwhile), a hanging call is timed out
//! and the turn goes on, a server speaking garbage or answering 10 MB does not hurt the
//! process, and a turn redone after kill -9 does not call a non-read-only tool twice.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, calls_from_the_message, fresh_results, last_user};
use crate::common::python::python;
use crate::common::service::{LogsOnFailure, Service, Workdir, config_with_llm, run};
use crate::common::wait_for;
use base64::Engine as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const HOOK_SECRET: &str = "hook-secret-MCP-0001";
const ADMIN: &str = "admin-token-MCP-0001";
const NOTES_KEY: &str = "notes-bearer-MCP-0001";

/// A streamable-HTTP MCP server on the official Python SDK: `add` (read-only), `record`
/// (appends a line to a file: an effect), `slow` (sleeps), `big` (10 MB of text), `grow`
/// (adds the tool `fresh` and sends `notifications/tools/list_changed`), `picture` (an
/// image). It
/// refuses requests without the bearer header the config passes from the environment.
const NOTES_SERVER: &str = r#"
import sys, time
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations
port, effects, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
server = MCPServer("notes")

@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"sum={a + b}"

@server.tool()
def record(text: str) -> str:
    """Record a line of text."""
    with open(effects, "a") as f:
        f.write(text + "\n")
    return "recorded " + text

@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def slow(seconds: float) -> str:
    """Wait, then answer."""
    time.sleep(seconds)
    return "finally"

@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def big() -> str:
    """A very large answer."""
    return "x" * (10 * 1024 * 1024)

@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def picture() -> Image:
    """A small picture."""
    return Image(data=b"\x89PNG-otter-picture", format="png")

@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool while running, and say so."""
    def fresh() -> str:
        """A tool added while the server runs."""
        return "fresh!"
    server.add_tool(fresh, name="fresh")
    await ctx.session.send_tool_list_changed()
    return "grown"

import uvicorn
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import PlainTextResponse
app = server.streamable_http_app()
class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.headers.get("authorization") != "Bearer " + key:
            return PlainTextResponse("no", status_code=401)
        return await call_next(request)
app.add_middleware(Bearer)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"#;

/// A "server" that answers the handshake with garbage.
const GARBAGE_SERVER: &str = "import sys, time\nsys.stdout.write('this is not json-rpc\\n{]\\n' * 50)\nsys.stdout.flush()\ntime.sleep(60)\n";

fn venv_bin(name: &str) -> PathBuf {
    python().parent().unwrap().join(name)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The notes server, started and answering; killed when dropped.
struct Notes {
    child: std::process::Child,
    url: String,
}

impl Drop for Notes {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn notes(effects: &Path) -> Notes {
    let port = free_port();
    let child = std::process::Command::new(python())
        .args(["-c", NOTES_SERVER, &port.to_string()])
        .arg(effects)
        .arg(NOTES_KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    wait_for("the notes MCP server", Duration::from_secs(30), || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })
    .await;
    Notes { child, url }
}

/// `[mcp.servers…]` for time, fetch, notes (and garbage), with `extra` after.
fn servers(notes: &str, dir: &Path, extra: &str) -> String {
    let garbage = dir.join("garbage.py");
    std::fs::write(&garbage, GARBAGE_SERVER).unwrap();
    // The time server does not start while `block` exists (a restart that keeps failing).
    let block = dir.join("block");
    format!(
        "[mcp.servers.time]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"if [ -e {} ]; then exit 3; fi; exec {} --local-timezone UTC\"]\n\n\
         [mcp.servers.fetch]\ncommand = \"{}\"\nargs = [\"--ignore-robots-txt\", \"--allow-private-ips\"]\n\n\
         [mcp.servers.notes]\nurl = \"{notes}\"\ntimeout_secs = 3\nmax_result_bytes = 2000\n\
         headers_env = {{ Authorization = \"FC_NOTES_AUTH\" }}\n\n\
         [mcp.servers.garbage]\ncommand = \"{}\"\nargs = [\"{}\"]\ntimeout_secs = 3\n\n{extra}",
        block.display(),
        venv_bin("mcp-server-time").display(),
        venv_bin("mcp-server-fetch").display(),
        python().display(),
        garbage.display(),
    )
}

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("FC_HOOK", HOOK_SECRET.to_string()),
        ("FC_ADMIN", ADMIN.to_string()),
        ("FC_NOTES_AUTH", format!("Bearer {NOTES_KEY}")),
    ]
}

fn config(llm: &str, body: &str) -> String {
    config_with_llm(
        llm,
        &format!("[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n\n{body}"),
    )
    .replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_list_shows_each_servers_state_and_tools_and_mcp_call_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.txt");
    let notes = notes(&effects).await;
    let body = servers(&notes.url, dir.path(), "");
    std::fs::write(
        dir.path().join("config.toml"),
        config("http://127.0.0.1:9/v1", &body),
    )
    .unwrap();
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let listed = tokio::task::block_in_place(|| {
        run(dir.path(), &["mcp", "list", "-c", "config.toml"], "", &env)
    });
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let out = listed.stdout;
    for line in [
        "time (stdio): up",
        "  time__get_current_time",
        "fetch (stdio): up",
        "  fetch__fetch",
        "notes (http): up",
        "  notes__add",
        "garbage (stdio): down",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "no line {line:?} in:\n{out}"
        );
    }
    assert!(out.contains("last error:"), "{out}");
    assert!(!out.contains(NOTES_KEY), "no secret in the output");

    let args = [
        "mcp",
        "call",
        "notes",
        "add",
        r#"{"a": 2, "b": 40}"#,
        "-c",
        "config.toml",
    ];
    let called = tokio::task::block_in_place(|| run(dir.path(), &args, "", &env));
    assert_eq!(called.code, Some(0), "{}", called.stderr);
    assert_eq!(called.stdout.trim(), "sum=42");
}

/// The stdio children of process `pid` whose command line contains `name`.
fn children_named(pid: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let parent = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split(' ').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        if parent == Some(pid) && String::from_utf8_lossy(&cmdline).contains(name) {
            found.push(child);
        }
    }
    found
}

async fn admin_server(service: &Service, id: &str) -> Value {
    let (status, body) = service.get_json("/v1/admin/mcp", ADMIN).await;
    assert_eq!(status, 200, "{body}");
    body["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_uses_real_servers_through_restarts_timeouts_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.txt");
    let notes = notes(&effects).await;
    let page = {
        let app = axum::Router::new().route(
            "/page",
            axum::routing::get(|| async {
                axum::response::Html("<html><body><h1>Otters</h1><p>Otters hold hands while sleeping.</p></body></html>")
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/page", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    };
    let llm = LlmStandIn::start(calls_from_the_message()).await;
    // Operators are told of a server that is down, and when it is back.
    let ops = crate::common::receiver::Receiver::start(0).await;
    let body = servers(
        &notes.url,
        dir.path(),
        &format!(
            "[agents.plain]\nmcp = []\n\n[[bindings]]\nagent = \"plain\"\nchat = \"plain\"\n\n\
             [alerts]\nwebhook_url = \"{}\"\nchannel_down_secs = 1\n",
            ops.url
        ),
    );
    // The model sees images (tool results' images reach it as image parts).
    let work = Workdir::new(&config(&llm.url, &body).replacen(
        "kind = \"openai\"\n",
        "kind = \"openai\"\nvision = true\n",
        1,
    ));
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    for id in ["time", "fetch", "notes"] {
        wait_for(&format!("{id} up"), Duration::from_secs(30), || async {
            (admin_server(&service, id).await["state"] == "up").then_some(())
        })
        .await;
    }
    let send = |conversation: &'static str, id: &'static str, calls: Value| {
        let hook = &hook;
        async move {
            let (status, body) = hook
                .send(conversation, None, id, &format!("run {calls}"), "")
                .await;
            assert_eq!(status, 202, "{body}");
        }
    };

    // Offered and called: time (stdio), fetch (stdio, a local page), notes (HTTP).
    send(
        "c",
        "m1",
        json!([["time__get_current_time", {"timezone": "UTC"}]]),
    )
    .await;
    let answer = hook.reply_containing("c", "datetime").await;
    assert!(answer.contains("UTC"), "{answer}");
    let offered: Vec<String> = llm.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in [
        "time__get_current_time",
        "fetch__fetch",
        "notes__add",
        "notes__record",
    ] {
        assert!(
            offered.iter().any(|o| o == name),
            "{name} offered: {offered:?}"
        );
    }
    assert!(!offered.iter().any(|o| o.starts_with("garbage__")));
    // `raw`: the page as it is (simplifying needs readability.js from npm, which this
    // machine cannot install).
    send(
        "c",
        "m2",
        json!([["fetch__fetch", {"url": page, "raw": true}]]),
    )
    .await;
    hook.reply_containing("c", "Otters hold hands").await;
    send("c", "m3", json!([["notes__add", {"a": 20, "b": 22}]])).await;
    hook.reply_containing("c", "sum=42").await;

    // An image result: a model that sees gets it as an image part with the next call.
    send("c", "m3a", json!([["notes__picture", {}]])).await;
    let got = hook.reply_containing("c", "[image:").await;
    assert!(got.contains("attached for you to see"), "{got}");
    let picture = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG-otter-picture");
    let shown = llm.requests().iter().any(|r| {
        r.body["messages"]
            .to_string()
            .contains(&format!("data:image/png;base64,{picture}"))
    });
    assert!(shown, "the image went to the model as an image part");

    // A tool the server adds while running is offered once it says its list changed.
    send("c", "m3b", json!([["notes__grow", {}]])).await;
    hook.reply_containing("c", "grown").await;
    wait_for("the new tool listed", Duration::from_secs(20), || async {
        let notes = admin_server(&service, "notes").await;
        notes["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fresh")
            .then_some(())
    })
    .await;
    send("c", "m3c", json!([["notes__fresh", {}]])).await;
    hook.reply_containing("c", "fresh!").await;
    let last = llm.requests().last().unwrap().body["tools"].to_string();
    assert!(last.contains("notes__fresh"), "offered: {last}");

    // An agent without the servers is not offered their tools.
    let before = llm.count();
    send("plain", "p1", json!([["notes__add", {"a": 1, "b": 1}]])).await;
    hook.reply_containing("plain", "is not available here")
        .await;
    let plain = &llm.requests()[before].body;
    let tools = plain["tools"].to_string();
    assert!(
        !tools.contains("notes__") && !tools.contains("time__"),
        "{tools}"
    );

    // A hanging call is cancelled at the server's time limit; the turn goes on.
    send(
        "c",
        "m4",
        json!([["notes__slow", {"seconds": 30}], ["notes__add", {"a": 1, "b": 2}]]),
    )
    .await;
    let timed_out = hook.reply_containing("c", "did not answer").await;
    assert!(timed_out.contains("sum=3"), "the turn went on: {timed_out}");

    // 10 MB comes back cut to max_result_bytes, saying so.
    send("c", "m5", json!([["notes__big", {}]])).await;
    let cut = hook
        .reply_containing("c", "[cut: the result was 10485760 bytes")
        .await;
    assert!(cut.len() < 4000, "{} bytes", cut.len());

    // Killed mid-session while it cannot start again: down, its tools withdrawn, and a
    // model that calls one anyway is told which server is down. Then it comes back.
    let pids = children_named(service.pid(), "mcp-server-time");
    assert_eq!(pids.len(), 1, "one time server: {pids:?}");
    std::fs::write(dir.path().join("block"), "").unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pids[0].to_string()])
        .status()
        .unwrap();
    wait_for("time down", Duration::from_secs(30), || async {
        (admin_server(&service, "time").await["state"] == "down").then_some(())
    })
    .await;
    send(
        "c",
        "m6",
        json!([["time__get_current_time", {"timezone": "UTC"}]]),
    )
    .await;
    hook.reply_containing("c", "MCP server `time` is down")
        .await;
    let last = llm.requests().last().unwrap().body["tools"].to_string();
    assert!(!last.contains("time__"), "withdrawn from the offer: {last}");
    // Down long enough to be told (channel_down_secs = 1; the alert loop ticks each second)
    // before it may come back: unblocked sooner, a quick restart leaves nothing to resolve.
    wait_for("time's down alert", Duration::from_secs(30), || async {
        ops.received()
            .iter()
            .any(|r| r.body["key"] == "mcp:time" && r.body["state"] == "down")
            .then_some(())
    })
    .await;
    std::fs::remove_file(dir.path().join("block")).unwrap();
    wait_for("time restarted", Duration::from_secs(40), || async {
        let server = admin_server(&service, "time").await;
        (server["state"] == "up" && server["restarts"].as_u64() >= Some(1)).then_some(())
    })
    .await;
    let again = children_named(service.pid(), "mcp-server-time");
    assert!(again.len() == 1 && again[0] != pids[0], "{again:?}");
    send(
        "c",
        "m7",
        json!([["time__get_current_time", {"timezone": "UTC"}]]),
    )
    .await;
    wait_for("a second time answer", Duration::from_secs(30), || async {
        let answers = hook
            .list("c", 0)
            .await
            .into_iter()
            .filter(|m| m["kind"] == "reply")
            .filter(|m| m["text"].as_str().unwrap_or("").contains("datetime"))
            .count();
        (answers >= 2).then_some(())
    })
    .await;

    // The garbage server stays down with its error; the service is fine.
    let garbage = admin_server(&service, "garbage").await;
    assert_eq!(garbage["state"], "down", "{garbage}");
    // 30 s: the alert loop ticks each second and tells its targets in turn, slower under
    // the full suite's load on two cores.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ops.received().iter().any(|r| r.body["state"] == "resolved") {
        let told: Vec<_> = ops.received().iter().map(|r| r.body.clone()).collect();
        assert!(
            std::time::Instant::now() < deadline,
            "no resolved alert for time within 30 s; told: {told:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let alerts: Vec<(String, String)> = ops
        .received()
        .iter()
        .map(|r| {
            (
                r.body["key"].as_str().unwrap_or_default().to_string(),
                r.body["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let of = |key: &str| -> Vec<&str> {
        alerts
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| s.as_str())
            .collect()
    };
    assert_eq!(of("mcp:garbage"), ["down"], "{alerts:?}");
    assert_eq!(of("mcp:time"), ["down", "resolved"], "{alerts:?}");
    assert!(of("mcp:notes").is_empty(), "{alerts:?}");
    assert!(!garbage["last_error"].as_str().unwrap_or("").is_empty());
    assert_eq!(service.readyz().await.0, 200);
    let (_, status) = service.get_json("/v1/admin/mcp", ADMIN).await;
    assert!(!status.to_string().contains(NOTES_KEY));

    // Stopped, the service leaves no child behind.
    let pid = service.pid();
    let (code, _) = service.terminate().await;
    assert_eq!(code, Some(0));
    assert!(children_named(pid, "mcp-server").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_redone_after_kill_9_does_not_call_a_recording_tool_twice() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.txt");
    let notes = notes(&effects).await;
    // The model asks for `record`; the first service dies (kill -9) while the model holds
    // the answer that follows the tool's result.
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = hang.clone();
    let llm = LlmStandIn::start(move |body, _| {
        if !last_user(body).starts_with("remember") {
            return Behaviour::reply("ok");
        }
        let done = fresh_results(body);
        if done.is_empty() {
            return Behaviour::tool("notes__record", json!({"text": "otters"}));
        }
        if hanging.load(Ordering::SeqCst) {
            return Behaviour::Hang;
        }
        Behaviour::reply(format!("done: {}", done.join(" | ")))
    })
    .await;
    let only_notes = format!(
        "[mcp.servers.notes]\nurl = \"{}\"\nheaders_env = {{ Authorization = \"FC_NOTES_AUTH\" }}\n",
        notes.url
    );
    let work = Workdir::new(&config(&llm.url, &only_notes));
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let service = Service::start(&work, &env).await;
    // Both processes' logs, printed if a check below fails.
    let mut logs = LogsOnFailure(vec![("first".into(), service.log_handle())]);
    wait_for("notes up", Duration::from_secs(30), || async {
        (admin_server(&service, "notes").await["state"] == "up").then_some(())
    })
    .await;
    let hook = Hook::new(&service, HOOK_SECRET);
    let (status, body) = hook.send("k", None, "k1", "remember otters", "").await;
    assert_eq!(status, 202, "{body}");
    wait_for("the tool's effect", Duration::from_secs(30), || async {
        (std::fs::read_to_string(&effects)
            .unwrap_or_default()
            .lines()
            .count()
            == 1)
            .then_some(())
    })
    .await;
    wait_for("the model asked again", Duration::from_secs(10), || async {
        (llm.count() >= 2).then_some(())
    })
    .await;
    service.kill();

    hang.store(false, Ordering::SeqCst);
    let service = Service::start(&work, &env).await;
    logs.0.push(("after the kill".into(), service.log_handle()));
    let hook = Hook::new(&service, HOOK_SECRET);
    let answer = hook.reply_containing("k", "done:").await;
    assert!(
        answer.contains("recorded otters"),
        "the recorded result replayed: {answer}"
    );
    assert_eq!(
        std::fs::read_to_string(&effects).unwrap().lines().count(),
        1,
        "the server recorded it once"
    );
}
