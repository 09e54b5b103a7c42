//! The stdio servers' processes this deployment started, kept in a file beside its
//! workspace (`<agent.workspace>/.mcp/children`: per line the child's pid and start time and
//! its service process's), so that a start after a kill -9 ends the children the dead
//! process left. A pid reused by another program has another start time and is left alone;
//! so are the children of a service process that still runs.

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

    /// End every child a process of this deployment that is gone left running, and forget
    /// them; children of processes still running (several instances share a workspace on
    /// PostgreSQL) are left alone and kept.
    pub(super) fn end_leftovers(&self) -> usize {
        let _held = self.lock.lock().expect("children lock");
        let Ok(text) = std::fs::read_to_string(&self.file) else {
            return 0;
        };
        let mut ended = 0;
        let mut kept = String::new();
        for line in text.lines() {
            let numbers: Vec<u64> = line
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            let [pid, started, owner, owner_started] = numbers[..] else {
                continue;
            };
            if start_time(owner as u32) == Some(owner_started) {
                kept.push_str(line);
                kept.push('\n');
                continue;
            }
            if start_time(pid as u32) == Some(started)
                && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
                && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
            {
                ended += 1;
            }
        }
        let _ = std::fs::write(&self.file, kept);
        ended
    }

    /// Note a child just started.
    pub(super) fn started(&self, pid: u32) {
        use std::io::Write;
        let me = std::process::id();
        let (Some(started), Some(my_start)) = (start_time(pid), start_time(me)) else {
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
            .and_then(|mut f| writeln!(f, "{pid} {started} {me} {my_start}"));
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot note an MCP server's process");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_children_of_a_gone_process_are_ended() {
        let dir = tempfile::tempdir().unwrap();
        let children = Children::new(dir.path().to_str().unwrap());
        let mut orphan = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut sibling = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let lines = format!(
            "{} {} 999999999 1\n{} {} {me} {}\n",
            orphan.id(),
            start_time(orphan.id()).unwrap(),
            sibling.id(),
            start_time(sibling.id()).unwrap(),
            start_time(me).unwrap(),
        );
        std::fs::create_dir_all(dir.path().join(".mcp")).unwrap();
        std::fs::write(dir.path().join(".mcp/children"), lines).unwrap();
        assert_eq!(children.end_leftovers(), 1);
        assert!(
            orphan.wait().is_ok_and(|s| !s.success()),
            "the orphan was killed"
        );
        assert!(
            sibling.try_wait().unwrap().is_none(),
            "a live process's child is kept"
        );
        let kept = std::fs::read_to_string(dir.path().join(".mcp/children")).unwrap();
        assert!(kept.contains(&sibling.id().to_string()));
        let _ = sibling.kill();
    }
}
