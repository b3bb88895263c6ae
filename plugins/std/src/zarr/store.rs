//! A Zarr filesystem store whose every write is crash-safe: a key is written to a temporary file
//! beside it and renamed into place, so a run killed mid-write leaves the old value or the new
//! one, never a torn chunk. `zarrs`' own `FilesystemStore` writes in place (and syncs each
//! file); it serves the reads, listings and erasures here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zarrs::filesystem::FilesystemStore;
use zarrs::storage::byte_range::ByteRangeIterator;
use zarrs::storage::{
    Bytes, ListableStorageTraits, MaybeBytesIterator, OffsetBytesIterator, ReadableStorageTraits, StorageError,
    StoreKey, StoreKeys, StoreKeysPrefixes, StorePrefix, WritableStorageTraits,
};

/// A directory holding a Zarr hierarchy, written atomically key by key.
#[derive(Debug)]
pub struct AtomicStore {
    root: PathBuf,
    inner: FilesystemStore,
}

impl AtomicStore {
    /// The store rooted at `root` (created if it does not exist).
    pub fn open(root: &Path) -> Result<Arc<AtomicStore>, String> {
        std::fs::create_dir_all(root).map_err(|e| format!("cannot create the store {}: {e}", root.display()))?;
        let inner = FilesystemStore::new(root).map_err(|e| format!("cannot open the store {}: {e}", root.display()))?;
        Ok(Arc::new(AtomicStore { root: root.to_path_buf(), inner }))
    }

    /// The file that holds `key`.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// Writes `bytes` at `key` atomically (metadata documents the plugins write themselves).
    pub fn put(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        runner_plugin::files::write_atomically(&self.path_of(key), |file| std::io::Write::write_all(file, bytes))
    }
}

impl ReadableStorageTraits for AtomicStore {
    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        self.inner.get_partial_many(key, byte_ranges)
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        self.inner.size_key(key)
    }

    fn supports_get_partial(&self) -> bool {
        self.inner.supports_get_partial()
    }
}

impl ListableStorageTraits for AtomicStore {
    fn list(&self) -> Result<StoreKeys, StorageError> {
        self.inner.list()
    }

    fn list_prefix(&self, prefix: &StorePrefix) -> Result<StoreKeys, StorageError> {
        self.inner.list_prefix(prefix)
    }

    fn list_dir(&self, prefix: &StorePrefix) -> Result<StoreKeysPrefixes, StorageError> {
        self.inner.list_dir(prefix)
    }

    fn size_prefix(&self, prefix: &StorePrefix) -> Result<u64, StorageError> {
        self.inner.size_prefix(prefix)
    }
}

impl WritableStorageTraits for AtomicStore {
    fn set(&self, key: &StoreKey, value: Bytes) -> Result<(), StorageError> {
        self.put(key.as_str(), &value).map_err(StorageError::Other)
    }

    /// Partial writes would modify a file in place; the plugins never need them (no sharding).
    fn set_partial_many(&self, key: &StoreKey, _offset_values: OffsetBytesIterator) -> Result<(), StorageError> {
        Err(StorageError::Unsupported(format!("partial write of {key}: chunks are written whole")))
    }

    fn erase(&self, key: &StoreKey) -> Result<(), StorageError> {
        self.inner.erase(key)
    }

    fn erase_prefix(&self, prefix: &StorePrefix) -> Result<(), StorageError> {
        self.inner.erase_prefix(prefix)
    }

    fn supports_set_partial(&self) -> bool {
        false
    }
}
