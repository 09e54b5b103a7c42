//! `read_file`, `write_file`, `list_files`: confined to the session's workspace folder.
//! Absolute paths, `..` and symlinks are refused: files are opened through
//! [`crate::workspace_fs`], which follows no link, planted or swapped in.

use super::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const MAX_READ_BYTES: u64 = 256 * 1024;

/// Checks that `relative` names a place inside `root` (no `..`, not absolute:
/// `workspace_fs`'s own rule) and that no symlink lies on the way, for a path handed on
/// rather than opened here (`exec`'s working folder). The file tools open through
/// [`crate::workspace_fs`] instead, which follows no link.
pub fn confine(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let names =
        crate::workspace_fs::parts(Path::new(relative)).map_err(|e| ToolError(e.to_string()))?;
    std::fs::create_dir_all(root).map_err(|e| ToolError(format!("workspace unavailable: {e}")))?;
    let mut at = root.to_path_buf();
    for name in names {
        at.push(name);
        if at
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(ToolError::new(
                "the path goes through a symlink (links are not followed)",
            ));
        }
    }
    Ok(root.join(relative))
}

fn fs_error(what: &str, e: std::io::Error) -> ToolError {
    ToolError(format!("{what}: {}", crate::workspace_fs::describe(&e)))
}

/// `{"path": ...}` (the workspace itself when absent).
#[derive(serde::Deserialize)]
struct PathArgs {
    #[serde(default = "here")]
    path: String,
}

/// `{"path": ..., "content": ...}`.
#[derive(serde::Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

fn here() -> String {
    ".".into()
}

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn in_container(&self) -> bool {
        true
    }
    fn description(&self) -> &str {
        "Read a UTF-8 text file from the session workspace."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "path relative to the workspace"}},
               "required": ["path"], "additionalProperties": false})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let PathArgs { path: given } = super::typed(args)?;
        let root = cx.workspace.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let (file, size) = crate::workspace_fs::open_read(&root, Path::new(&given))
                .map_err(|e| fs_error("cannot read", e))?;
            if size > MAX_READ_BYTES {
                return Err(ToolError(format!(
                    "file is {size} bytes; the limit is {MAX_READ_BYTES}"
                )));
            }
            let mut bytes = Vec::new();
            file.take(MAX_READ_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| ToolError(format!("cannot read: {e}")))?;
            String::from_utf8(bytes).map_err(|_| ToolError::new("file is not UTF-8 text"))
        })
        .await
        .map_err(|e| ToolError(format!("cannot read: {e}")))?
    }
}

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn in_container(&self) -> bool {
        true
    }
    fn description(&self) -> &str {
        "Write (create or replace) a text file in the session workspace."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
               "required": ["path", "content"], "additionalProperties": false})
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let WriteArgs {
            path: given,
            content,
        } = super::typed(args)?;
        let root = cx.workspace.clone();
        let len = content.len();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut file = crate::workspace_fs::create_file(
                &root,
                Path::new(&given),
                crate::workspace_fs::Existing::Truncate,
            )
            .map_err(|e| fs_error("cannot write", e))?;
            file.write_all(content.as_bytes())
                .map_err(|e| ToolError(format!("cannot write: {e}")))?;
            Ok(format!("wrote {len} bytes to {given}"))
        })
        .await
        .map_err(|e| ToolError(format!("cannot write: {e}")))?
    }
}

pub struct ListFiles;

#[async_trait]
impl Tool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }
    fn in_container(&self) -> bool {
        true
    }
    fn description(&self) -> &str {
        "List the entries of a folder in the session workspace (default: its root)."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn run(&self, args: Value, cx: &ToolContext) -> Result<String, ToolError> {
        let PathArgs { path: given } = super::typed(args)?;
        let root = cx.workspace.clone();
        let names = tokio::task::spawn_blocking(move || {
            crate::workspace_fs::list(&root, Path::new(&given))
                .map_err(|e| fs_error("cannot list", e))
        })
        .await
        .map_err(|e| ToolError(format!("cannot list: {e}")))??;
        Ok(if names.is_empty() {
            "(empty)".into()
        } else {
            names.join("\n")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confinement_refuses_every_escape() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(base.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(base.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(base.path().join("secret.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("inside")).unwrap();
        for bad in [
            "../secret.txt",
            "sub/../../secret.txt",
            "/etc/passwd",
            "out/secret.txt",
            "link.txt",
            "out",
            "out/new.txt",
            "inside/e.txt",
            "~/x",
        ] {
            assert!(confine(&root, bad).is_err(), "{bad} must be refused");
        }
        for good in ["a.txt", "sub/b.txt", "./c.txt", "new/deep/d.txt"] {
            assert!(confine(&root, good).is_ok(), "{good} must be allowed");
        }
    }
}
