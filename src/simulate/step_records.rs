//! What a simulation knows of one step's past: its recorded tasks, read from the store as the
//! estimator reads them (the last [`HISTORY_RUNS`] runs, a sample of [`HISTORY_TASKS_PER_RUN`]
//! tasks each), optionally only from the runs *before* a given one, and the figures a task's
//! prediction needs that only a real run measures (its time, its output's size, the estimate a
//! data-following plugin gave at dispatch) from the recorded run whose vars are most like the
//! predicted cycle's, or interpolated between the two on either side of it ([`super::alike`]);
//! past the recorded range along one number, how the step grew ([`super::growth`]) or what its
//! data moved to ([`super::trend`]). [`super::history`] reads every step's.

use std::collections::HashMap;
use std::time::Duration;

use crate::estimate::Observation;
use crate::estimate::{HISTORY_RUNS, HISTORY_TASKS_PER_RUN};
use crate::measure::PeakSource;
use crate::plan::EstimateSource;
use crate::store::{HistoryRun, RunFilter, SpillSpeed, Store, StoreError, TaskStatus};

use super::alike;
use super::alike_figures::{self, Recorded};
use super::durations::Timing;
use super::growth::{self, Growth, Past};
use super::like_tasks::{self, LikeTasks};
use super::service_wait::{Interpreters, StepWaits};
use super::time_per_byte;
use super::trend::{self, Extended};

/// A step's recorded tasks.
#[derive(Debug, Clone, Default)]
pub struct StepRecords {
    pub observations: Vec<Observation>,
    pub timings: Vec<Timing>,
    /// Of the alike run's tasks: median output bytes, median plugin estimate (what a plugin
    /// estimating from its inputs at dispatch said, for the weather of that cycle), and median
    /// size of the file a path output names.
    pub alike_output_bytes: Option<u64>,
    pub alike_plugin_estimate: Option<u64>,
    pub alike_file_bytes: Option<u64>,
    /// The alike run's figures by task index, for the sampled tasks: what a task whose args or
    /// inputs differ from the plan's was estimated at and produced.
    pub alike_by_index: HashMap<u64, Recorded>,
    /// The cycle of the run those figures come from.
    pub alike_cycle: Option<String>,
    /// The nearest alike run's cycle id and vars (JSON text), under which its plugins
    /// estimated: what this cycle's metadata changes is measured against them.
    pub alike_vars: Option<(String, String)>,
    /// The alike runs (run ids) and their weights.
    pub alike_runs: Vec<(i64, f64)>,
    /// How the alike run's figures grow past the recorded range ([`super::growth`]); the
    /// figures above are as recorded.
    pub grown: Option<Growth>,
    /// Past the one value the runs had of a number that may set the step's args
    /// ([`growth::OneValue`]): not grown, for want of a second value to measure how.
    pub one_value: Option<growth::OneValue>,
    /// Past the recorded range along a number that does not size the step, the alike run's
    /// figures carried along the line through it and the farthest run ([`super::trend`]); the
    /// figures above are as recorded.
    pub extended: Option<Extended>,
    pub longest: Option<Duration>,
    /// How fast its tasks read their spilled inputs back from disk, in the recipe's last runs
    /// that spilled (read by [`History::read`], whichever run the other figures come from).
    pub read_back: Option<SpillSpeed>,
    /// Of the last [`PATTERN_RUNS`] runs (oldest first), what each sampled task's data made
    /// of it (its plugin estimate, output and file bytes, summed), by task index: whether
    /// these keep to their tasks from one run to the next ([`super::deal`]).
    pub data_figures: Vec<HashMap<u64, u64>>,
    /// How long its services took to be ready for it, in the newest runs started cold and warm
    /// ([`super::service_wait`]).
    pub waits: StepWaits,
    /// Its recorded peaks were sampled from processes of the tasks' own
    /// ([`crate::measure::PeakSource::is_sampled`]): a running task's memory reached the
    /// ledger as it grew, not as the task started.
    pub peaks_sampled: bool,
}

/// Runs whose per-task figures are compared, each with the one before it.
pub const PATTERN_RUNS: usize = 4;

/// Which recorded run a step's measured-only figures come from.
#[derive(Debug, Clone, Copy)]
pub enum AlikeBy<'a> {
    /// The run whose vars are nearest to these, or two about them ([`alike`]).
    Vars(&'a serde_json::Map<String, serde_json::Value>),
    /// The newest.
    Newest,
    /// This one (by run id).
    Run(i64),
}

/// Recorded runs a prediction looks through for the cycle most like its own.
pub const ALIKE_RUNS: usize = 64;

/// The records of `step` of `recipe`, from runs before `before_run` when given; the figures
/// only a real run measures come from the run whose vars are nearest to `vars` (the newest
/// without them).
pub fn read_step(
    store: &Store,
    recipe: &str,
    step: &str,
    before_run: Option<i64>,
    alike_by: AlikeBy<'_>,
) -> Result<StepRecords, StoreError> {
    let mut runs = store.history_runs(Some(recipe), Some(step), usize::MAX, RunFilter::default())?;
    if let Some(before) = before_run {
        runs.retain(|run| run.run_id < before);
    }
    runs.drain(..runs.len().saturating_sub(ALIKE_RUNS.max(HISTORY_RUNS)));
    let mut records = StepRecords::default();
    let alike = match alike_by {
        AlikeBy::Vars(vars) => alike::alike(vars, &runs.iter().map(|r| r.vars.as_deref()).collect::<Vec<_>>()),
        AlikeBy::Newest => runs.len().checked_sub(1).map(|newest| (newest, 1.0)).into_iter().collect(),
        AlikeBy::Run(id) => runs.iter().position(|r| r.run_id == id).map(|at| (at, 1.0)).into_iter().collect(),
    };
    records.alike_runs = alike.iter().map(|&(at, weight)| (runs[at].run_id, weight)).collect();
    let along = match (alike_by, &alike[..]) {
        (AlikeBy::Vars(vars), &[(nearest, _)]) => {
            match growth::along(vars, &runs.iter().map(|r| r.vars.as_deref()).collect::<Vec<_>>(), nearest) {
                Some(Past::Measured(along)) => Some(along),
                Some(Past::OneValue(one)) => {
                    records.one_value = Some(one);
                    None
                }
                None => None,
            }
        }
        _ => None,
    };
    let mut taken = Vec::with_capacity(alike.len());
    for (at, weight) in alike {
        taken.push((alike_figures::read(store, &runs[at], step)?, weight));
    }
    let far = match (along, taken.first()) {
        (Some(along), Some((near, _))) => {
            let far = alike_figures::read(store, &runs[along.far], step)?;
            records.grown = growth::growth(&along, &near.by_index, &far.by_index);
            Some((along, far))
        }
        _ => None,
    };
    let runs = &runs[runs.len().saturating_sub(HISTORY_RUNS)..];
    // Per run: its ok tasks' figures and times, for the tasks like each alike run's.
    let mut like_by_run = Vec::with_capacity(runs.len());
    let mut waits_by_run = Vec::with_capacity(runs.len());
    let mut longest_ms = 0;
    // The recipe's first run is no measure of a task's time, as it is none of a run's pace
    // (`ran_as`): its process ran cold and its first tasks alone. Its times enter the means
    // only when there is no other run; an alike task no mean covers keeps its own time.
    let recipes_first = match runs.first() {
        Some(first) if runs.len() > 1 && !store.has_run_before(recipe, first.run_id)? => Some(first.run_id),
        _ => None,
    };
    for (index, run) in runs.iter().enumerate() {
        let age = (runs.len() - 1 - index) as u32;
        let mut like = Vec::new();
        let mut waited = 0;
        let mut figures = (age < PATTERN_RUNS as u32).then(HashMap::new);
        store.step_tasks(run.run_id, step, HISTORY_TASKS_PER_RUN, |task| {
            // Reused tasks were measured by the run they come from; skipped ones not at all.
            if matches!(task.status, TaskStatus::Skipped | TaskStatus::Reused) {
                return;
            }
            let plugin_estimate = task.plugin_estimate_bytes.unwrap_or(0);
            let figure = like_tasks::figure(plugin_estimate, task.output_bytes, task.file_bytes);
            if let (Some(figures), Some(index)) = (figures.as_mut(), task.task_index) {
                figures.insert(index, figure);
            }
            if task.status == TaskStatus::Ok && recipes_first != Some(run.run_id) {
                like.push((figure, task.own_us()));
            }
            // The longest: how long the step's services took to be ready.
            waited = waited.max(task.waited_us);
            records.peaks_sampled |= task.peak_source.is_some_and(PeakSource::is_sampled);
            records.observations.push(Observation {
                age,
                peak: task.peak_bytes,
                plugin_estimate,
                input_bytes: task.input_bytes,
                estimate: task.estimate_bytes,
                from_history: task.estimate_source == Some(EstimateSource::History),
            });
            records.timings.push(Timing {
                age,
                // To the µs (rows from before schema version 6: the middle of their whole ms),
                // without its wait for a service.
                wall: Duration::from_micros(task.own_us()),
                plugin_estimate,
                input_bytes: task.input_bytes,
            });
            longest_ms = longest_ms.max(task.wall_ms);
        })?;
        records.data_figures.extend(figures);
        like_by_run.push(like);
        let own = matches!(alike_by, AlikeBy::Run(id) if id == run.run_id);
        // A run from before schema version 9 recorded no waits (nor what it found warm).
        let waited = run.warm_services.map(|_| Duration::from_micros(waited));
        waits_by_run.push((own, Interpreters::of_run(run.warm_services), waited));
    }
    records.longest = (!runs.is_empty()).then(|| Duration::from_millis(longest_ms));
    // A run simulated as it ran waits as it did; others as the newest run started alike.
    waits_by_run.sort_by_key(|&(own, _, _)| own);
    for (_, start, longest) in waits_by_run {
        records.waits.note(start, longest);
    }
    // Each alike run's tasks take the mean time of the tasks like them in the runs near it,
    // before two alike runs are interpolated: a time between two weathers is between theirs.
    let predicted = match alike_by {
        AlikeBy::Vars(vars) => Some(vars),
        AlikeBy::Newest | AlikeBy::Run(_) => None,
    };
    for (alike, _) in &mut taken {
        let near = near_vars(alike.vars.as_deref(), predicted, runs);
        let like = like_by_run.iter().zip(near).filter(|(_, near)| *near).flat_map(|(like, _)| like.iter().copied());
        let like = LikeTasks::new(like.collect());
        for recorded in alike.by_index.values_mut() {
            recorded.wall_us = like.mean_wall_us(recorded.figure()).unwrap_or(recorded.wall_us);
        }
    }
    if let (Some((along, far)), Some((near, _))) = (&far, taken.first()) {
        records.extended = trend::extend(along, near, far, || time_per_byte::fit(&like_by_run));
    }
    if let Some((blended, cycles)) = alike_figures::blend(taken) {
        records.alike_by_index = blended.by_index;
        records.alike_output_bytes = blended.output_bytes;
        records.alike_plugin_estimate = blended.plugin_estimate;
        records.alike_file_bytes = blended.file_bytes;
        records.alike_vars = blended.vars.map(|vars| (blended.cycle, vars));
        records.alike_cycle = Some(cycles);
    }
    Ok(records)
}

/// Which of `runs` have vars near `vars` (an alike run's), whose tasks are like its
/// ([`like_tasks::NEAR_VARS`]); none without them. Near as a share of each number's range over
/// the runs and the cycle `predicted`: past the recorded range (`wet: 0.45` after runs at 0.02
/// to 0.05), the dry runs are alike beside the cycle, and their tasks' times are like the
/// alike run's. Over the runs alone, the alike run (often the recipe's first, whose times are
/// none of a task's) had no run near it, and its own cold times were dealt into the cycle.
fn near_vars(
    vars: Option<&str>,
    predicted: Option<&serde_json::Map<String, serde_json::Value>>,
    runs: &[HistoryRun],
) -> Vec<bool> {
    let vars = vars.and_then(|text| serde_json::from_str(text).ok());
    match vars {
        Some(vars) => {
            alike::distances(&vars, &runs.iter().map(|run| run.vars.as_deref()).collect::<Vec<_>>(), predicted)
                .into_iter()
                .map(|distance| distance <= like_tasks::NEAR_VARS)
                .collect()
        }
        None => vec![false; runs.len()],
    }
}
