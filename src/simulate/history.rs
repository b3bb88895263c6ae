//! What a simulation knows of a recipe's past: each step's recorded tasks, read from the store
//! as the estimator reads them (the last [`HISTORY_RUNS`] runs, a sample of
//! [`HISTORY_TASKS_PER_RUN`] tasks each, interrupted runs left out) — optionally only from the
//! runs *before* a given one, so that `replay --simulate` predicts each recorded cycle from the
//! history it had. From them: the footprint models ([`crate::plan::Plan::learn`], as `run`
//! learns them), the duration models, and per step the figures a task's prediction needs that
//! only a real run measures (its time, its output's size, the estimate a data-following plugin
//! gave at dispatch), taken from the recorded run whose vars are most like the predicted cycle's, or
//! interpolated between the two recorded runs on either side of it ([`super::alike`]), the
//! newest when there is no telling.

use std::collections::HashMap;
use std::time::Duration;

use crate::estimate::{HISTORY_RUNS, HISTORY_TASKS_PER_RUN};
use crate::estimate::{Observation, Params};
use crate::measure::PeakSource;
use crate::memory::Standing;
use crate::plan::Compiled;
use crate::plan::EstimateSource;
use crate::store::{Executor, HistoryRun, RunFilter, RunRow, RunStatus, SpillSpeed, Store, StoreError, TaskStatus};

use super::alike;
use super::alike_figures::{self, Recorded};
use super::durations::{DurationModel, Timing};
use super::growth::{self, Growth};
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

/// The newest runs besides the alike ones whose pace a prediction takes ([`super::calibrate`]).
/// Re-predicting 16 recorded passes of the cycles files (280 cycles): walls within 20% 223
/// with none, 229 with 2 or 4, 222 with 8 (older runs ran at the machine's older pace).
pub const RECENT_RUNS: usize = 2;

/// A recipe of more tasks takes the alike runs' pace alone: each recent run costs a
/// simulation of the whole recipe.
pub const MAX_TASKS: u64 = 100_000;

/// How fast a recipe's recent spills were written, and read back from disk by the tasks of its
/// steps: the disk's speed, for a step without recorded reads of its own (`None`: none recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillSpeeds {
    pub written: Option<SpillSpeed>,
    pub read_back: Option<SpillSpeed>,
}

/// Each step's records, in the recipe's step order.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub steps: Vec<StepRecords>,
    /// How fast the recipe's recent spills were written and read back.
    pub spill_speed: SpillSpeeds,
    /// The runs the alike figures come from, as they ran (empty when any of them is no
    /// measure of a run on this host: it did not finish ok on the workers of its process, has
    /// no wall recorded or was the recipe's first).
    pub alike_runs: Vec<AlikeRun>,
    /// The newest runs besides those (`RECENT_RUNS`), each with its own
    /// figures as a prediction of its own cycle takes them: how fast the machine has run lately
    /// (`simulate::calibrate`). None without alike runs, or for a recipe of more than
    /// `MAX_TASKS` tasks.
    pub recent: Vec<RecentRun>,
    /// The recipe's first run with its own figures, when it is the only run before this
    /// cycle: its pace, simulated as it ran (without history), is the only one there is
    /// (`simulate::calibrate`).
    pub first_run: Option<Box<RecentRun>>,
    /// The numbers among this cycle's vars outside every compared run's (`ALIKE_RUNS`).
    pub beyond: Vec<alike::Beyond>,
    /// What service processes (warm interpreters) held at their baseline at the runs' peaks,
    /// which the ledger counts for the run and no task: of the runs that pace the prediction
    /// (the alike runs weighted as one, and each recent run), or else the newest run's own.
    pub standing: Standing,
    /// The most workers the runs `standing` comes from had (0: none): more workers start
    /// more interpreters than they held.
    pub standing_workers: usize,
}

/// A recent run, and the history a prediction of its own cycle takes: its own figures as the
/// alike ones, and itself the one alike run.
#[derive(Debug, Clone)]
pub struct RecentRun {
    pub cycle: String,
    pub vars: serde_json::Map<String, serde_json::Value>,
    pub history: History,
}

impl RecentRun {
    /// How it ran.
    pub fn ran(&self) -> &RanAs {
        &self.history.alike_runs[0].ran
    }
}

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

/// A recorded run as it ran: how long it took, with which workers and budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RanAs {
    pub run_id: i64,
    pub wall: Duration,
    pub workers: usize,
    pub budget: u64,
    /// What its service processes held at their baseline at its peak reserved.
    pub standing: Standing,
    /// Whether it found its services alive as it started.
    pub interpreters: Interpreters,
}

/// A run the alike figures come from, and its weight among them (they sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlikeRun {
    pub ran: RanAs,
    pub weight: f64,
}

/// How fast the recorded tasks of all steps read their spilled inputs back from disk.
fn read_back_from_disk(steps: &[StepRecords]) -> Option<SpillSpeed> {
    SpillSpeed::total(steps.iter().filter_map(|records| records.read_back))
}

impl History {
    /// The history of `compiled`'s steps in `store`, from runs before `before_run` when given.
    pub fn read(store: &Store, compiled: &Compiled, before_run: Option<i64>) -> Result<History, StoreError> {
        let recipe = &compiled.recipe;
        let vars = recipe.vars_map();
        let mut steps = recipe
            .steps
            .iter()
            .map(|step| read_step(store, &recipe.name, &step.name, before_run, AlikeBy::Vars(&vars)))
            .collect::<Result<Vec<_>, _>>()?;
        // Read once: from the recipe's last runs that spilled, whichever run a step's other
        // figures come from.
        for (step, records) in recipe.steps.iter().zip(&mut steps) {
            records.read_back = store.read_back_speed(&recipe.name, &step.name, before_run, HISTORY_RUNS)?;
        }
        let spill_speed = SpillSpeeds {
            written: store.spill_speed(&recipe.name, before_run, HISTORY_RUNS)?,
            read_back: read_back_from_disk(&steps),
        };
        let mut runs = store.history_runs(Some(&recipe.name), None, usize::MAX, RunFilter::default())?;
        runs.retain(|run| before_run.is_none_or(|before| run.run_id < before));
        let compared = &runs[runs.len().saturating_sub(ALIKE_RUNS)..];
        let beyond = alike::beyond_recorded(&vars, &compared.iter().map(|r| r.vars.as_deref()).collect::<Vec<_>>());
        let alike = first_alike(&steps);
        let alike_runs = alike_runs(store, alike)?;
        // Without the alike runs' pace (one of them was the recipe's first, or ran as a
        // cluster's jobs), the recent runs alone tell the machine's pace, and an alike run
        // that measures a run here is one of them; without any alike run, there is no history
        // to pace.
        let paced_apart = if alike_runs.is_empty() { &[][..] } else { alike };
        let read_back = steps.iter().map(|records| records.read_back).collect();
        let own = OwnFigures { store, compiled, before_run, spill_speed, read_back };
        let recent = if alike.is_empty() || compiled.graph.total_tasks() > MAX_TASKS {
            Vec::new()
        } else {
            recent_runs(&own, &runs, paced_apart)?
        };
        let (standing, standing_workers) = match paced_standing(&alike_runs, &recent) {
            Some(standing) => standing,
            None => newest_standing(store, &runs)?,
        };
        let first_run = if alike_runs.is_empty() && recent.is_empty() && compiled.graph.total_tasks() <= MAX_TASKS {
            only_first_run(&own, &runs)?
        } else {
            None
        };
        Ok(History { steps, spill_speed, alike_runs, recent, first_run, beyond, standing, standing_workers })
    }

    /// The same history with its figures as recorded, none grown or carried past the recorded
    /// range: the alike runs as they ran ([`super::calibrate`]). Copied only when a step grows
    /// or is carried.
    pub fn as_recorded(&self) -> std::borrow::Cow<'_, History> {
        if self.steps.iter().all(|step| step.grown.is_none() && step.extended.is_none()) {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut history = self.clone();
        for step in &mut history.steps {
            step.grown = None;
            step.extended = None;
        }
        std::borrow::Cow::Owned(history)
    }

    /// The most workers of the runs that pace the prediction (0: none): their task times were
    /// recorded with that many tasks at once.
    pub fn paced_workers(&self) -> usize {
        let alike = self.alike_runs.iter().map(|run| run.ran.workers);
        let recent = self.recent.iter().chain(self.first_run.as_deref()).map(|run| run.ran().workers);
        alike.chain(recent).max().unwrap_or(0)
    }

    /// No history at all (every task's time and peak a guess).
    pub fn none(compiled: &Compiled) -> History {
        History {
            steps: vec![StepRecords::default(); compiled.recipe.steps.len()],
            spill_speed: SpillSpeeds::default(),
            alike_runs: Vec::new(),
            recent: Vec::new(),
            first_run: None,
            beyond: Vec::new(),
            standing: Standing::default(),
            standing_workers: 0,
        }
    }

    /// Makes each step's history the source of its estimates, as `run` does before it starts.
    pub fn learn_footprints(&self, compiled: &mut Compiled) {
        let Compiled { recipe, plan, .. } = compiled;
        let history = |name: &str| -> Vec<Observation> {
            recipe
                .steps
                .iter()
                .position(|s| s.name == name)
                .map(|at| self.steps[at].observations.clone())
                .unwrap_or_default()
        };
        plan.learn(recipe, &history, Params::default());
        for (step, records) in plan.steps.iter_mut().zip(&self.steps) {
            step.longest_task = records.longest;
        }
    }

    /// The recorded cycles the figures only a run measures were taken from, each once, in step
    /// order (as a prediction tells them).
    pub fn alike_cycles(&self) -> Vec<String> {
        let mut cycles: Vec<String> = Vec::new();
        for cycle in self.steps.iter().filter_map(|s| s.alike_cycle.as_ref()) {
            if !cycles.contains(cycle) {
                cycles.push(cycle.clone());
            }
        }
        cycles
    }

    /// Each step's duration model (`None` for a step without history).
    pub fn durations(&self) -> Vec<Option<DurationModel>> {
        self.steps.iter().map(|s| DurationModel::learn(&s.timings)).collect()
    }
}

/// The runs (and their weights) the first step with alike figures took them from.
fn first_alike(steps: &[StepRecords]) -> &[(i64, f64)] {
    steps.iter().map(|records| &records.alike_runs[..]).find(|runs| !runs.is_empty()).unwrap_or(&[])
}

/// The `alike` runs as they ran; none when any of them is not [`ran_as`] a measure of a run
/// (their figures blended are what a pace of them would be measured against).
fn alike_runs(store: &Store, alike: &[(i64, f64)]) -> Result<Vec<AlikeRun>, StoreError> {
    let mut runs = Vec::with_capacity(alike.len());
    for &(run_id, weight) in alike {
        match ran_as(store, run_id, FirstRun::Refused)? {
            Some(ran) => runs.push(AlikeRun { ran, weight }),
            None => return Ok(Vec::new()),
        }
    }
    Ok(runs)
}

/// The standing bytes of the runs that pace a prediction, weighted as the pace weights them
/// ([`super::calibrate::pace`]), and the most workers those runs had; `None` without any.
fn paced_standing(alike: &[AlikeRun], recent: &[RecentRun]) -> Option<(Standing, usize)> {
    let parts = |s: &Standing| [s.bytes as f64, s.shared as f64, s.services as f64];
    let weighted = (!alike.is_empty()).then(|| {
        alike.iter().fold([0.0; 3], |sum, run| {
            let own = parts(&run.ran.standing);
            [0, 1, 2].map(|i| sum[i] + run.weight * own[i])
        })
    });
    let all: Vec<[f64; 3]> = weighted.into_iter().chain(recent.iter().map(|run| parts(&run.ran().standing))).collect();
    if all.is_empty() {
        return None;
    }
    let mean = |i: usize| (all.iter().map(|p| p[i]).sum::<f64>() / all.len() as f64).round() as u64;
    let ran = alike.iter().map(|run| &run.ran).chain(recent.iter().map(RecentRun::ran));
    let workers = ran.map(|ran| ran.workers).max().unwrap_or(0);
    Some((Standing { bytes: mean(0), shared: mean(1), services: mean(2) }, workers))
}

/// The standing memory the newest of `runs` recorded at its peak, and its workers (none when
/// it ran elsewhere or did not finish ok).
fn newest_standing(store: &Store, runs: &[HistoryRun]) -> Result<(Standing, usize), StoreError> {
    let Some(newest) = runs.last() else { return Ok((Standing::default(), 0)) };
    Ok(match ran_as(store, newest.run_id, FirstRun::Taken)? {
        Some(ran) => (ran.standing, ran.workers),
        None => (Standing::default(), 0),
    })
}

/// Whether [`ran_as`] takes the recipe's first run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstRun {
    Refused,
    Taken,
}

/// The recipe's first run, as it ran (without history: its steps' first tasks alone), when it
/// is the only run of `runs` (the recipe's, before `before_run`) and measures a run here: the
/// only pace a prediction of the recipe's second cycle can take ([`History::first_run`]).
fn only_first_run(own: &OwnFigures<'_>, runs: &[HistoryRun]) -> Result<Option<Box<RecentRun>>, StoreError> {
    let [run] = runs else { return Ok(None) };
    Ok(own.of(run, FirstRun::Taken)?.map(Box::new))
}

/// What [`RecentRun`]s are read with: a run with its own figures, as a prediction of its cycle
/// takes them.
struct OwnFigures<'a> {
    store: &'a Store,
    compiled: &'a Compiled,
    before_run: Option<i64>,
    spill_speed: SpillSpeeds,
    /// Each step's read-back speed, which is the recipe's, whatever the run.
    read_back: Vec<Option<SpillSpeed>>,
}

impl OwnFigures<'_> {
    /// `run` with its own figures, when it kept its vars and is [`ran_as`] a measure of a run.
    fn of(&self, run: &HistoryRun, first: FirstRun) -> Result<Option<RecentRun>, StoreError> {
        let Some(vars) = run.vars.as_deref().and_then(|text| serde_json::from_str(text).ok()) else { return Ok(None) };
        let Some(ran) = ran_as(self.store, run.run_id, first)? else { return Ok(None) };
        let recipe = &self.compiled.recipe;
        let mut steps = recipe
            .steps
            .iter()
            .map(|step| read_step(self.store, &recipe.name, &step.name, self.before_run, AlikeBy::Run(run.run_id)))
            .collect::<Result<Vec<_>, _>>()?;
        for (records, &read_back) in steps.iter_mut().zip(&self.read_back) {
            records.read_back = read_back;
        }
        let history = History {
            steps,
            spill_speed: self.spill_speed,
            alike_runs: vec![AlikeRun { ran, weight: 1.0 }],
            recent: Vec::new(),
            first_run: None,
            beyond: Vec::new(),
            standing: ran.standing,
            standing_workers: ran.workers,
        };
        Ok(Some(RecentRun { cycle: run.cycle.clone(), vars, history }))
    }
}

/// How run `run_id` ran, when it measures what a run on this host takes: it finished ok on
/// the workers of its process (not as a cluster's jobs), has a recorded wall, and, unless
/// `first` takes it, was not its recipe's first (without history, its first tasks ran alone
/// to be measured, which a simulation with history does not repeat).
fn ran_as(store: &Store, run_id: i64, first: FirstRun) -> Result<Option<RanAs>, StoreError> {
    let Some(run) = store.run(run_id)? else { return Ok(None) };
    let RunRow { status: RunStatus::Ok, executor: Executor::Local, wall_us: Some(wall_us), .. } = run else {
        return Ok(None);
    };
    if first == FirstRun::Refused && !store.has_run_before(&run.recipe, run_id)? {
        return Ok(None);
    }
    Ok(Some(RanAs {
        run_id,
        wall: Duration::from_micros(wall_us),
        workers: run.workers.max(1) as usize,
        budget: run.budget_bytes,
        // As if every interpreter it started had stood at its peak, as a run with history
        // starts them all at once (the ledger of a real run expects what stood).
        standing: run.standing_of_started(),
        interpreters: Interpreters::of_run(run.warm_services),
    }))
}

/// The newest [`RECENT_RUNS`] of `runs` (the recipe's, before `before_run`),
/// other than those paced as the alike runs (`alike`), that kept their vars and are [`ran_as`] a measure of a
/// run; with each step's records holding the run's own figures.
fn recent_runs(own: &OwnFigures<'_>, runs: &[HistoryRun], alike: &[(i64, f64)]) -> Result<Vec<RecentRun>, StoreError> {
    let mut recent = Vec::with_capacity(RECENT_RUNS);
    for run in runs.iter().rev() {
        if recent.len() == RECENT_RUNS {
            break;
        }
        if alike.iter().any(|&(run_id, _)| run_id == run.run_id) {
            continue;
        }
        recent.extend(own.of(run, FirstRun::Refused)?);
    }
    Ok(recent)
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
            growth::along(vars, &runs.iter().map(|r| r.vars.as_deref()).collect::<Vec<_>>(), nearest)
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
