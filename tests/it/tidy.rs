//! What ARCHITECTURE.md promises about the shape of `src/`, checked on the source text: the
//! top-level modules form no cycle, nothing is wired after construction, and no macro that
//! writes code is longer than a screenful or two.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A source file's text without its comments (comments do not count as uses).
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().display().to_string();
            (rel, code(&path))
        })
        .collect()
}

/// The top-level module a file of `src/` belongs to (`engine/turn.rs` → `engine`).
fn top_module(rel: &str) -> String {
    let first = rel.split('/').next().unwrap();
    first.trim_end_matches(".rs").to_string()
}

/// `crate::X` paths a file names, X a top-level module other than its own.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let modules: BTreeSet<String> = files.iter().map(|(rel, _)| top_module(rel)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &files {
        let from = top_module(rel);
        if from == "main" || from == "lib" {
            continue;
        }
        let edges = graph.entry(from.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                edges.insert(name);
            }
        }
    }
    graph
}

/// A path from `to` back to `from`, if there is one.
fn path_back(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![to.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == from {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

#[test]
fn the_top_level_modules_of_src_form_no_cycle() {
    let graph = module_graph();
    assert!(
        graph.len() > 20 && graph["engine"].contains("providers"),
        "the module graph was not read: {graph:?}"
    );
    let mut cycles = Vec::new();
    for (from, edges) in &graph {
        for to in edges {
            if let Some(back) = path_back(&graph, from, to) {
                cycles.push(format!("{from} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles in src/: {cycles:#?}");
}

#[test]
fn a_cycle_would_be_found() {
    // The check itself: a graph with a loop through three modules reports it.
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("config", "agents"),
        ("agents", "schedules"),
        ("schedules", "config"),
    ] {
        graph.entry(a.into()).or_default().insert(b.into());
    }
    assert_eq!(
        path_back(&graph, "config", "agents").unwrap(),
        ["agents", "schedules", "config"]
    );
}

#[test]
fn nothing_is_wired_after_construction() {
    let mut found = Vec::new();
    for (rel, text) in sources() {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            let setter =
                (line.contains("fn set_") || line.contains("fn bind(")) && line.contains("Arc<");
            let back_reference = line.contains("Weak<")
                || line.contains("OnceLock<Arc<dyn")
                || line.contains("OnceLock<Weak");
            if setter || back_reference {
                found.push(format!("src/{rel}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "late binding (pass it to the constructor instead): {found:#?}"
    );
}

#[test]
fn no_code_writing_macro_is_longer_than_150_lines() {
    let mut long = Vec::new();
    for (rel, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            if let Some(name) = line.trim_start().strip_prefix("macro_rules! ") {
                let end = (start..lines.len())
                    .find(|&i| lines[i] == "}")
                    .unwrap_or(lines.len());
                if end - start > 150 {
                    long.push(format!("src/{rel}: {name} is {} lines", end - start));
                }
            }
        }
    }
    assert!(long.is_empty(), "{long:#?}");
}

/// Sibling files a file of `dir` names through `prefix` (`super::` inside a module folder,
/// `crate::` at a crate's root), as `(file, sibling)` edges.
fn sibling_edges(dir: &Path, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let stems: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|s| s != "mod" && s != "lib" && s != "main")
        .collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let from = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !stems.contains(&from) {
            continue;
        }
        let text = code(path);
        // Names after the prefix: `super::x`, and each item of `super::{x, y::z}`.
        let mut named = BTreeSet::new();
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let items: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                named.insert(name);
            }
        }
        let edges: BTreeSet<String> = named
            .into_iter()
            .filter(|n| *n != from && stems.contains(n))
            .collect();
        graph.insert(from, edges);
    }
    graph
}

fn module_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            module_dirs(&path, out);
        }
    }
}

#[test]
fn no_two_files_of_a_module_name_each_other_round_a_loop() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = Vec::new();
    module_dirs(&root.join("src"), &mut dirs);
    let mut crate_roots = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("channels")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            module_dirs(&src, &mut dirs);
            crate_roots.push(src);
        }
    }
    let mut loops = Vec::new();
    let mut checked = 0;
    for dir in &dirs {
        let prefix = if crate_roots.contains(dir) {
            "crate::"
        } else {
            "super::"
        };
        let graph = sibling_edges(dir, prefix);
        checked += graph.values().map(BTreeSet::len).sum::<usize>();
        for (from, edges) in &graph {
            for to in edges {
                if let Some(back) = path_back(&graph, from, to) {
                    loops.push(format!(
                        "{}: {from} -> {}",
                        dir.strip_prefix(root).unwrap().display(),
                        back.join(" -> ")
                    ));
                }
            }
        }
    }
    assert!(checked > 20, "sibling references were not read");
    assert!(loops.is_empty(), "file loops: {loops:#?}");
}
