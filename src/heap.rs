//! Gives freed heap memory back to the system after a burst. glibc keeps what a burst
//! freed (10,000 concurrent model calls' buffers: hundreds of MB stayed resident after they
//! ended); `malloc_trim` returns its free pages. Looked at every few seconds, from
//! `/proc/self/statm`: memory is trimmed only when it is well above the lowest seen and has
//! stopped growing, so a busy service is not trimmed over and over. With jemalloc (the
//! opt-in allocator, which returns memory itself) and off glibc this does nothing. Knows the
//! allocator; nothing of what the memory held.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often resident memory is looked at.
const EVERY: Duration = Duration::from_secs(5);
/// Resident memory this far above the lowest seen is worth a trim.
const SLACK: u64 = 24 << 20;

/// Resident bytes of this process, if the system says.
pub fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Hand free heap pages back; what was resident before and after.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
#[allow(unsafe_code)] // the project's one unsafe call (see Cargo.toml's lints)
pub fn trim() -> (Option<u64>, Option<u64>) {
    let before = resident();
    // SAFETY: malloc_trim takes no pointer; it only walks glibc's own arenas, which it locks.
    unsafe {
        libc::malloc_trim(0);
    }
    (before, resident())
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc"))))]
pub fn trim() -> (Option<u64>, Option<u64>) {
    (resident(), resident())
}

/// Until `stop`: trim after each burst.
pub async fn run(stop: CancellationToken) {
    let Some(mut floor) = resident() else {
        return;
    };
    let mut last = floor;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        let Some(now) = resident() else { return };
        if now > floor + SLACK && now <= last {
            let (before, after) = trim();
            tracing::debug!(before = ?before, after = ?after, "heap trimmed after a burst");
            last = after.unwrap_or(now);
        } else {
            last = now;
        }
        floor = floor.min(last);
    }
}
