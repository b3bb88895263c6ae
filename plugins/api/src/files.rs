//! Writing output files so that no reader, and no run killed half-way, ever sees part of one:
//! the one way the engine and the plugins write files (an output, a kept value, a chunk).
//!
//! A file is written under a hidden temporary name in its own directory,
//! `.<name>.<pid>-<n>.tmp`, and renamed into place once complete. A killed process leaves only
//! such temporary files behind; [`is_temp_of`] tells them apart, so that the run that resumes
//! it can remove them.
//!
//! Nothing written replaces a file the engine [`protect`]s (the feedback store and its SQLite
//! files, the recipe, the cycles file): an output whose path a template renders onto one of
//! them fails, naming it, and the file stays as it was.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file no output may replace: its path, what it is, and its identity once it exists.
struct Protected {
    path: PathBuf,
    what: String,
}

static PROTECTED: RwLock<Vec<Protected>> = RwLock::new(Vec::new());

/// From now on in this process, no file written through this module may replace the file at
/// `path` (which may not exist yet, as SQLite's `-wal`); `what` names it in the error ("the
/// feedback store"). Files are compared by identity (device and inode), whatever the names.
pub fn protect(path: &Path, what: &str) {
    let mut protected = PROTECTED.write().unwrap_or_else(|p| p.into_inner());
    if !protected.iter().any(|p| p.path == path) {
        protected.push(Protected { path: path.to_path_buf(), what: what.to_string() });
    }
}

/// An error when `path` is a protected file ([`protect`]): for a writer that removes or
/// replaces a file by other means than this module (a stale output removed first).
pub fn refuse_protected(path: &Path) -> Result<(), String> {
    let protected = PROTECTED.read().unwrap_or_else(|p| p.into_inner());
    if protected.is_empty() {
        return Ok(());
    }
    let Ok(target) = std::fs::metadata(path) else { return Ok(()) };
    let same = |other: &std::fs::Metadata| other.dev() == target.dev() && other.ino() == target.ino();
    match protected.iter().find(|p| std::fs::metadata(&p.path).is_ok_and(|m| same(&m))) {
        Some(p) => Err(format!(
            "it is {} {}, which no output may replace (give the output another path)",
            p.what,
            p.path.display()
        )),
        None => Ok(()),
    }
}

/// Moves the finished file `written` to `path` (a rename: both in one directory), unless
/// `path` is a protected file. Errors name both.
pub fn place(written: &Path, path: &Path) -> Result<(), String> {
    refuse_protected(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::fs::rename(written, path)
        .map_err(|e| format!("cannot move the output {} into place at {}: {e}", written.display(), path.display()))
}

/// Writes a file at `path` through `write`, under a hidden temporary name in the same
/// directory that is renamed into place once complete. Creates parent directories. Errors name
/// the file.
///
/// No fsync: the rename guards against failed and killed runs, not against power loss, which
/// would cost a sync per file for nothing a run needs.
///
/// What is at `path` is honoured: a symlink is written through (its target is replaced, not
/// the link), and what is not a regular file (`/dev/null`, `/dev/stdout`, a FIFO, a pipe such
/// as `>(jq .)`) is written into as it is, never replaced by a file.
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), String> {
    let fail = |what: String| format!("writing {}: {what}", path.display());
    refuse_protected(path).map_err(fail)?;
    let resolved;
    let path = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() && !meta.is_dir() => {
            let mut file = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| fail(e.to_string()))?;
            return write(&mut file).map_err(|e| fail(e.to_string()));
        }
        _ => {
            resolved = through_symlinks(path);
            resolved.as_path()
        }
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create directory {}: {e}", dir.display())))?;
    let temp = temp_path(path).ok_or_else(|| fail("the path does not name a file".into()))?;
    let written = File::create_new(&temp).and_then(|mut file| write(&mut file)).and_then(|()| {
        // Again, at the last moment: a protected file may have appeared meanwhile (a `-wal`).
        refuse_protected(path).map_err(io::Error::other)?;
        std::fs::rename(&temp, path)
    });
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        fail(e.to_string())
    })
}

/// Where a write to `path` lands: the file a symlink (or a chain of them) at `path` names, even
/// one that does not exist yet; `path` itself when it is no symlink.
pub fn through_symlinks(path: &Path) -> PathBuf {
    let mut at = path.to_path_buf();
    // A bound on the chain, as the kernel's: a loop is left to the write to report.
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            Ok(target) => at = at.parent().map_or(target.clone(), |dir| dir.join(&target)),
            Err(_) => break,
        }
    }
    at
}

/// [`write_atomically`] of `bytes`.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    write_atomically(path, |file| io::Write::write_all(file, bytes))
}

/// Whether a file can be created in the folder `dir`: a probe file is created there under a
/// name no other writer, thread or process uses (as [`write_atomically`]'s temporary files) and
/// removed. Tells a read-only folder as such before a writer (SQLite) would tell it less clearly.
pub fn probe_folder(dir: &Path) -> io::Result<()> {
    let probe = temp_path(&dir.join("runner-probe")).expect("the probe has a file name");
    File::create_new(&probe)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A fresh temporary name for `path`: hidden, beside it (so the rename is atomic), unique per
/// process and call (so concurrent writers never share one).
fn temp_path(path: &Path) -> Option<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut name = OsString::from(".");
    name.push(path.file_name()?);
    name.push(format!(".{}-{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    Some(path.with_file_name(name))
}

/// A fresh temporary name for `path` that a tool writes (an `exec` command's `{output}`),
/// renamed into place by the caller: hidden, beside it, unique, and ending in `path`'s own file
/// name, so that a tool that goes by the extension (NumPy's `save` adds `.npy` to any other)
/// writes what it would have: `.<pid>-<n>.tmp.<name>`.
pub fn temp_path_keeping_name(path: &Path) -> Option<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut name = OsString::from(format!(".{}-{}.tmp.", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    name.push(path.file_name()?);
    Some(path.with_file_name(name))
}

/// Whether `file_name` is a temporary file [`write_atomically`] or [`temp_path_keeping_name`]
/// made in process `pid`.
pub fn is_temp_of(file_name: &str, pid: u32) -> bool {
    if let Some((owner, rest)) = file_name.strip_prefix('.').and_then(|n| n.split_once('-'))
        && let Some((counter, _)) = rest.split_once(".tmp.")
        && owner.parse() == Ok(pid)
        && !counter.is_empty()
        && counter.bytes().all(|b| b.is_ascii_digit())
    {
        return true;
    }
    let Some(rest) = file_name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else { return false };
    let Some((_, tail)) = rest.rsplit_once('.') else { return false };
    let Some((owner, counter)) = tail.split_once('-') else { return false };
    owner.parse() == Ok(pid) && !counter.is_empty() && counter.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_appears_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.bin");
        write_bytes_atomically(&path, b"abc").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![OsString::from("out.bin")]);
    }

    #[test]
    fn a_failed_write_leaves_neither_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let error = write_atomically(&path, |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert!(error.contains("out.bin") && error.contains("disk full"), "{error}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn temporary_files_are_told_by_their_owner() {
        let temp = temp_path(Path::new("a/prob.T001.npy")).unwrap();
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_of(name, std::process::id()), "{name}");
        assert!(!is_temp_of(name, std::process::id() + 1));
        assert!(!is_temp_of("prob.npy", std::process::id()));
        assert!(!is_temp_of(".prob.npy.12-x.tmp", 12));
        let temp = temp_path_keeping_name(Path::new("a/prob.T001.npy")).unwrap();
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert!(name.ends_with(".tmp.prob.T001.npy") && name.starts_with('.'), "{name}");
        assert!(is_temp_of(name, std::process::id()), "{name}");
        assert!(!is_temp_of(name, std::process::id() + 1));
    }
}
