//! Letting a spilled buffer's pages go once it was read: from the process's mapping and from the
//! page cache (which unmapping alone would leave charged to the process's cgroup).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

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
