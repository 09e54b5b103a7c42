//! The SQLite store: one file, WAL, a single writer connection and a few readers.

use super::sqlite_conns::SqliteConns;
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

pub struct SqliteStore {
    pub(super) write: SqliteConns,
    pub(super) read: SqliteConns,
    /// The file was written from the fresh schema's image by [`SqliteStore::connect`].
    pub(super) from_image: bool,
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
        // and -shm files the database file's mode. It is written whole from the migrated
        // schema's image (`sqlite_schema.rs`); if that fails, created empty for the script.
        let file = options.get_filename();
        let mut from_image = false;
        if file != std::path::Path::new(":memory:") && !file.exists() {
            match super::sqlite_schema::write_fresh_image(file) {
                Ok(written) => from_image = written,
                Err(_) => {
                    use std::os::unix::fs::OpenOptionsExt;
                    let _ = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(file);
                }
            }
        }
        // One writer, opened now (a database that cannot be opened fails the start), and up
        // to four readers opened on first use (opening one at start cost start-up time for a
        // connection the writer already proved). Not sqlx's pool: `sqlite_conns.rs`.
        let write = SqliteConns::new(options.clone(), 1, true).await?;
        let read = SqliteConns::new(options, 4, false).await?;
        Ok(SqliteStore {
            write,
            read,
            from_image,
        })
    }

    /// Hand back what the connections cache: idle connections' page caches.
    pub(super) async fn release_idle_memory(&self) {
        self.write.shrink_idle().await;
        self.read.shrink_idle().await;
    }
}
