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

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use runner_plugin::{
    CommandOutcome, CommandSpec, DimValue, FailureKind, Host, Input, Inputs, ServiceIo, ServiceSpec, TaskContext,
    TaskError, Value, task_tag,
};
use serde::{Deserialize, Serialize};

use crate::Compiled;
use crate::command;
use crate::measure::{self, PeakSource};
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
    }
}

/// The [`FailureKind`] named `name` in a result file.
pub fn failure_kind(name: &str) -> FailureKind {
    match name {
        "missing_input" => FailureKind::MissingInput,
        "out_of_memory" => FailureKind::OutOfMemory,
        "timed_out" => FailureKind::TimedOut,
        "cancelled" => FailureKind::Cancelled,
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

/// Runs one task, measured, and writes its value.
fn run_one(compiled: &Compiled, folder: &RunFolder, step_id: StepId, index: u64) -> TaskResult {
    let started = Instant::now();
    let step = &compiled.recipe.steps[step_id];
    let (mut key, mut pairs) = (String::new(), Vec::new());
    compiled.graph.describe_task(&compiled.recipe, step_id, index, &mut key, &mut pairs);
    let failed = |error: TaskError, peak: u64, log_path: Option<PathBuf>| TaskResult {
        ok: false,
        failure: Some(failure_name(error.kind()).to_string()),
        error: Some(error.to_string()),
        peak_bytes: peak,
        peak_source: PeakSource::Allocator.as_str().to_string(),
        wall_ms: started.elapsed().as_millis() as u64,
        output_bytes: 0,
        value: None,
        log_path,
    };
    let (values, counts) = match read_inputs(compiled, folder, step_id, index) {
        Ok(inputs) => inputs,
        Err(error) => return failed(error, 0, None),
    };
    let tag = match measure::begin_new_task() {
        Ok(tag) => tag,
        Err(error) => return failed(TaskError::msg(format!("cannot measure the task: {error}")), 0, None),
    };
    let lookup = |name: &str| pairs.iter().find(|(n, _): &&(&str, DimValue)| *n == name).map(|(_, v)| v.clone());
    let args = step.args.for_task(&lookup);
    let host = JobHost {
        scratch: folder.root.join("scratch").join(&step.name).join(sanitize(&key)),
        log: folder.logs().join(&step.name).join(format!("{}.log", sanitize(&key))),
        timeout: step.timeout,
        started,
        tag,
        commands: Mutex::new(None),
    };
    let ctx = TaskContext::new(&step.name, &key, &compiled.recipe.cycle, &pairs, tag, &host);
    let mut inputs: Vec<Input<'_>> = Vec::new();
    let mut at = 0;
    for (&edge, &count) in compiled.graph.steps[step_id].inputs.iter().zip(&counts) {
        let e = &compiled.graph.edges[edge];
        inputs.push(Input::new(&step.inputs[e.input].name, e.gathered, &values[at..at + count]));
        at += count;
    }
    let outcome =
        task_tag::with(tag, || catch_unwind(AssertUnwindSafe(|| step.plugin.run(&ctx, &args, &Inputs::new(&inputs)))));
    let memory = measure::end_task(tag).ok();
    let mut peak = memory.map_or(0, |m| m.peak_bytes);
    let mut peak_source = PeakSource::Allocator;
    let command = host.commands.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(command) = &command
        && command.peak > peak
    {
        (peak, peak_source) = (command.peak, command.source);
    }
    let log_path = command.map(|c| c.log_path);
    let outcome = match outcome {
        Ok(result) => result,
        Err(panic) => Err(TaskError::msg(format!("panicked: {}", crate::panics::message(&*panic)))),
    };
    let outcome = match (outcome, step.timeout) {
        (Ok(_), Some(limit)) if started.elapsed() > limit => Err(TaskError::of_kind(
            FailureKind::TimedOut,
            format!(
                "timed out: it ran {:.1} s, its step's timeout is {:.1} s",
                started.elapsed().as_secs_f64(),
                limit.as_secs_f64()
            ),
        )),
        (outcome, _) => outcome,
    };
    let output = match outcome {
        Ok(output) => output,
        Err(error) => {
            return TaskResult { peak_source: peak_source.as_str().to_string(), ..failed(error, peak, log_path) };
        }
    };
    let output_bytes = output.buffer_bytes();
    let value = match values::write(&folder.values(&step.name), index, &output) {
        Ok(path) => path.strip_prefix(&folder.root).map(Path::to_path_buf).unwrap_or(path),
        Err(error) => return failed(TaskError::msg(format!("cannot keep the output: {error}")), peak, log_path),
    };
    TaskResult {
        ok: true,
        failure: None,
        error: None,
        peak_bytes: peak,
        peak_source: peak_source.as_str().to_string(),
        wall_ms: started.elapsed().as_millis() as u64,
        output_bytes,
        value: Some(value),
        log_path,
    }
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

/// Makes a task key usable as a file name.
fn sanitize(key: &str) -> String {
    if key.is_empty() {
        return "_".into();
    }
    key.chars().map(|c| if c.is_alphanumeric() || "=-_.,".contains(c) { c } else { '_' }).collect()
}

/// The engine services of a task inside a job: a scratch folder, commands measured and logged,
/// the step's timeout. The job's `--mem` is its memory limit, so there is no ledger to grow.
struct JobHost {
    scratch: PathBuf,
    log: PathBuf,
    timeout: Option<Duration>,
    started: Instant,
    tag: u32,
    commands: Mutex<Option<command::CommandMeasured>>,
}

impl Host for JobHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.scratch)?;
        Ok(self.scratch.clone())
    }

    fn will_allocate(&self, _bytes: u64) {}

    fn cancelled(&self) -> bool {
        self.timeout.is_some_and(|limit| self.started.elapsed() > limit)
    }

    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        let cancelled = || self.cancelled();
        let task = command::TaskCommand {
            default_log: self.log.clone(),
            timeout: self.timeout,
            limit: None,
            tag: self.tag,
            cancelled: &cancelled,
        };
        command::run_for_task(spec, &task, |measured| self.note_measured(measured))
    }

    fn serve(
        &self,
        spec: &ServiceSpec,
        work: &mut dyn FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    ) -> Result<Value, TaskError> {
        let cancelled = || self.cancelled();
        let task = command::TaskCommand {
            default_log: self.log.clone(),
            timeout: self.timeout,
            limit: None,
            tag: self.tag,
            cancelled: &cancelled,
        };
        command::service::serve_for_task(spec, &task, work, |measured| self.note_measured(measured))
    }
}

impl JobHost {
    fn note_measured(&self, measured: &command::CommandMeasured) {
        let mut record = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        match record.as_mut() {
            Some(r) if r.peak > measured.peak => r.log_path = measured.log_path.clone(),
            _ => *record = Some(measured.clone()),
        }
    }
}
