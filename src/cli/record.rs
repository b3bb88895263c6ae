//! The CLI's side of the feedback loop: which store to use (`--db`, `RUNNER_DB`,
//! `--no-record`), learning estimates from it before a run, and recording every task into it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use crate::Compiled;
use crate::estimate::{Observation, Params};
use crate::scheduler::{Outcome, TaskReport, TaskSink};
use crate::store::{RunRecorder, Store, StoreError, TaskRecord, TaskStatus};

/// Runs of a step the estimator learns from.
pub const HISTORY_RUNS: usize = 16;
/// Tasks per run it reads at most (a million-task step is learned from a sample).
pub const HISTORY_TASKS_PER_RUN: u64 = 5_000;

/// Opens the store at `path` for recording, or, with `read_only`, only if it already exists
/// (so `--no-record` and `runner plan` never create a file).
pub fn open(path: &Path, read_only: bool) -> anyhow::Result<Option<Store>> {
    if read_only && !path.exists() {
        return Ok(None);
    }
    let store = Store::open(path).with_context(|| format!("opening the feedback store {}", path.display()))?;
    Ok(Some(store))
}

/// The default store path: `RUNNER_DB` or `runner.db` in the working directory.
pub fn default_db() -> PathBuf {
    std::env::var_os("RUNNER_DB").map_or_else(|| PathBuf::from("runner.db"), PathBuf::from)
}

/// What the estimator learns `step` of `recipe` from: its last [`HISTORY_RUNS`] runs' tasks
/// (a sample of [`HISTORY_TASKS_PER_RUN`] of each), their ages counted back from the newest run.
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
                from_history: task.estimate_source == "history",
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

/// Records a worker buffers before sending them on, at most.
const RECORDS_PER_MESSAGE: usize = 256;

/// Records finished tasks through a store's writer thread, a batch of a worker's tasks at a
/// time (one channel message per batch rather than per task).
pub struct StoreSink {
    pub recorder: RunRecorder,
    /// Step names shared by every record of the step.
    steps: Vec<Arc<str>>,
    /// Each worker's records since its last flush; only that worker touches its own.
    pending: Box<[Mutex<Vec<TaskRecord>>]>,
}

impl StoreSink {
    pub fn new(recorder: RunRecorder, compiled: &Compiled, workers: usize) -> StoreSink {
        StoreSink {
            recorder,
            steps: compiled.recipe.steps.iter().map(|s| Arc::from(s.name.as_str())).collect(),
            pending: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    fn to_record(&self, task: &TaskReport<'_>) -> TaskRecord {
        // By index, not by comparing names: this runs for every task.
        let step = match self.steps.get(task.step_id) {
            Some(name) if &**name == task.step => name.clone(),
            _ => Arc::from(task.step),
        };
        TaskRecord {
            step,
            key: task.key.to_string(),
            plugin: task.plugin,
            status: match task.outcome {
                Outcome::Ok => TaskStatus::Ok,
                Outcome::Failed => TaskStatus::Failed,
                Outcome::Skipped => TaskStatus::Skipped,
            },
            attempts: if task.outcome == Outcome::Skipped { 0 } else { 1 },
            input_bytes: task.input_bytes,
            estimate_bytes: task.estimate,
            estimate_source: task.source.as_str(),
            plugin_estimate_bytes: task.plugin_estimate,
            peak_bytes: task.peak,
            output_bytes: task.output_bytes,
            wall_ms: task.wall.as_millis() as u64,
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
