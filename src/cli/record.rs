//! The CLI's side of the feedback loop: which store to use (`--db`, `RUNNER_DB`,
//! `--no-record`), learning estimates from it before a run, and recording every task into it.
//!
//! What is learned from: the finished runs of a step (ok or failed) and the killed ones — a
//! killed run's rows were measured like any other, only the tasks running when it died are
//! missing — but not interrupted runs (Ctrl-C, SIGTERM): a run stopped on purpose is often a
//! run that went wrong (a wrong budget, a wrong input), and its cycle is incomplete.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::interrupt::{self, InterruptGuard};
use crate::Compiled;
use crate::estimate::{Observation, Params};
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
/// List dims up to this many values get a value → position map, so that their tasks' indices
/// are recorded; a longer list's tasks are recorded by key alone.
const INDEXED_LIST_VALUES: usize = 1 << 16;

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
    // (run index, observation with age still unknown).
    let mut rows: Vec<(usize, Observation)> = Vec::new();
    let runs = store.task_history(recipe, step, HISTORY_RUNS, Some(HISTORY_TASKS_PER_RUN), |_, task| {
        if task.status != TaskStatus::Skipped {
            let observation = Observation {
                age: 0,
                peak: task.peak_bytes,
                plugin_estimate: task.plugin_estimate_bytes.unwrap_or(0),
                input_bytes: task.input_bytes,
                estimate: task.estimate_bytes,
            };
            rows.push((task.run_index, observation));
        }
    })?;
    let newest = runs.len().saturating_sub(1);
    Ok(rows.into_iter().map(|(index, o)| Observation { age: (newest - index) as u32, ..o }).collect())
}

/// Makes each step's history the source of its estimates, where there is history.
pub fn learn(store: &Store, compiled: &mut Compiled) {
    let recipe = compiled.recipe.name.clone();
    let history = |step: &str| -> Vec<Observation> {
        step_observations(store, &recipe, step).unwrap_or_else(|e| {
            tracing::warn!("cannot read the history of step `{step}`: {e}");
            Vec::new()
        })
    };
    let Compiled { recipe: steps, plan, .. } = compiled;
    plan.learn(steps, &history, Params::default());
}

/// The run row a run of `compiled` under `options` starts with, declaring the steps whose keys
/// the store can spell from task indices.
pub fn run_start(compiled: &Compiled, options: &RunOptions) -> RunStart {
    let keys = KeyParser::for_recipe(compiled)
        .into_iter()
        .zip(&compiled.recipe.steps)
        .filter_map(|(parser, step)| parser.spelling(&step.name))
        .collect();
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

/// How one dim's value is read back from a key.
#[derive(Debug, Clone)]
enum DimReader {
    /// `value0 + value_step * position`.
    Arithmetic { value0: i64, value_step: i64, size: u64 },
    /// A list's values by their text.
    Listed { positions: Arc<HashMap<String, u64>>, size: u64 },
    /// A list too long to index (or a kind of dim this reader does not know).
    Unindexed,
}

/// Turns a step's task keys (`name=value,...`) back into task indices, and says whether the
/// store can spell the keys from the indices (every dim arithmetic).
#[derive(Debug, Clone)]
struct KeyParser {
    /// `name=` of each dim, and `,name=` of each dim after the first.
    names: Vec<(String, KeyDimName)>,
    readers: Vec<DimReader>,
}

#[derive(Debug, Clone)]
struct KeyDimName {
    prefix: String,
    separator: String,
}

impl KeyParser {
    /// One per step of the recipe, in step order.
    fn for_recipe(compiled: &Compiled) -> Vec<KeyParser> {
        let recipe = &compiled.recipe;
        let mut lists: HashMap<usize, Arc<HashMap<String, u64>>> = HashMap::new();
        let mut reader = |dim_id: usize| -> DimReader {
            let dim = &recipe.dims[dim_id];
            match &dim.values {
                DimValues::Range { start, step, len } => {
                    let last = start.checked_add(step.checked_mul(len.saturating_sub(1) as i64).unwrap_or(i64::MAX));
                    match last {
                        Some(_) if *len > 0 => DimReader::Arithmetic { value0: *start, value_step: *step, size: *len },
                        _ => DimReader::Unindexed,
                    }
                }
                DimValues::Group { len, .. } => DimReader::Arithmetic { value0: 0, value_step: 1, size: *len },
                DimValues::List(values) if values.len() <= INDEXED_LIST_VALUES => {
                    let positions = lists.entry(dim_id).or_insert_with(|| {
                        Arc::new(values.iter().enumerate().map(|(i, v)| (v.to_string(), i as u64)).collect())
                    });
                    DimReader::Listed { positions: positions.clone(), size: values.len() as u64 }
                }
                // Longer lists, and kinds of dims without a reader here yet: recorded by key alone.
                _ => DimReader::Unindexed,
            }
        };
        compiled
            .graph
            .steps
            .iter()
            .map(|shape| {
                let names = shape
                    .dims
                    .iter()
                    .map(|&d| {
                        let name = recipe.dims[d].name.clone();
                        let names = KeyDimName { prefix: format!("{name}="), separator: format!(",{name}=") };
                        (name, names)
                    })
                    .collect();
                KeyParser { names, readers: shape.dims.iter().map(|&d| reader(d)).collect() }
            })
            .collect()
    }

    /// The store's spelling of this step's keys, if every dim is arithmetic.
    fn spelling(&self, step: &str) -> Option<StepKeys> {
        let dims = self
            .names
            .iter()
            .zip(&self.readers)
            .map(|((name, _), reader)| match *reader {
                DimReader::Arithmetic { value0, value_step, size } => {
                    Some(KeyDim { name: name.clone(), value0, value_step, size })
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(StepKeys { step: step.to_string(), dims })
    }

    /// The linear index of the task with `key`, if the key reads back.
    fn index_of(&self, key: &str) -> Option<u64> {
        let mut rest = key;
        let mut index: u64 = 0;
        for (pos, ((_, names), reader)) in self.names.iter().zip(&self.readers).enumerate() {
            let marker = if pos == 0 { &names.prefix } else { &names.separator };
            rest = rest.strip_prefix(marker.as_str())?;
            let value = match self.names.get(pos + 1) {
                Some((_, next)) => {
                    let end = rest.find(next.separator.as_str())?;
                    let (value, after) = rest.split_at(end);
                    rest = after;
                    value
                }
                None => std::mem::take(&mut rest),
            };
            let (position, size) = match reader {
                DimReader::Arithmetic { value0, value_step, size } => {
                    let offset = i128::from(value.parse::<i64>().ok()?) - i128::from(*value0);
                    let step = i128::from(*value_step);
                    if step == 0 || offset % step != 0 || offset / step < 0 {
                        return None;
                    }
                    (u64::try_from(offset / step).ok()?, *size)
                }
                DimReader::Listed { positions, size } => (*positions.get(value)?, *size),
                DimReader::Unindexed => return None,
            };
            if position >= size {
                return None;
            }
            index = index.checked_mul(size)?.checked_add(position)?;
        }
        rest.is_empty().then_some(index)
    }
}

/// Records a worker buffers before sending them on, at most.
const RECORDS_PER_MESSAGE: usize = 256;

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
    /// Per step: how its keys read back as indices, and whether the store spells them.
    keys: Vec<(KeyParser, bool)>,
    /// Each worker's records since its last flush; only that worker touches its own.
    pending: Box<[Mutex<Vec<TaskRecord>>]>,
}

impl StoreSink {
    /// `start` is the run row `recorder` started with (its key spellings).
    pub fn new(recorder: RunRecorder, start: &RunStart, compiled: &Compiled, workers: usize) -> StoreSink {
        let spelled: Vec<&str> = start.keys.iter().map(|k| k.step.as_str()).collect();
        let keys = KeyParser::for_recipe(compiled)
            .into_iter()
            .zip(&compiled.recipe.steps)
            .map(|(parser, step)| (parser, spelled.contains(&step.name.as_str())))
            .collect();
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
            keys,
            pending: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
        }
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

    fn to_record(&self, task: &TaskReport<'_>) -> TaskRecord {
        // By index, not by comparing names: this runs for every task.
        let (step, keys) = match (self.steps.get(task.step_id), self.keys.get(task.step_id)) {
            (Some(name), Some(keys)) if &**name == task.step => (name.clone(), Some(keys)),
            _ => (Arc::from(task.step), None),
        };
        let task_index = keys.and_then(|(parser, _)| parser.index_of(task.key));
        let spelled = keys.is_some_and(|(_, spelled)| *spelled) && task_index.is_some();
        TaskRecord {
            step,
            task_index,
            key: (!spelled).then(|| task.key.to_string()),
            plugin: task.plugin,
            status: match task.outcome {
                Outcome::Ok => TaskStatus::Ok,
                Outcome::Failed => TaskStatus::Failed,
                Outcome::Skipped => TaskStatus::Skipped,
            },
            attempts: task.attempts,
            input_bytes: task.input_bytes,
            estimate_bytes: task.estimate,
            estimate_source: task.source,
            plugin_estimate_bytes: task.plugin_estimate,
            peak_bytes: task.peak,
            peak_source: task.peak_source,
            output_bytes: task.output_bytes,
            wall_ms: task.wall.as_millis() as u64,
            worker: task.worker as u32,
            start_ms: task.started.as_millis() as u64,
            log_path: task.log_path.map(|p| p.display().to_string()),
            args_hash: None,
            inputs_hash: None,
            output_hash: None,
            output_path: None,
            error: task.error.map(str::to_string),
        }
    }
}

impl TaskSink for StoreSink {
    fn record(&self, task: &TaskReport<'_>) {
        let record = self.to_record(task);
        match self.pending.get(task.worker) {
            Some(pending) => {
                let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
                pending.push(record);
                // A long run of skipped tasks is reported before any flush: bound what waits here.
                if pending.len() >= RECORDS_PER_MESSAGE {
                    self.recorder.record_all(std::mem::take(&mut *pending));
                }
            }
            None => self.recorder.record(record),
        }
    }

    fn flush(&self, worker: usize) {
        if let Some(pending) = self.pending.get(worker) {
            let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
            if !pending.is_empty() {
                self.recorder.record_all(std::mem::take(&mut *pending));
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
    fn keys_read_back_as_the_indices_the_engine_gave_them() {
        let c = compiled(
            "recipe: r\ndims:\n  member: 3\n  hour: {start: 6, stop: 15, step: 3}\n  lead: [1, 12, 3]\n  name: [\"a,b=c\", x]\nsteps:\n  s:\n    plugin: noop\n    over: [member, hour]\n  l:\n    plugin: noop\n    over: [lead, member]\n  n:\n    plugin: noop\n    over: [name]\n",
        );
        let parsers = KeyParser::for_recipe(&c);
        let s = &parsers[0];
        assert_eq!(s.index_of("member=0,hour=6"), Some(0));
        assert_eq!(s.index_of("member=2,hour=15"), Some(11));
        assert_eq!(s.index_of("member=1,hour=7"), None, "not a value of the range");
        assert_eq!(s.index_of("member=3,hour=6"), None, "beyond the dim");
        assert_eq!(s.index_of("member=1"), None);
        let spelling = s.spelling("s").unwrap();
        for i in 0..12 {
            assert_eq!(s.index_of(&spelling.key(i)), Some(i));
        }
        let l = &parsers[1];
        assert_eq!(l.index_of("lead=3,member=1"), Some(7));
        assert!(l.spelling("l").is_none(), "a list's values are not arithmetic");
        let n = &parsers[2];
        assert_eq!(n.index_of("name=a,b=c"), Some(0), "a value may hold separators");
        assert_eq!(n.index_of("name=x"), Some(1));
        assert_eq!(n.index_of("name=y"), None);
    }
}
