//! Shared memory for values that other processes read: a warm interpreter's return value is
//! read into an anonymous in-memory file (`memfd`) that the engine maps, and an interpreter that
//! consumes it maps the same pages (`/proc/PID/fd/N`, privately: a write gives it its own copy
//! of that page) instead of being sent a copy down its pipe. The consumer then holds no second
//! copy of its inputs, and the copy through the pipe (about a millisecond per MiB) is gone.
//!
//! Accounting: a buffer counts as a heap block of the task that made it
//! ([`crate::measure::OffHeapCharge`]) until dropped, so the ledger, the task's peak and the
//! run's figures see it as they see any value; the ledger counts it as resident and may spill
//! it, which writes its bytes to a spill file and drops the buffer. Its pages are charged to the
//! runner's memory cgroup (the runner wrote them), so a consumer's cgroup never counts them; a
//! consumer's `VmHWM` does, and its task reports how much to take out
//! ([`runner_plugin::ServiceIo::mapped`]).
//!
//! Each live buffer holds a file descriptor: the process's open-file limit is raised to its hard
//! limit once, and at most a quarter of it is used for buffers; past that (or when the kernel
//! refuses), [`SharedBuffer::new`] says `None` and the value stays on the heap.

use std::fs::File;
use std::os::fd::FromRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use memmap2::{MmapMut, MmapOptions};
use runner_plugin::{ExternalBytes, SharedBufferMut};

use crate::measure::OffHeapCharge;

/// A buffer being filled ([`SharedBufferMut`]).
pub struct SharedBuffer {
    map: MmapMut,
    held: Held,
}

/// A filled buffer: a value's storage ([`ExternalBytes`]).
#[derive(Debug)]
pub struct SharedBytes {
    map: MmapMut,
    held: Held,
}

/// What a buffer holds besides its mapping: the file, its path for other processes, its charge
/// and its place among the live buffers.
#[derive(Debug)]
struct Held {
    _file: File,
    path: PathBuf,
    _charge: OffHeapCharge,
    _slot: LiveSlot,
}

impl SharedBuffer {
    /// A zeroed buffer of `len` bytes, or `None` (see the module docs).
    pub fn new(len: usize) -> Option<SharedBuffer> {
        if len == 0 {
            return None;
        }
        let slot = LiveSlot::take()?;
        // SAFETY: a constant NUL-terminated name; the flags are valid.
        let fd = unsafe { libc::memfd_create(c"runner-value".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            tracing::debug!("no shared memory for a value: {}", std::io::Error::last_os_error());
            return None;
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).ok()?;
        // Populated: the pages are allocated and mapped in one call, not faulted in one by one
        // as they are filled (a third of a value's crossing time otherwise).
        // SAFETY: the file is this buffer's own; nothing else writes it while it is mapped.
        let map = unsafe { MmapOptions::new().populate().map_mut(&file) }.ok()?;
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        let held = Held { _file: file, path, _charge: OffHeapCharge::new(len as u64), _slot: slot };
        Some(SharedBuffer { map, held })
    }
}

impl SharedBufferMut for SharedBuffer {
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    fn freeze(self: Box<Self>) -> Box<dyn ExternalBytes> {
        let SharedBuffer { map, held } = *self;
        // Still writable underneath, but only ever read through `bytes`.
        Box::new(SharedBytes { map, held })
    }
}

impl ExternalBytes for SharedBytes {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn in_memory(&self) -> bool {
        true
    }

    fn shared_path(&self) -> Option<&Path> {
        Some(&self.held.path)
    }
}

/// One of the live buffers, counted against [`most_live`].
#[derive(Debug)]
struct LiveSlot;

static LIVE: AtomicUsize = AtomicUsize::new(0);

impl LiveSlot {
    fn take() -> Option<LiveSlot> {
        if LIVE.fetch_add(1, Ordering::Relaxed) >= most_live() {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(LiveSlot)
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many buffers may live at once: a quarter of the open-file limit, raised to its hard
/// limit first (spill files, logs, pipes and sockets need the rest).
fn most_live() -> usize {
    static MOST: OnceLock<usize> = OnceLock::new();
    *MOST.get_or_init(|| {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `limit` is a valid out-parameter.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            // SAFETY: as above; raising the soft limit to the hard one is always allowed.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit = raised;
            }
        }
        usize::try_from(limit.rlim_cur / 4).unwrap_or(usize::MAX).min(1 << 20)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_in_memory_and_its_path_opens_to_the_same_bytes() {
        let mut buffer = Box::new(SharedBuffer::new(3 << 20).expect("shared memory"));
        buffer.bytes_mut()[..5].copy_from_slice(b"hello");
        buffer.bytes_mut()[(3 << 20) - 1] = 7;
        let bytes = buffer.freeze();
        assert!(bytes.in_memory());
        assert_eq!(&bytes.bytes()[..5], b"hello");
        let path = bytes.shared_path().expect("a path").to_path_buf();
        // Another open of the path reads the same bytes (what an interpreter maps).
        let read = std::fs::read(&path).expect("the path opens");
        assert_eq!(read.len(), 3 << 20);
        assert_eq!(&read[..5], b"hello");
        assert_eq!(read[(3 << 20) - 1], 7);
    }

    #[test]
    fn an_empty_buffer_is_none() {
        assert!(SharedBuffer::new(0).is_none());
    }
}
