//! Inside a job: runs a unit of tasks of one step in this process (`runner task`), as the local
//! worker pool would — inputs read from the run folder's value files, each task measured by the
//! counting allocator (and its commands by their cgroups), its value and result written back.
//!
//! Layout of a run folder (`--shared-dir`/`<run>`), every file written atomically:
//! - `values/<step>/<index>.<kind>`: outputs ([`crate::values`]);
//! - `results/<step>/<index>.json`: each task's [`TaskResult`];
//! - `units/<unit>`: the task indices a job element runs, one per line; `units/array-<unit>`:
//!   the units of an array's elements, from its first;
//! - `jobs.tsv`: every job submitted (id, step, elements, `--mem`, `--time`);
//! - `logs/`, `scratch/`: the jobs' logs and the tasks' scratch folders.

use std::path::{Path, PathBuf};
use std::time::Instant;

use runner_plugin::{FailureKind, Input, Inputs, TaskError, Value};
use serde::{Deserialize, Serialize};

use super::attempt::{Limits, Site, TaskOutcome, TaskToRun, attempt};
use crate::plan::Compiled;
use crate::recipe::StepId;
use crate::values;

/// How a task that ran in a job ended, as its result file says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskResult {
    pub ok: bool,
    /// The failure's kind (`error`, `missing_input`, `out_of_memory`, `timed_out`, `cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub peak_bytes: u64,
    pub peak_source: String,
    pub wall_ms: u64,
    /// Of `wall_ms`, what the task waited for its services (interpreters) to start.
    #[serde(default)]
    pub waited_ms: u64,
    pub output_bytes: u64,
    /// The value file, relative to the run folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<PathBuf>,
}

/// A [`FailureKind`]'s name in result files.
pub fn failure_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Error => "error",
        FailureKind::MissingInput => "missing_input",
        FailureKind::OutOfMemory => "out_of_memory",
        FailureKind::TimedOut => "timed_out",
        FailureKind::Cancelled => "cancelled",
        FailureKind::Preempted => "preempted",
    }
}

/// The [`FailureKind`] named `name` in a result file.
pub fn failure_kind(name: &str) -> FailureKind {
    match name {
        "missing_input" => FailureKind::MissingInput,
        "out_of_memory" => FailureKind::OutOfMemory,
        "timed_out" => FailureKind::TimedOut,
        "cancelled" => FailureKind::Cancelled,
        "preempted" => FailureKind::Preempted,
        _ => FailureKind::Error,
    }
}

/// Where the files of the run folder `run_dir` are.
#[derive(Debug, Clone)]
pub struct RunFolder {
    pub root: PathBuf,
}

impl RunFolder {
    pub fn values(&self, step: &str) -> PathBuf {
        self.root.join("values").join(step)
    }
    pub fn result(&self, step: &str, index: u64) -> PathBuf {
        self.root.join("results").join(step).join(format!("{index}.json"))
    }
    pub fn unit(&self, unit: u64) -> PathBuf {
        self.root.join("units").join(unit.to_string())
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// The jobs submitted, one a line ([`super::slurm::JOBS_HEADER`]).
    pub fn jobs(&self) -> PathBuf {
        self.root.join("jobs.tsv")
    }

    /// Where each of the run's job processes notes its pid as it starts (`pids/<pid>`): the
    /// temporary files a killed job leaves are named by its pid ([`runner_plugin::files`]), and
    /// a run resuming this one removes them ([`crate::resume::remove_temp_files_of`]).
    pub fn pids(&self) -> PathBuf {
        self.root.join("pids")
    }

    /// Notes this process as one of the run's job processes ([`RunFolder::pids`]).
    pub fn note_job_process(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.pids())?;
        values::write_atomically(&self.pids().join(std::process::id().to_string()), b"")
    }

    /// Names the store's run this folder is the Slurm run folder of (written once the run is
    /// recorded): `--resume` takes the job pids of the killed run's folder only, not of an
    /// older folder of the same recipe and runner pid (pids repeat, in containers every time).
    pub fn note_run(&self, run_id: i64) -> std::io::Result<()> {
        values::write_atomically(&self.root.join("run"), run_id.to_string().as_bytes())
    }

    /// The store's run this folder noted, if it did.
    pub fn noted_run(&self) -> Option<i64> {
        std::fs::read_to_string(self.root.join("run")).ok()?.trim().parse().ok()
    }

    /// The pids the run's job processes noted.
    pub fn job_pids(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.pids()) else { return Vec::new() };
        entries.flatten().filter_map(|entry| entry.file_name().to_str()?.parse().ok()).collect()
    }

    /// The result of task `index` of `step`, if it has one.
    pub fn read_result(&self, step: &str, index: u64) -> Option<TaskResult> {
        let text = std::fs::read(self.result(step, index)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// What went wrong around the tasks (a task's own failure is its result, not this).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("no step `{0}` in the recipe")]
    NoStep(String),
    #[error("unit file {}: {source}", path.display())]
    Unit { path: PathBuf, source: std::io::Error },
    #[error("unit file {}: line `{line}` is not a task index", path.display())]
    BadIndex { path: PathBuf, line: String },
    #[error("writing the result of task {index}: {source}")]
    Result { index: u64, source: std::io::Error },
}

/// The task indices unit `unit` of `folder` lists.
pub fn read_unit(folder: &RunFolder, unit: u64) -> Result<Vec<u64>, JobError> {
    let path = folder.unit(unit);
    let text = std::fs::read_to_string(&path).map_err(|source| JobError::Unit { path: path.clone(), source })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse().map_err(|_| JobError::BadIndex { path: path.clone(), line: l.to_string() }))
        .collect()
}

/// Runs tasks `indices` of step `step` one after another, writing each one's value and result.
pub fn run_tasks(compiled: &Compiled, folder: &RunFolder, step: &str, indices: &[u64]) -> Result<(), JobError> {
    let step_id = compiled.recipe.step_id(step).ok_or_else(|| JobError::NoStep(step.to_string()))?;
    crate::panics::install_hook();
    if let Err(error) = folder.note_job_process() {
        // Only a resume's cleanup needs it: the tasks run all the same.
        tracing::warn!("cannot note this job's pid in {}: {error}", folder.pids().display());
    }
    for &index in indices {
        let result = run_one(compiled, folder, step_id, index);
        let text = serde_json::to_vec(&result).expect("a result serialises");
        let path = folder.result(step, index);
        std::fs::create_dir_all(path.parent().expect("a result file has a folder"))
            .and_then(|()| values::write_atomically(&path, &text))
            .map_err(|source| JobError::Result { index, source })?;
    }
    Ok(())
}

/// Runs one task, measured ([`attempt`]), and writes its value.
fn run_one(compiled: &Compiled, folder: &RunFolder, step_id: StepId, index: u64) -> TaskResult {
    let started = Instant::now();
    let step = &compiled.recipe.steps[step_id];
    let (mut key, mut pairs) = (String::new(), Vec::new());
    compiled.graph.describe_task(&compiled.recipe, step_id, index, &mut key, &mut pairs);
    let outcome = match read_inputs(compiled, folder, step_id, index) {
        Err(error) => TaskOutcome::failed(error, started),
        Ok((values, counts)) => {
            let mut inputs: Vec<Input<'_>> = Vec::new();
            let mut at = 0;
            for (&edge, &count) in compiled.graph.steps[step_id].inputs.iter().zip(&counts) {
                let e = &compiled.graph.edges[edge];
                inputs.push(Input::new(&step.inputs[e.input].name, e.gathered, &values[at..at + count]));
                at += count;
            }
            let inputs = Inputs::new(&inputs);
            let task = TaskToRun { step, key: &key, index: &pairs, cycle: &compiled.recipe.cycle, inputs: &inputs };
            let site = JobSite { scratch: folder.root.join("scratch"), logs: folder.logs() };
            // The job's `--mem` is its memory limit: its commands need none of their own.
            let limits = Limits { started, timeout: step.timeout, command_limit: None, reserved: 0 };
            attempt(&task, &site, &limits)
        }
    };
    let mut result = TaskResult {
        ok: false,
        failure: None,
        error: None,
        peak_bytes: outcome.peak,
        peak_source: outcome.peak_source.as_str().to_string(),
        wall_ms: 0,
        waited_ms: outcome.waited.as_millis() as u64,
        output_bytes: 0,
        value: None,
        log_path: outcome.log_path,
    };
    let kept = outcome.result.and_then(|output| {
        let path = values::write(&folder.values(&step.name), index, &output)
            .map_err(|error| TaskError::msg(format!("cannot keep the output: {error}")))?;
        Ok((output.buffer_bytes(), path.strip_prefix(&folder.root).map(Path::to_path_buf).unwrap_or(path)))
    });
    match kept {
        Ok((output_bytes, value)) => {
            (result.ok, result.output_bytes, result.value) = (true, output_bytes, Some(value));
        }
        Err(error) => {
            result.failure = Some(failure_name(error.kind()).to_string());
            result.error = Some(error.to_string());
        }
    }
    result.wall_ms = started.elapsed().as_millis() as u64;
    result
}

/// The inputs of task `index` of `step_id`, from its producers' value files, edge by edge in
/// gather order, with the count per input. A producer dropped under `on_missing: ignore` (a
/// result without a value) is left out of its gathers.
fn read_inputs(
    compiled: &Compiled,
    folder: &RunFolder,
    step_id: StepId,
    index: u64,
) -> Result<(Vec<std::sync::Arc<Value>>, Vec<usize>), TaskError> {
    let graph = &compiled.graph;
    let (mut values, mut counts) = (Vec::new(), Vec::new());
    for &edge in &graph.steps[step_id].inputs {
        let producer = &compiled.recipe.steps[graph.edges[edge].producer].name;
        let dir = folder.values(producer);
        let before = values.len();
        let mut problem = None;
        graph.for_each_producer(edge, index, |p| {
            if problem.is_some() {
                return;
            }
            match values::map(&dir, p) {
                Ok(value) => values.push(std::sync::Arc::new(value)),
                Err(_)
                    if folder
                        .read_result(producer, p)
                        .is_some_and(|r| r.failure.as_deref() == Some("missing_input")) => {}
                Err(error) => problem = Some(TaskError::msg(format!("input from step `{producer}`: {error}"))),
            }
        });
        if let Some(problem) = problem {
            return Err(problem);
        }
        counts.push(values.len() - before);
    }
    Ok((values, counts))
}

/// Where a task runs inside a job: scratch folders and logs in the run folder. The submitting
/// run claimed the task's outputs before it handed the unit over, and the job's `--mem` is its
/// memory limit, so there is no ledger to grow.
struct JobSite {
    scratch: PathBuf,
    logs: PathBuf,
}

impl Site for JobSite {
    fn claim_outputs(&self, _args: &runner_plugin::Args) -> Result<(), String> {
        Ok(())
    }

    fn scratch_root(&self) -> &Path {
        &self.scratch
    }

    fn log_root(&self) -> &Path {
        &self.logs
    }
}
