//! The integration-test harness: stand-ins that speak real protocols on 127.0.0.1 and a
//! helper that starts the real `ferroclaw` binary on port 0 with a fresh database.
#![allow(dead_code)]

pub mod discord;
pub mod files;
pub mod hook;
pub mod inproc;
pub mod llm;
pub mod metrics;
pub mod models;
pub mod pg;
pub mod python;
pub mod receiver;
pub mod schema;
pub mod service;
pub mod slack;
pub mod telegram;
pub mod tls;

use std::time::{Duration, Instant};

/// Poll `check` until it returns Some, or panic after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `Some(())` when a GET of `url` answers 200 (for `wait_for`).
pub async fn answers_200(client: &reqwest::Client, url: &str) -> Option<()> {
    client
        .get(url)
        .send()
        .await
        .ok()
        .filter(|r| r.status() == 200)
        .map(|_| ())
}
