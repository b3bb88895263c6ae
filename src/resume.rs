//! `--resume`: after a failed, killed or interrupted run of a recipe and cycle, only what did
//! not finish — and what depends on it — runs again.
//!
//! Every recorded task carries three hashes (xxh3, 64 bits). `args_hash` is its step's
//! fingerprint ([`Fingerprints`]: plugin, name, compiled args, inputs, dims, cycle — what every
//! task of the step is asked to do). `inputs_hash` hashes what it read: its producers' output
//! hashes, and the name, size and modification time of each file its args name as input
//! (`ArgKind::InputPath`), and of each item of an argv-like arg (`ArgKind::MayNameInputs`, as
//! `exec`'s `command`) that names an existing file or folder inside the working directory.
//! A folder is hashed by its contents ([`path_hash`]: every file under it, recursively, by
//! relative name, size and modification time — a Zarr store with a chunk deleted or rewritten
//! is changed, though the folder's own mtime is not). `output_hash` hashes what a later run can
//! check of its output: a path's name, size and modification time (a file rewritten since is a
//! changed output), or a value kept with `cache: true` by its content; an in-memory value that
//! is not kept is not hashed (0). A step with `resume: content` ([`ResumeCheck::Content`]) has
//! the files it reads and writes hashed by their bytes instead of size and modification time,
//! as Nextflow's `cache 'deep'`: for files whose modification time lies.
//! [`Reuse::plan`] compares them with what the recipe would do now:
//! 1. a task is reusable when it finished ok last time, its step's fingerprint is unchanged,
//!    every producer of it is reusable, the inputs hash it would have now is the recorded one,
//!    and its output can be had again (a path output's file is unchanged);
//! 2. a reusable task whose output some task that runs again must read has to give it back: a
//!    path, nothing, or a value its step kept with `cache: true` (a value file in
//!    `runner-cache/`, checked against its hash). Otherwise it runs again too, and then so must
//!    what it reads from.
//!
//! The scheduler completes the reused tasks as if they had just finished (their values, where
//! needed, mapped from their files), so the rest of the run is the uninterrupted run's.
//! Plugins are taken to be deterministic: a task run again makes the bytes it made before.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use runner_plugin::{ArgKind, DimValue, Value};
use serde_json::Value as Json;
use xxhash_rust::xxh3::Xxh3;

use crate::plan::Compiled;
use crate::recipe::{Recipe, ResumeCheck, StepId};
// The scheduler still names it here; it lives with the value files, where `store::prune` reads it too.
use crate::values;

/// The output hash of nothing (a task that returns `Value::None`).
pub const NONE_HASH: u64 = 0x6e6f_6e65_0000_0001;

/// A streaming hash that serde_json can write into.
struct Hasher(Xxh3);

impl io::Write for Hasher {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What each step is asked to do, fingerprinted once per run: its plugin, name, compiled args
/// (fixed values and templates), inputs, the recipe's dims (whose values fill the templates in)
/// and the cycle. Equal fingerprints mean every task of the step renders the same args as
/// before, so no task's args are rendered, or allocated, to be hashed — and the store keeps one
/// value per step, not one per task.
pub struct Fingerprints {
    steps: Vec<u64>,
    /// The args naming files a step's tasks read (`ArgKind::InputPath`, `ArgKind::MayNameInputs`).
    input_paths: Vec<Vec<(&'static str, ArgKind)>>,
    /// How each step's files are checked (`resume:`).
    checks: Vec<ResumeCheck>,
}

impl Fingerprints {
    pub fn new(recipe: &Recipe) -> Fingerprints {
        let dims = format!("{:?}", recipe.dims);
        let steps = recipe
            .steps
            .iter()
            .map(|step| {
                let mut hasher = Xxh3::new();
                let (args, inputs) = (format!("{:?}", step.args), format!("{:?}", step.inputs));
                for part in [step.plugin.name(), &step.name, &recipe.cycle, &args, &inputs, &dims] {
                    hasher.update(part.as_bytes());
                    hasher.update(&[0]);
                }
                nonzero(hasher.digest())
            })
            .collect();
        let input_paths = recipe
            .steps
            .iter()
            .map(|step| {
                let reads = |a: &&runner_plugin::ArgSpec| matches!(a.kind, ArgKind::InputPath | ArgKind::MayNameInputs);
                step.plugin.args().iter().filter(reads).map(|a| (a.name, a.kind)).collect()
            })
            .collect();
        let checks = recipe.steps.iter().map(|step| step.resume).collect();
        Fingerprints { steps, input_paths, checks }
    }

    /// The fingerprint of `step` (every task's `args_hash`).
    pub fn step(&self, step: StepId) -> u64 {
        self.steps[step]
    }

    /// The inputs hash of a task of `step` whose producers' hash is `producers` (see
    /// [`ProducersHash`]): with, when the step reads files named by its args, each file's
    /// [`path_hash`] — a file changed since is a changed input.
    pub fn inputs_hash(&self, recipe: &Recipe, step: StepId, producers: u64, dims: &[(&str, DimValue)]) -> u64 {
        let names = &self.input_paths[step];
        if names.is_empty() {
            return producers;
        }
        let lookup = |name: &str| dims.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = recipe.steps[step].args.for_task(&lookup);
        let mut hasher = Xxh3::new();
        hasher.update(&producers.to_le_bytes());
        let work_dir = std::env::current_dir().ok().and_then(|d| d.canonicalize().ok());
        let check = self.checks[step];
        for &(name, kind) in names {
            let mut add = |path: &str| {
                if kind == ArgKind::InputPath || names_a_file_inside(path, work_dir.as_deref()) {
                    hasher.update(&path_hash(Path::new(path), check).to_le_bytes());
                }
            };
            match args.get(name) {
                Some(Json::String(path)) => add(path),
                Some(Json::Array(paths)) => paths.iter().filter_map(Json::as_str).for_each(add),
                _ => {}
            }
        }
        nonzero(hasher.digest())
    }

    /// The output hash of a task of `step` (see [`output_hash`]), its files checked as the
    /// step's `resume:` says.
    pub fn output_hash(&self, step: StepId, value: &Value, kept: bool) -> u64 {
        output_hash(value, kept, self.checks[step])
    }
}

/// Hash of what a task read from its producers: their output hashes in gather order (an
/// in-memory value not kept for resume hashes to 0: only files' contents are checked again).
///
/// Every task's is made under the scheduler's lock, so the first [`INLINE_PRODUCERS`] hashes
/// are hashed in one call, as xxh3 hashes a short input, and only a longer gather streams
/// through `Xxh3`'s state (half a kilobyte to set up and copy: a 1.2 M-task run of one-input
/// tasks took a fifth longer). Both give the same value, the one stored by earlier runs.
pub struct ProducersHash {
    head: [u8; INLINE_PRODUCERS * 8],
    len: usize,
    stream: Option<Xxh3>,
}

impl Default for ProducersHash {
    fn default() -> ProducersHash {
        ProducersHash { head: [0; INLINE_PRODUCERS * 8], len: 0, stream: None }
    }
}

/// How many producers' hashes [`ProducersHash`] holds before it streams.
const INLINE_PRODUCERS: usize = 8;

impl ProducersHash {
    pub fn add(&mut self, output_hash: u64) {
        let bytes = output_hash.to_le_bytes();
        if let Some(stream) = &mut self.stream {
            stream.update(&bytes);
        } else if self.len < self.head.len() {
            self.head[self.len..self.len + 8].copy_from_slice(&bytes);
            self.len += 8;
        } else {
            let mut stream = Xxh3::new();
            stream.update(&self.head);
            stream.update(&bytes);
            self.stream = Some(stream);
        }
    }
    pub fn finish(&self) -> u64 {
        nonzero(match &self.stream {
            Some(stream) => stream.digest(),
            None => xxhash_rust::xxh3::xxh3_64(&self.head[..self.len]),
        })
    }
}

/// Hash of a task's output, as far as a later run can check it: nothing, a path (its file), or
/// a value kept with `cache: true` (its content); 0 for an in-memory value not kept, which is
/// not hashed at all.
fn output_hash(value: &Value, kept: bool, check: ResumeCheck) -> u64 {
    match value {
        Value::None => NONE_HASH,
        Value::Path(path) => path_hash(path, check),
        _ if kept => content_hash(value),
        _ => 0,
    }
}

/// Hash of a value's content: an array's dtype, shape, attributes and bytes.
fn content_hash(value: &Value) -> u64 {
    let mut hasher = Hasher(Xxh3::new());
    match value {
        Value::None => return NONE_HASH,
        Value::Array(array) => {
            hasher.0.update(b"array");
            hasher.0.update(array.dtype().name().as_bytes());
            for &dim in array.shape() {
                hasher.0.update(&(dim as u64).to_le_bytes());
            }
            let _ = serde_json::to_writer(&mut hasher, array.attrs());
            hasher.0.update(array.bytes());
        }
        Value::Bytes(storage) => {
            hasher.0.update(b"bytes");
            hasher.0.update(storage.bytes());
        }
        Value::Json(json) => {
            hasher.0.update(b"json");
            let _ = serde_json::to_writer(&mut hasher, json);
        }
        // Not reached: a path's hash is its file's (`output_hash`).
        Value::Path(path) => return path_hash(path, ResumeCheck::Metadata),
    }
    nonzero(hasher.0.digest())
}

/// Whether an argv item names an existing file or folder strictly inside the working directory
/// (`work_dir`, canonical): not the working directory itself nor anything above it (`.` is
/// not every file of the run), not an option, not a template a plugin fills in.
fn names_a_file_inside(item: &str, work_dir: Option<&Path>) -> bool {
    let Some(work_dir) = work_dir else { return false };
    if item.is_empty() || item.starts_with('-') || item.contains('{') {
        return false;
    }
    match Path::new(item).canonicalize() {
        Ok(path) => path.starts_with(work_dir) && path != work_dir,
        Err(_) => false,
    }
}

/// Hash of a path: its name, and its file's size and modification time (or, with
/// [`ResumeCheck::Content`], its bytes) — for a folder, those of every file and folder under
/// it, recursively, by name relative to it, in name order (0 when nothing is there, which no
/// output hashes to).
pub fn path_hash(path: &Path, check: ResumeCheck) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else { return 0 };
    let mut hasher = Xxh3::new();
    hasher.update(match check {
        ResumeCheck::Metadata => b"path",
        ResumeCheck::Content => b"deep",
    });
    hasher.update(path.as_os_str().as_encoded_bytes());
    add_file(&mut hasher, path, &meta, check);
    if meta.is_dir() {
        hasher.update(b"dir");
        add_folder(&mut hasher, path, Path::new(""), check);
    }
    nonzero(hasher.digest())
}

/// A file's size and modification time, or its bytes (for a folder, only its kind: its
/// contents say what changed). A file that cannot be read hashes as such, so that it reads
/// as changed once it can be.
fn add_file(hasher: &mut Xxh3, path: &Path, meta: &std::fs::Metadata, check: ResumeCheck) {
    if meta.is_dir() {
        return;
    }
    hasher.update(&meta.len().to_le_bytes());
    match check {
        ResumeCheck::Metadata => {
            let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            hasher.update(&modified.map_or(0, |d| d.as_nanos()).to_le_bytes());
        }
        ResumeCheck::Content => {
            if add_bytes(hasher, path).is_err() {
                hasher.update(b"unreadable");
            }
        }
    }
}

/// The bytes of the file at `path`, streamed into `hasher`.
fn add_bytes(hasher: &mut Xxh3, path: &Path) -> io::Result<()> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut chunk = [0u8; 64 << 10];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => hasher.update(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Every entry under `root/relative`, depth first in name order. Symbolic links are hashed by
/// what they point to, and folders they point to are not entered (no loops).
fn add_folder(hasher: &mut Xxh3, root: &Path, relative: &Path, check: ResumeCheck) {
    let Ok(entries) = std::fs::read_dir(root.join(relative)) else { return };
    let mut names: Vec<std::ffi::OsString> = entries.flatten().map(|e| e.file_name()).collect();
    names.sort_unstable();
    for name in names {
        let relative = relative.join(&name);
        let full = root.join(&relative);
        hasher.update(relative.as_os_str().as_encoded_bytes());
        hasher.update(&[0]);
        let Ok(own) = std::fs::symlink_metadata(&full) else { continue };
        if own.file_type().is_symlink() {
            hasher.update(b"link");
            if let Ok(target) = std::fs::read_link(&full) {
                hasher.update(target.as_os_str().as_encoded_bytes());
            }
            if let Ok(meta) = std::fs::metadata(&full) {
                add_file(hasher, &full, &meta, check);
            }
        } else if own.is_dir() {
            hasher.update(b"dir");
            add_folder(hasher, root, &relative, check);
        } else {
            add_file(hasher, &full, &own, check);
        }
    }
}

/// 0 means "no hash" in the store.
fn nonzero(hash: u64) -> u64 {
    if hash == 0 { 1 } else { hash }
}

/// How a reused task's output is had again.
#[derive(Debug, Clone)]
enum Recovered {
    /// `Value::None`.
    Nothing,
    /// A path output, unchanged.
    Path(PathBuf),
    /// A value kept by `cache: true`.
    Cached(PathBuf),
    /// An in-memory value that was not kept: reusable only while nothing that runs reads it.
    Lost,
}

/// What a reused task was, for its record in this run.
#[derive(Debug, Clone)]
pub struct ReusedTask {
    pub args_hash: u64,
    pub inputs_hash: u64,
    pub output_hash: u64,
    pub output_path: Option<PathBuf>,
    recovered: Recovered,
}

/// Which tasks of the last run of this recipe and cycle this run takes over as they are.
#[derive(Debug, Default)]
pub struct Reuse {
    /// The run they come from.
    pub from_run: i64,
    steps: Vec<HashMap<u64, ReusedTask>>,
}

/// A task of an earlier run as the store recorded it, with what `--resume` compares to reuse
/// it (the store reads these for resume; resume knows nothing of the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedTask {
    pub step: String,
    pub task_index: Option<u64>,
    pub key: String,
    /// It ended ok, or was reused: its output was made.
    pub finished: bool,
    pub args_hash: Option<u64>,
    pub inputs_hash: Option<u64>,
    pub output_hash: Option<u64>,
    pub output_path: Option<String>,
}

impl Reuse {
    /// The reuse plan of `compiled` against `previous`, the tasks recorded by run `from_run`.
    pub fn plan(compiled: &Compiled, from_run: i64, previous: Vec<RecordedTask>) -> Reuse {
        let recipe = &compiled.recipe;
        let graph = &compiled.graph;
        let mut recorded: Vec<HashMap<u64, RecordedTask>> = vec![HashMap::new(); recipe.steps.len()];
        for task in previous {
            let (Some(step), Some(index)) = (recipe.step_id(&task.step), task.task_index) else { continue };
            if task.finished && task.args_hash.is_some() {
                recorded[step].insert(index, task);
            }
        }
        let mut steps: Vec<HashMap<u64, ReusedTask>> = vec![HashMap::new(); recipe.steps.len()];
        let (mut key, mut pairs) = (String::new(), Vec::new());
        let fingerprints = Fingerprints::new(recipe);
        for &step in &graph.topo {
            for (&index, task) in &recorded[step] {
                if task.args_hash != Some(fingerprints.step(step)) {
                    continue;
                }
                let Some(producers) = producers_of(compiled, &steps, step, index) else { continue };
                graph.describe_task(recipe, step, index, &mut key, &mut pairs);
                let inputs = fingerprints.inputs_hash(recipe, step, producers, &pairs);
                if Some(inputs) != task.inputs_hash {
                    continue;
                }
                let output_hash = task.output_hash.unwrap_or(0);
                let check = recipe.steps[step].resume;
                let Some(recovered) = recover(output_hash, task.output_path.as_deref(), check) else { continue };
                let reused = ReusedTask {
                    args_hash: fingerprints.step(step),
                    inputs_hash: inputs,
                    output_hash,
                    output_path: task.output_path.as_ref().map(PathBuf::from),
                    recovered,
                };
                steps[step].insert(index, reused);
            }
        }
        let mut reuse = Reuse { from_run, steps };
        reuse.give_back_what_runs_again_reads(compiled);
        reuse
    }

    /// Tasks that run again read their inputs: a reused producer whose value is lost runs
    /// again as well (and then what it reads must be had), until nothing changes.
    fn give_back_what_runs_again_reads(&mut self, compiled: &Compiled) {
        let graph = &compiled.graph;
        let mut changed = true;
        while changed {
            changed = false;
            for &step in &graph.topo {
                for index in 0..graph.steps[step].tasks {
                    if self.steps[step].contains_key(&index) {
                        continue;
                    }
                    for &edge in &graph.steps[step].inputs {
                        let producer = graph.edges[edge].producer;
                        let mut lost = Vec::new();
                        graph.for_each_producer(edge, index, |p| {
                            if matches!(self.steps[producer].get(&p), Some(t) if matches!(t.recovered, Recovered::Lost))
                            {
                                lost.push(p);
                            }
                        });
                        for p in lost {
                            self.steps[producer].remove(&p);
                            changed = true;
                        }
                    }
                }
            }
        }
    }

    /// How many tasks are reused.
    pub fn count(&self) -> u64 {
        self.steps.iter().map(|s| s.len() as u64).sum()
    }

    /// The reused task `index` of `step`, if it is one.
    pub fn get(&self, step: StepId, index: u64) -> Option<&ReusedTask> {
        self.steps.get(step)?.get(&index)
    }

    /// The reused tasks of `step`.
    pub fn of_step(&self, step: StepId) -> impl Iterator<Item = u64> + '_ {
        self.steps[step].keys().copied()
    }
}

impl ReusedTask {
    /// The task's output as its consumers read it: a path, nothing, or its cached value mapped
    /// from its file. A lost value (nobody that runs reads it) is `Value::None`.
    pub fn value(&self) -> Value {
        match &self.recovered {
            Recovered::Nothing | Recovered::Lost => Value::None,
            Recovered::Path(path) => Value::Path(path.clone()),
            // Checked when the plan was made; gone since, its consumers see nothing and fail.
            Recovered::Cached(path) => kept_value(path).unwrap_or(Value::None),
        }
    }
}

/// Removes the temporary files that process `pid` (a run that was killed) left in the folders
/// its recorded outputs are in: what it was writing when it died. Returns how many.
pub fn remove_temp_files_of(pid: u32, previous: &[RecordedTask]) -> usize {
    let mut folders: Vec<&Path> =
        previous.iter().filter_map(|t| Path::new(t.output_path.as_deref()?).parent()).collect();
    folders.sort_unstable();
    folders.dedup();
    let mut removed = 0;
    for folder in folders {
        let folder = if folder.as_os_str().is_empty() { Path::new(".") } else { folder };
        let Ok(entries) = std::fs::read_dir(folder) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| runner_plugin::files::is_temp_of(n, pid))
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed
}

/// How the output a task recorded is had again, or `None` when it must run again: a path
/// output whose file is gone or changed. A kept value whose file is gone or no longer holds
/// what was recorded is as good as not kept.
fn recover(output_hash: u64, output_path: Option<&str>, check: ResumeCheck) -> Option<Recovered> {
    let Some(path) = output_path.map(Path::new) else {
        return Some(if output_hash == NONE_HASH { Recovered::Nothing } else { Recovered::Lost });
    };
    if !is_value_file(path) {
        return (path_hash(path, check) == output_hash).then(|| Recovered::Path(path.to_path_buf()));
    }
    let intact = kept_value(path).is_some_and(|value| content_hash(&value) == output_hash);
    Some(if intact { Recovered::Cached(path.to_path_buf()) } else { Recovered::Lost })
}

/// The value `cache: true` kept in `path` (`<dir>/<index>.<kind>`), mapped from its file.
fn kept_value(path: &Path) -> Option<Value> {
    let dir = path.parent()?;
    let index = path.file_stem()?.to_str()?.parse().ok()?;
    values::map(dir, index).ok()
}

/// The producers' hash task `index` of `step` would have now, when every producer of it is
/// reused (`None` otherwise: a producer that runs again may make something else).
fn producers_of(compiled: &Compiled, steps: &[HashMap<u64, ReusedTask>], step: StepId, index: u64) -> Option<u64> {
    let graph = &compiled.graph;
    let mut hash = ProducersHash::default();
    for &edge in &graph.steps[step].inputs {
        let producer = graph.edges[edge].producer;
        let mut all = true;
        graph.for_each_producer(edge, index, |p| match steps[producer].get(&p) {
            Some(task) => hash.add(task.output_hash),
            None => all = false,
        });
        if !all {
            return None;
        }
    }
    Some(hash.finish())
}

/// A file `values::write` made (`<index>.<kind>` under `runner-cache/`), as `cache: true`
/// keeps values.
fn is_value_file(path: &Path) -> bool {
    path.file_stem().and_then(|s| s.to_str()).is_some_and(|s| s.parse::<u64>().is_ok())
        && path.components().any(|c| c.as_os_str() == "runner-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producers_hash_is_the_stream_of_their_output_hashes_however_many_there_are() {
        for count in 0..20u64 {
            let mut stream = Xxh3::new();
            let mut hash = ProducersHash::default();
            for i in 0..count {
                let output = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                stream.update(&output.to_le_bytes());
                hash.add(output);
            }
            assert_eq!(hash.finish(), nonzero(stream.digest()), "{count} producers");
        }
    }

    #[test]
    fn a_folder_is_hashed_by_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("sst.zarr");
        std::fs::create_dir_all(store.join("sst/c/0")).unwrap();
        for chunk in 0..3 {
            std::fs::write(store.join(format!("sst/c/0/{chunk}")), [chunk as u8; 10]).unwrap();
        }
        std::fs::write(store.join("zarr.json"), "{}").unwrap();
        let before = path_hash(&store, ResumeCheck::Metadata);
        assert_eq!(before, path_hash(&store, ResumeCheck::Metadata), "the same contents hash the same");
        let folder_mtime = std::fs::metadata(&store).unwrap().modified().unwrap();
        std::fs::remove_file(store.join("sst/c/0/1")).unwrap();
        assert_eq!(std::fs::metadata(&store).unwrap().modified().unwrap(), folder_mtime, "the folder's mtime stays");
        let deleted = path_hash(&store, ResumeCheck::Metadata);
        assert_ne!(deleted, before, "a deleted nested chunk is a change");
        std::fs::write(store.join("sst/c/0/2"), [9u8; 11]).unwrap();
        assert_ne!(path_hash(&store, ResumeCheck::Metadata), deleted, "a rewritten chunk is a change");
        assert_eq!(path_hash(&dir.path().join("nothing"), ResumeCheck::Metadata), 0);
    }

    #[test]
    fn content_checks_see_a_file_rewritten_with_its_size_and_mtime_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (file, store) = (dir.path().join("t.nc"), dir.path().join("t.zarr"));
        std::fs::create_dir(&store).unwrap();
        let chunk = store.join("0");
        let hashes = |check| (path_hash(&file, check), path_hash(&store, check));
        std::fs::write(&file, b"first").unwrap();
        std::fs::write(&chunk, b"first").unwrap();
        let (metadata, content) = (hashes(ResumeCheck::Metadata), hashes(ResumeCheck::Content));
        assert_ne!(metadata, content, "the two checks never mistake one another");
        // As `cp -p` or `rsync -t` would leave it: other bytes, the same size and mtime.
        for path in [&file, &chunk] {
            let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
            std::fs::write(path, b"other").unwrap();
            std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
        }
        assert_eq!(hashes(ResumeCheck::Metadata), metadata, "size and mtime do not tell");
        let rewritten = hashes(ResumeCheck::Content);
        assert!(rewritten.0 != content.0 && rewritten.1 != content.1, "the bytes do");
        assert_eq!(hashes(ResumeCheck::Content), rewritten, "the same bytes hash the same");
    }

    #[test]
    fn argv_items_are_inputs_when_they_name_files_inside_the_working_directory() {
        let here = std::env::current_dir().unwrap().canonicalize().unwrap();
        let inside = tempfile::tempdir_in(&here).unwrap();
        let file = inside.path().join("rain.nc");
        std::fs::write(&file, "x").unwrap();
        let relative = file.strip_prefix(&here).unwrap().to_str().unwrap().to_string();
        assert!(names_a_file_inside(&relative, Some(&here)));
        assert!(names_a_file_inside(file.to_str().unwrap(), Some(&here)));
        assert!(!names_a_file_inside(".", Some(&here)), "not the whole working directory");
        assert!(!names_a_file_inside("..", Some(&here)));
        assert!(!names_a_file_inside("/etc/hostname", Some(&here)), "outside");
        assert!(!names_a_file_inside("python3", Some(&here)), "no such file here");
        assert!(!names_a_file_inside("--out", Some(&here)));
        assert!(!names_a_file_inside("{input.field}", Some(&here)));
    }
}
