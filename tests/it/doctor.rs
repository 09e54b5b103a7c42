//! `ferroclaw doctor`: each seeded misconfiguration in a table is found with its severity and
//! key, a clean deployment has no findings, and the exit code is 1 only when one is HIGH.

use crate::common::schema;
use crate::common::service::{config_with_llm, folder_with, run};
use std::os::unix::fs::PermissionsExt;

/// The sandbox image CI builds (scripts/sandbox-image.sh).
const IMAGE: &str = "ferroclaw-sandbox:busybox";

/// Run `doctor` on `config` (written with `mode`) and return its exit code and output.
fn doctor(config: &str, mode: u32, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    let out = run(dir.path(), &["doctor", "-c", "config.toml"], "", env);
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

/// A seeded misconfiguration: the config, its file mode, the environment, the line expected
/// (its start) and the exit code.
struct Case {
    config: String,
    mode: u32,
    env: Vec<(&'static str, &'static str)>,
    expect: &'static str,
    exit: i32,
}

fn case(config: String, expect: &'static str, exit: i32) -> Case {
    Case {
        config,
        mode: 0o600,
        env: Vec::new(),
        expect,
        exit,
    }
}

#[test]
fn each_seeded_misconfiguration_is_found_and_a_clean_deployment_passes() {
    // No local fallback: the tests run with FERROCLAW_OFFLINE and no model in the cache.
    let base = config_with_llm("http://127.0.0.1:9/v1", "").replacen(
        "model = \"standin/test-model\"",
        "model = \"standin/test-model\"\nfallbacks = []",
        1,
    );
    let (code, out) = doctor(&base, 0o600, &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.trim(), "no findings");

    let public = |extra: &str| {
        base.replacen("listen = \"127.0.0.1:0\"", "listen = \"0.0.0.0:8787\"", 1) + extra
    };
    let cases = vec![
        case(public(""), "HIGH server.listen:", 1),
        Case {
            env: vec![("FERROCLAW_ADMIN_TOKEN", "admin-token-DOCTOR")],
            ..case(public(""), "MEDIUM server.public_url:", 0)
        },
        case(
            format!("{base}\n[tools]\nhost_exec = true\n"),
            "MEDIUM tools.host_exec:",
            0,
        ),
        case(
            format!("{base}\n[tools]\nhost_exec = true\n"),
            "LOW approvals.approvers:",
            0,
        ),
        Case {
            env: vec![("FC_TG", "123:abc")],
            ..case(
                format!(
                    "{base}\n[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG\"\naccess = \"open\"\n"
                ),
                "MEDIUM channels.telegram.access:",
                0,
            )
        },
        case(
            base.replacen(
                "kind = \"openai\"",
                "kind = \"openai\"\napi_key_env = \"sk-live-PASTED-KEY\"",
                1,
            ),
            "HIGH providers.standin.api_key_env:",
            1,
        ),
        case(
            format!(
                "{base}\n[storage]\nurl = \"postgres://bot:hunter2secret@db.internal/ferro\"\n"
            ),
            "HIGH storage.url:",
            1,
        ),
        Case {
            mode: 0o644,
            ..case(base.clone(), "MEDIUM config file:", 0)
        },
        case(
            base.replacen("fallbacks = []", "fallbacks = [\"local/smollm2-135m\"]", 1),
            "MEDIUM providers.local:",
            0,
        ),
        case(
            format!("{base}\n[sandbox]\nenabled = true\nnetwork = \"host\"\nimage = \"{IMAGE}\"\n"),
            "HIGH sandbox.network:",
            1,
        ),
        case(
            format!(
                "{base}\n[sandbox]\nenabled = true\nnetwork = \"bridge\"\ndocker_host = \"tcp://127.0.0.1:9\"\n"
            ),
            "HIGH sandbox.docker_host:",
            1,
        ),
        // Asks the Docker engine (CI starts one): the image is not there.
        case(
            format!("{base}\n[sandbox]\nenabled = true\nimage = \"ferroclaw-no-such-image:0\"\n"),
            "MEDIUM sandbox.image:",
            0,
        ),
        Case {
            env: vec![("FC_HOOK", "short7x")],
            ..case(
                format!("{base}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"),
                "MEDIUM FC_HOOK:",
                0,
            )
        },
        Case {
            env: vec![("FC_HOOK", "ten-chars!")],
            ..case(
                format!("{base}\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"),
                "MEDIUM channels.webhook.main.secret_env:",
                0,
            )
        },
    ];
    for Case {
        config,
        mode,
        env,
        expect: expected,
        exit,
    } in cases
    {
        let (code, out) = doctor(&config, mode, &env);
        assert!(
            out.lines()
                .any(|l| l.starts_with(expected) && l.contains(" — ")),
            "expected a line starting {expected:?}:\n{out}"
        );
        assert_eq!(code, Some(exit), "{expected}:\n{out}");
        assert!(
            !out.contains("hunter2secret"),
            "no secret in the output: {out}"
        );
    }
}

#[tokio::test]
async fn a_schema_behind_or_ahead_of_the_binary_is_reported_and_nothing_is_migrated() {
    use sqlx::Connection;
    let dir = folder_with(
        &config_with_llm(
            "http://127.0.0.1:9/v1",
            "[storage]\nurl = \"sqlite://ferro.db\"\n",
        )
        .replacen(
            "model = \"standin/test-model\"",
            "model = \"standin/test-model\"\nfallbacks = []",
            1,
        ),
    );
    std::fs::set_permissions(
        dir.path().join("config.toml"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let doctor = || {
        let out = run(dir.path(), &["doctor", "-c", "config.toml"], "", &[]);
        (out.code, format!("{}{}", out.stdout, out.stderr))
    };
    // No database yet: nothing to say, and none is created.
    assert_eq!(doctor(), (Some(0), "no findings\n".to_string()));
    assert!(!dir.path().join("ferro.db").exists());
    let migrated = run(dir.path(), &["migrate", "-c", "config.toml"], "", &[]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(doctor(), (Some(0), "no findings\n".to_string()));
    for file in ["ferro.db", "ferro.db-wal"] {
        let mode = std::fs::metadata(dir.path().join(file))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o600);
        assert_eq!(mode, 0o600, "{file} is the owner's alone");
    }

    let url = format!("sqlite://{}", dir.path().join("ferro.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let newest = schema::forget_newest(&mut db).await;
    let (code, out) = doctor();
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with(&format!(
            "MEDIUM storage.url: the database's schema is at migration {}",
            newest - 1
        )),
        "{out}"
    );
    assert_eq!(
        schema::newest(&mut db).await,
        newest - 1,
        "doctor migrated nothing"
    );

    schema::record_a_future_migration(&mut db).await;
    let (code, out) = doctor();
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("HIGH storage.url:") && out.contains(&schema::FUTURE.to_string()),
        "{out}"
    );
}
