//! A SQLite database's migration records, read and rewritten so the database stands for one
//! an older binary left (its newest record forgotten) or a newer one wrote (a record from the
//! future).

use sqlx::SqliteConnection;

/// The version a newer binary's schema is at.
pub const FUTURE: i64 = 99999;

/// The newest migration the database records.
pub async fn newest(db: &mut SqliteConnection) -> i64 {
    sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(db)
        .await
        .unwrap()
}

/// Forget the newest migration's record; returns its version.
pub async fn forget_newest(db: &mut SqliteConnection) -> i64 {
    let version = newest(db).await;
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?")
        .bind(version)
        .execute(db)
        .await
        .unwrap();
    version
}

/// Record migration [`FUTURE`], as a newer binary would have.
pub async fn record_a_future_migration(db: &mut SqliteConnection) {
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (?, 'from the future', 1, x'00', 0)",
    )
    .bind(FUTURE)
    .execute(db)
    .await
    .unwrap();
}
