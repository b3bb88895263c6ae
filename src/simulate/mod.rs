//! `runner simulate`: a run predicted instead of made. The recipe compiles as for `run`, the
//! plan learns its footprints from the store as `run`'s does, and the real scheduler's `State`
//! (order, admission, batching, spill victims) is driven on a virtual clock by virtual workers
//! ([`engine`]); each task takes the time and peak its step's history predicts ([`predict`],
//! [`durations`], [`history`]). With a [`cluster`], units become jobs on its nodes. The
//! result is what `run` reports, plus the [`critical_path`].

pub mod alike;
pub mod alike_figures;
pub mod alike_plan;
pub mod calibrate;
pub mod cluster;
pub mod cpus;
pub mod critical_path;
pub mod deal;
pub mod durations;
pub mod engine;
pub mod growth;
pub mod history;
pub mod like_tasks;
pub mod meter;
pub mod outcome;
pub mod predict;
pub mod service_wait;
pub mod step_records;
pub mod time_per_byte;
pub mod trend;
pub(crate) mod variants;

use crate::plan::Compiled;
pub use alike_plan::Recompile;
pub use cluster::{Cluster, ClusterShape};
pub use critical_path::CriticalPath;
pub use history::History;
pub use outcome::Simulated;
pub use predict::Predictor;
use service_wait::Interpreters;
use step_records::StepRecords;

/// How to simulate.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub workers: usize,
    pub budget: u64,
    /// How fast spills are written and read back.
    pub spill: SpillRates,
    /// Have the ledger read every running task's live bytes at each admission, as it does in a
    /// local run (whose meter cannot promise tasks stay within their reservations): the
    /// predictions are the same, only slower; the bench measures what that costs per worker.
    pub read_every_task: bool,
    /// The CPUs local workers share when more of them are busy (`cpus::SharedCpus`); `None`: each
    /// worker has a CPU of its own (a cluster's are its nodes'; and times recorded on more
    /// workers than CPUs already hold the sharing they met).
    pub cpus: Option<usize>,
    /// How the run finds its services (warm interpreters) as it starts: a cluster's jobs each
    /// start theirs.
    pub interpreters: Interpreters,
    /// The run keeps its services to its end, for the next run in its process (a replay's
    /// cycles but the last); else those no task left can use are stopped near the end
    /// (`meter::ReservationsOnly::retire`).
    pub keep_services: bool,
}

/// How fast a simulation's spills are written and its tasks read them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillRates {
    /// Bytes a second a spill is written at.
    pub written: u64,
    /// Bytes a second a task reads its spilled inputs back at where its step's own recorded
    /// reads do not say ([`Predictor::read_back_time`]).
    pub read_back: u64,
    /// A step's tasks read theirs back as fast as its recorded tasks did, where they did: not
    /// under `--spill-bandwidth`, a what-if of the disk.
    pub read_back_as_recorded: bool,
}

impl SpillRates {
    /// Written and read back at `bytes_per_second`, each step's recorded reads aside.
    pub fn at(bytes_per_second: u64) -> SpillRates {
        SpillRates { written: bytes_per_second, read_back: bytes_per_second, read_back_as_recorded: false }
    }
}

/// A predicted run and its critical path.
#[derive(Debug, Clone)]
pub struct Prediction {
    pub simulated: Simulated,
    pub critical_path: CriticalPath,
    /// Each step's learned task time (`None`: no recorded times, a guess).
    pub durations: Vec<Option<durations::DurationModel>>,
    /// The recorded cycles, nearest in vars to this one, whose output sizes and data-following
    /// estimates the prediction used ([`History::alike_cycles`]).
    pub alike_cycles: Vec<String>,
    /// The numbers among the cycle's vars outside every recorded run's ([`History::beyond`]).
    pub beyond: Vec<alike::Beyond>,
    /// The steps whose figures were grown past the recorded range ([`growth`]).
    pub grown: Vec<growth::Grown>,
    /// The steps whose args this cycle's number sets, past the one value the runs had of it.
    pub not_grown: Vec<growth::NotGrown>,
    /// The steps whose figures were carried along the line past it ([`trend`]).
    pub carried: Vec<trend::Carried>,
    /// The most workers of the runs whose interpreters' baseline the prediction holds
    /// ([`History::standing_workers`]).
    pub standing_workers: usize,
    /// Seconds added to the simulated wall (negative: taken off) for what a run costs beyond
    /// its tasks and the machine's pace, as the simulator missed them on the alike and recent
    /// runs ([`calibrate`]; `None`: none recorded, or a cluster).
    pub overhead: Option<f64>,
    /// The range the dealings of the recorded weather gave ([`deal`]; `None`: the recorded
    /// labels kept).
    pub dealt: Option<deal::Dealt>,
    /// Whether the workers shared the CPUs.
    pub cpus: CpuSharing,
    /// What its tasks wait for their interpreters ([`service_wait`]).
    pub waits: service_wait::AddedWaits,
}

/// Whether a local simulation's workers shared its CPUs ([`cpus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSharing {
    /// Each worker had a CPU of its own (no more workers than CPUs), or a cluster's nodes had
    /// them.
    Own,
    /// More workers than these CPUs shared them.
    Shared(usize),
    /// More workers than these CPUs, but the recorded times were taken so, and hold the
    /// sharing they met: each task took its recorded time.
    AsRecorded(usize),
}

/// Predicts a run of `compiled` from `history`: its plan learns from it (as `run` learns from
/// the store), then the scheduler runs it on the virtual clock. A task of a step without recorded
/// times runs for its estimate at `guess_speed` bytes a second. `record_tasks` keeps every task
/// and the memory over time. `recompile` compiles the recipe with an alike run's vars, to learn
/// what this cycle's metadata changes (`simulate::alike_plan`).
pub fn predict(
    compiled: &mut Compiled,
    history: &History,
    recompile: &Recompile<'_>,
    options: &SimOptions,
    guess_speed: u64,
    cluster: Option<ClusterShape>,
    record_tasks: bool,
) -> Prediction {
    // Past the recorded range, only the steps whose args the number sets grow.
    let sized = alike_plan::sized_by_args(history, compiled, recompile);
    let history = sized.as_ref().unwrap_or(history);
    history.learn_footprints(compiled);
    // Times recorded here with more tasks at once than CPUs hold the sharing they met.
    let recorded_alone = history.paced_workers() <= crate::scheduler::cpus_here();
    let cpus = options.cpus;
    let options = &SimOptions { cpus: cpus.filter(|_| recorded_alone), ..options.clone() };
    let alike_plans = alike_plan::per_step(history, compiled, recompile);
    // The alike runs ran the recipe as compiled with their vars (this cycle's, when the same).
    let then = alike_plans.iter().flatten().next().cloned();
    let mut predictor = Predictor::new(compiled, history, alike_plans, guess_speed);
    let local = cluster.is_none();
    let simulate = |predictor: &Predictor, record_tasks| {
        engine::simulate(compiled, predictor, options, cluster.map(Cluster::new), record_tasks)
    };
    let dealt = deal::dims_to_deal(compiled, predictor.variants(), history);
    let mut dealt = dealt.map(|dims| {
        let (dealt, median) = deal::median(compiled, &dims, |dealing| {
            predictor.deal(dealing);
            simulate(&predictor, false).report
        });
        predictor.deal(median);
        dealt
    });
    let mut simulated = simulate(&predictor, record_tasks);
    let critical_path = critical_path::critical_path(&compiled.graph, &simulated.longest);
    let durations = (0..compiled.recipe.steps.len()).map(|s| predictor.duration_model(s).copied()).collect();
    let then = then.as_ref().map_or(&*compiled, |plan| &plan.compiled);
    let pace = local.then(|| calibrate::pace(then, history, options, guess_speed, recompile)).flatten();
    let overhead = pace.map(|pace| {
        let paced = |wall| calibrate::paced(wall, pace, critical_path.length);
        let report = &mut simulated.report;
        let unpaced = report.wall;
        report.wall = paced(report.wall);
        if let Some(dealt) = &mut dealt {
            dealt.wall = (paced(dealt.wall.0), paced(dealt.wall.1));
        }
        report.wall.as_secs_f64() - unpaced.as_secs_f64()
    });
    let cpus = match (simulated.cpus_shared, cpus) {
        (Some(shared), _) => CpuSharing::Shared(shared),
        (None, Some(cpus)) if options.workers > cpus => CpuSharing::AsRecorded(cpus),
        _ => CpuSharing::Own,
    };
    Prediction {
        simulated,
        critical_path,
        durations,
        alike_cycles: history.alike_cycles(),
        beyond: history.beyond.clone(),
        grown: of_steps(history, compiled, |step, records| {
            records.grown.clone().map(|growth| growth::Grown { step: step.to_string(), growth })
        }),
        not_grown: of_steps(history, compiled, |step, records| {
            records.one_value.clone().map(|along| growth::NotGrown { step: step.to_string(), along })
        }),
        carried: carried_steps(compiled, &predictor),
        standing_workers: history.standing_workers,
        overhead,
        dealt,
        cpus,
        // A cluster's every job starts its interpreters.
        waits: added_waits(compiled, &predictor, if local { options.interpreters } else { Interpreters::Cold }),
    }
}

/// What `predictor` adds to the steps of `compiled` for a run starting as `start`: the steps
/// whose first tasks wait for their interpreters, and how long.
fn added_waits(compiled: &Compiled, predictor: &Predictor, start: Interpreters) -> service_wait::AddedWaits {
    let steps = compiled.recipe.steps.iter().enumerate();
    let steps = steps
        .map(|(index, step)| (step, predictor.service_wait(index, start)))
        .filter(|(_, wait)| !wait.is_zero())
        .map(|(step, wait)| service_wait::StepWait { step: step.name.clone(), wait_s: wait.as_secs_f64() })
        .collect();
    service_wait::AddedWaits { interpreters: start, steps }
}

/// What `of` makes of each step of `compiled` (its name) and its records in `history`, where
/// it makes anything, in step order.
fn of_steps<T>(history: &History, compiled: &Compiled, of: impl Fn(&str, &StepRecords) -> Option<T>) -> Vec<T> {
    let steps = compiled.recipe.steps.iter().zip(&history.steps);
    steps.filter_map(|(step, records)| of(&step.name, records)).collect()
}

/// The steps of `compiled` whose figures `predictor` carried along the line, in step order.
fn carried_steps(compiled: &Compiled, predictor: &Predictor) -> Vec<trend::Carried> {
    let steps = compiled.recipe.steps.iter().enumerate();
    steps
        .filter_map(|(index, step)| {
            let trend = predictor.carried(index)?.clone();
            Some(trend::Carried { step: step.name.clone(), trend })
        })
        .collect()
}
