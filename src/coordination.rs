//! Which of several `serve` processes on one database leads (SPEC section 11): the leader
//! runs what a platform allows only once (Telegram long polling, the Discord gateway); every
//! process delivers (under per-conversation leases, see `outbox::delivery`). On PostgreSQL the leader holds a session-level advisory lock on its own
//! connection: when the process dies the server drops the connection and the lock, and a
//! follower (retrying every second) takes over. A leader that loses its connection stops
//! leading at once: the service stops its exclusive receivers and waits for them to end,
//! and this process competes again as a follower (it cannot know whether another process
//! leads meanwhile; a platform's own single-consumer rule and the journal's deduplication
//! cover the seconds in between). SQLite is one process by nature: it always leads.
//!
//! Knows only the database URL; nothing of channels or the engine.

use sqlx::Connection;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// This process's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Another process leads (or none yet, or this one lost its lock); retrying.
    Follower,
    Leader,
}

/// The advisory lock every ferroclaw process of a database competes for.
pub(crate) const LOCK: i64 = 0x6665_7272_6f63_6c77; // "ferroclw"
/// How often a follower retries and a leader checks its connection.
const TICK: Duration = Duration::from_secs(1);
/// A leader whose connection does not answer within this long has lost the lock.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether several processes may share this database (PostgreSQL): only then is there a
/// leader to compete for and followers to tell.
pub fn shared_database(database_url: &str) -> bool {
    database_url.starts_with("postgres")
}

/// Start competing for leadership; the receiver tells this process's role as it changes.
/// The returned future runs until `cancel` (it is the caller's to own).
pub fn start(
    database_url: &str,
    cancel: CancellationToken,
) -> (
    watch::Receiver<Role>,
    futures::future::BoxFuture<'static, ()>,
) {
    if !shared_database(database_url) {
        // One process: it leads until it stops (the sender lives as long as the service).
        let (tx, rx) = watch::channel(Role::Leader);
        return (
            rx,
            Box::pin(async move {
                cancel.cancelled().await;
                drop(tx);
            }),
        );
    }
    let (tx, rx) = watch::channel(Role::Follower);
    let url = database_url.to_string();
    (rx, Box::pin(compete(url, tx, cancel)))
}

async fn compete(url: String, role: watch::Sender<Role>, cancel: CancellationToken) {
    let mut told_follower = false;
    loop {
        let connected = tokio::select! {
            _ = cancel.cancelled() => return,
            c = tokio::time::timeout(CHECK_TIMEOUT, sqlx::PgConnection::connect(&url)) => c,
        };
        let Ok(Ok(mut conn)) = connected else {
            tracing::warn!("leader election: cannot reach the database; retrying");
            if sleep_or_cancel(&cancel).await {
                return;
            }
            continue;
        };
        let leads = loop {
            let got: Result<bool, _> = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(LOCK)
                .fetch_one(&mut conn)
                .await;
            match got {
                Ok(true) => break true,
                Ok(false) => {
                    if !told_follower {
                        tracing::info!(
                            "another process leads: this one follows (no polling, no deliveries) until it leads"
                        );
                        told_follower = true;
                    }
                    if sleep_or_cancel(&cancel).await {
                        return;
                    }
                }
                // The connection broke: connect again.
                Err(_) => break false,
            }
        };
        if !leads {
            continue;
        }
        role.send_replace(Role::Leader);
        tracing::info!("this process leads: it polls exclusive channels and delivers the outbox");
        loop {
            if sleep_or_cancel(&cancel).await {
                // Leaving: closing the connection hands the lock to a follower at once.
                let _ = conn.close().await;
                return;
            }
            let alive =
                tokio::time::timeout(CHECK_TIMEOUT, sqlx::query("SELECT 1").execute(&mut conn))
                    .await;
            if !matches!(alive, Ok(Ok(_))) {
                tracing::error!(
                    "lost the leader lock's database connection; no longer leading, competing again"
                );
                role.send_replace(Role::Follower);
                told_follower = false;
                break;
            }
        }
    }
}

/// Sleep one tick; true when cancelled meanwhile.
async fn sleep_or_cancel(cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(TICK) => false,
    }
}
