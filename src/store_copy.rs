//! `ferroclaw store copy --from URL --to URL` (SPEC section 22): every aggregate moved
//! between SQLite and PostgreSQL, either way — journal, sessions, transcripts, outbox, runs,
//! jobs, teams, approvals, usage, memories — table by table in primary-key order, 1,000
//! rows a statement, each insert `ON CONFLICT DO NOTHING`, so an interrupted copy run again
//! finishes without duplicates; row counts and content hashes are compared at the end. Both stores are brought
//! to this binary's schema first (the destination migrated, the source refused when it is
//! not current). It refuses while a service uses the source: on PostgreSQL a service holds
//! the leader lock; on SQLite a process has the file open. Leases, rate-limit hits and the
//! write probe are not copied (they mean nothing in another place).
//!
//! The columns and their types are read from PostgreSQL's catalogue (the one side with
//! strict types); generated columns (the memories' `tsvector`) are rebuilt by the
//! destination. After each table the row counts and an order-free content hash of both
//! sides are compared. Knows tables and rows; nothing of what they mean.

use anyhow::{Context, bail};
use sqlx::{PgPool, Row, SqlitePool};
use std::path::Path;

/// Tables not copied: process-local state.
const SKIPPED: &[&str] = &[
    "_sqlx_migrations",
    "write_probe",
    "session_leases",
    "rate_hits",
    "alert_incidents",
    "channel_health",
    "budget_refusals",
    "message_reach",
];
const BATCH: i64 = 1_000;

/// What one copy did.
#[derive(Debug, Default)]
pub struct Copied {
    /// (table, rows in the source, rows newly written).
    pub tables: Vec<(String, i64, u64)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Text,
    Bytes,
    Real,
}

enum Cell {
    /// A NULL of a column of this kind (PostgreSQL wants it typed).
    Null(Kind),
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    Real(f64),
}

struct Table {
    name: String,
    columns: Vec<(String, Kind)>,
    key: Vec<String>,
}

enum Db {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

/// Where a copy reads: SQLite's pool, or one PostgreSQL connection inside a
/// `REPEATABLE READ` transaction (one consistent snapshot of every table).
enum Reader<'a> {
    Sqlite(&'a SqlitePool),
    Pg(&'a mut sqlx::PgConnection),
}

pub async fn copy(from: &str, to: &str) -> anyhow::Result<Copied> {
    let (source, destination) = (open(from).await?, open(to).await?);
    // Held for the whole copy: no service starts leading on a PostgreSQL source meanwhile.
    let _source_lock = refuse_if_in_use(from, &source).await?;
    schema_current(from).await?;
    migrate(to).await?;
    transfer(source, destination, false).await
}

/// A PostgreSQL store's consistent snapshot into a new SQLite file (a backup's database,
/// taken while the service runs).
pub async fn snapshot_postgres(pg_url: &str, sqlite_file: &Path) -> anyhow::Result<Copied> {
    let sqlite_url = format!("sqlite://{}", sqlite_file.display());
    migrate(&sqlite_url).await?;
    transfer(open(pg_url).await?, open(&sqlite_url).await?, false).await
}

/// A backup's SQLite database into a PostgreSQL store; `replace` empties it first (else a
/// store holding rows is refused).
pub async fn load_postgres(
    sqlite_file: &Path,
    pg_url: &str,
    replace: bool,
) -> anyhow::Result<Copied> {
    let sqlite_url = format!("sqlite://{}", sqlite_file.display());
    migrate(pg_url).await?;
    transfer(open(&sqlite_url).await?, open(pg_url).await?, replace).await
}

/// Whether a PostgreSQL store holds no journal and no sessions (a restore's target).
pub async fn postgres_is_empty(pg_url: &str) -> anyhow::Result<bool> {
    migrate(pg_url).await?;
    let Db::Pg(pool) = open(pg_url).await? else {
        bail!("not a PostgreSQL URL");
    };
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM inbound) + (SELECT count(*) FROM sessions)",
    )
    .fetch_one(&pool)
    .await?;
    Ok(rows == 0)
}

async fn migrate(url: &str) -> anyhow::Result<()> {
    let store = crate::storage::connect(url)
        .await
        .with_context(|| format!("opening {}", redact_url(url)))?;
    store.migrate().await?;
    Ok(())
}

async fn transfer(source: Db, destination: Db, replace: bool) -> anyhow::Result<Copied> {
    let pg = match (&source, &destination) {
        (Db::Sqlite(_), Db::Pg(pg)) | (Db::Pg(pg), Db::Sqlite(_)) => pg.clone(),
        _ => bail!("store copy moves between SQLite and PostgreSQL (one side each)"),
    };
    let tables = tables(&pg).await?;
    if replace {
        for table in &tables {
            let sql = format!("DELETE FROM {}", table.name);
            match &destination {
                Db::Sqlite(pool) => sqlx::query(&sql).execute(pool).await?.rows_affected(),
                Db::Pg(pool) => sqlx::query(&sql).execute(pool).await?.rows_affected(),
            };
        }
    }
    let mut snapshot: Option<sqlx::pool::PoolConnection<sqlx::Postgres>> = None;
    let mut reader = match &source {
        Db::Sqlite(pool) => Reader::Sqlite(pool),
        Db::Pg(pool) => {
            let mut conn = pool.acquire().await?;
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *conn)
                .await?;
            Reader::Pg(snapshot.insert(conn))
        }
    };
    // The destination is read back for its content hash (PostgreSQL: one connection).
    let mut check_conn = match &destination {
        Db::Pg(pool) => Some(pool.acquire().await?),
        Db::Sqlite(_) => None,
    };
    let mut copied = Copied::default();
    for table in &tables {
        let total: i64 = count_read(&mut reader, &table.name).await?;
        let mut insert = Sink::Insert(&destination, 0);
        walk(&mut reader, table, &mut insert).await?;
        let Sink::Insert(_, written) = insert else {
            unreachable!("an insert walk")
        };
        let now = count(&destination, &table.name).await?;
        if now != total {
            bail!(
                "table {}: the source has {total} rows, the destination {now} (it held rows of its own)",
                table.name
            );
        }
        let mut theirs = Sink::Hash(0);
        walk(&mut reader, table, &mut theirs).await?;
        let mut ours = Sink::Hash(0);
        let mut check = match (&destination, check_conn.as_mut()) {
            (Db::Sqlite(pool), _) => Reader::Sqlite(pool),
            (Db::Pg(_), Some(conn)) => Reader::Pg(conn),
            (Db::Pg(_), None) => unreachable!("acquired above"),
        };
        walk(&mut check, table, &mut ours).await?;
        if let (Sink::Hash(a), Sink::Hash(b)) = (&theirs, &ours)
            && a != b
        {
            bail!(
                "table {}: the copied rows differ from the source's",
                table.name
            );
        }
        copied.tables.push((table.name.clone(), total, written));
    }
    drop(check_conn);
    if let Some(mut conn) = snapshot {
        sqlx::query("COMMIT").execute(&mut *conn).await?;
    }
    if let Db::Pg(pg) = &destination {
        advance_sequences(pg).await?;
    }
    if let Db::Sqlite(pool) = &destination {
        checkpoint(pool).await?;
    }
    for db in [source, destination] {
        match db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Pg(pool) => pool.close().await,
        }
    }
    Ok(copied)
}

/// Every row a SQLite destination received moved from its write-ahead log into the main
/// file, and the log emptied: a backup zips that file alone, and a copy taken while a
/// checkpoint runs is torn (seen once: an index counted 20 rows its table did not hold).
async fn checkpoint(pool: &SqlitePool) -> anyhow::Result<()> {
    let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(pool)
        .await?;
    if busy != 0 {
        bail!("the SQLite copy's write-ahead log could not be checkpointed (the file is in use)");
    }
    Ok(())
}

async fn open(url: &str) -> anyhow::Result<Db> {
    let shown = redact_url(url);
    if url.starts_with("sqlite:") {
        let options: sqlx::sqlite::SqliteConnectOptions = url
            .parse()
            .with_context(|| format!("{shown} is not a SQLite URL"))?;
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.create_if_missing(true))
            .await
            .with_context(|| format!("opening {shown}"))?;
        Ok(Db::Sqlite(pool))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await
            .with_context(|| format!("opening {shown}"))?;
        Ok(Db::Pg(pool))
    } else {
        bail!("{shown}: a store URL starts with sqlite:, postgres:// or postgresql://")
    }
}

/// A URL without its password.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Refuse a source a service is using; hold what keeps one from starting (PostgreSQL).
async fn refuse_if_in_use(
    url: &str,
    db: &Db,
) -> anyhow::Result<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>> {
    match db {
        Db::Pg(pool) => {
            let mut conn = pool.acquire().await?;
            let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(crate::coordination::LOCK)
                .fetch_one(&mut *conn)
                .await?;
            if !free {
                bail!(
                    "a ferroclaw service is running on the source (it holds the leader lock): stop it first"
                );
            }
            Ok(Some(conn))
        }
        Db::Sqlite(_) => {
            if let Some(pid) = sqlite_user(url) {
                bail!("process {pid} has the source database open: stop the service first");
            }
            Ok(None)
        }
    }
}

/// Another process that has the SQLite file open (Linux: its open files in /proc).
fn sqlite_user(url: &str) -> Option<u32> {
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse().ok()?;
    let path = std::fs::canonicalize(options.get_filename()).ok()?;
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target == path) {
                return Some(pid);
            }
        }
    }
    None
}

async fn schema_current(url: &str) -> anyhow::Result<()> {
    match crate::storage::schema_state(url).await? {
        Some(state) if state.applied != Some(state.known) => bail!(
            "the source's schema is at migration {} and this binary's at {}: run `ferroclaw migrate` with the matching binary first",
            state.applied.unwrap_or(0),
            state.known
        ),
        Some(_) => Ok(()),
        None => bail!("the source holds no ferroclaw store"),
    }
}

/// The tables to copy, their columns (generated ones left out) and primary keys.
async fn tables(pg: &PgPool) -> anyhow::Result<Vec<Table>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
    .fetch_all(pg)
    .await?;
    let mut tables = Vec::new();
    for name in names.into_iter().filter(|n| !SKIPPED.contains(&n.as_str())) {
        let columns: Vec<(String, String)> = sqlx::query_as(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER' \
             ORDER BY ordinal_position",
        )
        .bind(&name)
        .fetch_all(pg)
        .await?;
        let columns = columns
            .into_iter()
            .map(|(column, kind)| {
                let kind = match kind.as_str() {
                    "bigint" | "integer" | "smallint" => Kind::Int,
                    "bytea" => Kind::Bytes,
                    "double precision" | "real" | "numeric" => Kind::Real,
                    _ => Kind::Text,
                };
                (column, kind)
            })
            .collect();
        let key: Vec<String> = sqlx::query_scalar(
            "SELECT kcu.column_name::text FROM information_schema.table_constraints AS tc \
             JOIN information_schema.key_column_usage AS kcu \
               ON tc.constraint_name = kcu.constraint_name AND tc.table_schema = kcu.table_schema \
             WHERE tc.table_schema = current_schema() AND tc.table_name = $1 \
               AND tc.constraint_type = 'PRIMARY KEY' ORDER BY kcu.ordinal_position",
        )
        .bind(&name)
        .fetch_all(pg)
        .await?;
        if key.is_empty() {
            bail!("table {name} has no primary key: it cannot be copied without duplicates");
        }
        tables.push(Table { name, columns, key });
    }
    Ok(tables)
}

async fn count_read(reader: &mut Reader<'_>, table: &str) -> anyhow::Result<i64> {
    let sql = format!("SELECT count(*) FROM {table}");
    Ok(match reader {
        Reader::Sqlite(pool) => sqlx::query_scalar(&sql).fetch_one(*pool).await?,
        Reader::Pg(conn) => sqlx::query_scalar(&sql).fetch_one(&mut **conn).await?,
    })
}

async fn count(db: &Db, table: &str) -> anyhow::Result<i64> {
    let sql = format!("SELECT count(*) FROM {table}");
    Ok(match db {
        Db::Sqlite(pool) => sqlx::query_scalar(&sql).fetch_one(pool).await?,
        Db::Pg(pool) => sqlx::query_scalar(&sql).fetch_one(pool).await?,
    })
}

/// Read one row's cells by the column kinds (the same code for both dialects' rows).
macro_rules! cells {
    ($row:expr, $columns:expr) => {{
        let mut cells = Vec::with_capacity($columns.len());
        for (i, (_, kind)) in $columns.iter().enumerate() {
            cells.push(match kind {
                Kind::Int => $row
                    .try_get::<Option<i64>, _>(i)?
                    .map_or(Cell::Null(*kind), Cell::Int),
                Kind::Text => $row
                    .try_get::<Option<String>, _>(i)?
                    .map_or(Cell::Null(*kind), Cell::Text),
                Kind::Bytes => $row
                    .try_get::<Option<Vec<u8>>, _>(i)?
                    .map_or(Cell::Null(*kind), Cell::Bytes),
                Kind::Real => $row
                    .try_get::<Option<f64>, _>(i)?
                    .map_or(Cell::Null(*kind), Cell::Real),
            });
        }
        cells
    }};
}

/// Insert rows (`ON CONFLICT DO NOTHING`); how many were new.
macro_rules! insert {
    ($db:ty, $pool:expr, $table:expr, $rows:expr) => {{
        let names: Vec<&str> = $table.columns.iter().map(|(c, _)| c.as_str()).collect();
        let mut insert = sqlx::QueryBuilder::<$db>::new(format!(
            "INSERT INTO {} ({}) ",
            $table.name,
            names.join(", ")
        ));
        insert.push_values($rows, |mut row, cells| {
            for cell in cells {
                match cell {
                    Cell::Null(Kind::Int) => row.push_bind(None::<i64>),
                    Cell::Null(Kind::Text) => row.push_bind(None::<String>),
                    Cell::Null(Kind::Bytes) => row.push_bind(None::<Vec<u8>>),
                    Cell::Null(Kind::Real) => row.push_bind(None::<f64>),
                    Cell::Int(v) => row.push_bind(v),
                    Cell::Text(v) => row.push_bind(v),
                    Cell::Bytes(v) => row.push_bind(v),
                    Cell::Real(v) => row.push_bind(v),
                };
            }
        });
        insert.push(" ON CONFLICT DO NOTHING");
        insert.build().execute($pool).await?.rows_affected()
    }};
}

/// One page of `table` after `last` (keyset on a one-integer key) or at `offset`.
fn page_sql(table: &Table, keyset: bool) -> String {
    let names: Vec<&str> = table.columns.iter().map(|(c, _)| c.as_str()).collect();
    let order = table.key.join(", ");
    if keyset {
        format!(
            "SELECT {} FROM {} WHERE {order} > $1 ORDER BY {order} LIMIT {BATCH}",
            names.join(", "),
            table.name
        )
    } else {
        format!(
            "SELECT {} FROM {} ORDER BY {order} LIMIT {BATCH} OFFSET $1",
            names.join(", "),
            table.name
        )
    }
}

/// What a walk over a table's rows does with each page.
enum Sink<'a> {
    /// Insert them into this store; counts the rows that were new.
    Insert(&'a Db, u64),
    /// Fold them into an order-free content hash (the sum of each row's digest): the two
    /// dialects may order text keys differently.
    Hash(u128),
}

/// One row's digest: each cell tagged by its kind, so NULL, '' and 0 differ.
fn row_digest(row: &[Cell]) -> u128 {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for cell in row {
        match cell {
            Cell::Null(_) => hash.update([0u8]),
            Cell::Int(v) => {
                hash.update([1u8]);
                hash.update(v.to_le_bytes());
            }
            Cell::Text(v) => {
                hash.update([2u8]);
                hash.update((v.len() as u64).to_le_bytes());
                hash.update(v.as_bytes());
            }
            Cell::Bytes(v) => {
                hash.update([3u8]);
                hash.update((v.len() as u64).to_le_bytes());
                hash.update(v);
            }
            Cell::Real(v) => {
                hash.update([4u8]);
                hash.update(v.to_bits().to_le_bytes());
            }
        }
    }
    let digest = hash.finalize();
    u128::from_le_bytes(digest[..16].try_into().expect("16 bytes"))
}

/// Every row of `table` in key order, a page at a time, into `sink`.
async fn walk(source: &mut Reader<'_>, table: &Table, sink: &mut Sink<'_>) -> anyhow::Result<()> {
    let key_column = table
        .columns
        .iter()
        .position(|(c, _)| table.key.len() == 1 && *c == table.key[0]);
    let keyset = key_column.is_some_and(|i| table.columns[i].1 == Kind::Int);
    let sql = page_sql(table, keyset);
    let (mut after, mut offset) = (i64::MIN, 0i64);
    loop {
        let position = if keyset { after } else { offset };
        let rows: Vec<Vec<Cell>> = match source {
            Reader::Sqlite(pool) => {
                let mut out = Vec::new();
                for row in sqlx::query(&sql).bind(position).fetch_all(*pool).await? {
                    out.push(cells!(row, table.columns));
                }
                out
            }
            Reader::Pg(conn) => {
                let mut out = Vec::new();
                for row in sqlx::query(&sql)
                    .bind(position)
                    .fetch_all(&mut **conn)
                    .await?
                {
                    out.push(cells!(row, table.columns));
                }
                out
            }
        };
        if rows.is_empty() {
            return Ok(());
        }
        let fetched = rows.len() as i64;
        if let Some(i) = key_column.filter(|_| keyset)
            && let Some(Cell::Int(last)) = rows.last().map(|r| &r[i])
        {
            after = *last;
        }
        offset += fetched;
        match sink {
            Sink::Insert(destination, written) => {
                *written += match destination {
                    Db::Sqlite(pool) => insert!(sqlx::Sqlite, pool, table, rows),
                    Db::Pg(pool) => insert!(sqlx::Postgres, pool, table, rows),
                };
            }
            Sink::Hash(sum) => {
                for row in &rows {
                    *sum = sum.wrapping_add(row_digest(row));
                }
            }
        }
        if fetched < BATCH {
            return Ok(());
        }
    }
}

/// Serial columns continue after the copied ids.
async fn advance_sequences(pg: &PgPool) -> anyhow::Result<()> {
    let serials: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND column_default LIKE 'nextval(%'",
    )
    .fetch_all(pg)
    .await?;
    for (table, column) in serials {
        sqlx::query(&format!(
            "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
             COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
        ))
        .execute(pg)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_never_shows() {
        assert_eq!(
            super::redact_url("postgres://me:s3cret@db:5432/x"),
            "postgres://me:***@db:5432/x"
        );
        assert_eq!(super::redact_url("sqlite://a.db"), "sqlite://a.db");
    }
}
