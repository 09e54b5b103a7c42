//! The PostgreSQL store: one pool; several ferroclaw processes may share the database.

use super::StoreResult;
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Pool, Postgres};
use std::str::FromStr;
use std::time::Duration;

pub struct PostgresStore {
    pub(super) write: Pool<Postgres>,
    pub(super) read: Pool<Postgres>,
}

impl PostgresStore {
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(PgConnectOptions::from_str(url)?.log_statements(log::LevelFilter::Off))
            .await?;
        Ok(PostgresStore {
            write: pool.clone(),
            read: pool,
        })
    }
}

/// The PostgreSQL schema's migrations, built into the binary.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

impl PostgresStore {
    /// The migrator's own path: its advisory lock keeps two processes starting at the same
    /// time from applying a migration twice. (Not in one transaction: the lock is released
    /// before the commit, so a second process would apply them again.)
    pub(super) async fn migrate_schema(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.write).await?;
        Ok(())
    }

    /// Nothing: the server holds PostgreSQL's caches, not this process.
    pub(super) async fn release_idle_memory(&self) {}
}
