//! `ferroclaw import openclaw DIR [--dry-run]` (SPEC section 22): an OpenClaw state
//! directory (`openclaw.json`, `workspace/` and `workspace-<agent>/` with their `SOUL.md`,
//! `IDENTITY.md`, `AGENTS.md`, `TOOLS.md`, `USER.md`, `MEMORY.md`, `skills/`) into ferroclaw:
//! each workspace becomes an agent whose system prompt is its identity, soul, instructions
//! and tool notes; skills are copied into `skills.dir`; each channel's `allowFrom` becomes
//! that channel's allowlist; `MEMORY.md` and `USER.md` become memories of the owner (the
//! first allowlisted person). The config file is edited in place (its comments kept, the
//! old one saved beside it); memories are keyed by their text, so a second import adds
//! nothing. What has no counterpart (other channels, daily notes) is listed, not guessed.

use crate::config::LoadedConfig;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// What an import did (or, dry, would do), line by line, and what it could not map.
#[derive(Debug, Default)]
pub struct Report {
    pub done: Vec<String>,
    pub unmapped: Vec<String>,
}

/// The channels whose `allowFrom` has a ferroclaw counterpart.
const CHANNELS: &[&str] = &["telegram", "discord", "slack"];

struct Agent {
    id: String,
    workspace: PathBuf,
}

pub async fn import(
    loaded: &LoadedConfig,
    config_path: &Path,
    dir: &Path,
    dry_run: bool,
) -> anyhow::Result<Report> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let settings = read_settings(dir)?;
    let mut report = Report::default();
    // No file yet (built-in defaults): the import writes the first one.
    let existed = config_path.exists();
    let text = if existed {
        std::fs::read_to_string(config_path)
            .with_context(|| format!("reading {}", config_path.display()))?
    } else {
        String::new()
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not TOML", config_path.display()))?;

    for agent in agents(dir, &settings) {
        let prompt = system_prompt(&agent.workspace);
        let (table, key) = if agent.id == "main" {
            ("agent".to_string(), "system_prompt")
        } else {
            (format!("agents.{}", agent.id), "system_prompt")
        };
        match prompt {
            Some((prompt, from)) => {
                set(&mut doc, &table, key, toml_edit::value(prompt.clone()));
                report.done.push(format!(
                    "agent {}: system prompt from {} ({} characters)",
                    agent.id,
                    from.join(", "),
                    prompt.chars().count()
                ));
            }
            None => report.unmapped.push(format!(
                "agent {}: its workspace has no SOUL.md, IDENTITY.md, AGENTS.md or TOOLS.md",
                agent.id
            )),
        }
        let daily = agent.workspace.join("memory");
        if let Ok(entries) = std::fs::read_dir(&daily) {
            let n = entries.count();
            if n > 0 {
                report.unmapped.push(format!(
                    "agent {}: memory/ ({n} daily notes) is a log, not facts; left out",
                    agent.id
                ));
            }
        }
        copy_skills(
            &agent.workspace.join("skills"),
            &loaded.config.skills.dir,
            dry_run,
            &mut report,
        )?;
    }
    copy_skills(
        &dir.join("skills"),
        &loaded.config.skills.dir,
        dry_run,
        &mut report,
    )?;

    let mut owner = None;
    for (channel, value) in settings["channels"].as_object().into_iter().flatten() {
        let ids: Vec<String> = value["allowFrom"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| match v {
                serde_json::Value::String(s) => Some(s.rsplit(':').next().unwrap_or(s).to_string()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect();
        if !CHANNELS.contains(&channel.as_str()) {
            report.unmapped.push(format!(
                "channels.{channel}: ferroclaw has no {channel} channel"
            ));
            continue;
        }
        if ids.is_empty() {
            continue;
        }
        let table = format!("channels.{channel}");
        let mut list = toml_edit::Array::new();
        for id in &ids {
            list.push(id.as_str());
        }
        set(&mut doc, &table, "allowed_users", toml_edit::value(list));
        set(&mut doc, &table, "access", toml_edit::value("allowlist"));
        report.done.push(format!(
            "channels.{channel}: allowlist of {} ({})",
            ids.len(),
            ids.join(", ")
        ));
        owner.get_or_insert(format!("{channel}:{}", ids[0]));
    }

    let facts = owner_facts(dir, &agents(dir, &settings));
    match (&owner, facts.is_empty()) {
        (_, true) => {}
        (None, false) => report.unmapped.push(format!(
            "{} facts of MEMORY.md/USER.md: no allowlisted person to own them (allowFrom is empty)",
            facts.len()
        )),
        (Some(owner), false) => {
            let mut new = 0;
            if !dry_run {
                new = save_memories(loaded, owner, &facts).await?;
            }
            report.done.push(format!(
                "{} memories for {owner} from MEMORY.md and USER.md{}",
                facts.len(),
                if dry_run {
                    String::new()
                } else {
                    format!(" ({new} new)")
                }
            ));
        }
    }

    if !dry_run {
        if existed {
            let mut saved = config_path.as_os_str().to_owned();
            saved.push(".before-import");
            std::fs::copy(config_path, &saved).context("saving the config beside itself")?;
        }
        std::fs::write(config_path, doc.to_string())
            .with_context(|| format!("writing {}", config_path.display()))?;
    }
    Ok(report)
}

/// `openclaw.json` (JSON5), or an empty object when there is none.
fn read_settings(dir: &Path) -> anyhow::Result<serde_json::Value> {
    let path = dir.join("openclaw.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            json5::from_str(&text).with_context(|| format!("{} is not JSON5", path.display()))
        }
        Err(_) => Ok(serde_json::json!({})),
    }
}

/// The default workspace as `main`, every `workspace-<id>/`, and agents the config names
/// with a workspace of their own.
fn agents(dir: &Path, settings: &serde_json::Value) -> Vec<Agent> {
    let mut found = Vec::new();
    if dir.join("workspace").is_dir() {
        found.push(Agent {
            id: "main".into(),
            workspace: dir.join("workspace"),
        });
    }
    let mut named: Vec<Agent> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let id = name.strip_prefix("workspace-")?.to_string();
            let valid = !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            (valid && e.path().is_dir()).then(|| Agent {
                id,
                workspace: e.path(),
            })
        })
        .collect();
    named.sort_by(|a, b| a.id.cmp(&b.id));
    for agent in named {
        if !found.iter().any(|a| a.id == agent.id) {
            found.push(agent);
        }
    }
    let listed = settings["agents"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for entry in listed {
        let (Some(id), Some(workspace)) = (entry["id"].as_str(), entry["workspace"].as_str())
        else {
            continue;
        };
        let workspace = match workspace.strip_prefix("~/.openclaw/") {
            Some(rest) => dir.join(rest),
            None => PathBuf::from(workspace),
        };
        if workspace.is_dir() && !found.iter().any(|a| a.id == id) {
            found.push(Agent {
                id: id.to_string(),
                workspace,
            });
        }
    }
    found
}

/// The persona files of a workspace as one prompt, and which files it came from.
fn system_prompt(workspace: &Path) -> Option<(String, Vec<String>)> {
    let mut parts = Vec::new();
    let mut from = Vec::new();
    for file in ["IDENTITY.md", "SOUL.md", "AGENTS.md", "TOOLS.md"] {
        if let Ok(text) = std::fs::read_to_string(workspace.join(file))
            && !text.trim().is_empty()
        {
            parts.push(text.trim().to_string());
            from.push(file.to_string());
        }
    }
    (!parts.is_empty()).then(|| (parts.join("\n\n"), from))
}

/// Every fact line of the agents' `MEMORY.md` and `USER.md` (list items and plain lines;
/// headings and blank lines skipped), each once.
fn owner_facts(_dir: &Path, agents: &[Agent]) -> Vec<String> {
    let mut facts: Vec<String> = Vec::new();
    for agent in agents {
        for file in ["MEMORY.md", "USER.md"] {
            let Ok(text) = std::fs::read_to_string(agent.workspace.join(file)) else {
                continue;
            };
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || line.starts_with("---") {
                    continue;
                }
                let fact = line.trim_start_matches(['-', '*', '+']).trim().to_string();
                if fact.chars().count() >= 3
                    && fact.chars().count() <= crate::memory::MAX_TEXT_CHARS
                    && !facts.contains(&fact)
                {
                    facts.push(fact);
                }
            }
        }
    }
    facts
}

/// Save facts for `owner`, each keyed by its text (a second import adds none). New ones.
async fn save_memories(
    loaded: &LoadedConfig,
    owner: &str,
    facts: &[String],
) -> anyhow::Result<usize> {
    use sha2::{Digest, Sha256};
    let store = crate::app::App::open_store(&loaded.config).await?;
    let person = store.memory_person(owner).await?;
    let scope = crate::storage::person_scope(&person);
    let mut new = 0;
    for fact in facts {
        let key = hex::encode(&Sha256::digest(format!("{owner}\n{fact}").as_bytes())[..12]);
        let (_, saved) = store
            .memory_save(&crate::storage::NewMemory {
                scope: scope.clone(),
                text: fact.clone(),
                tags: "openclaw".into(),
                created_at: crate::clock::now_ms(),
                session_key: None,
                call_ref: Some(format!("import:openclaw:{key}")),
                embedding: None,
            })
            .await?;
        new += usize::from(saved);
    }
    Ok(new)
}

/// Copy each `<skill>/` holding a `SKILL.md` into `target` (an existing one is kept).
fn copy_skills(
    from: &Path,
    target: &str,
    dry_run: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let source = entry.path();
        if !source.join("SKILL.md").is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        let destination = Path::new(target).join(&name);
        if destination.exists() {
            report.unmapped.push(format!(
                "skill {name}: {} exists already; kept",
                destination.display()
            ));
            continue;
        }
        if !dry_run {
            copy_dir(&source, &destination)?;
        }
        report
            .done
            .push(format!("skill {name} → {}", destination.display()));
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)?.flatten() {
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `table.key = value`, creating the (dotted) table as a normal `[table]` when missing.
fn set(doc: &mut toml_edit::DocumentMut, table: &str, key: &str, value: toml_edit::Item) {
    let mut item = doc.as_item_mut();
    for part in table.split('.') {
        let tables = item.as_table_like_mut().expect("a table");
        if !tables.contains_key(part) {
            let mut fresh = toml_edit::Table::new();
            fresh.set_implicit(part == "agents" || part == "channels");
            tables.insert(part, toml_edit::Item::Table(fresh));
        }
        item = tables.get_mut(part).expect("just made");
    }
    item[key] = value;
}
