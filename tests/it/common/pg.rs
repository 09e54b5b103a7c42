//! PostgreSQL for tests: a fresh database per test on the cluster named by
//! `FERROCLAW_TEST_PG_URL` (set by `scripts/test`). Missing cluster: the test fails loudly.

use sqlx::Connection;

/// Create a fresh database and return its URL.
pub async fn fresh_database() -> String {
    let admin = std::env::var("FERROCLAW_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "FERROCLAW_TEST_PG_URL is not set: PostgreSQL tests need a server. \
             Run the suite with scripts/test, which starts a throwaway cluster."
        )
    });
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at FERROCLAW_TEST_PG_URL: {e}"));
    let name = format!("ferroclaw_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (base, _) = admin.rsplit_once('/').expect("URL has a database path");
    format!("{base}/{name}")
}
