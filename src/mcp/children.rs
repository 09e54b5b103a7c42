//! The stdio servers' processes this deployment started, kept in a file beside its
//! workspace (`<agent.workspace>/.mcp/children`: pid and start time per line), so that a
//! start after a kill -9 ends the children the dead process left (a child whose pid was
//! reused by another program has another start time and is left alone).

use std::path::PathBuf;
use std::sync::Mutex;

pub(super) struct Children {
    file: PathBuf,
    lock: Mutex<()>,
}

/// A process's start time (clock ticks after boot, field 22 of `/proc/<pid>/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

impl Children {
    pub(super) fn new(workspace: &str) -> Self {
        Children {
            file: PathBuf::from(workspace).join(".mcp").join("children"),
            lock: Mutex::new(()),
        }
    }

    /// End every child an earlier process of this deployment left running; forget them.
    pub(super) fn end_leftovers(&self) -> usize {
        let _held = self.lock.lock().expect("children lock");
        let Ok(text) = std::fs::read_to_string(&self.file) else {
            return 0;
        };
        let mut ended = 0;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(pid), Some(started)) = (
                parts.next().and_then(|p| p.parse::<u32>().ok()),
                parts.next().and_then(|s| s.parse::<u64>().ok()),
            ) else {
                continue;
            };
            if start_time(pid) == Some(started)
                && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
                && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
            {
                ended += 1;
            }
        }
        let _ = std::fs::remove_file(&self.file);
        ended
    }

    /// Note a child just started.
    pub(super) fn started(&self, pid: u32) {
        use std::io::Write;
        let Some(started) = start_time(pid) else {
            return;
        };
        let _held = self.lock.lock().expect("children lock");
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .and_then(|mut f| writeln!(f, "{pid} {started}"));
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot note an MCP server's process");
        }
    }
}
