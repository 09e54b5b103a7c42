//! Gives memory back to the system: freed heap after a burst, and the code pages start-up
//! touched once it is over.
//!
//! glibc keeps what a burst freed (10,000 concurrent model calls' buffers: hundreds of MB
//! stayed resident after they ended); `malloc_trim` returns its free pages. Looked at every
//! few seconds, from `/proc/self/statm`: memory is trimmed only when it is well above the
//! lowest seen and has stopped growing, so a busy service is not trimmed over and over. With
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
//! the allocator and the process's mappings; nothing of what the memory held.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often resident memory is looked at.
const EVERY: Duration = Duration::from_secs(5);
/// Resident memory this far above the lowest seen is worth a trim.
const SLACK: u64 = 24 << 20;

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

/// Until `stop`: let start-up's code pages go once it is over (and again whenever many are
/// mapped back); trim the heap after each burst.
pub async fn run(stop: CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(START_UP) => {}
    }
    let released = unmap_clean_file_pages();
    let mut file_floor = resident_file().unwrap_or(0);
    tracing::debug!(released, file_floor, "start-up's code pages let go");
    let Some(mut floor) = resident() else {
        return;
    };
    let mut last = floor;
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
        // This test binary's own code is unmapped while it runs and maps back on use.
        let before = resident_file().unwrap();
        assert!(unmap_clean_file_pages() > 0);
        let after = resident_file().unwrap();
        assert!(
            after < before,
            "file pages resident before {before} bytes, after {after} bytes"
        );
        let again: u64 = (1..=1000u64).map(|n| n * n).sum();
        assert_eq!(again, 333_833_500);
        assert!(format!("{again}").len() == 9);
    }
}
