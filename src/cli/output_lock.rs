//! One writer per output: a live run holds a lock on each output root it writes — a Zarr store
//! or any path an output arg names in full, or the fixed folder before the first dim reference
//! of a templated path (`out/2026-12-01T00Z/` of `out/{cycle}/prob_{lead}.npy`) — and a second
//! run that would write one is refused, naming who holds it.
//!
//! A lock is a file beside its root (`out/.sst.zarr.runner-lock`, never inside a store that is
//! replaced as a whole) holding the holder's [`ProcessIdentity`] marker, and an exclusive
//! `flock` on it for as long as the run lives. The kernel lets go of a killed holder's `flock`,
//! so its lock is taken over by the next run, whose marker then replaces the dead one.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use runner_plugin::ArgKind;
use serde_json::Value as Json;

use super::UsageError;
use crate::plan::Compiled;
use crate::process_identity::ProcessIdentity;
use crate::recipe::template::Segment;
use crate::recipe::{ArgTemplate, StepArgs};

/// The suffix of lock files.
const LOCK_SUFFIX: &str = ".runner-lock";
/// How often a lock whose file was replaced while it was being taken is tried again.
const ATTEMPTS: usize = 8;

/// The locks a run holds; released (their files removed) when dropped.
#[derive(Debug, Default)]
pub struct OutputLocks {
    held: Vec<(PathBuf, File)>,
}

impl OutputLocks {
    /// Takes the lock of every output root of `compiled`, or none: the first one another live
    /// process holds is a usage error naming it.
    pub fn acquire(compiled: &Compiled) -> Result<OutputLocks, UsageError> {
        let mut locks = OutputLocks::default();
        for root in output_roots(compiled) {
            locks.take(&root)?;
        }
        Ok(locks)
    }

    fn take(&mut self, root: &Path) -> Result<(), UsageError> {
        let path = lock_path(root);
        if self.held.iter().any(|(held, _)| *held == path) {
            return Ok(());
        }
        let failed = |what: &str, error: std::io::Error| {
            UsageError(format!("cannot lock the outputs under {}: {what} {}: {error}", root.display(), path.display()))
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| failed("creating the folder of", e))?;
        }
        for _ in 0..ATTEMPTS {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| failed("opening", e))?;
            // SAFETY: flock on a descriptor this function owns; LOCK_NB never blocks.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let error = std::io::Error::last_os_error();
                if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(failed("locking", error));
                }
                let mut marker = String::new();
                let _ = file.read_to_string(&mut marker);
                return Err(UsageError(format!(
                    "another run is writing the outputs under {} ({}, lock {}); expected one run at a time to \
                     write them: wait for it to finish or stop it",
                    root.display(),
                    describe_holder(ProcessIdentity::parse_marker(&marker).as_ref()),
                    path.display()
                )));
            }
            // The holder before us may have removed the file between our open and our flock:
            // then the lock is on a file nobody else sees; take the one at the path instead.
            let same = match (file.metadata(), std::fs::metadata(&path)) {
                (Ok(ours), Ok(there)) => ours.dev() == there.dev() && ours.ino() == there.ino(),
                _ => false,
            };
            if !same {
                continue;
            }
            let marker = ProcessIdentity::current().marker();
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(marker.as_bytes()))
                .map_err(|e| failed("writing who holds", e))?;
            self.held.push((path, file));
            return Ok(());
        }
        Err(UsageError(format!(
            "cannot lock the outputs under {}: its lock {} kept being replaced by other runs",
            root.display(),
            path.display()
        )))
    }
}

impl Drop for OutputLocks {
    fn drop(&mut self) {
        // Removed while still locked, so that no other run takes a lock on a file that is
        // about to go (it checks that the file it locked is the one at the path).
        for (path, _file) in &self.held {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// "pid 123 on host h" (what the marker tells), or that it does not say.
fn describe_holder(holder: Option<&ProcessIdentity>) -> String {
    match holder {
        Some(holder) => {
            let host = holder.host.as_deref().map(|h| format!(" on host {h}")).unwrap_or_default();
            format!("held by pid {}{host}", holder.pid)
        }
        None => "held by a process that has not said who it is yet".to_string(),
    }
}

/// Where the lock of `root` lives: beside it, or inside it for a root with no name (`/`) and
/// for the working directory or a folder above it (a lock never lands above where the run
/// works, where it may not write).
fn lock_path(root: &Path) -> PathBuf {
    let working_dir = std::env::current_dir().ok().and_then(|d| d.canonicalize().ok());
    if working_dir.is_some_and(|w| w.starts_with(root)) {
        return root.join(LOCK_SUFFIX);
    }
    match (root.parent(), root.file_name()) {
        (Some(parent), Some(name)) => {
            let mut file = std::ffi::OsString::from(".");
            file.push(name);
            file.push(LOCK_SUFFIX);
            parent.join(file)
        }
        _ => root.join(LOCK_SUFFIX),
    }
}

/// The output roots of every step, resolved through symlinks and without repeats.
pub fn output_roots(compiled: &Compiled) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for step in &compiled.recipe.steps {
        let outputs = step.plugin.args().iter().filter(|a| a.kind == ArgKind::OutputPath).map(|a| a.name);
        for name in outputs {
            for root in arg_roots(&step.args, name) {
                let root = crate::recipe::resolve_existing_prefix(Path::new(&root));
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
        }
    }
    roots
}

/// The roots arg `name` writes: a fixed path in full, a templated one up to its last `/` before
/// the first dim reference (`.` when there is none).
fn arg_roots(args: &StepArgs, name: &str) -> Vec<String> {
    let mut roots = Vec::new();
    match args {
        StepArgs::Fixed(args) => fixed_roots(args.get(name), &mut roots),
        StepArgs::PerTask { fixed, templated } => match templated.iter().find(|(n, _)| n == name) {
            Some((_, template)) => template_roots(template, &mut roots),
            None => fixed_roots(fixed.get(name), &mut roots),
        },
    }
    roots
}

fn fixed_roots(value: Option<&Json>, roots: &mut Vec<String>) {
    match value {
        Some(Json::String(path)) => roots.push(path.clone()),
        Some(Json::Array(paths)) => roots.extend(paths.iter().filter_map(Json::as_str).map(String::from)),
        _ => {}
    }
}

fn template_roots(template: &ArgTemplate, roots: &mut Vec<String>) {
    match template {
        ArgTemplate::Json(json) => fixed_roots(Some(json), roots),
        ArgTemplate::Text(text) => {
            let mut prefix = String::new();
            for segment in &text.segments {
                match segment {
                    Segment::Literal(literal) | Segment::Rendered(literal) => prefix.push_str(literal),
                    Segment::FileRef(_) | Segment::Ref { .. } | Segment::Lookup { .. } | Segment::Time(_) => break,
                }
            }
            let folder = match prefix.rfind('/') {
                Some(0) => "/".to_string(),
                Some(at) => prefix[..at].to_string(),
                None => ".".to_string(),
            };
            roots.push(folder);
        }
        ArgTemplate::List(items) => items.iter().for_each(|item| template_roots(item, roots)),
        ArgTemplate::Object(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_live_beside_their_roots() {
        assert_eq!(lock_path(Path::new("out/sst.zarr")), Path::new("out/.sst.zarr.runner-lock"));
        assert_eq!(lock_path(Path::new("/w/out")), Path::new("/w/.out.runner-lock"));
        assert_eq!(lock_path(Path::new("/")), Path::new("/.runner-lock"));
        let here = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert_eq!(lock_path(&here), here.join(".runner-lock"), "never above the working dir");
    }

    #[test]
    fn a_held_lock_is_refused_and_a_released_one_taken() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let mut first = OutputLocks::default();
        first.take(&root).unwrap();
        let marker = std::fs::read_to_string(lock_path(&root)).unwrap();
        assert_eq!(ProcessIdentity::parse_marker(&marker).as_ref(), Some(ProcessIdentity::current()));
        // flock locks belong to the open file: a second open in this process is refused too.
        let error = OutputLocks::default().take(&root).unwrap_err().0;
        assert!(error.contains("another run is writing the outputs under") && error.contains("held by pid"), "{error}");
        drop(first);
        assert!(!lock_path(&root).exists(), "released locks are removed");
        let mut second = OutputLocks::default();
        second.take(&root).unwrap();
        assert_eq!(second.held.len(), 1);
    }
}
