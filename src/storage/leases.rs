//! Session leases: which process works a session (several processes on one PostgreSQL database).
//!
//! The trait, then its SQL, written once for both dialects: each macro below expands the
//! same bodies for SQLite and PostgreSQL (both accept `$N` placeholders).

use super::*;
use async_trait::async_trait;

/// Session leases: which process works a session's pending entries (several processes on
/// one PostgreSQL database).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Take (or keep) the lease of `session_key` for `owner` until `until_ms`, when it is
    /// free, expired at `now_ms`, or already `owner`'s. Returns whether `owner` holds it.
    async fn lease_claim(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<bool>;
    /// Extend `owner`'s leases of `keys`.
    async fn lease_renew(&self, keys: &[String], owner: &str, until_ms: i64) -> StoreResult<()>;
    /// Give the lease up (only `owner`'s).
    async fn lease_release(&self, session_key: &str, owner: &str) -> StoreResult<()>;
    /// A lane's start: [`lease_claim`](Self::lease_claim) and, when held, the session's
    /// oldest pending entry and the fence ([`LaneClaim::Held`]), read in a statement after
    /// the claim's (one on PostgreSQL), so they see what the lease's last holder committed.
    async fn lease_claim_next(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<LaneClaim>;
    /// A lane's step: the session's oldest pending entry, or, when none is pending, `owner`'s
    /// lease given up (None), decided together so an entry pending at that moment is never
    /// left with its lease released (one round trip on PostgreSQL).
    async fn lease_next_or_release(
        &self,
        session_key: &str,
        owner: &str,
    ) -> StoreResult<Option<JournalEntry>>;
}

/// What [`LeaseStore::lease_claim_next`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum LaneClaim {
    /// Another process holds the lease.
    NotHeld,
    /// Held by the caller now: the session's oldest pending entry if any, and the journal's
    /// highest id read after the claim. An entry above `fence` was not yet in
    /// the journal when the lease was taken, so no process can have started it before (it
    /// is not a redo).
    Held {
        next: Option<Box<JournalEntry>>,
        fence: i64,
    },
}

macro_rules! sql {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::LeaseStore for $store {
            async fn lease_claim(
                &self,
                session_key: &str,
                owner: &str,
                now_ms: i64,
                until_ms: i64,
            ) -> $crate::storage::StoreResult<bool> {
                // A write with RETURNING: read with fetch_all (see the module note).
                let held: Vec<String> = sqlx::query_scalar(
                    "INSERT INTO session_leases (session_key, owner, expires_at) VALUES ($1, $2, $4) \
                     ON CONFLICT (session_key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
                     WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= $3 \
                     RETURNING owner",
                )
                    .bind(session_key)
                    .bind(owner)
                    .bind(now_ms)
                    .bind(until_ms)
                    .fetch_all(&self.write)
                    .await?;
                Ok(!held.is_empty())
            }

            async fn lease_renew(
                &self,
                keys: &[String],
                owner: &str,
                until_ms: i64,
            ) -> $crate::storage::StoreResult<()> {
                if keys.is_empty() {
                    return Ok(());
                }
                let mut update =
                    sqlx::QueryBuilder::<$db>::new("UPDATE session_leases SET expires_at = ");
                update.push_bind(until_ms);
                update.push(" WHERE owner = ");
                update.push_bind(owner);
                update.push(" AND session_key IN (");
                let mut keys_list = update.separated(", ");
                for key in keys {
                    keys_list.push_bind(key);
                }
                update.push(")");
                update.build().execute(&self.write).await?;
                Ok(())
            }

            async fn lease_claim_next(
                &self,
                session_key: &str,
                owner: &str,
                now_ms: i64,
                until_ms: i64,
            ) -> $crate::storage::StoreResult<LaneClaim> {
                self.claim_with_next(session_key, owner, now_ms, until_ms)
                    .await
            }

            async fn lease_next_or_release(
                &self,
                session_key: &str,
                owner: &str,
            ) -> $crate::storage::StoreResult<Option<JournalEntry>> {
                self.next_or_release(session_key, owner).await
            }

            async fn lease_release(
                &self,
                session_key: &str,
                owner: &str,
            ) -> $crate::storage::StoreResult<()> {
                sqlx::query("DELETE FROM session_leases WHERE session_key = $1 AND owner = $2")
                    .bind(session_key)
                    .bind(owner)
                    .execute(&self.write)
                    .await?;
                Ok(())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite);
sql!(super::PostgresStore, sqlx::Postgres);

/// PostgreSQL: the claim's reads in one statement after it; the step a single statement of
/// data-modifying CTEs, atomic without a transaction.
impl PostgresStore {
    async fn claim_with_next(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<LaneClaim> {
        use sqlx::Row;
        // The claim, then the reads in a statement of their own: its snapshot is taken after
        // the claim, so it sees whatever the lease's last holder committed before giving the
        // lease up (a claim that waited for the lease row's lock keeps the snapshot it took
        // before the wait, so one statement could read an entry already answered as pending).
        if !self
            .lease_claim(session_key, owner, now_ms, until_ms)
            .await?
        {
            return Ok(LaneClaim::NotHeld);
        }
        // One row, the entry's columns NULL when none is pending. The fence: every entry
        // anyone could have read before the lease was ours was committed before this read.
        let rows = sqlx::query(concat!(
            "SELECT n.id, n.session_key, n.payload, (",
            sql_text::journal_fence!(),
            ") AS fence FROM (SELECT 1) AS one LEFT JOIN LATERAL (",
            sql_text::journal_next!(),
            ") AS n ON true"
        ))
        .bind(session_key)
        .fetch_all(&self.read)
        .await?;
        let Some(row) = rows.first() else {
            return Err(StoreError::Corrupt(
                "the lane's read returned no row".into(),
            ));
        };
        let next = match row.try_get::<Option<i64>, _>("id")? {
            Some(_) => Some(Box::new(Self::decode_journal(row)?)),
            None => None,
        };
        let fence = row.try_get("fence")?;
        Ok(LaneClaim::Held { next, fence })
    }

    async fn next_or_release(
        &self,
        session_key: &str,
        owner: &str,
    ) -> StoreResult<Option<JournalEntry>> {
        // A data-modifying CTE runs whether or not the query reads it.
        let rows = sqlx::query(concat!(
            "WITH next AS (",
            sql_text::journal_next!(),
            "), released AS (DELETE FROM session_leases WHERE session_key = $1 AND owner = $2 \
             AND NOT EXISTS (SELECT 1 FROM next)) SELECT id, session_key, payload FROM next"
        ))
        .bind(session_key)
        .bind(owner)
        .fetch_all(&self.write)
        .await?;
        rows.first().map(Self::decode_journal).transpose()
    }
}

/// SQLite (one process, one writer): the same decisions in two statements.
impl SqliteStore {
    async fn claim_with_next(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<LaneClaim> {
        if !self
            .lease_claim(session_key, owner, now_ms, until_ms)
            .await?
        {
            return Ok(LaneClaim::NotHeld);
        }
        let fence: i64 = sqlx::query_scalar(sql_text::journal_fence!())
            .fetch_one(&self.write)
            .await?;
        let next = self.journal_next(session_key).await?.map(Box::new);
        Ok(LaneClaim::Held { next, fence })
    }

    async fn next_or_release(
        &self,
        session_key: &str,
        owner: &str,
    ) -> StoreResult<Option<JournalEntry>> {
        let released = sqlx::query(
            "DELETE FROM session_leases WHERE session_key = $1 AND owner = $2 AND NOT EXISTS \
             (SELECT 1 FROM inbound WHERE session_key = $1 AND state = 'pending')",
        )
        .bind(session_key)
        .bind(owner)
        .execute(&self.write)
        .await?
        .rows_affected();
        if released > 0 {
            return Ok(None);
        }
        // Kept (something is pending), or not `owner`'s to give up.
        self.journal_next(session_key).await
    }
}
