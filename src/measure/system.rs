//! Memory as jemalloc and the OS see it: allocated and resident bytes, process RSS and its peak.
//!
//! These complement the tagged counters: they include what the counters cannot see (jemalloc's
//! size-class rounding and cached free pages, memory not from the heap such as mapped spill
//! files), which is what the RSS promise is about.

use std::ffi::c_char;
use std::fs;
use std::ptr;
use std::sync::OnceLock;

#[cfg(test)]
use tikv_jemalloc_ctl::{epoch, stats};

use super::MeasureError;

const STATUS: &str = "/proc/self/status";
const CLEAR_REFS: &str = "/proc/self/clear_refs";
/// `arena.<i>.purge` with jemalloc's `MALLCTL_ARENAS_ALL` (4096): every arena.
const PURGE_ALL: &[u8] = b"arena.4096.purge\0";

/// jemalloc's own statistics, in bytes (what the tests check the counting against).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JemallocStats {
    /// Bytes in blocks handed out (`stats.allocated`), rounded up to size classes.
    pub allocated: u64,
    /// Bytes in pages holding handed-out blocks (`stats.active`).
    pub active: u64,
    /// Bytes jemalloc has resident, including its cached free pages (`stats.resident`).
    pub resident: u64,
}

/// The process's memory as the OS sees it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size now (`VmRSS`).
    pub rss_bytes: u64,
    /// Highest resident set size since start or the last [`reset_peak_rss`] (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// Resident anonymous memory (`RssAnon`): the heap, not mapped files. `None` on kernels
    /// before 4.5.
    pub rss_anon_bytes: Option<u64>,
}

/// The system's page size (4 KiB when it cannot be told). Allocation-free after its first
/// call and during it, so the allocator may ask it.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1))
}

#[cfg(test)]
/// Reads jemalloc's statistics, refreshed first (jemalloc caches them until the epoch advances).
pub fn jemalloc_stats() -> Result<JemallocStats, MeasureError> {
    epoch::advance()?;
    Ok(JemallocStats {
        allocated: stats::allocated::read()? as u64,
        active: stats::active::read()? as u64,
        resident: stats::resident::read()? as u64,
    })
}

/// Returns jemalloc's cached free pages to the OS now, in every arena, instead of when they
/// decay (about 10 s). For tests of RSS, and for when RSS matters more than the next
/// allocation's speed.
pub fn purge_free_pages() -> Result<(), MeasureError> {
    // SAFETY: a NUL-terminated name of a void control: no old or new value to read or write.
    let code = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast::<c_char>(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    };
    if code == 0 {
        Ok(())
    } else {
        Err(MeasureError::JemallocCall { name: "arena.<all>.purge", source: std::io::Error::from_raw_os_error(code) })
    }
}

/// Reads the process's RSS, peak RSS and anonymous RSS from `/proc/self/status` (Linux).
pub fn process_memory() -> Result<ProcessMemory, MeasureError> {
    let text = fs::read_to_string(STATUS).map_err(|source| MeasureError::Os { path: STATUS, source })?;
    parse_status(&text)
}

/// Restarts the kernel's peak RSS (`VmHWM`) from the current RSS (Linux 4.0+).
pub fn reset_peak_rss() -> Result<(), MeasureError> {
    // "5" is the clear_refs command that resets the peak RSS and nothing else.
    fs::write(CLEAR_REFS, "5").map_err(|source| MeasureError::Os { path: CLEAR_REFS, source })
}

/// Parses the memory fields of a `/proc/<pid>/status` text.
pub(super) fn parse_status(text: &str) -> Result<ProcessMemory, MeasureError> {
    let missing = |field| MeasureError::OsField { path: STATUS, field };
    Ok(ProcessMemory {
        rss_bytes: status_field(text, "VmRSS").ok_or_else(|| missing("VmRSS"))?,
        peak_rss_bytes: status_field(text, "VmHWM").ok_or_else(|| missing("VmHWM"))?,
        rss_anon_bytes: status_field(text, "RssAnon"),
    })
}

/// The value in bytes of a `Name:   1234 kB` line.
fn status_field(text: &str, name: &str) -> Option<u64> {
    let value = text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))?;
    let kib = value.trim().strip_suffix("kB")?.trim_end().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}
