//! Starts the real `ferroclaw` binary (`serve` on port 0, or `chat` with piped stdin) in a
//! temporary folder with its own database, and captures its logs.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ferroclaw");

/// A folder holding a config file and (by default) the SQLite database; survives restarts.
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Workdir { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }
}

/// A config with an `echo` OpenAI-compatible provider at `llm_url`, plus `extra` TOML.
pub fn config_with_llm(llm_url: &str, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
shutdown_grace_secs = 5

[agent]
model = "standin/test-model"

[providers.standin]
kind = "openai"
base_url = "{llm_url}"

[fallback]
retries_per_model = 0
request_timeout_secs = 30

{extra}
"#
    )
}

pub struct Service {
    child: Child,
    pub base: String,
    logs: Arc<Mutex<String>>,
}

impl Service {
    /// Start `ferroclaw serve -c config.toml` in `work` with extra environment variables and
    /// wait until `/readyz` answers 200.
    pub async fn start(work: &Workdir, env: &[(&str, &str)]) -> Service {
        let service = Service::spawn(work, env).await;
        let client = reqwest::Client::new();
        let url = format!("{}/readyz", service.base);
        super::wait_for("/readyz to answer 200", Duration::from_secs(20), || {
            super::answers_200(&client, &url)
        })
        .await;
        service
    }

    /// Start `serve` and return once it listens, ready or not.
    pub async fn spawn(work: &Workdir, env: &[(&str, &str)]) -> Service {
        let mut command = Command::new(BIN);
        command
            .arg("serve")
            .arg("-c")
            .arg(work.config())
            .current_dir(work.path())
            .env("FERROCLAW_LOG", "info")
            // No local model unless a test asks for it (see `models.rs`).
            .env("FERROCLAW_OFFLINE", "1")
            .env("FERROCLAW_HOME", work.path().join("home"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start ferroclaw serve");
        let logs = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    // Human lines end the address with a space, JSON lines with a quote.
                    let _ = addr_tx.send(
                        rest.chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':'))
                            .collect::<String>(),
                    );
                }
                let mut logs = sink.lock().unwrap();
                logs.push_str(&line);
                logs.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            if let Ok(addr) = addr_rx.try_recv() {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "ferroclaw serve exited with {status}; logs:\n{}",
                    logs.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "serve did not log its address; logs:\n{}",
                logs.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        Service {
            child,
            base: format!("http://{addr}"),
            logs,
        }
    }

    /// GET `path` with a bearer `token`: the status and the JSON body (Null when none).
    pub async fn get_json(&self, path: &str, token: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `/readyz`: status and body.
    pub async fn readyz(&self) -> (u16, String) {
        let response = reqwest::get(format!("{}/readyz", self.base)).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// The service's log as it grows, readable after the service is gone (a killed process's
    /// last lines arrive after `kill` returns).
    pub fn log_handle(&self) -> LogHandle {
        LogHandle(self.logs.clone())
    }

    /// The service's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The peak resident memory of the service's process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb * 1024
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM and wait for the exit code.
    pub async fn terminate(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A service's captured log (see [`Service::log_handle`]).
#[derive(Clone)]
pub struct LogHandle(Arc<Mutex<String>>);

impl LogHandle {
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

/// Named processes' logs, printed when the test fails (dropped while panicking).
pub struct LogsOnFailure(pub Vec<(String, LogHandle)>);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, log) in &self.0 {
                eprintln!("----- log of {name} -----\n{}", log.text());
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Output of a finished command.
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `ferroclaw ARGS` in `dir` with `stdin` piped in, to completion (bounded).
pub fn run(dir: &Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Finished {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(dir)
        .env_remove("FERROCLAW_LOG")
        // No local model unless a test asks for it (see `models.rs`).
        .env("FERROCLAW_OFFLINE", "1")
        .env("FERROCLAW_HOME", dir.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start ferroclaw");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferroclaw {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.join().unwrap();
    let output = child.wait_with_output().unwrap();
    Finished {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Run `ferroclaw chat` in `dir` (which holds config.toml) with `stdin` piped in.
pub async fn chat(
    dir: &Path,
    stdin: &str,
    env: &'static [(&'static str, &'static str)],
) -> Finished {
    let (dir, stdin) = (dir.to_path_buf(), stdin.to_string());
    tokio::task::spawn_blocking(move || run(&dir, &["chat"], &stdin, env))
        .await
        .unwrap()
}

/// A temp folder holding `config`.
pub fn folder_with(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    dir
}
