//! The run-time half of "two tasks never write one file": before a task runs, each path its
//! args name as output ([`ArgKind::OutputPath`]) is claimed for it; a path another task of the
//! run claimed already fails the task, naming the other. The compile-time check catches a
//! template that leaves out a dim; this catches what it cannot see: paths that coincide across
//! several dims (`{a}{b}` for 1,11 and 11,1), or across steps.
//!
//! Claims are kept as 64-bit hashes of the lexically normalised path (computed without
//! allocating; 16 bytes a path, not the path itself), and a hash match is confirmed by rendering the other task's path, so a
//! collision of hashes never fails a task. The claims' own lock is held only for the lookup.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use runner_plugin::{ArgKind, Args, DimValue};
use serde_json::Value as Json;
use xxhash_rust::xxh3::Xxh3;

use super::TaskRef;
use crate::graph::Graph;
use crate::recipe::Recipe;

pub struct OutputClaims {
    /// Per step, the args naming files its tasks write.
    args: Vec<Vec<&'static str>>,
    claimed: Mutex<HashMap<u64, TaskRef>>,
}

impl OutputClaims {
    pub fn new(recipe: &Recipe) -> OutputClaims {
        let args = recipe
            .steps
            .iter()
            .map(|step| step.plugin.args().iter().filter(|a| a.kind == ArgKind::OutputPath).map(|a| a.name).collect())
            .collect();
        OutputClaims { args, claimed: Mutex::new(HashMap::new()) }
    }

    /// Claims the output paths of `task`, whose args are `args`; the error names the path and
    /// the task that claimed it first.
    pub fn claim(&self, recipe: &Recipe, graph: &Graph, task: TaskRef, args: &Args) -> Result<(), String> {
        for &name in &self.args[task.step] {
            for path in paths(args, name) {
                let hash = normal_hash(Path::new(path));
                let other = {
                    let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
                    match claimed.entry(hash) {
                        Entry::Vacant(entry) => {
                            entry.insert(task);
                            continue;
                        }
                        Entry::Occupied(entry) if *entry.get() == task => continue,
                        Entry::Occupied(entry) => *entry.get(),
                    }
                };
                if let Some(key) = writes(recipe, graph, other, &self.args[other.step], &normalise(Path::new(path))) {
                    return Err(format!(
                        "output `{path}` is also written by {}[{key}] of this run: two tasks must not write one file \
                         (give the path a dim that tells them apart)",
                        recipe.steps[other.step].name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The paths arg `name` names: a string, or a list of them.
pub(crate) fn paths<'a>(args: &'a Args, name: &str) -> impl Iterator<Item = &'a str> {
    let (one, many) = match args.get(name) {
        Some(Json::String(path)) => (Some(path.as_str()), None),
        Some(Json::Array(items)) => (None, Some(items.iter().filter_map(Json::as_str))),
        _ => (None, None),
    };
    one.into_iter().chain(many.into_iter().flatten())
}

/// The key of `task` when one of its output args (`names`) renders to `normal`, else `None` (the
/// hashes collided).
fn writes(recipe: &Recipe, graph: &Graph, task: TaskRef, names: &[&str], normal: &Path) -> Option<String> {
    let (mut key, mut dims): (String, Vec<(&str, DimValue)>) = (String::new(), Vec::new());
    graph.describe_task(recipe, task.step, task.index, &mut key, &mut dims);
    let lookup = |name: &str| dims.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
    let args = recipe.steps[task.step].args.for_task(&lookup);
    let same = names.iter().any(|name| paths(&args, name).any(|p| normalise(Path::new(p)) == normal));
    same.then_some(key)
}

/// The hash of [`normalise`]`(path)`, without allocating (this runs for every task that writes a
/// file): the components are folded on a stack of at most [`FOLDED`], hashed one by one.
fn normal_hash(path: &Path) -> u64 {
    const FOLDED: usize = 64;
    let mut stack = [Component::CurDir; FOLDED];
    let mut len = 0;
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if len > 0 && matches!(stack[len - 1], Component::Normal(_)) => len -= 1,
            other if len < FOLDED => {
                stack[len] = other;
                len += 1;
            }
            // Deeper than any real path: folded the allocating way, hashed alike.
            _ => return hash_components(normalise(path).components()),
        }
    }
    hash_components(stack[..len].iter().copied())
}

fn hash_components<'a>(components: impl Iterator<Item = Component<'a>>) -> u64 {
    let mut hasher = Xxh3::new();
    for component in components {
        hasher.update(component.as_os_str().as_encoded_bytes());
        hasher.update(b"/");
    }
    hasher.digest()
}

/// `path` with `.` components dropped and `name/..` pairs folded, without touching the disk:
/// `out/./a/../b.npy` and `out/b.npy` are one file.
pub(crate) fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_lexically() {
        assert_eq!(normalise(Path::new("out/./a/../b.npy")), PathBuf::from("out/b.npy"));
        assert_eq!(normalise(Path::new("./b.npy")), PathBuf::from("b.npy"));
        assert_eq!(normalise(Path::new("../x/b.npy")), PathBuf::from("../x/b.npy"));
        assert_eq!(normalise(Path::new("/a//b")), PathBuf::from("/a/b"));
        assert_eq!(normal_hash(Path::new("out/./a/../b.npy")), normal_hash(Path::new("out/b.npy")));
        assert_ne!(normal_hash(Path::new("out/b.npy")), normal_hash(Path::new("out/a/b.npy")));
        assert_eq!(normal_hash(Path::new("../x/b.npy")), normal_hash(Path::new("./../x/b.npy")));
        let deep = "d/".repeat(100) + "f";
        assert_eq!(normal_hash(Path::new(&deep)), normal_hash(Path::new(&format!("./{deep}"))));
        let folded = "d/".repeat(100) + &"../".repeat(90) + "f";
        assert_eq!(normal_hash(Path::new(&folded)), normal_hash(Path::new(&("d/".repeat(10) + "f"))));
    }
}
