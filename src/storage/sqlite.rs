//! The SQLite store: one file, WAL, a single writer connection and a few readers.

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, Pool, Sqlite};
use std::str::FromStr;
use std::time::Duration;

pub struct SqliteStore {
    pub(super) write: Pool<Sqlite>,
    pub(super) read: Pool<Sqlite>,
}

impl SqliteStore {
    /// Open (creating if needed) the database at a `sqlite:` URL.
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            // No journal mode: migrating switches the file to WAL once (`sqlite_schema.rs`).
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(false)
            .log_statements(log::LevelFilter::Off);
        // A new database (conversations, usage) is its owner's alone; SQLite gives the -wal
        // and -shm files the database file's mode.
        let file = options.get_filename();
        if file != std::path::Path::new(":memory:") && !file.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(file);
        }
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            // A write that failed mid-transaction (disk full, I/O error) can leave the
            // connection believing it is still inside a transaction (SQLite rolled back on
            // its own, sqlx's ROLLBACK then failed). Such a connection would turn every later
            // transaction into a savepoint of a dead one; replace it instead. (Reading the
            // depth is an atomic load; right after a dropped transaction whose rollback is
            // still queued it also replaces a healthy connection, which is rare and cheap.)
            .before_acquire(|conn, _meta| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            .connect_with(options.clone())
            .await?;
        // Readers connect on first use: opening one at start (what `connect_with` does to
        // test the pool) cost start-up time for a connection the writer already proved.
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(0)
            .connect_lazy_with(options.read_only(false));
        Ok(SqliteStore { write, read })
    }
}
