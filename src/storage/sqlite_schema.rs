//! Migrating a SQLite database, and creating a fresh one in one step.
//!
//! Every pending migration runs in one transaction (each is a savepoint in it): one commit
//! instead of two per migration, and an upgrade applies all or nothing. A database with no
//! tables at all is instead given `migrations/sqlite_schema.sql`, the schema the migrations
//! build, in one script, and the migrations it covers are recorded in `_sqlx_migrations` with
//! the migrator's own checksums, so later upgrades see exactly what the one-by-one path leaves
//! behind. Creating the schema is most of a fresh database's start-up time, and a table
//! created whole costs one schema change instead of one per `ALTER TABLE ADD COLUMN`.
//!
//! A new database file is not even created by SQL: it is written from an image of that
//! schema (`migrations/sqlite_fresh.db.lz4`: the SQLite file, in WAL mode, with every
//! migration recorded) before SQLite opens it, which takes a first start a few tenths of a
//! millisecond instead of about three ([`write_fresh_image`]). The script stays for the
//! databases no image is written for: in memory, or an empty file that already exists.
//!
//! `tests/it/sqlite_schema.rs` checks that every path gives the same schema, and that the
//! script and the image cover every migration (it also rewrites both when asked, see there).

use super::{SqliteStore, StoreResult};
use sqlx::migrate::{Migrate, Migrator};
use sqlx::{Connection, Executor, SqliteConnection};
use std::path::Path;

/// The schema after the migrations it names in its first line (`-- through: N`).
const FRESH_SCHEMA: &str = include_str!("../../migrations/sqlite_schema.sql");

/// The database the migrations build, as its file (LZ4, its length first): 332 KB of mostly
/// empty pages in about 11 KB. Its migrations' `installed_on` reads 1970 until
/// [`SqliteStore::migrate_schema`] dates them at the first open.
const FRESH_IMAGE: &[u8] = include_bytes!("../../migrations/sqlite_fresh.db.lz4");

/// The migrations of `migrations/sqlite`.
pub(super) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The last migration [`FRESH_SCHEMA`] includes.
fn fresh_schema_through() -> i64 {
    FRESH_SCHEMA
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("-- through: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("migrations/sqlite_schema.sql starts with `-- through: N`")
}

/// The fresh database's file: what [`write_fresh_image`] writes.
pub fn fresh_image() -> Vec<u8> {
    lz4_flex::decompress_size_prepended(FRESH_IMAGE)
        .expect("migrations/sqlite_fresh.db.lz4 is an LZ4 block with its length first")
}

/// Create the database file `file` from [`fresh_image`], readable by its owner alone: written
/// beside it under another name, then linked in only if no file has that name yet (another
/// process starting at the same moment keeps its own). `Ok(false)`: a file was there. Not
/// synchronised to disk: like every first commit here, the first checkpoint makes it durable.
pub(super) fn write_fresh_image(file: &Path) -> std::io::Result<bool> {
    use std::io::Write;
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // A temporary file is created with mode 0600.
    let mut image = tempfile::Builder::new()
        .prefix(".ferroclaw-new-")
        .tempfile_in(dir)?;
    image.write_all(&fresh_image())?;
    match image.persist_noclobber(file) {
        Ok(_) => Ok(true),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.error),
    }
}

impl SqliteStore {
    pub(super) async fn migrate_schema(&self) -> StoreResult<()> {
        let mut conn = self.write.acquire().await?;
        let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master")
            .fetch_one(&mut *conn)
            .await?;
        let fresh = tables == 0;
        // WAL is a property of the file: set once here, every later connection opens in it
        // (the connect options leave the journal mode alone). A fresh file is switched and
        // filled without waiting for the disk (the switch alone cost four fsyncs): it holds
        // nothing yet, and the first checkpoint makes it durable like every later commit.
        // So is a file just written from the image (its first commit starts the WAL, which
        // synchronised the WAL's header and the folder: two fsyncs).
        let unsynchronised = fresh || self.from_image;
        if unsynchronised {
            conn.execute("PRAGMA synchronous = OFF").await?;
        }
        let migrated = async {
            conn.execute("PRAGMA journal_mode = WAL").await?;
            let mut tx = conn.begin().await?;
            if fresh {
                create_fresh(&mut tx).await?;
            }
            if self.from_image {
                // The image's migrations carry no date of their own: now, as if applied now
                // (a second migrate of the same store dates them again; only tests do that).
                sqlx::query("UPDATE _sqlx_migrations SET installed_on = CURRENT_TIMESTAMP")
                    .execute(&mut *tx)
                    .await?;
            }
            // Applies what the script does not cover, and checks what it recorded.
            MIGRATOR.run_direct(&mut *tx).await?;
            tx.commit().await?;
            StoreResult::Ok(())
        }
        .await;
        if unsynchronised {
            let restored = conn.execute("PRAGMA synchronous = NORMAL").await;
            if migrated.is_err() || restored.is_err() {
                // Never back into the pool unsynchronised.
                conn.close_on_drop();
            }
            restored?;
        }
        migrated
    }
}

/// Give an empty database the schema of the migrations [`FRESH_SCHEMA`] covers, recorded as
/// applied.
async fn create_fresh(conn: &mut SqliteConnection) -> StoreResult<()> {
    let through = fresh_schema_through();
    // Several statements in one unprepared string, as the migrator runs a migration.
    conn.execute(FRESH_SCHEMA).await?;
    conn.ensure_migrations_table().await?;
    for migration in MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && m.version <= through)
    {
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ($1, $2, TRUE, $3, 0)",
        )
        .bind(migration.version)
        .bind(&*migration.description)
        .bind(&*migration.checksum)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteStore, Store};

    /// The writer after migrating: `(journal_mode, synchronous)`.
    async fn writer_modes(store: &SqliteStore) -> (String, i64) {
        let mut conn = store.write.acquire().await.unwrap();
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        (journal, synchronous)
    }

    #[test]
    fn the_image_never_replaces_a_file_that_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("taken.db");
        std::fs::write(&file, b"someone else's").unwrap();
        assert!(!super::write_fresh_image(&file).unwrap());
        assert_eq!(std::fs::read(&file).unwrap(), b"someone else's");
        let new = dir.path().join("new.db");
        assert!(super::write_fresh_image(&new).unwrap());
        assert_eq!(std::fs::read(&new).unwrap(), super::fresh_image());
        // Only the two files: no temporary one left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[tokio::test]
    async fn a_fresh_file_ends_in_wal_with_the_writer_synchronous_again() {
        let dir = tempfile::tempdir().unwrap();
        // Written from the image (missing), and given the script (empty).
        std::fs::write(dir.path().join("empty.db"), b"").unwrap();
        for name in ["missing.db", "empty.db"] {
            let url = format!("sqlite://{}", dir.path().join(name).display());
            let store = SqliteStore::connect(&url).await.unwrap();
            assert_eq!(store.from_image, name == "missing.db");
            store.migrate().await.unwrap();
            // 1 = NORMAL: the unsynchronised creation does not outlive it.
            assert_eq!(writer_modes(&store).await, ("wal".to_string(), 1), "{name}");
            drop(store);
            // Later connections open the file in WAL without asking for it.
            let store = SqliteStore::connect(&url).await.unwrap();
            assert_eq!(writer_modes(&store).await, ("wal".to_string(), 1), "{name}");
            store.migrate().await.unwrap();
            assert_eq!(writer_modes(&store).await, ("wal".to_string(), 1), "{name}");
        }
    }
}
