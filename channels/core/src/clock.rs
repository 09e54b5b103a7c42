//! Wall-clock time as unix seconds or milliseconds: the one place ferroclaw reads it.

fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Unix milliseconds (the store's time format).
pub fn now_ms() -> i64 {
    since_epoch().as_millis() as i64
}

/// Unix seconds (signed webhook timestamps).
pub fn now_secs() -> i64 {
    since_epoch().as_secs() as i64
}
