//! The file `read_netcdf`'s output shape was read from, kept on its thread for the read that
//! usually follows. A task whose path is rendered per task is asked its own estimate as a
//! worker claims it, which reads the file's header (`ReadNetcdf::output`), and then the same
//! worker thread runs it, which read the header again: building 2,000 small files took 5% longer
//! for it. The run takes the kept file instead when it is still the same file (path, length,
//! modification time, inode); anything else opens it anew. One file a thread, replaced by the
//! next kept, taken once. The header it holds was read before the task's measurement began, so
//! it is not counted in the task's peak (tens of kB for a file of a few variables).

use std::cell::RefCell;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use netcdf_reader::NcFile;

/// What tells one version of a file at a path from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: (u64, u64),
}

impl Stamp {
    pub fn of(meta: &Metadata) -> Stamp {
        Stamp { len: meta.len(), modified: meta.modified().ok(), inode: (meta.dev(), meta.ino()) }
    }
}

thread_local! {
    static KEPT: RefCell<Option<(PathBuf, Stamp, NcFile)>> = const { RefCell::new(None) };
}

/// Keeps `file`, opened from `path` as `stamp` says, for this thread's next [`take`].
pub fn keep(path: &Path, stamp: Stamp, file: NcFile) {
    KEPT.with(|kept| *kept.borrow_mut() = Some((path.to_path_buf(), stamp, file)));
}

/// The file kept on this thread, if it was opened from `path` and the file there is still
/// `stamp`; it is kept no longer either way.
pub fn take(path: &Path, stamp: &Stamp) -> Option<NcFile> {
    KEPT.with(|kept| kept.borrow_mut().take())
        .and_then(|(kept_path, kept_stamp, file)| (kept_path == path && kept_stamp == *stamp).then_some(file))
}
