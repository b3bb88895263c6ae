//! Every task's files checked before anything runs: no task writes a file the command must
//! never replace (the store with its `-wal`/`-shm`, the recipe, the cycles file), nor a file
//! that a task of another step reads unless that step comes after the writer (then it reads
//! what was written), nor the file it reads itself. Templated paths are rendered for every task;
//! a clash is a usage error naming both files and the tasks.
//!
//! Paths are compared by where they lead: made absolute, their folder resolved through symlinks
//! (once per folder) and `.`/`..` folded, so `out/../r.db`, a symlinked folder and an absolute
//! path are one file. A file reached through a second hard link is not seen here; the atomic
//! writer's check by inode still refuses it when the task writes ([`runner_plugin::files`]).
//! Kept as 64-bit hashes with the task that named them, confirmed by rendering that task's
//! paths again before anything is reported.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use runner_plugin::{ArgKind, DimValue};
use xxhash_rust::xxh3::xxh3_64;

use super::UsageError;
use crate::plan::Compiled;
use crate::scheduler::output_claims::{normalise, paths};

/// A task: its step and index.
type Task = (usize, u64);

/// What a path arg of a step does with the files it names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Writes,
    /// Always a file the task reads (`ArgKind::InputPath`).
    Reads,
    /// Items that may name files the task reads (an argv, `ArgKind::MayNameInputs`): a file it
    /// reads only when it exists before the run.
    MayRead,
}

/// Where paths lead, each folder resolved once.
struct Resolver {
    folders: HashMap<PathBuf, PathBuf>,
    /// The working directory, asked once: `std::path::absolute` asks the kernel for every path
    /// (a tenth of the check's time over a million of them).
    cwd: Option<PathBuf>,
}

impl Resolver {
    fn new() -> Resolver {
        Resolver { folders: HashMap::new(), cwd: std::env::current_dir().ok() }
    }

    /// `path` absolute, its folder resolved through symlinks, `.` and `..` folded.
    fn resolve(&mut self, path: &Path) -> PathBuf {
        let absolute = match &self.cwd {
            Some(cwd) if path.is_relative() => normalise(&cwd.join(path)),
            _ => normalise(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())),
        };
        match (absolute.parent(), absolute.file_name()) {
            (Some(folder), Some(name)) => {
                let folder = match self.folders.get(folder) {
                    Some(real) => real.clone(),
                    None => {
                        let real = normalise(&crate::recipe::resolve_existing_prefix(folder));
                        self.folders.insert(folder.to_path_buf(), real.clone());
                        real
                    }
                };
                folder.join(name)
            }
            _ => absolute,
        }
    }

    fn hash(&mut self, path: &Path) -> u64 {
        xxh3_64(self.resolve(path).as_os_str().as_encoded_bytes())
    }
}

/// Checks every task's files before the run (see the module doc); `protected` are the files
/// no task may write, with what each is (`the feedback store r.db`).
pub fn check(compiled: &Compiled, protected: &[(PathBuf, String)]) -> Result<(), UsageError> {
    let uses = path_args(compiled);
    if !uses.iter().flatten().any(|(_, u)| *u == Use::Writes) {
        return Ok(());
    }
    let mut resolver = Resolver::new();
    // A protected file by the name it was given and, when it is a symlink, by where it leads.
    let mut by_hash: HashMap<u64, (PathBuf, &str)> = HashMap::new();
    for (path, what) in protected {
        let spellings = std::iter::once(path.clone()).chain(std::fs::canonicalize(path).ok());
        for spelling in spellings {
            let resolved = resolver.resolve(&spelling);
            by_hash.insert(xxh3_64(resolved.as_os_str().as_encoded_bytes()), (resolved, what.as_str()));
        }
    }
    let mut written: HashMap<u64, Task> = HashMap::new();
    let mut clash = None;
    for_each_path(
        compiled,
        &uses,
        |used| used == Use::Writes,
        |task, _, path, _| {
            if clash.is_some() {
                return;
            }
            let resolved = resolver.resolve(Path::new(path));
            let hash = xxh3_64(resolved.as_os_str().as_encoded_bytes());
            // A hash match is confirmed by the paths themselves: a collision never refuses a run.
            if let Some((_, what)) = by_hash.get(&hash).filter(|(protected, _)| *protected == resolved) {
                clash = Some(format!("{} writes {path}, which is {what}", describe(compiled, task)));
            }
            written.entry(hash).or_insert(task);
        },
    );
    if let Some(clash) = clash {
        return Err(UsageError(format!("{clash}: writing it would replace it; expected another file")));
    }
    let after = downstream(compiled);
    let mut clash = None;
    for_each_path(
        compiled,
        &uses,
        |used| used != Use::Writes,
        |reader, arg, path, used| {
            if clash.is_some() {
                return;
            }
            let Some(&writer) = written.get(&resolver.hash(Path::new(path))) else { return };
            let (same_task, comes_after) = (writer == reader, after[writer.0][reader.0] && writer.0 != reader.0);
            let harmless = match used {
                // An argv naming the task's own output, or a file that is not there yet.
                Use::MayRead => same_task || comes_after || !Path::new(path).is_file(),
                _ => comes_after,
            };
            if harmless || !writes(compiled, &uses, writer, &resolver.resolve(Path::new(path)), &mut resolver) {
                return;
            }
            let whose = if same_task { "the same task".to_string() } else { describe(compiled, reader) };
            clash = Some(format!(
                "{} writes {path}, which {whose} reads (arg `{arg}`){}: writing it would replace an input of the run; \
             expected another file",
                describe(compiled, writer),
                if same_task || comes_after { "" } else { " and does not come after it" },
            ));
        },
    );
    clash.map_or(Ok(()), |clash| Err(UsageError(clash)))
}

/// Per step, its args that name files and what it does with them.
fn path_args(compiled: &Compiled) -> Vec<Vec<(&'static str, Use)>> {
    let used = |kind| match kind {
        ArgKind::OutputPath => Some(Use::Writes),
        ArgKind::InputPath => Some(Use::Reads),
        ArgKind::MayNameInputs => Some(Use::MayRead),
        _ => None,
    };
    let steps = &compiled.recipe.steps;
    steps.iter().map(|s| s.plugin.args().iter().filter_map(|a| Some((a.name, used(a.kind)?))).collect()).collect()
}

/// Calls `f(task, arg, path, use)` for every path every task names in an arg whose use is
/// `wanted` (once for a step whose args are the same for every task); a step without such an
/// arg is not rendered at all.
fn for_each_path(
    compiled: &Compiled,
    uses: &[Vec<(&'static str, Use)>],
    wanted: impl Fn(Use) -> bool,
    mut f: impl FnMut(Task, &'static str, &str, Use),
) {
    let (recipe, graph) = (&compiled.recipe, &compiled.graph);
    let (mut key, mut dims): (String, Vec<(&str, DimValue)>) = (String::new(), Vec::new());
    let mut names = Vec::new();
    for (step, step_uses) in uses.iter().enumerate() {
        names.clear();
        names.extend(step_uses.iter().copied().filter(|&(_, used)| wanted(used)));
        if names.is_empty() {
            continue;
        }
        let args = &recipe.steps[step].args;
        let tasks = if args.is_per_task() { graph.steps[step].tasks } else { 1 };
        for index in 0..tasks {
            graph.describe_task(recipe, step, index, &mut key, &mut dims);
            let lookup = |name: &str| dims.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
            let rendered = args.for_task(&lookup);
            for &(name, used) in &names {
                for path in paths(&rendered, name) {
                    f((step, index), name, path, used);
                }
            }
        }
    }
}

/// Whether `task` writes the file `resolved` (a hash matched: rendered again to be sure).
fn writes(
    compiled: &Compiled,
    uses: &[Vec<(&'static str, Use)>],
    (step, index): Task,
    resolved: &Path,
    resolver: &mut Resolver,
) -> bool {
    let (recipe, graph) = (&compiled.recipe, &compiled.graph);
    let (mut key, mut dims): (String, Vec<(&str, DimValue)>) = (String::new(), Vec::new());
    graph.describe_task(recipe, step, index, &mut key, &mut dims);
    let lookup = |name: &str| dims.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
    let rendered = recipe.steps[step].args.for_task(&lookup);
    let outputs = uses[step].iter().filter(|(_, u)| *u == Use::Writes);
    outputs.into_iter().any(|&(name, _)| paths(&rendered, name).any(|p| resolver.resolve(Path::new(p)) == resolved))
}

/// `step `save`[lead=2]`, or `step `save`` when its tasks have no dims.
fn describe(compiled: &Compiled, (step, index): Task) -> String {
    let (recipe, graph) = (&compiled.recipe, &compiled.graph);
    let (mut key, mut dims) = (String::new(), Vec::new());
    graph.describe_task(recipe, step, index, &mut key, &mut dims);
    let name = &recipe.steps[step].name;
    if key.is_empty() || !recipe.steps[step].args.is_per_task() {
        format!("step `{name}`")
    } else {
        format!("step `{name}`[{key}]")
    }
}

/// `after[a][b]`: step `b` comes after step `a` (takes its values, directly or through others).
fn downstream(compiled: &Compiled) -> Vec<Vec<bool>> {
    let graph = &compiled.graph;
    let steps = graph.steps.len();
    let mut after = vec![vec![false; steps]; steps];
    // Consumers first, so each one's row is whole when its producers take it in.
    for &step in graph.topo.iter().rev() {
        for &edge in &graph.steps[step].outputs {
            let consumer = graph.edges[edge].consumer;
            let reached = after[consumer].clone();
            after[step][consumer] = true;
            for (a, b) in after[step].iter_mut().zip(reached) {
                *a |= b;
            }
        }
    }
    after
}
