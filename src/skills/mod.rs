//! Skills (SPEC section 12): a folder holding `SKILL.md` (front matter `name` and
//! `description`, then the instructions) under the shared `[skills] dir` or an agent's
//! workspace `skills/`. The system prompt lists each agent's menu (name and description
//! only); the model reads a skill's instructions on demand (`read_skill`).
//!
//! Owns finding, parsing and filtering skills per agent. Read once at start (a skill added
//! later is seen after a restart); the instructions are read from the file when asked for.
//! A malformed `SKILL.md` is skipped with a warning naming the file, never fatal. The tool
//! is `tool.rs`. Knows the agents' profiles; not the engine.

mod component;
mod tool;
pub use component::SkillsComponent;
pub use tool::ReadSkill;

use crate::agents::Agents;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most of a skill's instructions one read returns.
const MAX_INSTRUCTIONS: usize = 64 * 1024;
/// The most of a description the menu (in every prompt) shows; longer ones are cut.
const MAX_DESCRIPTION: usize = 300;

/// One skill on an agent's menu.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub file: PathBuf,
    /// The file's content hash when it was loaded (SHA-256, 12 hex digits).
    pub sha256: String,
}

/// The first 12 hex digits of the SHA-256 of `bytes`.
fn short_hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(bytes)[..6])
}

impl Skill {
    /// The file's content hash now (None when it can no longer be read): differs from
    /// `sha256` when the file changed since it was loaded.
    pub fn hash_now(&self) -> Option<String> {
        std::fs::read(&self.file).ok().map(|b| short_hash(&b))
    }

    /// `name (sha256 …)`, with what changed since start: how `/status` and the admin API
    /// show a skill (skills are read, never executed; a changed file is worth seeing).
    pub fn fingerprint(&self) -> String {
        match self.hash_now() {
            Some(now) if now == self.sha256 => format!("{} (sha256 {})", self.name, self.sha256),
            Some(now) => format!(
                "{} (sha256 {} at start, {now} now: changed)",
                self.name, self.sha256
            ),
            None => format!("{} (sha256 {}, file gone)", self.name, self.sha256),
        }
    }

    /// The instructions (the file after its front matter), read now.
    pub fn instructions(&self) -> Result<String, String> {
        let text = std::fs::read_to_string(&self.file)
            .map_err(|e| format!("cannot read {}: {e}", self.file.display()))?;
        let (_, body) = parse(&text)?;
        let mut body = body.trim().to_string();
        if body.len() > MAX_INSTRUCTIONS {
            let mut end = MAX_INSTRUCTIONS;
            while !body.is_char_boundary(end) {
                end -= 1;
            }
            body.truncate(end);
            body.push_str("\n[… cut at 64 KB]");
        }
        Ok(body)
    }
}

/// Each agent's skill menu.
#[derive(Debug, Default)]
pub struct SkillLibrary {
    menus: HashMap<String, Arc<[Skill]>>,
}

impl SkillLibrary {
    /// Find the skills in `shared_dir` and in each agent's workspace `skills/`, filtered per
    /// agent (an agent's own skill replaces a shared one of the same name).
    pub fn load(shared_dir: &str, agents: &Agents) -> Self {
        let shared = scan(Path::new(shared_dir));
        let mut own_by_root: HashMap<&str, BTreeMap<String, Skill>> = HashMap::new();
        let mut menus = HashMap::new();
        for agent in agents.all() {
            let own = own_by_root
                .entry(agent.workspace.as_str())
                .or_insert_with(|| scan(&Path::new(&agent.workspace).join("skills")));
            let mut all = shared.clone();
            all.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
            let menu: Vec<Skill> = all
                .into_values()
                .filter(|s| {
                    agent
                        .skills
                        .as_ref()
                        .is_none_or(|keep| keep.contains(&s.name))
                })
                .collect();
            menus.insert(agent.id.clone(), menu.into());
        }
        SkillLibrary { menus }
    }

    /// Every agent's menu, by agent id (sorted).
    pub fn menus(&self) -> impl Iterator<Item = (&str, &[Skill])> {
        let mut all: Vec<(&str, &[Skill])> = self
            .menus
            .iter()
            .map(|(id, menu)| (id.as_str(), &menu[..]))
            .collect();
        all.sort_by_key(|(id, _)| *id);
        all.into_iter()
    }

    /// The skills `agent` sees (empty for an unknown agent).
    pub fn menu(&self, agent: &str) -> Arc<[Skill]> {
        self.menus
            .get(agent)
            .cloned()
            .unwrap_or_else(|| Arc::new([]))
    }
}

/// The system prompt's section listing a menu (None when it is empty).
pub fn menu_section(menu: &[Skill]) -> Option<String> {
    if menu.is_empty() {
        return None;
    }
    let mut out = String::from(
        "## Skills\nWhen a task matches a skill, read its instructions with `read_skill` first, then follow them.\n",
    );
    for skill in menu {
        out.push_str(&format!("- {}: {}\n", skill.name, skill.description));
    }
    Some(out)
}

/// Every well-formed skill in the folders of `dir`, by name.
fn scan(dir: &Path) -> BTreeMap<String, Skill> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    let mut folders: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let file = folder.join("SKILL.md");
        if !file.is_file() {
            continue;
        }
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| parse(&text).map(|(meta, _)| (meta, short_hash(text.as_bytes()))));
        match parsed {
            Ok(((name, _), _)) if found.contains_key(&name) => {
                // Two skills of one name: the first (by folder name) is kept, loudly.
                tracing::warn!(
                    file = %file.display(),
                    kept = %found[&name].file.display(),
                    skill = %name,
                    "skill skipped: another skill in the same folder has this name"
                );
            }
            Ok(((name, description), sha256)) => {
                found.insert(
                    name.clone(),
                    Skill {
                        name,
                        description,
                        file,
                        sha256,
                    },
                );
            }
            Err(problem) => {
                tracing::warn!(file = %file.display(), problem = %problem, "skill skipped");
            }
        }
    }
    found
}

/// `(name, description)` from the front matter, and the body after it.
///
/// The front matter is read as flat `key: value` lines (values may be quoted); other keys
/// and indented lines are ignored.
fn parse(text: &str) -> Result<((String, String), &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---")
        .and_then(|r| r.strip_prefix('\n').or_else(|| r.strip_prefix("\r\n")))
        .ok_or("it does not start with a `---` front matter block")?;
    let end = rest
        .find("\n---")
        .ok_or("its front matter block has no closing `---`")?;
    let (head, tail) = (&rest[..end], &rest[end + 4..]);
    let body = tail.split_once('\n').map_or("", |(_, body)| body);
    let mut name = None;
    let mut description = None;
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim() {
            "name" => name = Some(value),
            "description" => description = Some(value),
            _ => {}
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or("its front matter has no `name`")?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "its name `{name}` may hold only letters, digits, '-' and '_'"
        ));
    }
    let description = description
        .filter(|d| !d.is_empty())
        .ok_or("its front matter has no `description`")?;
    // One line on the menu, of at most MAX_DESCRIPTION characters.
    let line = description.lines().next().unwrap_or_default();
    let description = if line.chars().count() > MAX_DESCRIPTION {
        let cut: String = line.chars().take(MAX_DESCRIPTION).collect();
        tracing::warn!(skill = %name, "a skill's description is longer than {MAX_DESCRIPTION} characters; the menu shows its start");
        format!("{cut}…")
    } else {
        line.to_string()
    };
    Ok(((name, description), body))
}

fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return value[1..value.len() - 1].to_string();
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_gives_name_description_and_the_body() {
        let ((name, description), body) =
            parse("---\nname: summarise\ndescription: \"Summarise a text\"\nmetadata:\n  x: 1\n---\nDo it.\n")
                .unwrap();
        assert_eq!(name, "summarise");
        assert_eq!(description, "Summarise a text");
        assert_eq!(body, "Do it.\n");
    }

    #[test]
    fn malformed_front_matter_is_named() {
        assert!(parse("no front matter").unwrap_err().contains("---"));
        assert!(parse("---\nname: x\n").unwrap_err().contains("closing"));
        assert!(
            parse("---\nname: x\n---\nbody")
                .unwrap_err()
                .contains("description")
        );
        assert!(
            parse("---\nname: a b\ndescription: d\n---\n")
                .unwrap_err()
                .contains("name")
        );
    }

    #[test]
    fn a_second_skill_of_one_name_is_skipped_and_long_descriptions_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let write = |folder: &str, name: &str, description: &str| {
            std::fs::create_dir_all(dir.path().join(folder)).unwrap();
            std::fs::write(
                dir.path().join(folder).join("SKILL.md"),
                format!("---\nname: {name}\ndescription: {description}\n---\nbody\n"),
            )
            .unwrap();
        };
        write("a", "dup", "the first");
        write("b", "dup", "the second");
        write("c", "long", &"x".repeat(3 * 1024 * 1024));
        let found = scan(dir.path());
        assert_eq!(found.len(), 2);
        assert_eq!(found["dup"].description, "the first");
        assert!(found["dup"].file.starts_with(dir.path().join("a")));
        assert_eq!(
            found["long"].description.chars().count(),
            MAX_DESCRIPTION + 1
        );
    }
}
