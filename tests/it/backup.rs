//! Backup and restore (SPEC section 22) through the real binary: a backup taken while 200
//! messages flow restores into an empty folder where every journalled message has its reply
//! or gets one when the restored service starts (nothing half-written), the workspace comes
//! back, the restored service answers new messages, and a restore into a store that is not
//! empty is refused unless `--force`.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, last_user};
use crate::common::service::{Service, Workdir, config_with_llm, run};
use crate::common::wait_for;
use sqlx::Connection;
use std::time::Duration;

const SECRET: &str = "hook-secret-BACKUP-0001";

async fn conversations_journalled(db: &std::path::Path) -> Vec<String> {
    let url = format!("sqlite://{}", db.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT chat_id FROM inbound ORDER BY id")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_taken_while_messages_flow_restores_to_a_store_that_answers_them_all() {
    let llm = LlmStandIn::start(|body, _| {
        Behaviour::slow(
            format!("echo: {}", last_user(body)),
            Duration::from_millis(30),
        )
    })
    .await;
    let config = config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n",
    );
    let env = [("FC_HOOK", SECRET)];
    let first = Workdir::new(&config);
    std::fs::create_dir_all(first.path().join("workspace/notes")).unwrap();
    std::fs::write(first.path().join("workspace/notes/plan.md"), "keep me").unwrap();
    let service = Service::start(&first, &env).await;
    let hook = Hook::new(&service, SECRET);

    // 200 messages, each its own conversation, sent while the backup is taken.
    let sending = {
        let base = service.base.clone();
        tokio::spawn(async move {
            let hook = Hook::for_base(&base, SECRET);
            for i in 0..200 {
                let (status, body) = hook
                    .send(
                        &format!("c{i}"),
                        None,
                        &format!("m{i}"),
                        &format!("hello {i}"),
                        "",
                    )
                    .await;
                assert_eq!(status, 202, "{body}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    wait_for(
        "some messages answered",
        Duration::from_secs(30),
        || async { (!hook.list("c20", 0).await.is_empty()).then_some(()) },
    )
    .await;
    let backed_up = tokio::task::block_in_place(|| {
        run(
            first.path(),
            &["backup", "snap.zip", "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_eq!(backed_up.code, Some(0), "{}", backed_up.stderr);
    assert!(
        backed_up.stdout.contains("backup written to snap.zip"),
        "{}",
        backed_up.stdout
    );
    sending.await.unwrap();
    wait_for("all 200 answered", Duration::from_secs(60), || async {
        (!hook.list("c199", 0).await.is_empty()).then_some(())
    })
    .await;
    let (code, _) = service.terminate().await;
    assert_eq!(code, Some(0));

    // Restored into an empty folder with the same configuration.
    let second = Workdir::new(&config);
    let archive = first.path().join("snap.zip");
    let archive = archive.to_str().unwrap();
    let restored = tokio::task::block_in_place(|| {
        run(
            second.path(),
            &["restore", archive, "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_eq!(restored.code, Some(0), "{}", restored.stderr);
    assert_eq!(
        std::fs::read_to_string(second.path().join("workspace/notes/plan.md")).unwrap(),
        "keep me"
    );
    let again = tokio::task::block_in_place(|| {
        run(
            second.path(),
            &["restore", archive, "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_eq!(again.code, Some(1), "a store that is not empty is refused");
    assert!(again.stderr.contains("--force"), "{}", again.stderr);

    let journalled = conversations_journalled(&second.path().join("ferroclaw.db")).await;
    assert!(
        !journalled.is_empty() && journalled.len() < 200,
        "the snapshot was taken mid-flow: {} journalled",
        journalled.len()
    );
    let service = Service::start(&second, &env).await;
    let hook = Hook::new(&service, SECRET);
    for conversation in &journalled {
        let number = conversation.trim_start_matches('c');
        let reply = hook
            .reply_containing(conversation, &format!("echo: hello {number}"))
            .await;
        assert!(!reply.is_empty());
    }
    for conversation in &journalled {
        let replies = hook
            .list(conversation, 0)
            .await
            .into_iter()
            .filter(|m| m["kind"] == "reply")
            .count();
        assert_eq!(replies, 1, "{conversation} answered once");
    }
    let (status, body) = hook.send("new", None, "n1", "after the move", "").await;
    assert_eq!(status, 202, "{body}");
    hook.reply_containing("new", "echo: after the move").await;
}

/// PostgreSQL: a backup taken from a running service (its tables in one snapshot) restores
/// into another, empty PostgreSQL database with every row, which a service then answers
/// from; a database holding rows is refused unless `--force`.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_store_is_backed_up_while_running_and_restored_into_another() {
    let llm =
        LlmStandIn::start(|body, _| Behaviour::reply(format!("echo: {}", last_user(body)))).await;
    let (first, second) = (
        crate::common::pg::fresh_database().await,
        crate::common::pg::fresh_database().await,
    );
    let cfg = |db: &str| {
        config_with_llm(
            &llm.url,
            &format!(
                "[storage]\nurl = \"{db}\"\n\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"
            ),
        )
    };
    let env = [("FC_HOOK", SECRET)];
    let work = Workdir::new(&cfg(&first));
    let service = Service::start(&work, &env).await;
    let hook = Hook::new(&service, SECRET);
    for i in 0..20 {
        assert_eq!(
            hook.ask(&format!("c{i}"), "m", &format!("hi {i}")).await,
            format!("echo: hi {i}")
        );
    }
    let backed_up = tokio::task::block_in_place(|| {
        run(
            work.path(),
            &["backup", "pg.zip", "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_eq!(
        backed_up.code,
        Some(0),
        "{}{}",
        backed_up.stdout,
        backed_up.stderr
    );
    service.terminate().await;

    let target = Workdir::new(&cfg(&second));
    std::fs::copy(work.path().join("pg.zip"), target.path().join("pg.zip")).unwrap();
    let restored = tokio::task::block_in_place(|| {
        run(
            target.path(),
            &["restore", "pg.zip", "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_eq!(
        restored.code,
        Some(0),
        "{}{}",
        restored.stdout,
        restored.stderr
    );
    let count = |url: String| async move {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let n: (i64, i64) =
            sqlx::query_as("SELECT (SELECT count(*) FROM inbound), (SELECT count(*) FROM outbox)")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        n
    };
    let (inbound, outbox) = count(second.clone()).await;
    assert_eq!((inbound, outbox), count(first.clone()).await);
    assert_eq!(inbound, 20);
    let again = tokio::task::block_in_place(|| {
        run(
            target.path(),
            &["restore", "pg.zip", "-c", "config.toml"],
            "",
            &env,
        )
    });
    assert_ne!(again.code, Some(0), "a store with rows is refused");
    assert!(again.stderr.contains("not empty"), "{}", again.stderr);

    let service = Service::start(&target, &env).await;
    let hook = Hook::new(&service, SECRET);
    assert_eq!(
        hook.ask("c0", "m2", "after restore").await,
        "echo: after restore"
    );
}

/// A PostgreSQL snapshot's SQLite file holds every row in its main file when the snapshot
/// returns (no write-ahead log left to checkpoint): the backup zips that file alone, and a
/// file copied while a checkpoint ran was once torn (an index counted 20 rows, its table 0).
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_snapshot_is_whole_in_its_main_file() {
    let url = crate::common::pg::fresh_database().await;
    ferroclaw::storage::connect(&url)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let mut pg = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO inbound (channel, chat_id, platform_id, session_key, payload, received_at) \
         SELECT 'webhook:main', 'c' || n, 'm' || n, 'webhook:main:c' || n, '{}', n \
         FROM generate_series(1, 3000) AS n",
    )
    .execute(&mut pg)
    .await
    .unwrap();
    pg.close().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.sqlite");
    ferroclaw::store_copy::snapshot_postgres(&url, &file)
        .await
        .unwrap();
    let wal = dir.path().join("snapshot.sqlite-wal");
    let left = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(left, 0, "the write-ahead log still holds {left} bytes");
    // The main file alone, as a backup carries it.
    let alone = dir.path().join("alone.sqlite");
    std::fs::copy(&file, &alone).unwrap();
    let mut copy = sqlx::SqliteConnection::connect(&format!("sqlite://{}", alone.display()))
        .await
        .unwrap();
    let rows: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM inbound), (SELECT count(*) FROM inbound NOT INDEXED)",
    )
    .fetch_one(&mut copy)
    .await
    .unwrap();
    assert_eq!(rows, (3000, 3000));
}
