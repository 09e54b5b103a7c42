//! Gives memory back to the system: freed heap after a burst, and the code pages start-up
//! touched once it is over.
//!
//! glibc keeps what a burst freed (10,000 concurrent model calls' buffers: hundreds of MB
//! stayed resident after they ended); `malloc_trim` returns its free pages. Looked at every
//! few seconds, from `/proc/self/statm`: memory is trimmed when it is above the lowest seen
//! and has stopped growing, and again at each look while trims hand memory back (what the
//! burst left is freed over the next seconds: idle connections closed, caches let go), so
//! memory returns to near idle within 30 s; trims that find nothing stop until memory
//! grows again, so a service settled above idle is not walked over and over. With
//! jemalloc (the opt-in allocator, which returns memory itself) and off glibc the trim does
//! nothing.
//!
//! Start-up (configuration, migrations, building every channel and the router) runs code
//! from all over the binary, and the kernel maps 64 KB around each page touched: 16 MB of a
//! 20 MB idle process were the binary's and the libraries' code and read-only data,
//! most never needed again. Once start-up is over, and again whenever more than 4 MB of
//! them are mapped back (a burst, late start-up work; looked at every few seconds), those
//! clean file pages are unmapped ([`unmap_clean_file_pages`]): they stay in the page
//! cache, and a page used again is mapped again at its first touch (a minor fault). Knows
//! the allocator and the process's mappings; nothing of what the memory held (what to let go
//! before a trim, a store's caches, is handed in as a [`Release`]).

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The environment's side of [`without_thread_caches`] (unused with jemalloc or off glibc).
#[cfg_attr(
    not(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc"))),
    allow(dead_code)
)]
mod tunables {
    /// The variable glibc reads its allocator's tunables from, once, when a process starts.
    pub(super) const TUNABLES: &str = "GLIBC_TUNABLES";
    /// The tunable that turns glibc's per-thread caches of freed chunks off.
    const THREAD_CACHE: &str = "glibc.malloc.tcache_count";
    /// The tunable that fixes how much free memory at the top of a heap is kept rather than
    /// handed back. glibc's default (128 KB) rises to twice the largest block it has freed
    /// from its own mapping (up to 64 MB), and `malloc_trim` trims only the main heap's top,
    /// not a thread arena's: after a burst each worker's and SQLite writer's arena kept
    /// 0.3–1.4 MB free yet resident at its top. Set, it stays at the default, and a free that
    /// leaves a larger top hands the rest back.
    const TOP_KEPT: &str = "glibc.malloc.trim_threshold";
    /// What [`TOP_KEPT`] is set to: glibc's own default, made fixed.
    const TOP_KEPT_BYTES: u32 = 128 << 10;
    /// Set across the re-exec: what [`TUNABLES`] held before it (empty: unset), put back so
    /// the programs the service starts see the operator's environment.
    pub(super) const TUNABLES_BEFORE: &str = "FERROCLAW_GLIBC_TUNABLES_BEFORE";

    /// What [`super::without_thread_caches`] does, decided from the environment alone.
    #[derive(Debug, PartialEq)]
    pub(super) enum Tuning {
        /// Start again with `GLIBC_TUNABLES` set to `value`, remembering `before`.
        Reexec { value: String, before: String },
        /// This is the re-executed process: put the operator's `GLIBC_TUNABLES` back (`None`:
        /// it was unset).
        Restore(Option<String>),
        /// The operator chose the caches' size (or the variable is not text): leave it.
        Leave,
    }

    /// From `GLIBC_TUNABLES` (`Err`: not text) and the re-exec's marker.
    pub(super) fn tuning(tunables: Option<Result<String, ()>>, before: Option<String>) -> Tuning {
        if let Some(before) = before {
            return Tuning::Restore((!before.is_empty()).then_some(before));
        }
        let operators = match tunables {
            Some(Err(())) => return Tuning::Leave,
            Some(Ok(value)) if value.contains(THREAD_CACHE) => return Tuning::Leave,
            Some(Ok(value)) => value,
            None => String::new(),
        };
        let mut value = operators.clone();
        if !value.is_empty() {
            value.push(':');
        }
        value.push_str(&format!("{THREAD_CACHE}=0"));
        if !operators.contains(TOP_KEPT) {
            value.push_str(&format!(":{TOP_KEPT}={TOP_KEPT_BYTES}"));
        }
        Tuning::Reexec {
            value,
            before: operators,
        }
    }
}

/// For the long-running service: start the program again, once, with glibc's per-thread
/// caches of freed chunks turned off. Each thread keeps up to 7 freed chunks of each of 64
/// sizes for itself, counted as in use, so `malloc_trim` cannot hand back the pages they
/// sit on: after a burst those few hundred chunks per thread, scattered over the burst's
/// heap, kept about 7 MB resident (10,000 calls in flight: 23 MB 30 s after with the
/// caches, 15 MB without; turns/s and CPU per turn alike, README, Benchmarks). glibc reads
/// the setting only when a process starts, hence the re-exec (same process id, name,
/// arguments and environment; it costs start-up a second program load, 2–3 ms). The same
/// start fixes the free memory a heap keeps at its top at glibc's default (`trim_threshold`,
/// see `tunables`). An operator's own `GLIBC_TUNABLES` naming `tcache_count` is kept as it
/// is (one naming `trim_threshold` keeps that); the re-executed process puts the
/// variable back as it was, so the programs it starts (MCP servers, hooks, the sandbox's
/// shell) run with the operator's environment. Call first thing in `main`, before any
/// thread starts; on failure (no `/proc`) the program simply goes on.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
#[allow(unsafe_code)] // see `trim`
pub fn without_thread_caches() {
    use tunables::{TUNABLES, TUNABLES_BEFORE, Tuning, tuning};
    let tunables = std::env::var_os(TUNABLES).map(|v| v.into_string().map_err(|_| ()));
    let before = std::env::var_os(TUNABLES_BEFORE).map(|v| v.to_string_lossy().into_owned());
    match tuning(tunables, before) {
        Tuning::Reexec { value, before } => {
            // The program's own path, not `/proc/self/exe`: the process keeps its name
            // (`ps`, `top`, `pgrep ferroclaw` show it, not `exe`). A binary replaced on disk
            // since it started reads as `… (deleted)` and the exec fails.
            if let Ok(program) = std::env::current_exe() {
                start_again(&program, &value, &before);
            }
        }
        Tuning::Restore(before) => {
            // SAFETY: called first thing in `main`, before any thread exists (the contract
            // above), so no other thread can read the environment while it changes.
            unsafe {
                match before {
                    Some(before) => std::env::set_var(TUNABLES, before),
                    None => std::env::remove_var(TUNABLES),
                }
                std::env::remove_var(TUNABLES_BEFORE);
            }
        }
        Tuning::Leave => {}
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc"))))]
pub fn without_thread_caches() {}

/// Replace this process with `program`, same arguments, `GLIBC_TUNABLES` set to `value` and
/// the operator's (`before`) remembered. Returns only if the exec failed, with the process
/// as it was: the program goes on with the caches on.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
#[allow(unsafe_code)] // see `trim`
fn start_again(program: &std::path::Path, value: &str, before: &str) {
    use std::os::unix::process::CommandExt;
    use tunables::{TUNABLES, TUNABLES_BEFORE};
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    let _ = std::process::Command::new(program)
        .arg0(arg0)
        .args(args)
        .env(TUNABLES, value)
        .env(TUNABLES_BEFORE, before)
        .exec();
    // std reset SIGPIPE to its default (death) for the program it meant to start; put back
    // what std gives every Rust program, so a write to a closed pipe or socket is an error,
    // not the end of the service.
    // SAFETY: `signal` with a constant disposition and no pointer.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// How often resident memory is looked at.
const EVERY: Duration = Duration::from_secs(5);
/// Resident memory this far above the lowest seen is worth a trim.
const SLACK: u64 = 2 << 20;
/// A trim that hands back less than this found nothing worth the walk.
const WORTHWHILE: u64 = 256 << 10;
/// Fruitless trims in a row before trimming waits for memory to grow again.
const FRUITLESS: u32 = 3;

/// Resident bytes of this process, if the system says.
pub fn resident() -> Option<u64> {
    statm_bytes(1)
}

/// Resident bytes of this process that are file pages (code, read-only data, mapped files).
fn resident_file() -> Option<u64> {
    statm_bytes(2)
}

/// Field `index` of `/proc/self/statm` (a count of pages), in bytes.
fn statm_bytes(index: usize) -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(index)?.parse().ok()?;
    Some(pages * 4096)
}

/// Hand free heap pages back; what was resident before and after.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
#[allow(unsafe_code)] // the project's unsafe calls are in this file (see Cargo.toml's lints)
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

/// Unmap the clean file-backed pages of the program and its libraries: private read-only
/// mappings of a file holding no page of their own (code, read-only data; not the relocated
/// tables, which hold written pages). Returns the bytes of the mappings let go.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // see `trim`
pub fn unmap_clean_file_pages() -> u64 {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for mapping in clean_file_mappings(&smaps) {
        // SAFETY: the range is one whole mapping the kernel listed as a private, read-only
        // mapping of a file with no anonymous (written) page: MADV_DONTNEED only drops its
        // page-table entries, and the next access maps the same bytes of the same file
        // again. No memory the program wrote is in it, and no pointer is dereferenced.
        let done = unsafe {
            libc::madvise(
                mapping.start as *mut libc::c_void,
                mapping.end - mapping.start,
                libc::MADV_DONTNEED,
            )
        };
        if done == 0 {
            released += (mapping.end - mapping.start) as u64;
        }
    }
    released
}

#[cfg(not(target_os = "linux"))]
pub fn unmap_clean_file_pages() -> u64 {
    0
}

/// One mapping's address range.
#[derive(Debug, PartialEq)]
struct Mapping {
    start: usize,
    end: usize,
}

/// From `/proc/self/smaps`: the private read-only (`r--p`, `r-xp`) mappings of a named file
/// whose pages are all the file's: no anonymous page (one the process wrote, copied on
/// write) and none swapped. Dirty pages are not a reason: a file written a moment ago (a
/// binary just built or copied) has dirty pages in the page cache, which smaps counts as
/// `Private_Dirty` in every mapping of it, though the process wrote nothing.
fn clean_file_mappings(smaps: &str) -> Vec<Mapping> {
    let mut found = Vec::new();
    let mut current: Option<(Mapping, bool)> = None;
    let mut close = |current: &mut Option<(Mapping, bool)>| {
        if let Some((mapping, true)) = current.take() {
            found.push(mapping);
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            close(&mut current);
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            let eligible = matches!(perms, "r--p" | "r-xp") && path.starts_with('/');
            current = Some((Mapping { start, end }, eligible));
            continue;
        }
        let written = matches!(first, "Anonymous:" | "Swap:" | "AnonHugePages:")
            && fields.next().is_some_and(|kb| kb != "0");
        if written && let Some((_, eligible)) = current.as_mut() {
            *eligible = false;
        }
    }
    close(&mut current);
    found
}

/// How long start-up is given before its pages are let go: ready takes about 15 ms.
const START_UP: Duration = Duration::from_millis(500);
/// File pages mapped again this far above what the last unmap left are let go again (what
/// start-up's last steps or a burst touched); the idle service maps about 1.5 MB back.
const FILE_SLACK: u64 = 4 << 20;
/// Once a burst is over (a trim is due), file pages this far above that are let go too.
const QUIET_FILE_SLACK: u64 = 1 << 20;

/// Shrink a table a burst grew once it is mostly empty (fewer entries than an eighth of
/// its capacity, which is above `floor`), to twice its entries: kept at its burst size it
/// holds pages of the burst's heap that no trim can hand back. The hysteresis keeps a
/// steady service from rehashing on every removal.
pub fn shrink_sparse<K: Eq + std::hash::Hash, V>(
    map: &mut std::collections::HashMap<K, V>,
    floor: usize,
) {
    if map.capacity() > floor && map.len() * 8 < map.capacity() {
        let keep = map.len() * 2;
        map.shrink_to(keep);
    }
}

/// What to let go before a trim: caches a burst filled (the store's), as a future.
pub type Release = Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Until `stop`: let start-up's code pages go once it is over (and again whenever many are
/// mapped back); after each burst, `release` caches, then trim the heap.
pub async fn run(stop: CancellationToken, release: Release) {
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(START_UP) => {}
    }
    let released = unmap_clean_file_pages();
    let mut file_floor = resident_file().unwrap_or(0);
    tracing::debug!(released, file_floor, "start-up's code pages let go");
    let Some(floor) = resident() else {
        return;
    };
    let mut trims = Trims::new(floor);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        if resident_file().is_some_and(|file| file > file_floor + FILE_SLACK) {
            unmap_clean_file_pages();
            file_floor = resident_file().unwrap_or(0);
        }
        let Some(now) = resident() else { return };
        if trims.due(now) {
            // Caches let go first, so the trim hands back the pages they held.
            release().await;
            // The code a burst ran is let go with the heap it freed.
            if resident_file().is_some_and(|file| file > file_floor + QUIET_FILE_SLACK) {
                unmap_clean_file_pages();
                file_floor = file_floor.min(resident_file().unwrap_or(0));
            }
            let (before, after) = trim();
            tracing::debug!(before = ?before, after = ?after, "heap trimmed after a burst");
            trims.trimmed(now, after.unwrap_or(now));
        }
    }
}

/// When to trim: memory above the lowest seen that has stopped growing (a burst over, or
/// what it left freed since: connections idle-closed, caches let go). Each look after a
/// burst trims again while trims hand memory back, so what is freed later is returned
/// too; after [`FRUITLESS`] trims that found nothing, trimming waits for memory to grow.
#[derive(Debug)]
struct Trims {
    /// The lowest resident memory seen (idle).
    floor: u64,
    /// Resident memory at the last look (after its trim, if one ran).
    last: u64,
    /// Trims in a row that handed back less than [`WORTHWHILE`].
    fruitless: u32,
    /// What the last fruitless run of trims left: memory must grow past it to trim again.
    settled: Option<u64>,
}

impl Trims {
    fn new(resident: u64) -> Self {
        Trims {
            floor: resident,
            last: resident,
            fruitless: 0,
            settled: None,
        }
    }

    /// Whether to trim now that resident memory is `now`.
    fn due(&mut self, now: u64) -> bool {
        let growing = now > self.last;
        self.last = now;
        self.floor = self.floor.min(now);
        if self.settled.is_some_and(|settled| now <= settled + SLACK) {
            return false;
        }
        self.settled = None;
        !growing && now > self.floor + SLACK
    }

    /// A trim at `before` left `after`.
    fn trimmed(&mut self, before: u64, after: u64) {
        self.last = after;
        self.floor = self.floor.min(after);
        if before.saturating_sub(after) < WORTHWHILE {
            self.fruitless += 1;
            if self.fruitless >= FRUITLESS {
                self.fruitless = 0;
                self.settled = Some(after);
            }
        } else {
            self.fruitless = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55954b08b000-55954b91b000 r--p 00000000 fe:00 815533 /usr/bin/ferroclaw
Rss:                1644 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
55954b91b000-55954d0da000 r-xp 0088f000 fe:00 815533 /usr/bin/ferroclaw
Rss:               12716 kB
Private_Dirty:       512 kB
Anonymous:             0 kB
55954d0da000-55954d2b1000 r--p 0204d000 fe:00 815533 /usr/bin/ferroclaw
Private_Dirty:      1884 kB
Anonymous:          1884 kB
55954d2b1000-55954d2bc000 rw-p 02223000 fe:00 815533 /usr/bin/ferroclaw
Anonymous:            44 kB
7fc93c713000-7fc93c71b000 rw-s 00000000 fe:00 10010687 /tmp/db.sqlite-shm
Anonymous:             0 kB
7fc93c800000-7fc93c900000 r--p 00000000 00:00 0
Anonymous:             0 kB
7fc93ca00000-7fc93cb00000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7fc93cc00000-7fc93cd00000 r--p 00000000 fe:00 42 /usr/lib/libc.so.6
Rss:                1576 kB
Anonymous:             0 kB
Swap:                  4 kB
";

    const MB: u64 = 1 << 20;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    #[allow(unsafe_code)] // reads SIGPIPE's disposition back
    fn a_failed_restart_leaves_the_process_as_it_was() {
        start_again(
            std::path::Path::new("/nonexistent/ferroclaw"),
            "glibc.malloc.tcache_count=0",
            "",
        );
        // SAFETY: `sigaction` with a null new action only reads the current one into a
        // zeroed struct owned here.
        let ignored = unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut current);
            current.sa_sigaction == libc::SIG_IGN
        };
        assert!(ignored, "SIGPIPE must stay ignored after a failed exec");
    }

    #[test]
    fn the_allocator_is_tuned_once_and_an_operators_choice_is_kept() {
        use super::tunables::{Tuning, tuning};
        let reexec = |value: &str, before: &str| Tuning::Reexec {
            value: value.into(),
            before: before.into(),
        };
        let ours = "glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=131072";
        assert_eq!(tuning(None, None), reexec(ours, ""));
        assert_eq!(tuning(Some(Ok(String::new())), None), reexec(ours, ""));
        assert_eq!(
            tuning(Some(Ok("glibc.malloc.arena_max=2".into())), None),
            reexec(
                &format!("glibc.malloc.arena_max=2:{ours}"),
                "glibc.malloc.arena_max=2"
            )
        );
        // An operator's own trim threshold is kept; the caches still go.
        assert_eq!(
            tuning(Some(Ok("glibc.malloc.trim_threshold=1".into())), None),
            reexec(
                "glibc.malloc.trim_threshold=1:glibc.malloc.tcache_count=0",
                "glibc.malloc.trim_threshold=1"
            )
        );
        assert_eq!(
            tuning(Some(Ok("glibc.malloc.tcache_count=7".into())), None),
            Tuning::Leave
        );
        assert_eq!(tuning(Some(Err(())), None), Tuning::Leave);
        // The re-executed process: never again, and the variable goes back as it was.
        assert_eq!(
            tuning(
                Some(Ok("glibc.malloc.tcache_count=0".into())),
                Some(String::new())
            ),
            Tuning::Restore(None)
        );
        assert_eq!(
            tuning(
                Some(Ok(
                    "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0".into()
                )),
                Some("glibc.malloc.arena_max=2".into())
            ),
            Tuning::Restore(Some("glibc.malloc.arena_max=2".into()))
        );
    }

    #[test]
    fn trims_follow_a_burst_down_and_stop_when_they_find_nothing() {
        let mut trims = Trims::new(7 * MB);
        assert!(!trims.due(7 * MB), "idle: nothing to trim");
        assert!(!trims.due(200 * MB), "growing: a burst is under way");
        assert!(!trims.due(250 * MB), "still growing");
        assert!(trims.due(240 * MB), "stopped growing, well above idle");
        trims.trimmed(240 * MB, 60 * MB);
        // Connections close later, freeing more: each look trims again while trims pay.
        assert!(trims.due(60 * MB));
        trims.trimmed(60 * MB, 20 * MB);
        assert!(trims.due(20 * MB));
        trims.trimmed(20 * MB, 12 * MB);
        let mut rss = 12 * MB;
        for _ in 0..FRUITLESS {
            assert!(trims.due(rss), "a trim may still find something");
            trims.trimmed(rss, rss - 100 * 1024);
            rss -= 100 * 1024;
        }
        let settled = rss;
        assert!(!trims.due(settled), "three fruitless trims: settled");
        assert!(
            !trims.due(settled + MB),
            "a little growth is not a new burst"
        );
        assert!(!trims.due(settled + 30 * MB), "growing again");
        assert!(
            trims.due(settled + 29 * MB),
            "the next burst is over: trimmed again"
        );
    }

    #[test]
    fn memory_near_idle_is_never_trimmed() {
        let mut trims = Trims::new(7 * MB);
        for rss in [8 * MB, 8 * MB, 7 * MB + MB / 2, 9 * MB] {
            assert!(!trims.due(rss), "{rss} is within {SLACK} of idle");
        }
        assert!(!trims.due(9 * MB + MB / 2), "growing");
        assert!(trims.due(9 * MB + MB / 4), "above idle and quiet");
    }

    #[test]
    fn only_clean_private_read_only_file_mappings_are_let_go() {
        let found = clean_file_mappings(SMAPS);
        assert_eq!(
            found,
            vec![
                Mapping {
                    start: 0x55954b08b000,
                    end: 0x55954b91b000
                },
                Mapping {
                    start: 0x55954b91b000,
                    end: 0x55954d0da000
                },
            ],
            "the relocated tables, writable, shared, anonymous, [vdso] and swapped mappings stay; \
             dirty page cache (a binary just written) does not keep code"
        );
    }

    #[test]
    fn letting_code_pages_go_keeps_the_program_running() {
        // This test binary's own code is unmapped while it runs and maps back on use. Tests
        // running beside this one map code back meanwhile: one of a few tries must show less.
        let tries: Vec<(u64, u64)> = (0..5)
            .map(|_| {
                let before = resident_file().unwrap();
                assert!(unmap_clean_file_pages() > 0);
                (before, resident_file().unwrap())
            })
            .collect();
        assert!(
            tries.iter().any(|(before, after)| after < before),
            "file pages resident (before, after) each try: {tries:?}"
        );
        let again: u64 = (1..=1000u64).map(|n| n * n).sum();
        assert_eq!(again, 333_833_500);
        assert!(format!("{again}").len() == 9);
    }
}
