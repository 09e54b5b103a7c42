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

/// A database whose schema is newer than this binary knows: nothing may touch it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database's schema is at migration {applied}, newer than this ferroclaw {binary} knows \
     (migration {known}); run the ferroclaw that wrote it (nothing was changed)"
)]
pub struct SchemaTooNew {
    pub applied: i64,
    pub known: i64,
    pub binary: &'static str,
}

/// Refuses a database whose schema is newer than this binary's, reading it without
/// changing anything; else where its schema stands (None: no database or none readable yet
/// — the connection that follows says why).
pub async fn refuse_newer_schema(url: &str) -> Result<Option<SchemaState>, SchemaTooNew> {
    match schema_state(url).await {
        Ok(Some(SchemaState {
            applied: Some(applied),
            known,
        })) if applied > known => Err(SchemaTooNew {
            applied,
            known,
            binary: env!("CARGO_PKG_VERSION"),
        }),
        Ok(state) => Ok(state),
        Err(_) => Ok(None),
    }
}

/// The migrations this binary would apply to the database at `url` (version and
/// description), read without changing anything.
pub async fn pending_migrations(url: &str) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let migrator: &sqlx::migrate::Migrator = if postgres {
        &super::postgres::MIGRATOR
    } else {
        &super::sqlite_schema::MIGRATOR
    };
    let applied = schema_state(url)
        .await?
        .and_then(|s| s.applied)
        .unwrap_or(0);
    Ok(migrator
        .iter()
        .filter(|m| m.version > applied)
        .map(|m| (m.version, m.description.to_string()))
        .collect())
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
        let file = options.get_filename().to_path_buf();
        if !file.exists() {
            return Ok(None);
        }
        // A file closed cleanly (no WAL beside it) is read as immutable, which creates no
        // -wal and -shm files; with a WAL its newest commits may be there, so it is read
        // through it (those files exist already).
        let mut wal = file.clone().into_os_string();
        wal.push("-wal");
        let options = options.immutable(!std::path::Path::new(&wal).exists());
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
