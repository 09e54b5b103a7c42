//! `exec` on the host (`tools.host_exec`): `sh -c` in the session's workspace, in its own
//! process group so a timeout kills the command and everything it started.

use super::{Capture, ExecOutcome, ExecRequest, OutputSink};
use std::path::Path;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

pub async fn run(
    workspace: &Path,
    request: &ExecRequest,
    sink: Option<&dyn OutputSink>,
) -> Result<ExecOutcome, String> {
    let dir = match &request.workdir {
        Some(sub) => workspace.join(sub),
        None => workspace.to_path_buf(),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the working folder: {e}"))?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&request.command)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the command: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let mut capture = Capture::default();
    let deadline = tokio::time::Instant::now() + request.timeout;
    let (mut out_open, mut err_open) = (true, true);
    let mut out_buf = vec![0u8; 8192];
    let mut err_buf = vec![0u8; 8192];
    let mut timed_out = false;
    while out_open || err_open {
        let (is_err, read) = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
            r = stdout.read(&mut out_buf), if out_open => (false, r),
            r = stderr.read(&mut err_buf), if err_open => (true, r),
        };
        match read {
            Ok(0) | Err(_) => {
                if is_err {
                    err_open = false
                } else {
                    out_open = false
                }
            }
            Ok(n) => {
                let bytes = if is_err { &err_buf[..n] } else { &out_buf[..n] };
                capture.push(is_err, bytes);
                if let Some(sink) = sink {
                    sink.output(&String::from_utf8_lossy(bytes)).await;
                }
            }
        }
    }
    let exit_code = if timed_out {
        kill_group(child.id()).await;
        let _ = child.kill().await;
        None
    } else {
        match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) => status.code().map(i64::from),
            _ => {
                timed_out = true;
                kill_group(child.id()).await;
                let _ = child.kill().await;
                None
            }
        }
    };
    let (stdout, stderr, truncated) = capture.into_texts();
    Ok(ExecOutcome {
        exit_code,
        stdout,
        stderr,
        timed_out,
        truncated,
    })
}

/// Kill the command's whole process group (what it started in the background too).
async fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = tokio::process::Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}
