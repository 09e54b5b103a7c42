//! Local model files: the catalog of models ferroclaw knows by name, the cache they live in
//! (`$FERROCLAW_HOME/models`, default `~/.cache/ferroclaw/models`) and fetching one from its
//! published source with its checksum checked (`ferroclaw model fetch|list`, and on first use
//! by the `local` provider).
//!
//! Knows files, HTTP and archives; nothing of providers, sessions or channels.

mod catalog;
mod fetch;
pub mod progress;

pub use catalog::{CATALOG, KnownModel, known};
pub use fetch::{FetchError, Progress, ensure, fetch};

use std::path::PathBuf;

/// `$FERROCLAW_HOME`, default `~/.cache/ferroclaw`.
pub fn home() -> PathBuf {
    if let Some(home) = std::env::var_os("FERROCLAW_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let user = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    user.join(".cache").join("ferroclaw")
}

/// Where fetched model files are kept.
pub fn cache_dir() -> PathBuf {
    home().join("models")
}

/// True when `FERROCLAW_OFFLINE` forbids fetching.
pub fn offline() -> bool {
    std::env::var("FERROCLAW_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A name beside `target` that no other writer uses, in this process or another: a file is
/// written there, then renamed over `target`, so a reader never sees half a file, even when
/// two first uses (a `serve` and a `chat`, say) prepare the same file at once.
pub fn scratch_beside(target: &std::path::Path, what: &str) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    target.with_file_name(format!(".{name}.{what}-{}", uuid::Uuid::new_v4().simple()))
}

/// Write `target` through a scratch file of its own ([`scratch_beside`]), renamed over it
/// once `write` has filled it: a reader sees the old file or the whole new one, never half,
/// even while another writer makes the same file. The scratch file is removed if anything
/// fails.
pub fn replace_file(
    target: &std::path::Path,
    what: &str,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let scratch = scratch_beside(target, what);
    let written = std::fs::File::create_new(&scratch)
        .and_then(|mut file| write(&mut file))
        .and_then(|()| std::fs::rename(&scratch, target));
    if written.is_err() {
        let _ = std::fs::remove_file(&scratch);
    }
    written
}

/// The cached file of a known model, if it is there.
pub fn cached(model: &KnownModel) -> Option<PathBuf> {
    let path = cache_dir().join(model.file);
    path.is_file().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::scratch_beside;
    use std::path::Path;

    #[test]
    fn each_writer_gets_a_scratch_name_of_its_own_beside_the_target() {
        let target = Path::new("/cache/models/m.gguf");
        let (a, b) = (
            scratch_beside(target, "part"),
            scratch_beside(target, "part"),
        );
        assert_ne!(a, b, "two writers never share a scratch file");
        for scratch in [&a, &b] {
            assert_eq!(
                scratch.parent(),
                target.parent(),
                "renamed within one folder"
            );
            let name = scratch.file_name().unwrap().to_string_lossy();
            assert!(name.starts_with(".m.gguf.part-"), "{name}");
        }
    }
}
