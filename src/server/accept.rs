//! Serving the router on a socket, hardened against clients that hold connections open:
//! at most `server.max_connections` at once (more wait in the kernel's backlog, so the
//! process never runs out of file descriptors), a request header must arrive within
//! `server.header_timeout_secs`, and a request body may pause at most that long between
//! pieces. Graceful shutdown: stop accepting, let open requests finish.
//!
//! Knows sockets and HTTP/1; not what the routes do.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Limits on client connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// For the request header, and for each pause in a request body.
    pub read_timeout: Duration,
    /// How long open requests may take to finish once shutdown begins.
    pub drain: Duration,
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let router = router.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.read_timeout,
    ));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout);
    // Every connection task is owned here; shutdown signals them through `graceful`.
    let connections = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let (stream, _peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // EMFILE and friends: wait a little instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open HTTP requests did not finish in time; closing them");
    }
    connections.close();
}

/// Raise the soft limit on open files to the hard limit (a busy server holds many sockets).
pub fn raise_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(err) => tracing::warn!(error = %err, "could not raise the open-file limit"),
    }
}
