//! Letting a spilled buffer's pages go once it was read: from the process's mapping and from the
//! page cache (which unmapping alone would leave charged to the process's cgroup).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use runner_plugin::Value;

use super::{lock, os};

/// Live mappings of spilled files by address, so [`release_value_pages`] can tell a mapped
/// spill file from any other external storage and reopen its file. `MappedBuffer` enters its
/// mapping here when it maps a file and removes it when it unmaps.
pub(super) fn mappings() -> &'static Mutex<HashMap<usize, PathBuf>> {
    static MAPPINGS: OnceLock<Mutex<HashMap<usize, PathBuf>>> = OnceLock::new();
    MAPPINGS.get_or_init(Mutex::default)
}

pub(super) fn release(addr: *const u8, len: usize, path: &Path) {
    match File::open(path) {
        Ok(file) => {
            os::drop_mapped(addr, len);
            os::drop_cached(&file, 0, 0);
        }
        // The folder is gone (the run is ending): reclaim through the mapping alone.
        Err(_) => {
            os::page_out(addr, len);
            os::drop_mapped(addr, len);
        }
    }
}

/// The bytes of `value`'s buffer if they are not on the heap (a spilled buffer's are mapped:
/// [`mappings`] tells it from other external storage).
fn external_bytes(value: &Value) -> Option<&[u8]> {
    let storage = match value {
        Value::Array(array) => array.storage(),
        Value::Bytes(storage) => storage,
        _ => return None,
    };
    (!storage.is_resident()).then(|| storage.bytes())
}

/// Spilled inputs a task read back from their files before it ran, and how long that took; of
/// those, what came from disk. A spilled page may be in memory still (read in by a plugin's
/// estimate or by another reader): reading it costs a fault, not a disk read, and counting it
/// would make reads from disk look as fast as memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadBack {
    pub bytes: u64,
    pub wall: Duration,
    /// Of `bytes`, those of pages not in memory when read (`mincore`): read from disk.
    pub from_disk: u64,
    /// Of `wall`, how long reading those took: how fast spills are read back from disk.
    pub disk_wall: Duration,
}

/// Reads the spilled ones among `values` back from their files ([`read_back_value`]), timed.
pub fn read_back<'v>(values: impl IntoIterator<Item = &'v Value>) -> ReadBack {
    let started = Instant::now();
    let mut read = ReadBack::default();
    let mut pages = Vec::new();
    for value in values {
        read_back_value(value, &mut read, &mut pages);
    }
    if read.bytes > 0 {
        read.wall = started.elapsed();
    }
    read
}

/// Reads `value`'s buffer back from its spill file if it is a spilled one — a byte of each page,
/// in order, as a reader faults them in: first the pages not in memory (timed, the disk's part),
/// then the rest — and adds it to `read`; nothing for resident buffers and other values. Its
/// reader then finds it in memory, and the disk's time is what a simulation charges a reader of
/// spilled bytes. `pages` is scratch for the pages' residency.
fn read_back_value(value: &Value, read: &mut ReadBack, pages: &mut Vec<u8>) {
    let Some(bytes) = external_bytes(value) else { return };
    if !lock(mappings()).contains_key(&(bytes.as_ptr() as usize)) {
        return;
    }
    // Where residency cannot be told, every page counts as read from disk.
    let told = os::page_residency(bytes.as_ptr(), bytes.len(), pages).is_ok();
    let in_memory = |at: usize| told && pages[at] & 1 != 0;
    let started = Instant::now();
    let from_disk = touch_pages(bytes, |at| !in_memory(at));
    if from_disk > 0 {
        read.from_disk += from_disk;
        read.disk_wall += started.elapsed();
    }
    touch_pages(bytes, in_memory);
    read.bytes += bytes.len() as u64;
}

/// Reads a byte of each page of `bytes` that `chosen` (by page number) picks; returns their bytes.
fn touch_pages(bytes: &[u8], chosen: impl Fn(usize) -> bool) -> u64 {
    let page = crate::measure::page_size();
    let mut sum = 0u8;
    let mut touched = 0u64;
    for (number, at) in (0..bytes.len()).step_by(page).enumerate() {
        if chosen(number) {
            sum = sum.wrapping_add(bytes[at]);
            touched += (bytes.len() - at).min(page) as u64;
        }
    }
    std::hint::black_box(sum);
    touched
}

/// Releases the pages of `value`'s buffer if it is a spilled (mapped) one, as
/// [`super::MappedBuffer::release_pages`] does, and returns its size; 0 (and nothing done) for resident
/// buffers and other values. For the engine, which holds spilled values as `Arc<Value>` and cannot
/// reach the `MappedBuffer` inside.
pub fn release_value_pages(value: &Value) -> u64 {
    let Some(bytes) = external_bytes(value) else { return 0 };
    let Some(path) = lock(mappings()).get(&(bytes.as_ptr() as usize)).cloned() else { return 0 };
    release(bytes.as_ptr(), bytes.len(), &path);
    bytes.len() as u64
}
