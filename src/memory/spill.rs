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
//! - [`swap_in`] puts a written spill file in place of a value's heap storage (the scheduler does
//!   that under its lock, and frees the heap copy after); [`spill_value`] writes and swaps at once.
//!
//! Pages are *released*, not just unmapped: unmapping leaves them in the page cache (charged to
//! the process's cgroup), so after writing the file is synced and `posix_fadvise(DONTNEED)` drops
//! them; after reading, `madvise(DONTNEED)` drops the mapping's pages and `posix_fadvise` the cached
//! ones. Disk trouble (an unwritable folder, a full disk) is a [`SpillError`]; the partly written
//! file is removed and the caller keeps its in-memory buffer.

use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime};
use std::{fmt, ptr};

use memmap2::{Mmap, MmapOptions};
use runner_plugin::{ExternalBytes, Storage, Value};

/// Name of the folder under the system temp dir used when no `--spill-dir` is given.
pub const DEFAULT_PARENT_NAME: &str = "runner-spill";

/// Name of the owner marker in each run's folder.
pub const OWNER_FILE: &str = "owner";

/// Bytes written before the kernel is asked to start writing them back: the page cache then
/// holds at most about two chunks of dirty data while a large buffer is spilled.
const WRITE_CHUNK: usize = 32 << 20;

/// A folder without an owner marker is judged by its name only once it is this old (a live run
/// writes its marker right after creating the folder).
const MARKERLESS_GRACE: Duration = Duration::from_secs(60);

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

/// Which process a folder belongs to: the process identity the store and the budget registry
/// use too. A folder's marker file holds it; its name holds the pid and start time.
use crate::process_identity::ProcessIdentity as Owner;
pub use crate::process_identity::process_start_time;

/// `<pid>-<start>-<hex>`: the folder names this module makes (a start of 0: unknown).
fn parse_folder_name(name: &str) -> Option<Owner> {
    let mut parts = name.split('-');
    let pid = parts.next()?;
    let start = parts.next()?;
    let random = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        || !digits(pid)
        || !digits(start)
        || random.is_empty()
        || !random.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let start: u64 = start.parse().ok()?;
    let mut owner = Owner::from_pid_and_start(pid.parse().ok()?, start);
    owner.start_ticks = (start != 0).then_some(start);
    Some(owner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every live `SpillDir`'s folder, for [`remove_active_dirs`].
static ACTIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing spilled yet: the folder does not exist.
    Pending,
    Created,
    /// Removed: the run is ending.
    Closed,
}

#[derive(Debug)]
struct Inner {
    parent: PathBuf,
    /// The parent is the shared default under the temp dir (created world-writable and sticky).
    shared_parent: bool,
    path: PathBuf,
    state: Mutex<State>,
    next_file: AtomicU64,
    spilled_bytes: AtomicU64,
    spills: AtomicU64,
}

impl Inner {
    /// Closes the folder and removes it; true if it existed.
    fn remove_now(&self) -> Result<bool, SpillError> {
        let mut state = lock(&self.state);
        let was = std::mem::replace(&mut *state, State::Closed);
        if was != State::Created {
            return Ok(false);
        }
        // A spill that passed its check just before the close may still add a file while the
        // folder is being emptied; trying again catches it.
        let mut last = None;
        for _ in 0..5 {
            match fs::remove_dir_all(&self.path) {
                Ok(()) => return Ok(true),
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(true),
                Err(error) => last = Some(error),
            }
        }
        Err(SpillError::Remove { path: self.path.clone(), source: last.expect("an error after failed attempts") })
    }
}

/// The run's spill folder: `<parent>/<pid>-<start time>-<random>`, created on the first spill,
/// removed when dropped. Counts what was spilled, for the summary.
#[derive(Debug)]
pub struct SpillDir {
    inner: Arc<Inner>,
}

impl SpillDir {
    /// The default parent: `<system temp dir>/runner-spill`.
    pub fn default_parent() -> PathBuf {
        std::env::temp_dir().join(DEFAULT_PARENT_NAME)
    }

    /// The spill folder for this run under `spill_dir` (the `--spill-dir` option), or under
    /// [`SpillDir::default_parent`] when `None`. Touches no disk: the folder is created on the
    /// first spill.
    pub fn new(spill_dir: Option<&Path>) -> SpillDir {
        let (parent, shared_parent) = match spill_dir {
            Some(dir) => (dir.to_path_buf(), false),
            None => (Self::default_parent(), true),
        };
        let owner = Owner::current();
        let path = parent.join(format!("{}-{}-{:016x}", owner.pid, owner.start_ticks.unwrap_or(0), random_u64()));
        SpillDir {
            inner: Arc::new(Inner {
                parent,
                shared_parent,
                path,
                state: Mutex::new(State::Pending),
                next_file: AtomicU64::new(0),
                spilled_bytes: AtomicU64::new(0),
                spills: AtomicU64::new(0),
            }),
        }
    }

    /// The run's folder (which exists only once something was spilled).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The folder holding the run's folder.
    pub fn parent(&self) -> &Path {
        &self.inner.parent
    }

    /// True once the folder exists (something was spilled and it was not removed since).
    pub fn is_created(&self) -> bool {
        *lock(&self.inner.state) == State::Created
    }

    /// True when the folder is (or would be, judging by its nearest existing ancestor) on a
    /// filesystem held in memory (tmpfs): spilling there frees no memory, so the CLI should warn
    /// and suggest `--spill-dir`.
    pub fn is_on_tmpfs(&self) -> bool {
        self.inner.path.ancestors().find(|p| p.exists()).is_some_and(os::is_tmpfs)
    }

    /// Bytes spilled so far (each spill counted once).
    pub fn spilled_bytes(&self) -> u64 {
        self.inner.spilled_bytes.load(Ordering::Relaxed)
    }

    /// Number of buffers spilled so far.
    pub fn spill_count(&self) -> u64 {
        self.inner.spills.load(Ordering::Relaxed)
    }

    /// Removes the run's folder and its files now; spills after this fail with
    /// [`SpillError::Closed`]. Buffers already spilled stay readable (their files are unlinked
    /// but stay mapped). Dropping the `SpillDir` does the same.
    pub fn remove_now(&self) -> Result<(), SpillError> {
        self.inner.remove_now().map(drop)
    }

    /// Removes the folders under `parent` left by runs that are gone: the owner process no
    /// longer exists (or is a zombie), its pid now belongs to a process with another start time,
    /// or the folder is from an earlier boot. Only folders named like this module names them are
    /// considered; a live run's folder, or one whose owner cannot be checked (another pid
    /// namespace), is never removed. Returns the folders removed; a missing `parent` is no error.
    /// Call at start, before spilling.
    pub fn remove_stale(parent: &Path) -> Result<Vec<PathBuf>, SpillError> {
        let entries = match fs::read_dir(parent) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(SpillError::List { path: parent.to_path_buf(), source }),
        };
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let name = entry.file_name();
            let Some(from_name) = name.to_str().and_then(parse_folder_name) else { continue };
            if !kind.is_dir() {
                continue;
            }
            let path = entry.path();
            let owner = match fs::read_to_string(path.join(OWNER_FILE)).ok().and_then(|t| Owner::parse_marker(&t)) {
                Some(owner) => owner,
                None => {
                    // Being created right now, or its run was killed before writing the marker.
                    let age = entry.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
                    if age.is_none_or(|age| age < MARKERLESS_GRACE) {
                        continue;
                    }
                    from_name
                }
            };
            if owner.is_gone() {
                match fs::remove_dir_all(&path) {
                    Ok(()) => removed.push(path),
                    // Another starting run removed it first, or it is not ours to remove.
                    Err(_) => continue,
                }
            }
        }
        Ok(removed)
    }

    /// Creates the folder and its owner marker if this is the first spill.
    fn ensure_created(&self) -> Result<(), SpillError> {
        let inner = &self.inner;
        let mut state = lock(&inner.state);
        match *state {
            State::Created => return Ok(()),
            State::Closed => return Err(SpillError::Closed { path: inner.path.clone() }),
            State::Pending => {}
        }
        fn create_error(path: &Path) -> impl FnOnce(io::Error) -> SpillError + '_ {
            move |source| SpillError::CreateDir { path: path.to_path_buf(), source }
        }
        if inner.shared_parent {
            create_shared_parent(&inner.parent).map_err(create_error(&inner.parent))?;
        } else {
            fs::create_dir_all(&inner.parent).map_err(create_error(&inner.parent))?;
        }
        DirBuilder::new().mode(0o700).create(&inner.path).map_err(create_error(&inner.path))?;
        let marker = inner.path.join(OWNER_FILE);
        if let Err(source) = fs::write(&marker, Owner::current().marker()) {
            let _ = fs::remove_dir_all(&inner.path);
            return Err(SpillError::CreateDir { path: marker, source });
        }
        *state = State::Created;
        let mut active = lock(&ACTIVE);
        active.retain(|dir| dir.strong_count() > 0);
        active.push(Arc::downgrade(inner));
        Ok(())
    }

    /// Writes `storage`'s bytes to a new file in the folder and maps it back read-only; see
    /// [`SpillDir::spill_bytes`].
    pub fn spill(&self, storage: &Storage) -> Result<MappedBuffer, SpillError> {
        self.spill_bytes(storage.bytes())
    }

    /// Writes `bytes` to a new file in the folder (large sequential writes), syncs it, maps it
    /// read-only (page-aligned, so every element type can be viewed) and drops its pages from
    /// the page cache. Empty input needs no file. On error the partly written file is removed.
    pub fn spill_bytes(&self, bytes: &[u8]) -> Result<MappedBuffer, SpillError> {
        if bytes.is_empty() {
            return Ok(MappedBuffer { map: None, path: None });
        }
        self.ensure_created()?;
        let number = self.inner.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.inner.path.join(format!("{number:06}.spill"));
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
        self.inner.spilled_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.inner.spills.fetch_add(1, Ordering::Relaxed);
        Ok(MappedBuffer { map: Some(map), path: Some(path) })
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = self.inner.remove_now();
        lock(&ACTIVE).retain(|dir| dir.strong_count() > 0 && !ptr::eq(dir.as_ptr(), Arc::as_ptr(&self.inner)));
    }
}

/// Removes the folder of every `SpillDir` alive in this process, as [`SpillDir::remove_now`]
/// does, and returns how many were removed. For the CLI's Ctrl-C handler, which has no handle
/// on the run's `SpillDir`. Call it from an ordinary thread (as `ctrlc`-style handlers run), not
/// from inside an async signal handler: it locks and allocates.
pub fn remove_active_dirs() -> usize {
    let dirs: Vec<Arc<Inner>> = lock(&ACTIVE).iter().filter_map(Weak::upgrade).collect();
    dirs.iter().filter(|dir| matches!(dir.remove_now(), Ok(true))).count()
}

/// The spill dir given by the user is created with the usual permissions; the shared default
/// under the temp dir is made world-writable and sticky (like `/tmp`), so runs of other users can
/// make their own folders in it but not remove each other's.
fn create_shared_parent(parent: &Path) -> io::Result<()> {
    if parent.is_dir() {
        return Ok(());
    }
    if let Some(grandparent) = parent.parent() {
        fs::create_dir_all(grandparent)?;
    }
    match DirBuilder::new().mode(0o1777).create(parent) {
        // The umask took bits off; put them back.
        Ok(()) => fs::set_permissions(parent, fs::Permissions::from_mode(0o1777)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && parent.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

/// A random number for folder names (std's randomly keyed hasher over the time and a counter).
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::hash::RandomState::new().build_hasher();
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

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

/// Live mappings of spilled files by address, so [`release_value_pages`] can tell a mapped
/// spill file from any other external storage and reopen its file.
fn mappings() -> &'static Mutex<HashMap<usize, PathBuf>> {
    static MAPPINGS: OnceLock<Mutex<HashMap<usize, PathBuf>>> = OnceLock::new();
    MAPPINGS.get_or_init(Mutex::default)
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
            Some(map) => os::resident_bytes(map.as_ptr(), map.len()),
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

/// The system's page size (4 KiB when it cannot be told).
fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1))
}

fn release(addr: *const u8, len: usize, path: &Path) {
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
/// [`MappedBuffer::release_pages`] does, and returns its size; 0 (and nothing done) for resident
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

/// The OS calls. All are advice: when one fails the data is still right, only memory stays in use
/// longer, so their errors are ignored (write errors surface at `fsync`).
#[cfg(target_os = "linux")]
mod os {
    use std::ffi::CString;
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// Whether `path` is on a tmpfs (false when that cannot be told).
    pub fn is_tmpfs(path: &Path) -> bool {
        let Ok(name) = CString::new(path.as_os_str().as_bytes()) else { return false };
        // SAFETY: `statfs` is plain old data for the call to fill in.
        let mut info: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a valid buffer to write.
        unsafe { libc::statfs(name.as_ptr(), &mut info) == 0 && info.f_type == libc::TMPFS_MAGIC }
    }

    /// Starts writing back a range without waiting.
    pub fn start_writeback(file: &File, offset: u64, len: u64) {
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE) };
    }

    /// Waits until a range is written back.
    pub fn finish_writeback(file: &File, offset: u64, len: u64) {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    }

    /// Drops a range's clean, unmapped pages from the page cache (`len` 0: to the end).
    pub fn drop_cached(file: &File, offset: u64, len: u64) {
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset as i64, len as i64, libc::POSIX_FADV_DONTNEED) };
    }

    /// Unmaps a read-only file mapping's pages from this process; they fault back in from the file.
    pub fn drop_mapped(addr: *const u8, len: usize) {
        // SAFETY: `addr..addr+len` is a live read-only shared file mapping (page-aligned start);
        // MADV_DONTNEED on it loses no data, later reads fault the pages back in from the file.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    }

    /// Asks the kernel to reclaim a file mapping's pages (Linux 5.4+; ignored before).
    pub fn page_out(addr: *const u8, len: usize) {
        // SAFETY: as in `drop_mapped`; MADV_PAGEOUT only reclaims, clean file pages are re-read.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
    }

    pub fn resident_bytes(addr: *const u8, len: usize) -> io::Result<u64> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: `addr` is the page-aligned start of a live mapping of `len` bytes and `vec` has
        // one byte per page of it.
        if unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&v| v & 1 != 0).count() as u64 * page as u64)
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub fn is_tmpfs(_: &Path) -> bool {
        false
    }
    pub fn start_writeback(_: &File, _: u64, _: u64) {}
    pub fn finish_writeback(_: &File, _: u64, _: u64) {}
    pub fn drop_cached(_: &File, _: u64, _: u64) {}
    pub fn drop_mapped(addr: *const u8, len: usize) {
        // SAFETY: as on Linux: a live read-only shared file mapping.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    }
    pub fn page_out(_: *const u8, _: usize) {}
    pub fn resident_bytes(_: *const u8, _: usize) -> io::Result<u64> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "mincore is only used on Linux"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names() {
        assert_eq!(parse_folder_name("12-34-00ff"), Some(Owner::from_pid_and_start(12, 34)));
        assert_eq!(parse_folder_name("12-0-00ff").map(|o| (o.pid, o.start_ticks)), Some((12, None)));
        for other in ["12-34", "12-34-zz", "a-34-ff", "12-34-ff-1", "notes", "-1-ff"] {
            assert_eq!(parse_folder_name(other), None, "{other}");
        }
    }
}
