//! Writing output files so that no reader, and no run killed half-way, ever sees part of one:
//! the one way the engine and the plugins write files (an output, a kept value, a chunk).
//!
//! A file is written under a hidden temporary name in its own directory,
//! `.<name>.<pid>-<n>.tmp`, and renamed into place once complete. A killed process leaves only
//! such temporary files behind; [`is_temp_of`] tells them apart, so that the run that resumes
//! it can remove them.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes a file at `path` through `write`, under a hidden temporary name in the same
/// directory that is renamed into place once complete. Creates parent directories. Errors name
/// the file.
///
/// No fsync: the rename guards against failed and killed runs, not against power loss, which
/// would cost a sync per file for nothing a run needs.
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), String> {
    let fail = |what: String| format!("writing {}: {what}", path.display());
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create directory {}: {e}", dir.display())))?;
    let temp = temp_path(path).ok_or_else(|| fail("the path does not name a file".into()))?;
    let written =
        File::create_new(&temp).and_then(|mut file| write(&mut file)).and_then(|()| std::fs::rename(&temp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        fail(e.to_string())
    })
}

/// [`write_atomically`] of `bytes`.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    write_atomically(path, |file| io::Write::write_all(file, bytes))
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
