//! `read_file`, `write_file`, `list_files`: confined to the session's workspace folder.
//! Absolute paths, `..` and symlinks that lead outside are refused.

use super::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

const MAX_READ_BYTES: u64 = 256 * 1024;

/// Resolve `relative` inside `root`, refusing anything that could leave it. The returned path
/// may not exist yet (for writes); every existing ancestor is checked after resolving links.
pub fn confine(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let rel = Path::new(relative);
    if rel.is_absolute() || relative.starts_with('~') {
        return Err(ToolError::new(
            "absolute paths are not allowed; use a path inside the workspace",
        ));
    }
    for component in rel.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            _ => {
                return Err(ToolError::new(
                    "`..` is not allowed; stay inside the workspace",
                ));
            }
        }
    }
    std::fs::create_dir_all(root).map_err(|e| ToolError(format!("workspace unavailable: {e}")))?;
    let root = root
        .canonicalize()
        .map_err(|e| ToolError(format!("workspace unavailable: {e}")))?;
    let joined = root.join(rel);
    // Walk up to the deepest existing ancestor and resolve it: symlinks out are caught here.
    let mut existing = joined.as_path();
    while !existing.exists() && existing.symlink_metadata().is_err() {
        existing = existing.parent().unwrap_or(&root);
    }
    let resolved = existing
        .canonicalize()
        .map_err(|_| ToolError::new("the path leads through a broken or looping link"))?;
    if !resolved.starts_with(&root) {
        return Err(ToolError::new(
            "the path leads outside the workspace (symlink)",
        ));
    }
    Ok(joined)
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
    fn name(&self) -> &'static str {
        "read_file"
    }
    fn description(&self) -> &'static str {
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
        let path = confine(&cx.workspace, &given)?;
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ToolError(format!("cannot read: {e}")))?;
        if !meta.is_file() {
            // A FIFO or device would block the turn (or never end).
            return Err(ToolError::new("not a regular file"));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(ToolError(format!(
                "file is {} bytes; the limit is {MAX_READ_BYTES}",
                meta.len()
            )));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| ToolError(format!("cannot read: {e}")))?;
        String::from_utf8(bytes).map_err(|_| ToolError::new("file is not UTF-8 text"))
    }
}

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }
    fn description(&self) -> &'static str {
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
        let path = confine(&cx.workspace, &given)?;
        match path.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ToolError::new("refusing to write through a symlink"));
            }
            Ok(m) if !m.is_file() => {
                return Err(ToolError::new("not a regular file"));
            }
            _ => {}
        }
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError(format!("cannot create folder: {e}")))?;
        }
        tokio::fs::write(&path, &content)
            .await
            .map_err(|e| ToolError(format!("cannot write: {e}")))?;
        Ok(format!("wrote {} bytes to {given}", content.len()))
    }
}

pub struct ListFiles;

#[async_trait]
impl Tool for ListFiles {
    fn name(&self) -> &'static str {
        "list_files"
    }
    fn description(&self) -> &'static str {
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
        let path = confine(&cx.workspace, &given)?;
        let mut dir = tokio::fs::read_dir(&path)
            .await
            .map_err(|e| ToolError(format!("cannot list: {e}")))?;
        let mut names = Vec::new();
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| ToolError(format!("cannot list: {e}")))?
        {
            let kind = entry
                .file_type()
                .await
                .map(|t| if t.is_dir() { "/" } else { "" })
                .unwrap_or("");
            names.push(format!("{}{kind}", entry.file_name().to_string_lossy()));
        }
        names.sort();
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
            "~/x",
        ] {
            assert!(confine(&root, bad).is_err(), "{bad} must be refused");
        }
        for good in [
            "a.txt",
            "sub/b.txt",
            "./c.txt",
            "new/deep/d.txt",
            "inside/e.txt",
        ] {
            assert!(confine(&root, good).is_ok(), "{good} must be allowed");
        }
    }
}
