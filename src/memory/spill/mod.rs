//! Spilling buffers to disk: a resident array or bytes value is written to a file in the run's
//! spill folder and mapped back read-only, so its consumers read it through the same view while
//! its heap copy is freed (SPEC, Execution promises → Spill).
//!
//! - [`SpillDir`] is the run's folder, `<parent>/<pid>-<start>-<random>`, created on the first
//!   spill (a run that never spills touches no disk) and removed when the `SpillDir` is dropped,
//!   by [`SpillDir::remove_now`], or by [`remove_active_dirs`] from a Ctrl-C handler. An `owner`
//!   file in it names the process (pid and start time), so [`SpillDir::remove_stale`] can remove
//!   the folders of killed runs at the next start without touching a live run's folder.
//! - [`SpillDir::spill`] writes a buffer with large sequential writes, syncs it, maps it and lets
//!   the page cache drop its pages: a spilled buffer holds no memory until it is read.
//! - [`MappedBuffer`] is the mapped file ([`runner_plugin::ExternalBytes`]); dropping it deletes
//!   the file. [`MappedBuffer::release_pages`] (or [`release_value_pages`] through a [`Value`])
//!   lets the pages go again after a consumer has read them, so a gather over more spilled inputs
//!   than the budget holds streams through them; `done_reading` (through
//!   [`runner_plugin::Array::done_reading`]) lets a part go while a reader streams through it.
//!   [`read_back`] reads a spilled value in before its reader runs, where the reader's
//!   reservation holds it, so that how fast spills are read back is measured.
//! - [`swap_in`] puts a written spill file in place of a value's heap storage (the scheduler does
//!   that under its lock, and frees the heap copy after); [`spill_value`] writes and swaps at once.
//!
//! Files: `dir` (the folders), `mapped` (write, sync, map), `pages` (page release), `os` (the
//! kernel advice they use); this file has the errors and the value-level operations.
//!
//! Pages are *released*, not just unmapped: unmapping leaves them in the page cache (charged to
//! the process's cgroup), so after writing the file is synced and `posix_fadvise(DONTNEED)` drops
//! them; after reading, `madvise(DONTNEED)` drops the mapping's pages and `posix_fadvise` the cached
//! ones. Disk trouble (an unwritable folder, a full disk) is a [`SpillError`]; the partly written
//! file is removed and the caller keeps its in-memory buffer.

mod dir;
mod mapped;
mod os;
mod pages;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use runner_plugin::{Storage, Value};

pub use dir::{SpillDir, probe_write_speed, process_start_time, remove_active_dirs};
pub use mapped::MappedBuffer;
pub use pages::{ReadBack, read_back, release_value_pages};

/// What can go wrong when spilling. Every case names the path and, where there is one, the OS
/// error; the buffer being spilled is left untouched.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error("cannot create the spill folder {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot write the spill file {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot map the spill file {}: {source}", path.display())]
    Map { path: PathBuf, source: io::Error },
    #[error("cannot list the spill folder {}: {source}", path.display())]
    List { path: PathBuf, source: io::Error },
    #[error("cannot remove the spill folder {}: {source}", path.display())]
    Remove { path: PathBuf, source: io::Error },
    /// The folder was removed ([`SpillDir::remove_now`]): the run is ending, nothing more spills.
    #[error("the spill folder {} was removed: the run is ending", path.display())]
    Closed { path: PathBuf },
}

impl SpillError {
    /// The file or folder concerned.
    pub fn path(&self) -> &Path {
        match self {
            SpillError::CreateDir { path, .. }
            | SpillError::Write { path, .. }
            | SpillError::Map { path, .. }
            | SpillError::List { path, .. }
            | SpillError::Remove { path, .. }
            | SpillError::Closed { path } => path,
        }
    }

    /// The OS error, if there was one.
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            SpillError::CreateDir { source, .. }
            | SpillError::Write { source, .. }
            | SpillError::Map { source, .. }
            | SpillError::List { source, .. }
            | SpillError::Remove { source, .. } => Some(source),
            SpillError::Closed { .. } => None,
        }
    }

    /// True when the disk (or quota) is full.
    pub fn is_disk_full(&self) -> bool {
        self.os_error()
            .and_then(io::Error::raw_os_error)
            .is_some_and(|code| code == libc::ENOSPC || code == libc::EDQUOT)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Puts `mapped` (a spill file of `value`'s bytes) in place of `value`'s heap storage and
/// returns the heap storage, for the caller to free (outside any lock). A value that is not an
/// array or bytes gets nothing: `mapped` comes back.
pub fn swap_in(value: &mut Value, mapped: MappedBuffer) -> Result<Storage, MappedBuffer> {
    match value {
        Value::Array(array) => Ok(array.replace_storage(Storage::External(Box::new(mapped)))),
        Value::Bytes(bytes) => Ok(std::mem::replace(bytes, Storage::External(Box::new(mapped)))),
        _ => Err(mapped),
    }
}

/// Spills `value`'s buffer if it is a resident array or bytes value: writes it to `dir`, swaps its
/// heap storage for the mapped file, frees the heap copy and returns the bytes moved. 0, with the
/// value untouched, for other values, empty buffers and buffers already spilled. On error the
/// value keeps its in-memory buffer.
pub fn spill_value(dir: &SpillDir, value: &mut Value) -> Result<u64, SpillError> {
    let storage = match value {
        Value::Array(array) if array.storage().is_resident() && array.nbytes() > 0 => array.storage(),
        Value::Bytes(storage) if storage.is_resident() && !storage.bytes().is_empty() => &*storage,
        _ => return Ok(0),
    };
    let moved = storage.bytes().len() as u64;
    let mapped = dir.spill(storage)?;
    if let Ok(heap) = swap_in(value, mapped) {
        drop(heap);
    }
    // jemalloc keeps freed pages for reuse for a while; the point of a spill is to give them
    // back now.
    let _ = crate::measure::purge_free_pages();
    Ok(moved)
}
