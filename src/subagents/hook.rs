//! The spawn hook (`subagents.hook`): an http(s) URL that is POSTed JSON, or a command that
//! gets the JSON on stdin. Before a spawn it can refuse (non-2xx, `{"allow": false}`, or a
//! non-zero exit; the reason is the body or stderr); a hook that fails or does not answer in
//! `hook_timeout_secs` refuses. Spawned/ended events are sent the same way, answers ignored.

use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

#[derive(Clone)]
pub struct Hook {
    target: Option<String>,
    timeout: Duration,
}

impl Hook {
    pub fn new(target: &str, timeout: Duration) -> Self {
        Hook {
            target: (!target.trim().is_empty()).then(|| target.trim().to_string()),
            timeout,
        }
    }

    pub fn configured(&self) -> bool {
        self.target.is_some()
    }

    /// Ask before a spawn. `Err` carries the refusal reason.
    pub async fn allow(&self, event: &Value) -> Result<(), String> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        match tokio::time::timeout(self.timeout, call(target, event)).await {
            Err(_) => Err(format!(
                "the spawn hook did not answer within {} s",
                self.timeout.as_secs()
            )),
            Ok(Err(e)) => Err(format!("the spawn hook failed: {e}")),
            Ok(Ok((true, _))) => Ok(()),
            Ok(Ok((false, reason))) => Err(if reason.trim().is_empty() {
                "the spawn hook refused it".into()
            } else {
                format!("the spawn hook refused it: {}", reason.trim())
            }),
        }
    }

    /// Tell the hook about an event; failures are only logged.
    pub async fn notify(&self, event: &Value) {
        let Some(target) = &self.target else { return };
        if let Ok(Err(e)) | Err(e) = tokio::time::timeout(self.timeout, call(target, event))
            .await
            .map_err(|e| e.to_string())
        {
            tracing::warn!(error = %e, "subagent hook event failed");
        }
    }
}

/// (allowed, reason).
async fn call(target: &str, event: &Value) -> Result<(bool, String), String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        let response = crate::http::shared()
            .post(target)
            .json(event)
            .send()
            .await
            .map_err(|_| "the hook URL is unreachable".to_string())?;
        let ok = response.status().is_success();
        let body = response.text().await.unwrap_or_default();
        let refused = serde_json::from_str::<Value>(&body)
            .ok()
            .is_some_and(|v| v.get("allow") == Some(&Value::Bool(false)));
        let reason = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_string))
            .unwrap_or(body);
        return Ok((ok && !refused, reason));
    }
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run the hook command: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(event.to_string().as_bytes()).await;
    }
    let output = child.wait_with_output().await.map_err(|e| e.to_string())?;
    let reason = String::from_utf8_lossy(if output.stderr.is_empty() {
        &output.stdout
    } else {
        &output.stderr
    })
    .to_string();
    Ok((output.status.success(), reason))
}
