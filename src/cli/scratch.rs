//! This process's scratch folder in the system temp dir (`runner-<pid>-<nanos>/`): made private
//! (0700) with an `owner` marker holding the process identity, removed when the command ends or
//! is interrupted, and, since a `kill -9` leaves it behind, swept by the next runner that starts:
//! every such folder of this user whose owner is certainly gone is removed.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::process_identity::ProcessIdentity;

/// The folder name's prefix in the temp dir.
const PREFIX: &str = "runner-";
/// The marker naming the folder's owner.
const OWNER: &str = "owner";

static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();

/// This process's scratch folder (made on first use, after sweeping what dead runners left);
/// `None` when it cannot be made (the runs then make theirs as they go).
fn root() -> Option<&'static Path> {
    ROOT.get_or_init(|| {
        let temp = std::env::temp_dir();
        sweep(&temp);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let root = temp.join(format!("{PREFIX}{}-{nanos:x}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&root).ok()?;
        // Whole or not at all: a sweep by another runner never reads half an owner.
        crate::values::write_atomically(&root.join(OWNER), ProcessIdentity::current().marker().as_bytes()).ok()?;
        super::interrupt::remove_on_interrupt(root.clone());
        Some(root)
    })
    .as_deref()
}

/// A new folder for one run's scratch files, inside this process's private folder.
pub fn run_dir() -> PathBuf {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match root() {
        Some(root) => root.join(format!("run-{n}")),
        None => std::env::temp_dir().join(format!("{PREFIX}{}-run-{n}", std::process::id())),
    }
}

/// Removes this process's folder (at the end of the command).
pub fn remove() {
    if let Some(Some(root)) = ROOT.get() {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// Removes the scratch folders in `temp` of this user whose owner is certainly gone. A folder
/// without a readable marker (made by an older runner, or killed before writing it) is judged
/// by the pid in its name alone, which keeps it whenever that pid is alive.
pub fn sweep(temp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else { return 0 };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else { continue };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_dir() || meta.uid() != uid || pid == std::process::id() {
            continue;
        }
        let owner = std::fs::read_to_string(path.join(OWNER))
            .ok()
            .and_then(|text| ProcessIdentity::parse_marker(&text))
            .filter(|owner| owner.pid == pid)
            .unwrap_or(ProcessIdentity { pid, start_ticks: None, boot_id: None, pid_ns: None, host: None });
        if owner.is_gone() && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The pid in a scratch folder's name `runner-<pid>-<hex>` (`None` for any other name).
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix(PREFIX)?.split_once('-')?;
    let hex = rest.strip_prefix("run-").unwrap_or(rest);
    (!hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(())?;
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_give_their_pid() {
        assert_eq!(owner_pid("runner-123-1f3a"), Some(123));
        assert_eq!(owner_pid("runner-123-run-0"), Some(123));
        assert_eq!(owner_pid("runner-spill"), None);
        assert_eq!(owner_pid("runner-123-x.db"), None);
        assert_eq!(owner_pid("other-123-1f"), None);
    }

    #[test]
    fn folders_of_dead_owners_are_swept_and_live_ones_kept() {
        let temp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = ProcessIdentity::current();
        let dead_dir = temp.path().join(format!("runner-{dead}-ab"));
        let live_dir = temp.path().join(format!("runner-{}-cd", std::process::id()));
        let recycled_dir = temp.path().join(format!("runner-{}-ef", 1));
        for dir in [&dead_dir, &live_dir, &recycled_dir] {
            std::fs::create_dir(dir).unwrap();
        }
        std::fs::write(dead_dir.join(OWNER), ProcessIdentity { pid: dead, ..me.clone() }.marker()).unwrap();
        // Pid 1 is alive, but this marker's start time is not its: a recycled pid.
        let recycled = ProcessIdentity { pid: 1, start_ticks: Some(u64::MAX), ..me.clone() };
        std::fs::write(recycled_dir.join(OWNER), recycled.marker()).unwrap();
        assert_eq!(sweep(temp.path()), 2);
        assert!(!dead_dir.exists() && !recycled_dir.exists());
        assert!(live_dir.exists(), "this process's own folder is kept");
    }
}
