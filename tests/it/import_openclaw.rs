//! `ferroclaw import openclaw` through the real binary (SPEC section 22), on a sample state
//! directory laid out as OpenClaw's documentation describes (`openclaw.json` in JSON5,
//! `workspace/` with SOUL.md, IDENTITY.md, AGENTS.md, USER.md, MEMORY.md, `memory/` daily
//! notes and `skills/`, a second agent's `workspace-support/`): a dry run changes nothing;
//! the import writes agents' prompts, the allowlist and skills into a config `config check`
//! accepts, memories the service then recalls for the owner; a second import adds nothing.

use crate::common::hook::Hook;
use crate::common::llm::LlmStandIn;
use crate::common::service::{Service, Workdir, config_with_llm, run};
use std::path::Path;

const HOOK_SECRET: &str = "hook-secret-IMPORT";
const ADMIN: &str = "admin-token-IMPORT";
const ENV: &[(&str, &str)] = &[
    ("FC_HOOK", HOOK_SECRET),
    ("FC_ADMIN", ADMIN),
    ("FC_TG_TOKEN", "123:tg-token-IMPORT"),
];

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn sample(dir: &Path) {
    write(
        &dir.join("openclaw.json"),
        r#"// OpenClaw's main config is JSON5
{
  agents: { defaults: { workspace: "~/.openclaw/workspace" } },
  channels: {
    telegram: { botToken: "x", dmPolicy: "allowlist", allowFrom: ["tg:4242", 777] },
    whatsapp: { allowFrom: ["+15551234567"] },
  },
}
"#,
    );
    let ws = dir.join("workspace");
    write(
        &ws.join("IDENTITY.md"),
        "# Identity\nName: Pip, a helpful otter.\n",
    );
    write(&ws.join("SOUL.md"), "# Soul\nBe warm, brief and exact.\n");
    write(
        &ws.join("AGENTS.md"),
        "# Instructions\nAlways answer in British English.\n",
    );
    write(
        &ws.join("USER.md"),
        "# User\n- Name: Morgan\n- Timezone: Europe/Lisbon\n",
    );
    write(
        &ws.join("MEMORY.md"),
        "# Memory\n- Morgan's sailing boat is called Wren\n- Morgan is allergic to shellfish\n",
    );
    write(&ws.join("memory/2026-11-30.md"), "talked about boats\n");
    write(
        &ws.join("skills/tide-tables/SKILL.md"),
        "---\nname: tide-tables\ndescription: Read tide tables\n---\nLook up the tides.\n",
    );
    write(
        &dir.join("workspace-support/SOUL.md"),
        "You are the support desk. Be patient.\n",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_openclaw_directory_becomes_agents_skills_an_allowlist_and_memories() {
    let llm = LlmStandIn::echo().await;
    let config = config_with_llm(
        &llm.url,
        "# my own comment stays\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    )
    .replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    );
    let work = Workdir::new(&config);
    let openclaw = tempfile::tempdir().unwrap();
    sample(openclaw.path());
    let dir = openclaw.path().to_str().unwrap();

    let dry = run(
        work.path(),
        &["import", "openclaw", dir, "--dry-run", "-c", "config.toml"],
        "",
        ENV,
    );
    assert_eq!(dry.code, Some(0), "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout.contains(
            "would import: agent main: system prompt from IDENTITY.md, SOUL.md, AGENTS.md"
        ),
        "{}",
        dry.stdout
    );
    assert_eq!(
        std::fs::read_to_string(work.config()).unwrap(),
        config,
        "a dry run changes nothing"
    );
    assert!(!work.path().join("skills/tide-tables").exists());

    let done = run(
        work.path(),
        &["import", "openclaw", dir, "-c", "config.toml"],
        "",
        ENV,
    );
    assert_eq!(done.code, Some(0), "{}{}", done.stdout, done.stderr);
    let out = &done.stdout;
    assert!(
        out.contains("imported: agent support: system prompt from SOUL.md"),
        "{out}"
    );
    assert!(
        out.contains("imported: channels.telegram: allowlist of 2 (4242, 777)"),
        "{out}"
    );
    assert!(out.contains("imported: skill tide-tables"), "{out}");
    assert!(out.contains("4 memories for telegram:4242"), "{out}");
    assert!(out.contains("not mapped: channels.whatsapp"), "{out}");
    assert!(
        out.contains("not mapped: agent main: memory/ (1 daily notes)"),
        "{out}"
    );
    let written = std::fs::read_to_string(work.config()).unwrap();
    assert!(written.contains("# my own comment stays"), "{written}");
    assert!(written.contains("Be warm, brief and exact."), "{written}");
    assert!(written.contains("[agents.support]"), "{written}");
    assert!(work.path().join("skills/tide-tables/SKILL.md").is_file());
    assert!(work.path().join("config.toml.before-import").is_file());
    let check = run(
        work.path(),
        &["config", "check", "-c", "config.toml"],
        "",
        ENV,
    );
    assert_eq!(check.code, Some(0), "{}{}", check.stdout, check.stderr);

    // Again: nothing new.
    let again = run(
        work.path(),
        &["import", "openclaw", dir, "-c", "config.toml"],
        "",
        ENV,
    );
    assert!(again.stdout.contains("(0 new)"), "{}", again.stdout);

    // The service uses the prompt, and the owner's memories are theirs.
    let service = Service::start(&work, ENV).await;
    let (status, body) = service
        .get_json("/v1/admin/memory?user=telegram:4242", ADMIN)
        .await;
    assert_eq!(status, 200, "{body}");
    let texts: Vec<&str> = body["memories"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts.contains(&"Morgan's sailing boat is called Wren"));
    let hook = Hook::new(&service, HOOK_SECRET);
    hook.ask("c1", "m1", "hello").await;
    let system = llm.requests()[0].system();
    assert!(
        system.contains("Name: Pip, a helpful otter.") && system.contains("British English"),
        "{system}"
    );
}
