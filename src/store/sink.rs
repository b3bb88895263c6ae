//! The engine's side of the store: the run row a compiled recipe starts with (and which steps'
//! keys the store spells from task indices), and [`StoreSink`], the scheduler's [`TaskSink`]
//! that writes each finished task's [`TaskReport`] over a row of a batch the writer handed back
//! and sends a worker's batch to the [`RunRecorder`] in one message.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    Executor, KeyDim, RunOutcome, RunRecorder, RunStart, RunWritten, StepKeys, StoreError, TaskRecord, TaskStatus,
};
use crate::plan::Compiled;
use crate::recipe::DimValues;
use crate::scheduler::{Outcome, RunOptions, TaskReport, TaskSink};

/// The run row a run of `compiled` under `options` starts with, declaring the steps whose keys
/// the store can spell from task indices.
pub fn run_start(compiled: &Compiled, options: &RunOptions) -> RunStart {
    let keys = key_spellings(compiled).into_iter().flatten().collect();
    RunStart {
        tasks_total: compiled.graph.total_tasks(),
        executor: Executor::Local,
        resumed_from: None,
        keys,
        vars: compiled.recipe.vars_json(),
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
/// time (one channel message per batch rather than per task). What Ctrl-C and SIGTERM do to
/// the run row is the command line's (`cli::record::mark_interrupted_on_signal`).
pub struct StoreSink {
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
        StoreSink {
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
        row.figures = task.figures;
        row.worker = task.worker as u32;
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
        let options = CompileOptions { cycle: "c".into(), ..CompileOptions::default() };
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
