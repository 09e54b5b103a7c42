//! The official Python client libraries (`openai`, `standardwebhooks`), from the venv that
//! `scripts/py-clients.sh` fills from PyPI (the test command runs it). A missing venv fails
//! the test loudly: these tests never skip.

use std::path::PathBuf;
use std::process::Stdio;

/// The venv's interpreter (`FERROCLAW_TEST_PYTHON`, default the venv the script makes).
pub fn python() -> PathBuf {
    let path = std::env::var_os("FERROCLAW_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/ferroclaw-py/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/py-clients.sh (the test command does) to install the \
         official Python clients",
        path.display()
    );
    path
}

/// What a Python script printed.
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run `script` with `args` and `env` (without blocking the runtime).
pub async fn run(script: &str, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let output = tokio::process::Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("python runs");
    Ran {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
