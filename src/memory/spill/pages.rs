//! Letting a spilled buffer's pages go once it was read: from the process's mapping and from the
//! page cache (which unmapping alone would leave charged to the process's cgroup).

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use runner_plugin::Value;

use super::mapped::mappings;
use super::{lock, os};

/// The system's page size (4 KiB when it cannot be told).
pub(super) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1))
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

/// Releases the pages of `value`'s buffer if it is a spilled (mapped) one, as
/// [`super::MappedBuffer::release_pages`] does, and returns its size; 0 (and nothing done) for resident
/// buffers and other values. For the engine, which holds spilled values as `Arc<Value>` and cannot
/// reach the `MappedBuffer` inside.
pub fn release_value_pages(value: &Value) -> u64 {
    let storage = match value {
        Value::Array(array) => array.storage(),
        Value::Bytes(storage) => storage,
        _ => return 0,
    };
    if storage.is_resident() {
        return 0;
    }
    let bytes = storage.bytes();
    let Some(path) = lock(mappings()).get(&(bytes.as_ptr() as usize)).cloned() else { return 0 };
    release(bytes.as_ptr(), bytes.len(), &path);
    bytes.len() as u64
}
