//! The run's spill folder: named for its process, created on the first spill, removed when the
//! run ends (or by the Ctrl-C handler), and the folders of killed runs removed at the next start.

use std::fs::{self, DirBuilder};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use runner_plugin::Storage;

use super::{MappedBuffer, SpillError, lock, os};

/// Name of the folder under the system temp dir used when no `--spill-dir` is given.
pub const DEFAULT_PARENT_NAME: &str = "runner-spill";

/// Name of the owner marker in each run's folder.
pub const OWNER_FILE: &str = "owner";

/// A folder without an owner marker is judged by its name only once it is this old (a live run
/// writes its marker right after creating the folder).
const MARKERLESS_GRACE: Duration = Duration::from_secs(60);

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
        // Whole or not at all: another run's sweep never reads half an owner.
        if let Err(source) = crate::values::write_atomically(&marker, Owner::current().marker().as_bytes()) {
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
            return Ok(MappedBuffer::empty());
        }
        self.ensure_created()?;
        let number = self.inner.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.inner.path.join(format!("{number:06}.spill"));
        let mapped = MappedBuffer::write(path, bytes)?;
        self.inner.spilled_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.inner.spills.fetch_add(1, Ordering::Relaxed);
        Ok(mapped)
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = self.inner.remove_now();
        lock(&ACTIVE).retain(|dir| dir.strong_count() > 0 && !ptr::eq(dir.as_ptr(), Arc::as_ptr(&self.inner)));
    }
}

/// A probe of the spill disk ([`probe_write_speed`]): buffers of a typical spill's size.
const PROBE_BUFFERS: usize = 3;
const PROBE_BYTES: usize = 4 << 20;

/// How fast spills are written now in a spill folder under `spill_dir` (as [`SpillDir::new`]
/// takes it), in bytes a second: a few buffers spilled there as a run spills them (written,
/// synced, mapped), timed, then removed. For a prediction with no recorded spill to go by.
pub fn probe_write_speed(spill_dir: Option<&Path>) -> Result<u64, SpillError> {
    let dir = SpillDir::new(spill_dir);
    // Not zeros, which some filesystems and virtual disks store for nothing.
    let bytes: Vec<u8> = (0..PROBE_BYTES).map(|at| (at % 251) as u8).collect();
    let mut spilled = Vec::with_capacity(PROBE_BUFFERS);
    let started = Instant::now();
    for _ in 0..PROBE_BUFFERS {
        spilled.push(dir.spill_bytes(&bytes)?);
    }
    let wall = started.elapsed();
    drop(spilled);
    dir.remove_now()?;
    Ok((dir.spilled_bytes() as f64 / wall.as_secs_f64().max(1e-9)) as u64)
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

    #[test]
    fn a_probe_of_the_spill_disk_spills_for_real_and_leaves_nothing_behind() {
        let parent = tempfile::tempdir().unwrap();
        let speed = probe_write_speed(Some(parent.path())).unwrap();
        // Written and synced: no disk takes 12 MiB in no time, and none here at a TB a second.
        assert!(speed > 1 << 20 && speed < 1 << 40, "{speed} bytes a second");
        assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0, "the probe's folder was left behind");
        // A folder it may not write in is the spill error a run would meet there.
        let missing = parent.path().join("no").join("such");
        fs::write(parent.path().join("no"), b"a file, not a folder").unwrap();
        assert!(probe_write_speed(Some(&missing)).is_err());
    }
}
