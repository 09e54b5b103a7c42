//! `ferroclaw store copy` through the real binary (SPEC section 22): a SQLite store a service
//! filled (journal, transcripts, outbox, usage, memories) moved to PostgreSQL with its counts
//! verified, refused while the service has the file open, run again without duplicates, a
//! service on PostgreSQL going on where the SQLite one stopped (ids continue, memories
//! recalled), and the way back into a new SQLite file.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, fresh_results, last_user};
use crate::common::pg::fresh_database;
use crate::common::service::{Service, Workdir, config_with_llm, run};
use serde_json::json;
use sqlx::Connection;

const HOOK_SECRET: &str = "hook-secret-COPY";
const ENV: &[(&str, &str)] = &[("FC_HOOK", HOOK_SECRET)];
const TABLES: &[&str] = &[
    "inbound",
    "sessions",
    "transcript",
    "outbox",
    "model_usage",
    "memories",
];

fn cfg(llm: &str, storage: &str) -> String {
    config_with_llm(
        llm,
        &format!(
            "[storage]\nurl = \"{storage}\"\n\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n"
        ),
    )
}

async fn counts_sqlite(path: &std::path::Path) -> Vec<i64> {
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let mut out = Vec::new();
    for table in TABLES {
        out.push(
            sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&mut conn)
                .await
                .unwrap(),
        );
    }
    out
}

async fn counts_pg(url: &str) -> Vec<i64> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut out = Vec::new();
    for table in TABLES {
        out.push(
            sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&mut conn)
                .await
                .unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_store_moves_to_postgres_and_back_with_nothing_lost_or_doubled() {
    let llm = LlmStandIn::start(|body, _| {
        if !fresh_results(body).is_empty() {
            return Behaviour::reply("noted");
        }
        let user = last_user(body);
        match user.strip_prefix("remember ") {
            Some(fact) => Behaviour::tool("memory_save", json!({"text": fact})),
            None => Behaviour::reply(format!("echo: {user}")),
        }
    })
    .await;
    let work = Workdir::new(&cfg(&llm.url, "sqlite://ferroclaw.db"));
    let service = Service::start(&work, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    for i in 0..5 {
        assert_eq!(
            hook.ask("c1", &format!("m{i}"), &format!("hello {i}"))
                .await,
            format!("echo: hello {i}")
        );
    }
    assert_eq!(
        hook.ask("c2", "n1", "remember the boat is called Wren")
            .await,
        "noted"
    );

    // Refused while the service has the file open.
    let pg = fresh_database().await;
    let busy = run(
        work.path(),
        &[
            "store",
            "copy",
            "--from",
            "sqlite://ferroclaw.db",
            "--to",
            &pg,
        ],
        "",
        ENV,
    );
    assert_eq!(busy.code, Some(1), "{}{}", busy.stdout, busy.stderr);
    assert!(
        busy.stderr.contains("has the source database open"),
        "{}",
        busy.stderr
    );
    service.terminate().await;

    let copied = run(
        work.path(),
        &[
            "store",
            "copy",
            "--from",
            "sqlite://ferroclaw.db",
            "--to",
            &pg,
        ],
        "",
        ENV,
    );
    assert_eq!(copied.code, Some(0), "{}{}", copied.stdout, copied.stderr);
    assert!(
        copied.stdout.contains("copied and verified"),
        "{}",
        copied.stdout
    );
    let sqlite_counts = counts_sqlite(&work.path().join("ferroclaw.db")).await;
    assert!(sqlite_counts.iter().all(|n| *n > 0), "{sqlite_counts:?}");
    assert_eq!(counts_pg(&pg).await, sqlite_counts);

    // Again (as after an interruption): nothing doubled.
    let again = run(
        work.path(),
        &[
            "store",
            "copy",
            "--from",
            "sqlite://ferroclaw.db",
            "--to",
            &pg,
        ],
        "",
        ENV,
    );
    assert_eq!(again.code, Some(0), "{}{}", again.stdout, again.stderr);
    assert!(
        again.stdout.contains("(0 copied now)") && !again.stdout.contains("(1 copied now)"),
        "{}",
        again.stdout
    );
    assert_eq!(counts_pg(&pg).await, sqlite_counts);

    // A service on PostgreSQL goes on: new rows get new ids, the conversation's history and
    // the memory are there.
    let moved = Workdir::new(&cfg(&llm.url, &pg));
    let service = Service::start(&moved, ENV).await;
    let hook = Hook::new(&service, HOOK_SECRET);
    assert_eq!(
        hook.ask("c1", "m9", "after the move").await,
        "echo: after the move"
    );
    let asked = llm
        .requests()
        .into_iter()
        .find(|r| last_user(&r.body) == "after the move")
        .unwrap();
    assert!(
        asked.body["messages"].to_string().contains("hello 4"),
        "the history came along"
    );
    let memories = hook.ask("c2", "n2", "/memory").await;
    assert!(memories.contains("the boat is called Wren"), "{memories}");
    // A redelivery of a message answered before the move is the journal's duplicate.
    let asked = llm.count();
    hook.ask("c1", "m0", "hello 0").await;
    assert_eq!(llm.count(), asked, "not a second turn");
    service.terminate().await;

    // And back into a new SQLite file.
    let back = run(
        moved.path(),
        &["store", "copy", "--from", &pg, "--to", "sqlite://back.db"],
        "",
        ENV,
    );
    assert_eq!(back.code, Some(0), "{}{}", back.stdout, back.stderr);
    assert_eq!(
        counts_sqlite(&moved.path().join("back.db")).await,
        counts_pg(&pg).await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_killed_halfway_and_run_again_ends_with_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite://{}", dir.path().join("big.db").display());
    let store = ferroclaw::storage::connect(&source).await.unwrap();
    store.migrate().await.unwrap();
    drop(store);
    // 200,000 transcript rows: the copy takes long enough to be killed in the middle.
    let mut conn = sqlx::SqliteConnection::connect(&source).await.unwrap();
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) \
         INSERT INTO transcript (session_key, epoch, role, content, created_at) \
         SELECT 's' || (i % 100), 0, 'user', 'message number ' || i, i FROM n",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let pg = fresh_database().await;
    let mut first = std::process::Command::new(crate::common::service::BIN)
        .args(["store", "copy", "--from", &source, "--to", &pg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once some rows are in.
    let partial = crate::common::wait_for(
        "rows arriving",
        std::time::Duration::from_secs(60),
        || async {
            let mut conn = sqlx::PgConnection::connect(&pg).await.ok()?;
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM transcript")
                .fetch_one(&mut conn)
                .await
                .ok()?;
            (n > 0).then_some(n)
        },
    )
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(partial < 200_000, "killed halfway ({partial} rows in)");
    let again = run(
        dir.path(),
        &["store", "copy", "--from", &source, "--to", &pg],
        "",
        ENV,
    );
    assert_eq!(again.code, Some(0), "{}{}", again.stdout, again.stderr);
    assert!(
        again.stdout.contains("content hash match"),
        "{}",
        again.stdout
    );
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM transcript")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 200_000);
}
