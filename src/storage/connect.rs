//! Choose the store implementation from `storage.url`.

use super::{PostgresStore, SqliteStore, Store, StoreResult};
use std::sync::Arc;

/// Connect to the database named by `url` (`sqlite:...` or `postgres://...`).
pub async fn connect(url: &str) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    }
}

/// Where a database's schema stands against this binary's migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaState {
    /// The newest migration applied (None: the database holds no schema yet).
    pub applied: Option<i64>,
    /// The newest migration this binary knows.
    pub known: i64,
}

/// Reads the schema version of the database at `url` without creating, migrating or
/// writing anything (None: a SQLite file that does not exist yet).
pub async fn schema_state(url: &str) -> Result<Option<SchemaState>, sqlx::Error> {
    use sqlx::Connection;
    const NEWEST: &str = "SELECT max(version) FROM _sqlx_migrations";
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let known =
        |migrator: &sqlx::migrate::Migrator| migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let applied = if postgres {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let applied = sqlx::query_scalar(NEWEST).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        applied
    } else {
        use std::str::FromStr;
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?
            .read_only(true)
            .create_if_missing(false);
        if !options.get_filename().exists() {
            return Ok(None);
        }
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
        let applied = sqlx::query_scalar(NEWEST).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        applied
    };
    // No migrations table: a database that holds no schema yet.
    let applied = match applied {
        Err(sqlx::Error::Database(e))
            if e.code().as_deref() == Some("42P01") || e.message().contains("no such table") =>
        {
            Ok(None)
        }
        other => other,
    };
    Ok(Some(SchemaState {
        applied: applied?,
        known: if postgres {
            known(&super::postgres::MIGRATOR)
        } else {
            known(&super::sqlite_schema::MIGRATOR)
        },
    }))
}
