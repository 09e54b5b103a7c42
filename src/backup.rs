//! `ferroclaw backup [FILE]` and `ferroclaw restore FILE [--force]` (SPEC section 22): one
//! zip file holding a consistent snapshot of the store, taken while the service runs (SQLite:
//! `VACUUM INTO`; PostgreSQL: the service's tables read in one `REPEATABLE READ` transaction
//! into the same portable SQLite file, loaded back by `restore`), every agent workspace and the resolved configuration with its secrets
//! redacted, and the way back into an empty store and data directory.
//!
//! Owns the archive's layout (`manifest.json`, `database.sqlite`, `workspaces/<n>/…`,
//! `config.toml`); knows the store only through its URL.

use crate::config::LoadedConfig;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What the archive says of itself.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    ferroclaw: String,
    created_at_ms: i64,
    /// The schema's newest migration in the snapshot.
    schema: Option<i64>,
    /// Workspace folders by their index under `workspaces/` (as configured).
    workspaces: Vec<String>,
}

/// What a backup or restore did.
#[derive(Debug)]
pub struct Summary {
    pub database_bytes: u64,
    pub files: usize,
}

/// The file a `sqlite:` URL names.
fn sqlite_file(url: &str) -> anyhow::Result<PathBuf> {
    if !url.starts_with("sqlite:") {
        bail!("storage.url is not a SQLite URL");
    }
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .context("storage.url is not a SQLite URL")?;
    Ok(options.get_filename().to_path_buf())
}

/// Every distinct workspace root the agents use.
fn workspaces(loaded: &LoadedConfig) -> Vec<String> {
    let config = &loaded.config;
    let mut roots = vec![config.agent.workspace.clone()];
    for agent in config.agents.values() {
        if let Some(own) = &agent.workspace
            && !roots.contains(own)
        {
            roots.push(own.clone());
        }
    }
    roots
}

/// Write a backup of the running (or stopped) service to `file`.
pub async fn backup(loaded: &LoadedConfig, file: &Path) -> anyhow::Result<Summary> {
    let url = &loaded.config.storage.url;
    crate::storage::refuse_newer_schema(url).await?;
    let staging = tempfile::tempdir().context("cannot make a staging folder")?;
    let snapshot = staging.path().join("database.sqlite");
    if is_postgres(url) {
        // The service's tables in one REPEATABLE READ snapshot, as a portable SQLite file.
        crate::store_copy::snapshot_postgres(url, &snapshot)
            .await
            .context("the database could not be copied")?;
    } else {
        let database = sqlite_file(url)?;
        if !database.exists() {
            bail!("there is no database at {} to back up", database.display());
        }
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&loaded.config.storage.url)
            .await
            .context("cannot open the database")?;
        // One read transaction: a consistent copy while the service goes on writing.
        sqlx::query("VACUUM INTO ?")
            .bind(snapshot.to_string_lossy().to_string())
            .execute(&mut conn)
            .await
            .context("the database could not be copied")?;
        let _ = conn.close().await;
    }
    let schema = crate::storage::schema_state(&format!("sqlite://{}", snapshot.display()))
        .await
        .ok()
        .flatten()
        .and_then(|s| s.applied);
    let roots = workspaces(loaded);
    let manifest = Manifest {
        format: 1,
        ferroclaw: env!("CARGO_PKG_VERSION").into(),
        created_at_ms: crate::clock::now_ms(),
        schema,
        workspaces: roots.clone(),
    };
    let config = crate::config::render_redacted(loaded);
    let file = file.to_path_buf();
    tokio::task::spawn_blocking(move || write_archive(&file, &manifest, &snapshot, &roots, &config))
        .await
        .context("the backup task failed")?
}

fn write_archive(
    file: &Path,
    manifest: &Manifest,
    snapshot: &Path,
    roots: &[String],
    config: &str,
) -> anyhow::Result<Summary> {
    let partial = file.with_extension("partial");
    let out = std::fs::File::create(&partial)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    let mut zip = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zip.start_file("manifest.json", options)?;
    zip.write_all(&serde_json::to_vec_pretty(manifest)?)?;
    zip.start_file("config.toml", options)?;
    zip.write_all(config.as_bytes())?;
    zip.start_file("database.sqlite", options)?;
    let database_bytes = std::io::copy(&mut std::fs::File::open(snapshot)?, &mut zip)?;
    let mut files = 0;
    for (index, root) in roots.iter().enumerate() {
        let root = Path::new(root);
        if !root.is_dir() {
            continue;
        }
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)?.flatten() {
                let kind = entry.file_type()?;
                let path = entry.path();
                // Links are not followed (a sandboxed command may have planted one).
                if kind.is_dir() {
                    stack.push(path);
                } else if kind.is_file() {
                    let relative = path
                        .strip_prefix(root)?
                        .to_string_lossy()
                        .replace('\\', "/");
                    zip.start_file(format!("workspaces/{index}/{relative}"), options)?;
                    std::io::copy(&mut std::fs::File::open(&path)?, &mut zip)?;
                    files += 1;
                }
            }
        }
    }
    zip.finish()?;
    std::fs::rename(&partial, file)
        .with_context(|| format!("cannot move the backup to {}", file.display()))?;
    Ok(Summary {
        database_bytes,
        files,
    })
}

/// How many backups `serve` keeps beside a SQLite file it migrated.
const KEEP_BEFORE_MIGRATION: usize = 3;

/// Copy the SQLite database at `url` (schema at migration `applied`) beside itself before it
/// is migrated (`<file>.before-migration-<applied>-<unix ms>`); keep the newest three.
pub async fn before_migration(url: &str, applied: i64) -> anyhow::Result<PathBuf> {
    use sqlx::Connection;
    let file = sqlite_file(url)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!("{name}.before-migration-");
    let copy = file.with_file_name(format!("{prefix}{applied}-{}", crate::clock::now_ms()));
    let mut conn = sqlx::SqliteConnection::connect(url).await?;
    sqlx::query("VACUUM INTO ?")
        .bind(copy.to_string_lossy().to_string())
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut kept: Vec<(u128, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stamp = n.strip_prefix(&prefix)?.rsplit('-').next()?.parse().ok()?;
            Some((stamp, e.path()))
        })
        .collect();
    kept.sort();
    let extra = kept.len().saturating_sub(KEEP_BEFORE_MIGRATION);
    for (_, old) in kept.into_iter().take(extra) {
        let _ = std::fs::remove_file(old);
    }
    Ok(copy)
}

/// Restore `file` into the store and workspaces `loaded` names, which must be empty unless
/// `force` (then they are replaced).
pub async fn restore(loaded: &LoadedConfig, file: &Path, force: bool) -> anyhow::Result<Summary> {
    let url = loaded.config.storage.url.clone();
    let roots = workspaces(loaded);
    let postgres = is_postgres(&url);
    // PostgreSQL: the archive's database is unpacked here, then loaded into the server.
    let staging = tempfile::tempdir().context("cannot make a staging folder")?;
    let (database, store_occupied) = if postgres {
        let empty = crate::store_copy::postgres_is_empty(&url).await?;
        (staging.path().join("database.sqlite"), !empty)
    } else {
        let database = sqlite_file(&url)?;
        let exists = database.exists();
        (database, exists)
    };
    let occupied = store_occupied
        || roots
            .iter()
            .any(|r| std::fs::read_dir(r).is_ok_and(|mut d| d.next().is_some()));
    if occupied && !force {
        bail!(
            "the store or a workspace is not empty; restore into an empty one, or pass --force to replace them"
        );
    }
    let file = file.to_path_buf();
    let unpacked = database.clone();
    let summary = tokio::task::spawn_blocking(move || read_archive(&file, &unpacked, &roots))
        .await
        .context("the restore task failed")??;
    if postgres {
        crate::store_copy::load_postgres(&database, &url, force)
            .await
            .context("the database could not be loaded into PostgreSQL")?;
    }
    Ok(summary)
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn read_archive(file: &Path, database: &Path, roots: &[String]) -> anyhow::Result<Summary> {
    let mut zip = zip::ZipArchive::new(
        std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?,
    )
    .context("not a ferroclaw backup (not a zip file)")?;
    let manifest: Manifest = {
        let mut text = String::new();
        zip.by_name("manifest.json")
            .context("not a ferroclaw backup (no manifest.json)")?
            .read_to_string(&mut text)?;
        serde_json::from_str(&text).context("the backup's manifest is not readable")?
    };
    if manifest.format != 1 {
        bail!(
            "the backup's format {} is newer than this ferroclaw reads",
            manifest.format
        );
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = database.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
    if let Some(dir) = database.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let database_bytes = {
        use std::os::unix::fs::OpenOptionsExt;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(database)?;
        std::io::copy(&mut zip.by_name("database.sqlite")?, &mut out)?
    };
    let mut files = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        // Only names inside the archive's own folders (no `..`, no absolute path).
        let Some(inner) = entry.enclosed_name() else {
            continue;
        };
        let Ok(rest) = inner.strip_prefix("workspaces") else {
            continue;
        };
        let mut parts = rest.components();
        let Some(index) = parts
            .next()
            .and_then(|c| c.as_os_str().to_str()?.parse::<usize>().ok())
        else {
            continue;
        };
        // Workspaces go where this config puts them (by the order the backup listed them).
        let Some(root) = roots.get(index).or(manifest.workspaces.get(index)) else {
            continue;
        };
        let target = Path::new(root).join(parts.as_path());
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::io::copy(&mut entry, &mut std::fs::File::create(&target)?)?;
        files += 1;
    }
    Ok(Summary {
        database_bytes,
        files,
    })
}
