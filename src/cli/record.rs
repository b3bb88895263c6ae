//! The CLI's side of the feedback loop: which store to use (`--db`, `RUNNER_DB`,
//! `--no-record`), learning estimates from it before a run, and recording every task into it.
//!
//! What is learned from: the finished runs of a step (ok or failed) and the killed ones — a
//! killed run's rows were measured like any other, only the tasks running when it died are
//! missing — but not interrupted runs (Ctrl-C, SIGTERM): a run stopped on purpose is often a
//! run that went wrong (a wrong budget, a wrong input), and its cycle is incomplete.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::interrupt::{self, InterruptGuard};
use crate::Compiled;
use crate::estimate::{Observation, Params};
use crate::plan::EstimateSource;
use crate::recipe::DimValues;
use crate::scheduler::{Outcome, RunOptions, TaskReport, TaskSink};
use crate::store::writer::INTERRUPT_WAIT;
use crate::store::{
    Executor, KeyDim, RunOutcome, RunRecorder, RunStart, RunStatus, RunWritten, StepKeys, Store, StoreError,
    TaskRecord, TaskStatus,
};

/// Runs of a step the estimator learns from.
pub const HISTORY_RUNS: usize = 16;
/// Tasks per run it reads at most (a million-task step is learned from a sample).
pub const HISTORY_TASKS_PER_RUN: u64 = 5_000;

/// Opens (or creates) the store at `path` for recording.
pub fn open_for_recording(path: &Path) -> anyhow::Result<Store> {
    Ok(Store::open(path)?)
}

/// Opens the store at `path` for reading only: `None` when there is none. Nothing is written
/// (`plan`, `history`, `run --no-record`).
pub fn open_for_reading(path: &Path) -> Result<Option<Store>, StoreError> {
    Store::open_read_only(path)
}

/// [`open_for_reading`] for commands that can do without history (`plan`, `run --no-record`):
/// a store of an older schema is skipped with a warning rather than refused.
pub fn open_history(path: &Path) -> anyhow::Result<Option<Store>> {
    match open_for_reading(path) {
        Err(error @ StoreError::TooOld { .. }) => {
            tracing::warn!("{error}; estimates do not use its history until then");
            Ok(None)
        }
        other => Ok(other?),
    }
}

/// The default store path: `RUNNER_DB` or `runner.db` in the working directory.
pub fn default_db() -> PathBuf {
    std::env::var_os("RUNNER_DB").map_or_else(|| PathBuf::from("runner.db"), PathBuf::from)
}

/// What the estimator learns `step` of `recipe` from: its last [`HISTORY_RUNS`] runs' tasks
/// (a sample of [`HISTORY_TASKS_PER_RUN`] of each), their ages counted back from the newest run.
/// Interrupted runs are left out (see the [module](self) documentation).
pub fn step_observations(store: &Store, recipe: &str, step: &str) -> Result<Vec<Observation>, StoreError> {
    Ok(step_history(store, recipe, step)?.0)
}

/// [`step_observations`], and the longest wall time of those tasks (`None` without any).
fn step_history(store: &Store, recipe: &str, step: &str) -> Result<(Vec<Observation>, Option<Duration>), StoreError> {
    // (run index, observation with age still unknown).
    let mut rows: Vec<(usize, Observation)> = Vec::new();
    let mut longest_ms = 0;
    let runs = store.task_history(recipe, step, HISTORY_RUNS, Some(HISTORY_TASKS_PER_RUN), |_, task| {
        // Reused tasks were measured by the run they come from, which is learned from already.
        if !matches!(task.status, TaskStatus::Skipped | TaskStatus::Reused) {
            longest_ms = longest_ms.max(task.wall_ms);
            let observation = Observation {
                age: 0,
                peak: task.peak_bytes,
                plugin_estimate: task.plugin_estimate_bytes.unwrap_or(0),
                input_bytes: task.input_bytes,
                estimate: task.estimate_bytes,
                from_history: task.estimate_source == Some(EstimateSource::History),
            };
            rows.push((task.run_index, observation));
        }
    })?;
    let newest = runs.len().saturating_sub(1);
    let observations = rows.into_iter().map(|(index, o)| Observation { age: (newest - index) as u32, ..o }).collect();
    Ok((observations, (!runs.is_empty()).then(|| Duration::from_millis(longest_ms))))
}

/// Makes each step's history the source of its estimates, where there is history.
/// Also notes each step's longest recorded task (what a Slurm job's `--time` is learned from).
pub fn learn(store: &Store, compiled: &mut Compiled) {
    let Compiled { recipe, plan, .. } = compiled;
    let recipe = &*recipe;
    let histories: Vec<(Vec<Observation>, Option<Duration>)> = recipe
        .steps
        .iter()
        .map(|step| {
            step_history(store, &recipe.name, &step.name).unwrap_or_else(|e| {
                tracing::warn!("cannot read the history of step `{}`: {e}", step.name);
                (Vec::new(), None)
            })
        })
        .collect();
    let history = |name: &str| -> Vec<Observation> {
        recipe.steps.iter().position(|s| s.name == name).map(|at| histories[at].0.clone()).unwrap_or_default()
    };
    plan.learn(recipe, &history, Params::default());
    for (step, (_, longest)) in plan.steps.iter_mut().zip(&histories) {
        step.longest_task = *longest;
    }
}

/// The run row a run of `compiled` under `options` starts with, declaring the steps whose keys
/// the store can spell from task indices.
pub fn run_start(compiled: &Compiled, options: &RunOptions) -> RunStart {
    let keys = key_spellings(compiled).into_iter().flatten().collect();
    RunStart {
        tasks_total: compiled.graph.total_tasks(),
        executor: Executor::Local,
        resumed_from: None,
        keys,
        ..RunStart::new(
            compiled.recipe.name.clone(),
            compiled.recipe.cycle.clone(),
            options.budget,
            options.workers as u32,
        )
    }
}

/// The store's spelling of each step's keys from task indices (in step order), for the steps
/// whose dims are all arithmetic (counts, ranges, groups): their keys need not be stored.
fn key_spellings(compiled: &Compiled) -> Vec<Option<StepKeys>> {
    let recipe = &compiled.recipe;
    let arithmetic = |dim_id: usize| -> Option<KeyDim> {
        let dim = &recipe.dims[dim_id];
        let (value0, value_step, size) = match &dim.values {
            DimValues::Range { start, step, len } if *len > 0 => {
                start.checked_add(step.checked_mul(i64::try_from(len - 1).ok()?)?)?;
                (*start, *step, *len)
            }
            DimValues::Group { len, .. } => (0, 1, *len),
            _ => return None,
        };
        Some(KeyDim { name: dim.name.clone(), value0, value_step, size })
    };
    compiled
        .graph
        .steps
        .iter()
        .zip(&recipe.steps)
        .map(|(shape, step)| {
            let dims = shape.dims.iter().map(|&d| arithmetic(d)).collect::<Option<Vec<_>>>()?;
            Some(StepKeys { step: step.name.clone(), dims })
        })
        .collect()
}

/// Records a worker buffers before sending them on, at most.
const RECORDS_PER_MESSAGE: usize = 256;
/// Room a new batch is made with: a worker sends what it reported in one turn, at most a
/// claimed batch of quick tasks (64) but for runs of skipped tasks.
const NEW_BATCH_ROWS: usize = 64;

/// Records finished tasks through a store's writer thread, a batch of a worker's tasks at a
/// time (one channel message per batch rather than per task). While it lives, Ctrl-C and
/// SIGTERM complete the run row as `interrupted` (with every row finished by then) before the
/// process exits.
pub struct StoreSink {
    /// First, so that it goes before the recorder when the sink is dropped.
    _interrupt: Option<InterruptGuard>,
    recorder: RunRecorder,
    /// Step names shared by every record of the step.
    steps: Vec<Arc<str>>,
    /// Per step: whether the store spells its keys from task indices (so none is stored).
    spelled: Vec<bool>,
    /// Each worker's records since its last flush; only that worker touches its own.
    pending: Box<[Mutex<Filling>]>,
    /// Rows made new (not overwritten): bounded by the batches in circulation.
    rows_made: AtomicU64,
}

/// A worker's batch being filled: its first `used` rows are this batch's; the rest are rows of
/// a committed batch the writer handed back, overwritten in place as tasks finish so that their
/// strings' room is reused rather than allocated again.
#[derive(Default)]
struct Filling {
    rows: Vec<TaskRecord>,
    used: usize,
}

impl StoreSink {
    /// `start` is the run row `recorder` started with (its key spellings).
    pub fn new(recorder: RunRecorder, start: &RunStart, compiled: &Compiled, workers: usize) -> StoreSink {
        let spelled = compiled.recipe.steps.iter().map(|step| start.keys.iter().any(|k| k.step == step.name)).collect();
        let started = Instant::now();
        let interrupt = recorder.interrupt_handle().map(|handle| {
            interrupt::on_interrupt(move || {
                let outcome = RunOutcome {
                    wall_ms: started.elapsed().as_millis() as u64,
                    peak_rss_bytes: crate::measure::process_memory().map_or(0, |m| m.peak_rss_bytes),
                    ..RunOutcome::new(RunStatus::Interrupted)
                };
                if !handle.interrupt(outcome, INTERRUPT_WAIT) {
                    eprintln!("run {} could not be marked interrupted in the store in time", handle.run_id());
                }
            })
        });
        StoreSink {
            _interrupt: interrupt,
            recorder,
            steps: compiled.recipe.steps.iter().map(|s| Arc::from(s.name.as_str())).collect(),
            spelled,
            pending: (0..workers).map(|_| Mutex::new(Filling::default())).collect(),
            rows_made: AtomicU64::new(0),
        }
    }

    /// Rows made so far rather than overwritten (each with its strings): at most a batch's
    /// worth per batch in circulation, however many tasks the run has.
    pub fn rows_made(&self) -> u64 {
        self.rows_made.load(Ordering::Relaxed)
    }

    /// The recorder, for the sampler.
    pub fn recorder(&self) -> &RunRecorder {
        &self.recorder
    }

    /// Writes what is queued and completes the run row (see [`RunRecorder::finish`]).
    pub fn finish(self, outcome: RunOutcome) -> Result<RunWritten, StoreError> {
        // A signal from now on has nothing to mark: the run row is being completed.
        drop(self._interrupt);
        self.recorder.finish(outcome)
    }

    /// The record of `task` written over `row` (one of a handed-back batch, or a new one),
    /// every field set; a string field that already has room keeps it.
    fn fill(&self, row: &mut TaskRecord, task: &TaskReport<'_>) {
        // By index, not by comparing names: this runs for every task.
        let spelled = match (self.steps.get(task.step_id), self.spelled.get(task.step_id)) {
            (Some(name), Some(&spelled)) if &**name == task.step => {
                if !Arc::ptr_eq(&row.step, name) {
                    row.step = name.clone();
                }
                spelled
            }
            _ => {
                row.step = Arc::from(task.step);
                false
            }
        };
        set_text(&mut row.key, (!spelled).then_some(task.key));
        row.task_index = Some(task.index);
        row.plugin = task.plugin;
        row.status = match task.outcome {
            Outcome::Ok => TaskStatus::Ok,
            Outcome::Failed => TaskStatus::Failed,
            Outcome::Skipped | Outcome::Dropped => TaskStatus::Skipped,
            Outcome::Reused => TaskStatus::Reused,
        };
        row.attempts = task.attempts;
        row.input_bytes = task.input_bytes;
        row.estimate_bytes = task.estimate;
        row.estimate_source = task.source;
        row.plugin_estimate_bytes = task.plugin_estimate;
        row.peak_bytes = task.peak;
        row.peak_source = task.peak_source;
        row.output_bytes = task.output_bytes;
        row.wall_ms = task.wall.as_millis() as u64;
        row.worker = task.worker as u32;
        row.start_ms = task.started.as_millis() as u64;
        set_path(&mut row.log_path, task.log_path);
        row.args_hash = task.hashes.map(|h| h.args);
        row.inputs_hash = task.hashes.map(|h| h.inputs);
        row.output_hash = task.hashes.map(|h| h.output);
        set_path(&mut row.output_path, task.output_path);
        set_text(&mut row.error, task.error);
    }

    /// Appends `task` to `filling`, overwriting a handed-back row where there is one.
    fn append(&self, filling: &mut Filling, task: &TaskReport<'_>) {
        if filling.used == filling.rows.len() {
            let step = self.steps.get(task.step_id).cloned().unwrap_or_else(|| Arc::from(task.step));
            filling.rows.push(TaskRecord::new(step, task.plugin, TaskStatus::Ok));
            self.rows_made.fetch_add(1, Ordering::Relaxed);
        }
        self.fill(&mut filling.rows[filling.used], task);
        filling.used += 1;
    }

    /// Sends the rows `filling` holds (its spare rows travel along), taking a spare batch to
    /// fill next.
    fn send(&self, filling: &mut Filling) {
        let rows = std::mem::replace(&mut filling.rows, self.recorder.spare_batch(NEW_BATCH_ROWS));
        self.recorder.record_first(rows, std::mem::take(&mut filling.used));
    }
}

/// Room a new text field gets beyond its first text: keys grow as a run goes on (`i=99999`,
/// `i=100000`), and a reused string that had to grow would allocate again.
const TEXT_HEADROOM: usize = 16;

/// Sets an optional text field, reusing the room of the string already there.
fn set_text(field: &mut Option<String>, text: Option<&str>) {
    match (field.as_mut(), text) {
        (Some(old), Some(text)) => {
            old.clear();
            if old.capacity() < text.len() {
                old.reserve(text.len() + TEXT_HEADROOM);
            }
            old.push_str(text);
        }
        (None, Some(text)) => {
            let mut new = String::with_capacity(text.len() + TEXT_HEADROOM);
            new.push_str(text);
            *field = Some(new);
        }
        (_, None) => *field = None,
    }
}

/// [`set_text`] for a path, as the store keeps it (lossily, when not UTF-8).
fn set_path(field: &mut Option<String>, path: Option<&Path>) {
    match path {
        Some(path) => match path.to_str() {
            Some(text) => set_text(field, Some(text)),
            None => *field = Some(path.display().to_string()),
        },
        None => *field = None,
    }
}

impl TaskSink for StoreSink {
    fn record(&self, task: &TaskReport<'_>) {
        match self.pending.get(task.worker) {
            Some(pending) => {
                let mut filling = pending.lock().unwrap_or_else(|p| p.into_inner());
                self.append(&mut filling, task);
                // A long run of skipped tasks is reported before any flush: bound what waits here.
                if filling.used >= RECORDS_PER_MESSAGE {
                    self.send(&mut filling);
                }
            }
            None => {
                let mut filling = Filling::default();
                self.append(&mut filling, task);
                self.send(&mut filling);
            }
        }
    }

    fn flush(&self, worker: usize) {
        if let Some(pending) = self.pending.get(worker) {
            let mut filling = pending.lock().unwrap_or_else(|p| p.into_inner());
            if filling.used > 0 {
                self.send(&mut filling);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::CompileOptions;
    use crate::registry::Registry;

    fn compiled(text: &str) -> Compiled {
        let registry = Registry::new(runner_std_plugins::all());
        let options = CompileOptions { cycle: "c".into(), set: vec![] };
        Compiled::from_text(Path::new("r.yaml"), text, &options, &registry).unwrap()
    }

    #[test]
    fn the_store_spells_the_keys_the_engine_gives() {
        let c = compiled(
            "recipe: r\ndims:\n  member: 3\n  hour: {start: 6, stop: 15, step: 3}\n  lead: [1, 12, 3]\n  chunk: {group: hour, size: 2}\nsteps:\n  s:\n    plugin: noop\n    over: [member, hour]\n  l:\n    plugin: noop\n    over: [lead, member]\n  g:\n    plugin: noop\n    over: [chunk]\n",
        );
        let spellings = key_spellings(&c);
        let (mut key, mut pairs) = (String::new(), Vec::new());
        for (step, spelling) in [(0, &spellings[0]), (2, &spellings[2])] {
            let spelling = spelling.as_ref().expect("arithmetic dims are spelled");
            for index in 0..c.graph.steps[step].tasks {
                c.graph.describe_task(&c.recipe, step, index, &mut key, &mut pairs);
                assert_eq!(spelling.key(index), key);
            }
        }
        assert!(spellings[1].is_none(), "a list's values are not arithmetic: its keys are stored");
    }
}
