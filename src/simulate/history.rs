//! What a simulation knows of a recipe's past: each step's records ([`super::step_records`]),
//! optionally only from the runs *before* a given one, so that `replay --simulate` predicts
//! each recorded cycle from the history it had; from them the footprint models
//! ([`crate::plan::Plan::learn`], as `run` learns them) and the duration models. And the runs
//! a prediction's pace is measured on, each as it ran ([`RanAs`]): the alike runs, the
//! [`RECENT_RUNS`] newest others with their own figures, or the recipe's first run alone; the
//! spill speeds the recipe's runs recorded; what its services held standing.

use std::time::Duration;

use crate::estimate::HISTORY_RUNS;
use crate::estimate::{Observation, Params};
use crate::memory::Standing;
use crate::plan::Compiled;
use crate::store::{Executor, HistoryRun, RunFilter, RunRow, RunStatus, SpillSpeed, Store, StoreError};

use super::alike;
use super::durations::DurationModel;
use super::service_wait::Interpreters;
use super::step_records::{ALIKE_RUNS, AlikeBy, StepRecords, read_step};

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
