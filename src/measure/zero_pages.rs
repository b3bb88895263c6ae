//! Pages of a freed zeroed block that were read but never written, given back to the kernel.
//!
//! `calloc` hands out fresh pages without touching them. A plugin that fills only part of a
//! zeroed output (`nbhood` writes its wet box; a dry cycle's box is small) leaves the rest
//! untouched, and a consumer reading those cells (`mean` over members) gets the kernel's shared
//! zero page mapped read-only there. RSS does not count it, which keeps such outputs cheap. The
//! cost comes later: jemalloc keeps the freed block for reuse, and the next allocation writing
//! to it takes a copy-on-write fault per page, each flushing the other cores' TLBs by
//! interrupt (2,283 of them in one dry `precip.yaml` cycle, 13% of its CPU samples, and the
//! stalls behind its runs' spread). Writing the background everywhere instead makes those
//! pages resident (`operational.yaml`'s peak RSS rose from 365 to 524 MiB).
//!
//! So when a large zeroed block is freed, its zero-page-mapped pages are found in
//! `/proc/self/pagemap` (present, not exclusively mapped, not file-backed) and unmapped with
//! `MADV_DONTNEED`, one call and one flush per run of them. Pages the task wrote stay as they are
//! for jemalloc to reuse; untouched pages are not mapped at all. The block is being freed, so
//! what its pages hold no longer matters: nothing here can change what a program reads.

use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering::Relaxed;

use super::system::page_size;

/// Zeroed blocks from this size up are scanned when freed: below it, the pagemap read costs
/// more than the faults it could save.
pub(super) const SCAN_FROM: usize = 1 << 20;

/// `/proc/self/pagemap`'s descriptor; [`UNOPENED`] before the first scan, [`UNAVAILABLE`] when
/// it cannot be read (no procfs): then nothing is released.
static PAGEMAP: AtomicI32 = AtomicI32::new(UNOPENED);
const UNOPENED: i32 = -1;
const UNAVAILABLE: i32 = -2;

// A pagemap entry's bits (the kernel's Documentation/admin-guide/mm/pagemap.rst).
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE_OR_SHARED: u64 = 1 << 61;
const EXCLUSIVE: u64 = 1 << 56;

/// Entries read per `pread`: 4 KiB on the stack, 2 MiB of 4 KiB pages.
const ENTRIES: usize = 512;

/// Whether `entry` maps the shared zero page: present, yet neither this process's own page nor a
/// file's. (A page shared with a child between `fork` and `exec` looks the same; unmapping it
/// from a freed block is as harmless.)
fn is_zero_page(entry: u64) -> bool {
    entry & PRESENT != 0 && entry & (SWAPPED | FILE_OR_SHARED | EXCLUSIVE) == 0
}

/// The pagemap's descriptor, opened once without allocating (this runs inside the allocator).
fn pagemap() -> Option<i32> {
    let fd = match PAGEMAP.load(Relaxed) {
        UNOPENED => {
            // SAFETY: a NUL-terminated literal path; the descriptor is kept for the process's life.
            let fd = unsafe { libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            let fd = if fd < 0 { UNAVAILABLE } else { fd };
            match PAGEMAP.compare_exchange(UNOPENED, fd, Relaxed, Relaxed) {
                Ok(_) => fd,
                Err(first) => {
                    // Another thread opened it first: keep one descriptor.
                    if fd >= 0 {
                        // SAFETY: `fd` is ours and nobody else saw it.
                        unsafe { libc::close(fd) };
                    }
                    first
                }
            }
        }
        fd => fd,
    };
    (fd >= 0).then_some(fd)
}

/// Unmaps the zero-page-mapped pages wholly inside `start .. start + len`.
///
/// # Safety
/// The range is a block being freed (or memory whose contents no longer matter): its pages may
/// read as zeros afterwards.
pub(super) unsafe fn release(start: *mut u8, len: usize) {
    let page = page_size();
    let first = (start as usize).next_multiple_of(page);
    let end = (start as usize + len) / page * page;
    if end <= first {
        return;
    }
    let Some(fd) = pagemap() else { return };
    let mut entries = [0u64; ENTRIES];
    let mut run: Option<usize> = None;
    let mut at = first;
    while at < end {
        let count = ((end - at) / page).min(ENTRIES);
        let bytes = count * size_of::<u64>();
        let offset = (at / page * size_of::<u64>()) as libc::off_t;
        // SAFETY: `entries` has room for `ENTRIES` ≥ `count` entries.
        let read = unsafe { libc::pread(fd, entries.as_mut_ptr().cast(), bytes, offset) };
        if read != bytes as isize {
            break;
        }
        for (i, &entry) in entries[..count].iter().enumerate() {
            let address = at + i * page;
            if is_zero_page(entry) {
                run.get_or_insert(address);
            } else if let Some(from) = run.take() {
                // SAFETY: the caller gives this range up.
                unsafe { dont_need(from, address) };
            }
        }
        at += count * page;
    }
    if let Some(from) = run {
        // SAFETY: as above.
        unsafe { dont_need(from, at) };
    }
}

/// # Safety
/// As [`release`]'s: `from .. to` is page-aligned memory whose contents no longer matter.
unsafe fn dont_need(from: usize, to: usize) {
    // SAFETY: a page-aligned range of this process's own mapping; the caller gives it up.
    unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Residency of each page of `region` as the kernel's `mincore` reports it: an independent
    /// view from the pagemap the module reads.
    pub(in crate::measure) fn resident(region: &[u8]) -> Vec<bool> {
        let page = page_size();
        let mut flags = vec![0u8; region.len().div_ceil(page)];
        // SAFETY: `region` is page-aligned (checked by the caller) and mapped.
        let done = unsafe { libc::mincore(region.as_ptr() as *mut libc::c_void, region.len(), flags.as_mut_ptr()) };
        assert_eq!(done, 0, "mincore: {}", std::io::Error::last_os_error());
        flags.iter().map(|f| f & 1 == 1).collect()
    }

    #[test]
    fn pages_read_and_never_written_are_unmapped_and_written_ones_kept() {
        let page = page_size();
        let pages = 64;
        // A fresh anonymous mapping: untouched pages, as `calloc` hands out a fresh extent.
        // SAFETY: a private anonymous mapping of our own, unmapped at the end.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        // SAFETY: the mapping is `pages * page` bytes, ours alone.
        let region = unsafe { std::slice::from_raw_parts_mut(base, pages * page) };
        // Pages 0..16 read (the zero page), 16..24 written, 24..40 read, 40..64 untouched.
        let mut sum = 0u64;
        for p in (0..16).chain(24..40) {
            sum += u64::from(unsafe { std::ptr::read_volatile(base.add(p * page)) });
        }
        for p in 16..24 {
            region[p * page] = 7;
        }
        assert_eq!(sum, 0);
        let before = resident(region);
        assert!(before[..40].iter().all(|&r| r), "read and written pages are mapped: {before:?}");
        assert!(before[40..].iter().all(|&r| !r), "untouched pages are not: {before:?}");

        // SAFETY: the region's contents no longer matter (the written bytes are checked below
        // to have stayed).
        unsafe { release(base, pages * page) };

        let after = resident(region);
        let expected: Vec<bool> = (0..pages).map(|p| (16..24).contains(&p)).collect();
        assert_eq!(after, expected, "only the written pages stay mapped");
        assert!((16..24).all(|p| region[p * page] == 7), "what was written is kept");
        assert!(region.iter().enumerate().all(|(i, &b)| b == 0 || (16..24).contains(&(i / page))));
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base.cast(), pages * page) };
    }
}
