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

fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().display().to_string();
            // Comments do not count as uses.
            let text: String = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            (rel, text)
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
