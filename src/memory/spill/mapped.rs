//! A spilled buffer: written to its file in large chunks with bounded dirty pages, synced, mapped
//! back read-only, and deleted when dropped.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr;

use memmap2::{Mmap, MmapOptions};
use runner_plugin::ExternalBytes;

use super::pages::{mappings, release};
use super::{SpillError, lock, os};
use crate::measure::page_size;

/// Bytes written before the kernel is asked to start writing them back: the page cache then
/// holds at most about two chunks of dirty data while a large buffer is spilled.
const WRITE_CHUNK: usize = 32 << 20;

enum Step {
    Write,
    Map,
}

/// Writes `bytes` to the new, empty `file` and maps it. Writes go in chunks; once a chunk is
/// written the kernel starts writing it back, and the chunk before it is waited for and dropped
/// from the page cache, so dirty pages stay bounded instead of growing to the buffer's size.
fn write_and_map(file: &File, bytes: &[u8]) -> Result<Mmap, (Step, io::Error)> {
    let write = |source| (Step::Write, source);
    let mut offset = 0u64;
    let mut previous: Option<(u64, u64)> = None;
    for chunk in bytes.chunks(WRITE_CHUNK) {
        let mut out = file;
        out.write_all(chunk).map_err(write)?;
        let len = chunk.len() as u64;
        os::start_writeback(file, offset, len);
        if let Some((at, n)) = previous {
            os::finish_writeback(file, at, n);
            os::drop_cached(file, at, n);
        }
        previous = Some((offset, len));
        offset += len;
    }
    // Write errors met during writeback are reported here, whatever the calls above returned.
    file.sync_all().map_err(write)?;
    let size = file.metadata().map_err(write)?.len();
    if size != bytes.len() as u64 {
        let message = format!("wrote {} bytes but the file holds {size}", bytes.len());
        return Err(write(io::Error::new(io::ErrorKind::WriteZero, message)));
    }
    // SAFETY: the file is ours, new, in a folder only we may write (0700), and nothing writes it
    // after this point, so the mapped bytes do not change under the reader.
    let map = unsafe { MmapOptions::new().len(bytes.len()).map(file) }.map_err(|source| (Step::Map, source))?;
    os::drop_cached(file, 0, 0);
    Ok(map)
}

/// A spilled buffer: a spill file mapped read-only. Its bytes are page-aligned. Dropping it
/// unmaps and deletes the file.
pub struct MappedBuffer {
    /// `None` for an empty buffer, which needs no file.
    map: Option<Mmap>,
    path: Option<PathBuf>,
}

impl MappedBuffer {
    /// The spill file (`None` for an empty buffer).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lets the buffer's pages go after it was read: drops them from this process's mapping
    /// (`madvise(MADV_DONTNEED)`; the next read faults them back in from the file) and from the
    /// page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`). Safe while other threads read it.
    pub fn release_pages(&self) {
        if let (Some(map), Some(path)) = (&self.map, &self.path) {
            release(map.as_ptr(), map.len(), path);
        }
    }

    /// Bytes of the buffer in memory now (in the page cache, mapped or not), from `mincore`.
    pub fn resident_bytes(&self) -> io::Result<u64> {
        match &self.map {
            Some(map) => {
                let mut pages = Vec::new();
                os::page_residency(map.as_ptr(), map.len(), &mut pages)?;
                Ok(pages.iter().filter(|&&page| page & 1 != 0).count() as u64 * crate::measure::page_size() as u64)
            }
            None => Ok(0),
        }
    }
}

impl ExternalBytes for MappedBuffer {
    /// Drops the mapping's pages over `range` (widened to whole pages): a reader streaming through
    /// a spilled buffer then holds only what it is working on.
    fn done_reading(&self, range: std::ops::Range<usize>) {
        let Some(map) = &self.map else { return };
        let page = page_size();
        let start = range.start / page * page;
        let end = range.end.div_ceil(page).saturating_mul(page).min(map.len());
        if start < end {
            // The mapping starts on a page boundary, so `start` offsets keep the alignment.
            os::drop_mapped(map[start..].as_ptr(), end - start);
        }
    }

    /// The spill file holds the bytes from offset 0: a warm interpreter maps it too, and reads
    /// the value through the page cache (reclaimable, as the runner's own mapping is) rather
    /// than being sent a copy of it.
    fn shared_path(&self) -> Option<&Path> {
        self.map.as_ref().and(self.path.as_deref())
    }

    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(map) => map,
            // An empty slice aligned for every element type, so empty arrays still have views.
            // SAFETY: a dangling, non-null pointer aligned to 8 is valid for a slice of length 0.
            None => unsafe { std::slice::from_raw_parts(ptr::NonNull::<u64>::dangling().as_ptr().cast::<u8>(), 0) },
        }
    }
}

impl fmt::Debug for MappedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedBuffer").field("path", &self.path).field("len", &self.len()).finish()
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        if let Some(map) = &self.map {
            lock(mappings()).remove(&(map.as_ptr() as usize));
        }
        if let Some(path) = &self.path {
            // Gone already when the folder was removed; the mapping stays valid until unmapped.
            let _ = fs::remove_file(path);
        }
        // The map is unmapped when the field drops, after this.
    }
}

impl MappedBuffer {
    /// A buffer of no bytes, which needs no file.
    pub(super) fn empty() -> MappedBuffer {
        MappedBuffer { map: None, path: None }
    }

    /// Writes `bytes` to the new file `path`, syncs it, maps it and drops its pages from the
    /// page cache; on error the partly written file is removed.
    pub(super) fn write(path: PathBuf, bytes: &[u8]) -> Result<MappedBuffer, SpillError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| SpillError::Write { path: path.clone(), source })?;
        let map = write_and_map(&file, bytes).map_err(|(error, source)| {
            let _ = fs::remove_file(&path);
            match error {
                Step::Write => SpillError::Write { path: path.clone(), source },
                Step::Map => SpillError::Map { path: path.clone(), source },
            }
        })?;
        drop(file);
        lock(mappings()).insert(map.as_ptr() as usize, path.clone());
        Ok(MappedBuffer { map: Some(map), path: Some(path) })
    }
}
