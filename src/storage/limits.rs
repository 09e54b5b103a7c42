//! The limits on people and on one message, as every process on the database shares them:
//! the rate windows of a person's (or a group chat's) messages and how far one message's tree
//! has reached (runs and model calls).
//!
//! The trait, then its SQL, written once for both dialects. Knows counts and windows, not
//! what a limit is for or what a refused message is told.

use super::*;
use async_trait::async_trait;

/// One rate window set to check a message against: whose messages (`<channel>:<user>`, or
/// `chat:<channel>:<chat>` for a group) and their windows (length ms, most messages).
#[derive(Debug, Clone, Copy)]
pub struct RateCheck<'a> {
    pub subject: &'a str,
    pub windows: &'a [(i64, u32)],
}

/// What of a message's reach is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachCount {
    /// Subagent runs, delegations, team tasks and plan steps.
    Runs,
    /// Model calls.
    Calls,
}

#[async_trait]
pub trait LimitStore: Send + Sync {
    /// Count a message against every check at `now_ms`, all or none: `Some((i, t))` (nothing
    /// counted) names the first check with a full window and when the next message fits
    /// it. Processes sharing the database count one message at a time per subject.
    async fn rate_take(
        &self,
        checks: &[RateCheck<'_>],
        now_ms: i64,
    ) -> StoreResult<Option<(usize, i64)>>;
    /// Take up to `want` more of `origin`'s runs or model calls within `limit`; how many were
    /// granted (0: the limit is reached). A row this creates starts its calls at `seed` (the
    /// calls the message's own first turn may count without the store).
    async fn reach_take(
        &self,
        origin: &str,
        what: ReachCount,
        want: i64,
        limit: i64,
        seed: i64,
        now_ms: i64,
    ) -> StoreResult<i64>;
    /// Forget the reach of messages untouched since `before_ms`.
    async fn reach_forget(&self, before_ms: i64) -> StoreResult<u64>;
}

/// When the next message fits, given the times of the messages in the longest window
/// (oldest first); None when every window has room.
fn rate_verdict(hits: &[i64], now_ms: i64, windows: &[(i64, u32)]) -> Option<i64> {
    windows
        .iter()
        .filter_map(|&(length, max)| {
            let inside: Vec<i64> = hits
                .iter()
                .copied()
                .filter(|at| *at > now_ms - length)
                .collect();
            let over = inside.len().checked_sub(max as usize)?;
            // The window has room again once its `over + 1` oldest hits have left it.
            Some(inside[over] + length)
        })
        .max()
}

/// The statement taking `$3` more of `$column` within `$4`, as much as is left (`$values`:
/// the new row's runs, calls and grant, where `$2` is what a new row grants and `$5` the
/// calls it starts at). `granted` is read back.
macro_rules! reach_take_statement {
    ($column:literal, $values:literal) => {
        concat!(
            "INSERT INTO message_reach (origin, runs, calls, granted, at) VALUES ($1, ",
            $values,
            ", $6) ON CONFLICT (origin) DO UPDATE SET granted = ",
            reach_take_statement!(@grant $column),
            ", ", $column, " = message_reach.", $column, " + ",
            reach_take_statement!(@grant $column),
            ", at = $6 RETURNING granted"
        )
    };
    (@grant $column:literal) => {
        concat!(
            "CASE WHEN $4 - message_reach.", $column, " <= 0 THEN 0 WHEN $4 - message_reach.",
            $column, " < $3 THEN $4 - message_reach.", $column, " ELSE $3 END"
        )
    };
}

/// The statement taking `$3` more of a column within `$4` (`$2` is the new row's starting
/// counts: runs and calls already include the grant). `granted` is read back.
fn reach_statement(what: ReachCount) -> &'static str {
    match what {
        ReachCount::Runs => reach_take_statement!("runs", "$2, $5, $2"),
        ReachCount::Calls => reach_take_statement!("calls", "0, $5 + $2, $2"),
    }
}

macro_rules! sql {
    ($store:ty, $db:ty, $lock:expr) => {
        #[async_trait::async_trait]
        impl $crate::storage::LimitStore for $store {
            async fn rate_take(
                &self,
                checks: &[RateCheck<'_>],
                now_ms: i64,
            ) -> $crate::storage::StoreResult<Option<(usize, i64)>> {
                let mut tx = self.write.begin().await?;
                // One message at a time per subject, taken in one order by every process.
                let lock: Option<&str> = $lock;
                if let Some(lock) = lock {
                    let mut subjects: Vec<&str> = checks.iter().map(|c| c.subject).collect();
                    subjects.sort_unstable();
                    for subject in subjects {
                        sqlx::query(lock).bind(subject).execute(&mut *tx).await?;
                    }
                }
                for (i, check) in checks.iter().enumerate() {
                    let longest = check.windows.iter().map(|w| w.0).max().unwrap_or(0);
                    sqlx::query("DELETE FROM rate_hits WHERE subject = $1 AND at <= $2")
                        .bind(check.subject)
                        .bind(now_ms - longest)
                        .execute(&mut *tx)
                        .await?;
                    let hits: Vec<i64> = sqlx::query_scalar(
                        "SELECT at FROM rate_hits WHERE subject = $1 ORDER BY at",
                    )
                    .bind(check.subject)
                    .fetch_all(&mut *tx)
                    .await?;
                    if let Some(at) = rate_verdict(&hits, now_ms, check.windows) {
                        tx.rollback().await?;
                        return Ok(Some((i, at)));
                    }
                }
                for check in checks {
                    sqlx::query("INSERT INTO rate_hits (subject, at) VALUES ($1, $2)")
                        .bind(check.subject)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(None)
            }

            async fn reach_take(
                &self,
                origin: &str,
                what: ReachCount,
                want: i64,
                limit: i64,
                seed: i64,
                now_ms: i64,
            ) -> $crate::storage::StoreResult<i64> {
                // A new row: what it grants now (runs start at 0, calls at `seed`).
                let start = match what {
                    ReachCount::Runs => 0,
                    ReachCount::Calls => seed,
                };
                let first = want.min((limit - start).max(0));
                Ok(sqlx::query_scalar(reach_statement(what))
                    .bind(origin)
                    .bind(first)
                    .bind(want)
                    .bind(limit)
                    .bind(seed)
                    .bind(now_ms)
                    .fetch_one(&self.write)
                    .await?)
            }

            async fn reach_forget(&self, before_ms: i64) -> $crate::storage::StoreResult<u64> {
                Ok(sqlx::query("DELETE FROM message_reach WHERE at < $1")
                    .bind(before_ms)
                    .execute(&self.write)
                    .await?
                    .rows_affected())
            }
        }
    };
}

sql!(super::SqliteStore, sqlx::Sqlite, None);
// Transaction-scoped advisory locks: two processes never count the same subject at once
// (READ COMMITTED would let both see room for the last message).
sql!(
    super::PostgresStore,
    sqlx::Postgres,
    Some("SELECT pg_advisory_xact_lock(hashtextextended($1, 16))")
);

#[cfg(test)]
mod tests {
    use super::rate_verdict;

    #[test]
    fn a_full_window_says_when_its_oldest_hit_leaves() {
        let minute = 60_000;
        // Two a minute: the third within the minute waits for the first to leave.
        assert_eq!(
            rate_verdict(&[1_000, 2_000], 3_000, &[(minute, 2)]),
            Some(61_000)
        );
        assert_eq!(rate_verdict(&[1_000], 3_000, &[(minute, 2)]), None);
        // Hits older than the window do not count.
        assert_eq!(rate_verdict(&[1_000, 2_000], 62_000, &[(minute, 2)]), None);
        // The later of two full windows decides.
        let hour = 3_600_000;
        assert_eq!(
            rate_verdict(&[0, 1_000, 50_000], 55_000, &[(minute, 5), (hour, 3)]),
            Some(hour)
        );
    }
}
