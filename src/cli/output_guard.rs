//! The files a command writes (`--summary`, `report -o`, the replay summary and report) checked,
//! before anything runs, against what it must never replace: the feedback store with its
//! `-wal`/`-shm`, the recipe, the cycles file and the files the recipe's steps name. Files are
//! compared by identity (device and inode, through symlinks), so `./r.db`, an absolute path and
//! a symlink to it are one file; a path that does not exist yet is compared by its canonical
//! folder and name (after following a dangling symlink), so it still clashes with the store's
//! `-wal` that the run is about to create.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use runner_plugin::ArgKind;
use serde_json::Value as Json;

use super::UsageError;
use crate::plan::Compiled;

/// Which file a path names, whether or not it exists yet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Inode {
        dev: u64,
        ino: u64,
    },
    /// Not there (yet): its canonical folder joined with its name.
    Missing(PathBuf),
}

/// How many symlinks a dangling path may go through before it is taken as it is.
const MAX_SYMLINKS: usize = 40;

impl Identity {
    fn of(path: &Path) -> Identity {
        match std::fs::metadata(path) {
            Ok(meta) => Identity::Inode { dev: meta.dev(), ino: meta.ino() },
            Err(_) => Identity::Missing(resolve_missing(path)),
        }
    }
}

/// Where a file that does not exist would be created: dangling symlinks followed, the folder
/// canonical.
fn resolve_missing(path: &Path) -> PathBuf {
    let mut path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for _ in 0..MAX_SYMLINKS {
        let Ok(target) = std::fs::read_link(&path) else { break };
        path = match path.parent() {
            Some(parent) => parent.join(target),
            None => target,
        };
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf()).join(name),
        _ => path,
    }
}

/// A file and what it is, for the message (`the feedback store r.db`, `--summary s.json`).
struct Named {
    identity: Identity,
    what: String,
}

/// The files a command will write and those they must not be.
#[derive(Default)]
pub struct OutputGuard {
    protected: Vec<Named>,
    /// What no task may write either, by the name given, with what it is.
    never_by_tasks: Vec<(PathBuf, String)>,
    outputs: Vec<Named>,
    /// Outputs that exist and hold something else than what is written there: their start.
    foreign: Vec<(String, OutputKind, String)>,
}

/// What a command writes to an output: an existing file there is replaced only when it holds
/// the same kind of thing (a file the recipe or the store cannot be mistaken for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// A JSON summary: starts with `{`.
    Json,
    /// A report page: starts with `<!DOCTYPE html`.
    Html,
}

impl OutputKind {
    fn description(self) -> &'static str {
        match self {
            OutputKind::Json => "a JSON summary",
            OutputKind::Html => "an HTML report",
        }
    }

    fn signature(self) -> &'static [u8] {
        match self {
            OutputKind::Json => b"{",
            OutputKind::Html => b"<!doctype html",
        }
    }
}

/// How much of a foreign file's start a message quotes.
const QUOTED_START: usize = 24;

/// The start of the file at `path` when it exists, is not empty and does not start as `kind`
/// does; `None` otherwise (also when it cannot be read: writing it will say why).
fn foreign_start(path: &Path, kind: OutputKind) -> Option<String> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    // Not opened unless it is a regular file: opening a FIFO to read waits for a writer.
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let read = file.read(&mut head).ok()?;
    let text = head[..read].trim_ascii_start();
    let signature = kind.signature();
    if read == 0 || (text.len() >= signature.len() && text[..signature.len()].eq_ignore_ascii_case(signature)) {
        return None;
    }
    let start: String = String::from_utf8_lossy(text).chars().take(QUOTED_START).collect();
    Some(start.escape_debug().to_string())
}

impl OutputGuard {
    /// `path` must not be written; `what` says what it is ("the recipe").
    pub fn protect(&mut self, path: &Path, what: &str) -> &mut Self {
        let identity = Identity::of(path);
        self.protected.push(Named { identity, what: format!("{what} {}", path.display()) });
        self
    }

    /// `path` must not be written, neither by this command's own outputs nor, while it runs,
    /// by any task's ([`runner_plugin::files::protect`]: a path a template renders per task).
    pub fn protect_always(&mut self, path: &Path, what: &str) -> &mut Self {
        runner_plugin::files::protect(path, what);
        self.never_by_tasks.push((path.to_path_buf(), format!("{what} {}", path.display())));
        self.protect(path, what)
    }

    /// The store at `db` and the `-wal` and `-shm` files SQLite keeps beside it.
    pub fn protect_store(&mut self, db: &Path) -> &mut Self {
        self.protect_always(db, "the feedback store");
        for suffix in ["-wal", "-shm"] {
            let mut name = db.as_os_str().to_os_string();
            name.push(suffix);
            self.protect_always(Path::new(&name), &format!("the feedback store's {suffix} file"));
        }
        self
    }

    /// The recipe file and the files its steps name in path args that are the same for every
    /// task (read or written by the run; a path that depends on a dim is left to the run).
    pub fn protect_recipe(&mut self, recipe_path: &Path, compiled: &Compiled) -> &mut Self {
        self.protect_always(recipe_path, "the recipe");
        for step in &compiled.recipe.steps {
            if step.args.is_per_task() {
                continue;
            }
            let args = step.args.for_task(&|_| None);
            for spec in step.plugin.args().iter().filter(|a| a.kind != ArgKind::Value) {
                let verb = if spec.kind == ArgKind::InputPath { "reads" } else { "writes" };
                let what = format!("the file step `{}` {verb} (arg `{}`)", step.name, spec.name);
                let paths: Vec<&str> = match args.get(spec.name) {
                    Some(Json::String(path)) => vec![path.as_str()],
                    Some(Json::Array(paths)) => paths.iter().filter_map(Json::as_str).collect(),
                    _ => Vec::new(),
                };
                for path in paths {
                    self.protect(Path::new(path), &what);
                }
            }
        }
        self
    }

    /// `path` will be written with a file of `kind`; `what` says by which option ("--summary").
    pub fn output(&mut self, path: &Path, what: &str, kind: OutputKind) -> &mut Self {
        let identity = Identity::of(path);
        let named = Named { identity, what: format!("{what} {}", path.display()) };
        if let Some(start) = foreign_start(path, kind) {
            self.foreign.push((named.what.clone(), kind, start));
        }
        self.outputs.push(named);
        self
    }

    /// A usage error naming both files when an output is a protected file or another output.
    /// Guards a command's `--summary` (JSON) and `--report` (HTML), then checks everything:
    /// no output replaces what the command reads, and each output can be written.
    pub fn check_summary_and_report(&mut self, summary: Option<&Path>, report: Option<&Path>) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let outputs =
            [(summary, "--summary", "summary", OutputKind::Json), (report, "--report", "report", OutputKind::Html)];
        for (path, flag, _, kind) in outputs {
            if let Some(path) = path {
                self.output(path, flag, kind);
            }
        }
        self.check()?;
        for (path, _, what, _) in outputs {
            if let Some(path) = path {
                check_writable(path).with_context(|| format!("the {what} cannot be written to {}", path.display()))?;
            }
        }
        Ok(())
    }

    /// A usage error when a task of `compiled` would write a file protected with
    /// [`OutputGuard::protect_always`] or one another task reads ([`super::task_files`]).
    pub fn check_tasks(&self, compiled: &Compiled) -> Result<(), UsageError> {
        super::task_files::check(compiled, &self.never_by_tasks)
    }

    pub fn check(&self) -> Result<(), UsageError> {
        for (i, output) in self.outputs.iter().enumerate() {
            let clash = self.protected.iter().chain(&self.outputs[..i]).find(|p| p.identity == output.identity);
            if let Some(other) = clash {
                return Err(UsageError(format!(
                    "{} is {}: writing it would replace it; expected another file",
                    output.what, other.what
                )));
            }
        }
        if let Some((what, kind, start)) = self.foreign.first() {
            return Err(UsageError(format!(
                "{what} exists and is not {} (it starts with `{start}`): writing it would replace it; \
                 expected a new file or one this command wrote before",
                kind.description()
            )));
        }
        Ok(())
    }
}

/// Whether a file can be created at `path` (its folder is made if needed): a probe file is
/// created next to it and removed; an existing file is left as it is.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => anyhow::bail!("{} is a directory", path.display()),
        // `/dev/null`, `/dev/stdout`, a FIFO or a pipe: written into as it is, nothing created.
        Ok(meta) if !meta.is_file() => return Ok(()),
        _ => {}
    }
    // Where the writer's file will be made: beside a symlink's target, not beside the link.
    let target = runner_plugin::files::through_symlinks(path);
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    runner_plugin::files::probe_folder(dir).with_context(|| format!("creating a file in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_through_a_symlink_is_checked_where_it_will_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("summary.json");
        std::os::unix::fs::symlink("/proc/runner-no-such-folder/summary.json", &link).unwrap();
        let error = check_writable(&link).expect_err("the target's folder cannot be made").to_string();
        assert!(error.contains("/proc/runner-no-such-folder"), "{error}");
        let fine = dir.path().join("elsewhere/s.json");
        std::os::unix::fs::symlink(&fine, dir.path().join("ok.json")).unwrap();
        check_writable(&dir.path().join("ok.json")).unwrap();
        assert!(dir.path().join("elsewhere").is_dir(), "the target's folder is made, as the writer would");
    }

    #[test]
    fn a_file_is_known_through_other_names_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("r.db");
        std::fs::write(&db, b"x").unwrap();
        std::os::unix::fs::symlink(&db, dir.path().join("link.db")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("r.db-wal"), dir.path().join("dangling")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let clashing = ["r.db", "link.db", "sub/../r.db", "r.db-wal", "dangling", "r.db-shm"];
        for name in clashing {
            let mut guard = OutputGuard::default();
            guard.protect_store(&db).output(&dir.path().join(name), "--summary", OutputKind::Json);
            let error = guard.check().expect_err(name).0;
            assert!(error.starts_with("--summary ") && error.contains("is the feedback store"), "{error}");
        }
        let mut guard = OutputGuard::default();
        guard.protect_store(&db).output(&dir.path().join("s.json"), "--summary", OutputKind::Json);
        assert!(guard.check().is_ok());
        let mut guard = OutputGuard::default();
        guard.output(&dir.path().join("a.json"), "--summary", OutputKind::Json).output(
            &dir.path().join("sub/../a.json"),
            "--report",
            OutputKind::Html,
        );
        assert!(guard.check().unwrap_err().0.contains("is --summary"), "two outputs are one file");
        std::fs::write(dir.path().join("tiny.yaml"), "recipe: tiny\n").unwrap();
        std::fs::write(dir.path().join("old.html"), "<!DOCTYPE html>\n<html>").unwrap();
        let mut guard = OutputGuard::default();
        guard.output(&dir.path().join("old.html"), "-o", OutputKind::Html);
        assert!(guard.check().is_ok(), "an earlier report is replaced");
        guard.output(&dir.path().join("tiny.yaml"), "-o", OutputKind::Html);
        let error = guard.check().unwrap_err().0;
        assert!(
            error.contains("tiny.yaml exists and is not an HTML report (it starts with `recipe: tiny\\n`)"),
            "{error}"
        );
    }
}
