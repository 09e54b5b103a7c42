//! Schema safety (SPEC section 22): a database whose schema is newer than the binary makes
//! `serve`, `chat` and `migrate` exit 2 with one line naming both versions and leaves every
//! file as it was; `migrate --dry-run` lists what would be applied and applies nothing.

use crate::common::schema;
use crate::common::service::{config_with_llm, folder_with, run};
use sqlx::Connection;
use std::path::Path;

/// Every file of the database (the file and its WAL) with a hash of its bytes, for comparing
/// before and after.
fn files(dir: &Path) -> Vec<(String, String)> {
    use sha2::Digest;
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ferro.db"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                hex::encode(sha2::Sha256::digest(std::fs::read(e.path()).unwrap())),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused_untouched_and_dry_run_lists_what_is_pending() {
    let dir = folder_with(&config_with_llm(
        "http://127.0.0.1:9/v1",
        "[storage]\nurl = \"sqlite://ferro.db\"\n",
    ));
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-c", "config.toml"]);
        tokio::task::block_in_place(|| run(dir.path(), &all, "", &[]))
    };
    let migrated = cli(&["migrate"]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let dry = cli(&["migrate", "--dry-run"]);
    assert_eq!(dry.stdout.trim(), "the schema is current: nothing to apply");

    let url = format!("sqlite://{}", dir.path().join("ferro.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let known = schema::forget_newest(&mut db).await;
    let dry = cli(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    let line = dry.stdout.trim();
    assert!(
        line.starts_with(&format!("would apply {known:04} ")),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "{line}");
    assert_eq!(
        schema::newest(&mut db).await,
        known - 1,
        "a dry run applies nothing"
    );

    schema::record_a_future_migration(&mut db).await;
    db.close().await.unwrap();
    let before = files(dir.path());
    for command in [&["serve"][..], &["chat"], &["migrate"]] {
        let out = cli(command);
        assert_eq!(out.code, Some(2), "{command:?}: {}", out.stderr);
        let error: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(error.len(), 1, "{command:?}: {}", out.stderr);
        assert!(
            error[0].contains(&format!("migration {}", schema::FUTURE))
                && error[0].contains(&format!("migration {known}"))
                && error[0].contains(env!("CARGO_PKG_VERSION")),
            "{command:?}: {}",
            error[0]
        );
        assert_eq!(files(dir.path()), before, "{command:?} changed nothing");
    }
}

/// A SQLite database at `path` whose schema stops one migration short of the binary's.
async fn one_migration_behind(path: &Path) -> i64 {
    let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    let mut files: Vec<_> = std::fs::read_dir(&all)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let older = tempfile::tempdir().unwrap();
    for file in &files[..files.len() - 1] {
        std::fs::copy(file, older.path().join(file.file_name().unwrap())).unwrap();
    }
    let migrator = sqlx::migrate::Migrator::new(older.path()).await.unwrap();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    migrator.run(&mut db).await.unwrap();
    let applied = schema::newest(&mut db).await;
    db.close().await.unwrap();
    applied
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_sqlite_file_is_backed_up_beside_itself_before_it_is_migrated() {
    let dir = folder_with(&config_with_llm(
        "http://127.0.0.1:9/v1",
        "[storage]\nurl = \"sqlite://ferro.db\"\n",
    ));
    let backups = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ferro.db.before-migration-"))
            .collect();
        names.sort();
        names
    };
    // A fresh database is not backed up: there is nothing to lose.
    let fresh =
        tokio::task::block_in_place(|| run(dir.path(), &["migrate", "-c", "config.toml"], "", &[]));
    assert_eq!(fresh.code, Some(0), "{}", fresh.stderr);
    assert!(backups().is_empty());
    let mut first = String::new();
    for round in 0..4 {
        for file in ["ferro.db", "ferro.db-wal", "ferro.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(file));
        }
        let applied = one_migration_behind(&dir.path().join("ferro.db")).await;
        let out = tokio::task::block_in_place(|| {
            run(dir.path(), &["migrate", "-c", "config.toml"], "", &[])
        });
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let kept = backups();
        assert_eq!(kept.len(), (round + 1).min(3), "{kept:?}");
        let newest_copy = kept.last().unwrap();
        assert!(
            newest_copy.starts_with(&format!("ferro.db.before-migration-{applied}-")),
            "{newest_copy}"
        );
        // The copy holds the schema as it was; the file itself moved on.
        let copy = format!("sqlite://{}", dir.path().join(newest_copy).display());
        let mut db = sqlx::SqliteConnection::connect(&copy).await.unwrap();
        assert_eq!(schema::newest(&mut db).await, applied);
        db.close().await.unwrap();
        let url = format!("sqlite://{}", dir.path().join("ferro.db").display());
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        assert_eq!(schema::newest(&mut db).await, applied + 1);
        db.close().await.unwrap();
        if round == 0 {
            first = kept[0].clone();
        }
        // Distinct names even within one millisecond of each other.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(!backups().contains(&first), "the oldest of four is gone");
}
