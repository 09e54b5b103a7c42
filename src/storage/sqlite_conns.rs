//! The SQLite store's connections: a few `SqliteConnection`s handed out and taken back
//! without sqlx's pool. sqlx's pool pings a connection when it hands one out and again when
//! it takes one back (a task spawned per statement, and a round trip to the connection's
//! worker thread each time), which for an in-process SQLite connection checks nothing a
//! network connection would: three round trips per statement. Here a statement is one
//! round trip: a connection leaves an idle list under a semaphore permit and goes back on
//! drop.
//!
//! The same surface the aggregates' SQL uses on a pool (`&conns` as an executor,
//! `acquire()`, `begin()` with `commit()`/`rollback()`, dereferencing to the connection), so
//! that SQL stays written once for both dialects; and `begin_in_batch()`, a transaction whose
//! BEGIN rides at the head of its first batch of statements (a turn's commit). A transaction dropped without commit
//! queues its rollback as sqlx's does; a connection still inside a transaction when it is
//! taken again (a failed rollback) is replaced instead of handed out. Knows connections,
//! not tables.

use futures::{StreamExt, TryStreamExt, future::BoxFuture, stream::BoxStream};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteQueryResult, SqliteRow, SqliteStatement,
    SqliteTypeInfo,
};
use sqlx::{ConnectOptions, Connection, Database, Describe, Either, Execute, Executor, Sqlite};
use sqlx::{Error, TransactionManager};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type Manager = <Sqlite as Database>::TransactionManager;

/// Up to `max` connections to one database, opened on demand.
#[derive(Clone)]
pub struct SqliteConns {
    inner: Arc<Inner>,
}

struct Inner {
    options: SqliteConnectOptions,
    idle: Mutex<Vec<SqliteConnection>>,
    permits: Arc<Semaphore>,
}

impl SqliteConns {
    /// `open_now`: open one connection at once (an error surfaces here, not at first use).
    pub async fn new(
        options: SqliteConnectOptions,
        max: usize,
        open_now: bool,
    ) -> Result<Self, Error> {
        let mut idle = Vec::with_capacity(max);
        if open_now {
            idle.push(options.connect().await?);
        }
        Ok(SqliteConns {
            inner: Arc::new(Inner {
                options,
                idle: Mutex::new(idle),
                permits: Arc::new(Semaphore::new(max)),
            }),
        })
    }

    /// A connection of its own until the lease is dropped.
    pub async fn acquire(&self) -> Result<Lease, Error> {
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let idle = self.inner.idle.lock().expect("idle list").pop();
        let conn = match idle {
            // A write that failed mid-transaction (disk full, I/O error) can leave the
            // connection believing it is still inside one (SQLite rolled back on its own,
            // the ROLLBACK then failed): every later transaction would be a savepoint of a
            // dead one. Replaced (right after a dropped transaction whose rollback is still
            // queued this also replaces a healthy one: rare and cheap).
            Some(conn) if conn.is_in_transaction() => {
                drop(conn);
                self.inner.options.connect().await?
            }
            Some(conn) => conn,
            None => self.inner.options.connect().await?,
        };
        Ok(Lease {
            conn: Some(conn),
            inner: self.inner.clone(),
            close: false,
            _permit: permit,
        })
    }

    /// A transaction on a connection of its own; rolled back if dropped uncommitted.
    pub async fn begin(&self) -> Result<Tx, Error> {
        let mut lease = self.acquire().await?;
        Manager::begin(&mut lease, None).await?;
        Ok(Tx { lease, open: true })
    }

    /// A transaction that the first statement sent on it begins ([`BatchTx::begin_sql`]
    /// leads a batch of statements): no round trip of its own for BEGIN.
    pub async fn begin_in_batch(&self) -> Result<BatchTx, Error> {
        Ok(BatchTx {
            lease: self.acquire().await?,
            open: true,
        })
    }

    /// Let the idle connections' caches go: their prepared statements (a turn's statements
    /// held about 2 MB on the writer; each is prepared again at its next use) and their
    /// page caches (`PRAGMA shrink_memory`: a burst fills them, a
    /// few MB, and SQLite keeps the pages for as long as the connection lives). Connections
    /// in use are left alone; the next statements read pages back as needed.
    pub async fn shrink_idle(&self) {
        let mut taken = Vec::new();
        while let Ok(permit) = self.inner.permits.clone().try_acquire_owned() {
            let Some(conn) = self.inner.idle.lock().expect("idle list").pop() else {
                break;
            };
            taken.push(Lease {
                conn: Some(conn),
                inner: self.inner.clone(),
                close: false,
                _permit: permit,
            });
        }
        for lease in &mut taken {
            if let Err(err) = lease.clear_cached_statements().await {
                tracing::debug!(error = %err, "could not drop an idle connection's statements");
            }
            if let Err(err) = sqlx::query("PRAGMA shrink_memory")
                .persistent(false)
                .execute(&mut **lease)
                .await
            {
                tracing::debug!(error = %err, "could not shrink an idle connection's cache");
            }
        }
    }
}

/// A transaction begun by the batch of statements sent first on it, ended by `commit` or
/// `rollback`. sqlx does not track a BEGIN inside a statement, so a `BatchTx` dropped before
/// either returned (an error, a cancelled future) closes its connection instead of handing
/// it back: SQLite rolls back what a closing connection had open, and no later holder finds
/// itself inside this transaction.
pub struct BatchTx {
    lease: Lease,
    open: bool,
}

impl BatchTx {
    /// What the first batch sent on this transaction starts with.
    pub fn begin_sql(&self) -> &'static str {
        "BEGIN; "
    }

    pub async fn commit(mut self) -> Result<(), Error> {
        self.lease.execute("COMMIT").await?;
        self.open = false;
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), Error> {
        self.lease.execute("ROLLBACK").await?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for BatchTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.lease
    }
}

impl std::ops::DerefMut for BatchTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.lease
    }
}

impl Drop for BatchTx {
    fn drop(&mut self) {
        if self.open {
            self.lease.close_on_drop();
        }
    }
}

/// A connection taken from [`SqliteConns`]; back to its idle list on drop.
pub struct Lease {
    conn: Option<SqliteConnection>,
    inner: Arc<Inner>,
    close: bool,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// Close the connection instead of putting it back (its settings were changed).
    pub fn close_on_drop(&mut self) {
        self.close = true;
    }
}

impl std::ops::Deref for Lease {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        self.conn.as_ref().expect("held until drop")
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.conn.as_mut().expect("held until drop")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !self.close
        {
            self.inner.idle.lock().expect("idle list").push(conn);
        }
        // A connection dropped here closes on its worker thread (SQLite rolls back what it
        // had open); the permit goes back after it.
    }
}

/// A transaction holding its connection.
pub struct Tx {
    lease: Lease,
    open: bool,
}

impl Tx {
    pub async fn commit(mut self) -> Result<(), Error> {
        Manager::commit(&mut self.lease).await?;
        self.open = false;
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), Error> {
        Manager::rollback(&mut self.lease).await?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for Tx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.lease
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.lease
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.open {
            // Queued on the connection's worker before anything the next holder sends.
            Manager::start_rollback(&mut self.lease);
        }
    }
}

impl std::fmt::Debug for SqliteConns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteConns")
            .field("free", &self.inner.permits.available_permits())
            .finish()
    }
}

impl<'p> Executor<'p> for &'_ SqliteConns {
    type Database = Sqlite;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<SqliteQueryResult, SqliteRow>, Error>>
    where
        E: 'q + Execute<'q, Sqlite>,
    {
        let conns = self.clone();
        // The rows are gathered while the connection is held, then yielded.
        futures::stream::once(async move {
            let mut lease = conns.acquire().await?;
            let all: Vec<_> = lease.fetch_many(query).collect().await;
            Ok::<_, Error>(futures::stream::iter(all))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<SqliteRow>, Error>>
    where
        E: 'q + Execute<'q, Sqlite>,
    {
        let conns = self.clone();
        Box::pin(async move { conns.acquire().await?.fetch_optional(query).await })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [SqliteTypeInfo],
    ) -> BoxFuture<'e, Result<SqliteStatement<'q>, Error>> {
        let conns = self.clone();
        Box::pin(async move { conns.acquire().await?.prepare_with(sql, parameters).await })
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Sqlite>, Error>> {
        let conns = self.clone();
        Box::pin(async move { conns.acquire().await?.describe(sql).await })
    }
}

#[cfg(test)]
mod tests {
    use super::SqliteConns;
    use sqlx::sqlite::SqliteConnectOptions;
    use std::str::FromStr;

    async fn conns(max: usize) -> (tempfile::TempDir, SqliteConns) {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::from_str(&format!(
            "sqlite://{}",
            dir.path().join("t.db").display()
        ))
        .unwrap()
        .create_if_missing(true);
        let conns = SqliteConns::new(options, max, true).await.unwrap();
        sqlx::query("CREATE TABLE t (n INTEGER NOT NULL)")
            .execute(&conns)
            .await
            .unwrap();
        (dir, conns)
    }

    async fn count(conns: &SqliteConns) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(conns)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_transaction_dropped_uncommitted_is_rolled_back_before_the_next_statement() {
        let (_dir, conns) = conns(1).await;
        {
            let mut tx = conns.begin().await.unwrap();
            sqlx::query("INSERT INTO t VALUES (1)")
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        assert_eq!(
            count(&conns).await,
            0,
            "the dropped transaction's row is gone"
        );
        let mut tx = conns.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(count(&conns).await, 1);
        let rows: Vec<i64> = sqlx::query_scalar("SELECT n FROM t")
            .fetch_all(&conns)
            .await
            .unwrap();
        assert_eq!(rows, [2]);
    }

    #[tokio::test]
    async fn a_transaction_begun_in_a_batch_commits_rolls_back_and_dies_with_its_connection() {
        let (_dir, conns) = conns(1).await;
        let batch = |tx: &super::BatchTx, n: i64| {
            format!(
                "{}INSERT INTO t VALUES ({n}); SELECT count(*) FROM t",
                tx.begin_sql()
            )
        };
        let mut tx = conns.begin_in_batch().await.unwrap();
        let seen: Vec<i64> = sqlx::query_scalar(&batch(&tx, 1))
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        assert_eq!(seen, [1]);
        tx.commit().await.unwrap();
        let mut tx = conns.begin_in_batch().await.unwrap();
        sqlx::query(&batch(&tx, 2)).execute(&mut *tx).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(count(&conns).await, 1, "the rolled back row is gone");
        // Dropped with its transaction open (an error between batch and commit): the next
        // holder gets a connection outside it and the row is gone.
        {
            let mut tx = conns.begin_in_batch().await.unwrap();
            sqlx::query(&batch(&tx, 3)).execute(&mut *tx).await.unwrap();
        }
        let mut next = conns.begin_in_batch().await.unwrap();
        let seen: Vec<i64> = sqlx::query_scalar(&batch(&next, 4))
            .fetch_all(&mut *next)
            .await
            .unwrap();
        assert_eq!(
            seen,
            [2],
            "row 3 was never committed; a nested BEGIN would have failed"
        );
        next.commit().await.unwrap();
        let rows: Vec<i64> = sqlx::query_scalar("SELECT n FROM t ORDER BY n")
            .fetch_all(&conns)
            .await
            .unwrap();
        assert_eq!(rows, [1, 4]);
    }

    #[tokio::test]
    async fn no_more_than_max_connections_are_out_and_each_goes_back() {
        let (_dir, conns) = conns(2).await;
        let (a, b) = (
            conns.acquire().await.unwrap(),
            conns.acquire().await.unwrap(),
        );
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), conns.acquire());
        assert!(
            third.await.is_err(),
            "a third connection waits for a lease to end"
        );
        drop(a);
        let c = conns.acquire().await.unwrap();
        drop((b, c));
        assert_eq!(conns.inner.idle.lock().unwrap().len(), 2, "both went back");
    }

    #[tokio::test]
    async fn shrinking_takes_only_idle_connections_drops_their_statements_and_gives_each_back() {
        use sqlx::Connection;
        let (_dir, conns) = conns(3).await;
        let (mut a, mut b) = (
            conns.acquire().await.unwrap(),
            conns.acquire().await.unwrap(),
        );
        for lease in [&mut a, &mut b] {
            sqlx::query("SELECT count(*) FROM t")
                .execute(&mut **lease)
                .await
                .unwrap();
            assert!(lease.cached_statements_size() >= 1, "prepared and kept");
        }
        let kept = a.cached_statements_size();
        drop(b);
        // `a` is in use: shrinking neither waits for it nor touches it.
        tokio::time::timeout(std::time::Duration::from_secs(5), conns.shrink_idle())
            .await
            .expect("shrinking does not wait for a connection in use");
        assert_eq!(
            conns.inner.idle.lock().unwrap().len(),
            1,
            "the idle one went back"
        );
        assert_eq!(conns.inner.permits.available_permits(), 2, "permits back");
        let idle = conns.inner.idle.lock().unwrap().pop().unwrap();
        assert_eq!(
            idle.cached_statements_size(),
            0,
            "the idle one's statements went"
        );
        conns.inner.idle.lock().unwrap().push(idle);
        assert_eq!(
            a.cached_statements_size(),
            kept,
            "the one in use keeps its own"
        );
        drop(a);
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&conns)
            .await
            .unwrap();
        assert_eq!(count(&conns).await, 1, "connections work after shrinking");
    }
}
