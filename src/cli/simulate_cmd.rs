//! `runner simulate`: compile as `run` does, predict the run from the store's history on the
//! real scheduler with a virtual clock ([`crate::simulate`]), print what `run` would print at
//! the end plus the critical path, and write the summary JSON (marked `"predicted": true`) and
//! the HTML run page when asked.

use anyhow::Context as _;
use runner_plugin::size::format_size;
use serde::Serialize;
use std::path::Path;

use super::output_guard::OutputGuard;
use super::record;
use super::summary::{NO_LOCAL_BUDGET, RunSummary};
use super::{EXIT_USAGE, ExecutorKind, SimulateArgs, UsageError, compile};
use crate::plan::Compiled;
use crate::recipe::CompileOptions;
use crate::registry::Registry;
use crate::simulate::alike::{Beyond, Measure};
use crate::simulate::growth::{Grown, NotGrown, grown_text, not_grown_text};
use crate::simulate::service_wait::{AddedWaits, Interpreters};
use crate::simulate::trend::{Carried, carried_text};
use crate::simulate::{ClusterShape, CpuSharing, History, Prediction, SimOptions, SpillRates};
use crate::store::Executor;
use crate::store::SpillSpeed;

/// Jobs in flight with `--executor slurm` unless `--workers` says (as `run`).
const SLURM_JOBS_IN_FLIGHT: usize = 64;

pub fn simulate(registry: &Registry, args: SimulateArgs) -> anyhow::Result<u8> {
    let Some(mut compiled) = compile(registry, &args.recipe) else { return Ok(EXIT_USAGE) };
    let db = args.db.clone().unwrap_or_else(record::default_db);
    let mut guard = OutputGuard::default();
    guard.protect_store(&db).protect_recipe(&args.recipe.recipe, &compiled);
    guard.check_summary_and_report(args.summary.as_deref(), args.report.as_deref())?;
    let cluster = cluster_shape(&args)?;
    let history = match record::open_for_reading(&db)? {
        Some(store) => History::read(&store, &compiled, None)?,
        None => {
            tracing::warn!(
                "no feedback store at {}: nothing recorded to predict from, so every task is a guess (runs record \
                 there; pass --db PATH)",
                db.display()
            );
            History::none(&compiled)
        }
    };
    let spill = SpillBandwidth::choose(args.spill_bandwidth, &history);
    let options = sim_options(&args, cluster.is_some(), spill)?;
    let sections = args.recipe.python.sections();
    let recompile = recompiler(registry, &args.recipe.recipe, &sections);
    let report = args.report.is_some();
    let (prediction, spill) = predict_measuring_spills(spill, &options, None, &mut None, |options| {
        crate::simulate::predict(&mut compiled, &history, &recompile, options, args.guess_speed, cluster, report)
    });
    let summary = PredictedSummary::new(&compiled, &prediction, args.guess_speed, spill);
    summary.print(&prediction);
    if let Some(path) = &args.summary {
        summary.write(path)?;
    }
    if let Some(path) = &args.report {
        super::simulate_report::write(&compiled, &prediction, path)
            .with_context(|| format!("writing the predicted run's page to {}", path.display()))?;
        say!("  report (a prediction): {}", path.display());
    }
    Ok(0)
}

/// Compiles the recipe at `path` with a recorded run's cycle id and vars (as `--set`s would):
/// what its plugins said under that run's metadata. Quiet: a recipe that no longer takes those
/// vars is predicted without them.
pub fn recompiler<'a>(
    registry: &'a Registry,
    path: &'a Path,
    sections: &'a [(String, String, serde_json::Value)],
) -> impl Fn(&str, &serde_json::Map<String, serde_json::Value>) -> Option<Compiled> + 'a {
    move |cycle, vars| {
        let set = vars.iter().map(|(name, value)| (name.clone(), value.to_string())).collect();
        let options = CompileOptions { cycle: cycle.to_string(), set, sections: sections.to_vec() };
        Compiled::from_file(path, &options, registry).ok()
    }
}

/// Bytes a second a spill is taken to be written (and read back) at when neither
/// `--spill-bandwidth` nor the recorded spills say, and the prediction spills nothing (else
/// the spill folder's disk is measured, [`predict_measuring_spills`]).
const DEFAULT_SPILL_BANDWIDTH: u64 = 1 << 30;

/// Where the spill bandwidth of a prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpillBandwidthFrom {
    /// `--spill-bandwidth`.
    Flag,
    /// The recipe's recorded spills (how long they took to write, or their readers to read
    /// them back).
    History,
    /// Neither: [`DEFAULT_SPILL_BANDWIDTH`].
    Default,
    /// Neither, and the prediction spilled: as fast as the spill folder's disk took a few
    /// spilled buffers as the prediction was made (`memory::spill::probe_write_speed`).
    Measured,
    /// Read back as fast as written: no recorded task read a spilled input back.
    AsWritten,
}

/// How fast a prediction writes its spills, and its tasks read them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SpillBandwidth {
    pub bytes_per_second: u64,
    pub from: SpillBandwidthFrom,
    pub read_back_bytes_per_second: u64,
    pub read_back_from: SpillBandwidthFrom,
}

impl SpillBandwidth {
    /// `given` (the flag, for both), else the speeds of the recipe's recorded spills, else the
    /// default; spills are read back as fast as they are written where no reads were recorded.
    pub fn choose(given: Option<u64>, history: &History) -> SpillBandwidth {
        let recorded = history.spill_speed;
        // The flag, else the recorded speed, else `otherwise`.
        let speed = |recorded: Option<SpillSpeed>, otherwise: (u64, SpillBandwidthFrom)| match (given, recorded) {
            (Some(given), _) => (given, SpillBandwidthFrom::Flag),
            (None, Some(speed)) => (speed.bytes_per_second(), SpillBandwidthFrom::History),
            (None, None) => otherwise,
        };
        let (bytes_per_second, from) = speed(recorded.written, (DEFAULT_SPILL_BANDWIDTH, SpillBandwidthFrom::Default));
        let (read_back_bytes_per_second, read_back_from) =
            speed(recorded.read_back, (bytes_per_second, SpillBandwidthFrom::AsWritten));
        SpillBandwidth { bytes_per_second, from, read_back_bytes_per_second, read_back_from }
    }

    /// Spills written at `speed`, measured, and read back so where no read was recorded.
    fn measured(self, speed: u64) -> SpillBandwidth {
        let read_back = self.read_back_from == SpillBandwidthFrom::AsWritten;
        SpillBandwidth {
            bytes_per_second: speed,
            from: SpillBandwidthFrom::Measured,
            read_back_bytes_per_second: if read_back { speed } else { self.read_back_bytes_per_second },
            ..self
        }
    }

    /// The simulation's spill rates: a step's tasks read back as fast as its recorded ones
    /// did, unless the flag says how fast the disk is.
    pub fn rates(&self) -> SpillRates {
        SpillRates {
            written: self.bytes_per_second,
            read_back: self.read_back_bytes_per_second,
            read_back_as_recorded: self.read_back_from != SpillBandwidthFrom::Flag,
        }
    }

    fn said(&self) -> String {
        let written = match self.from {
            SpillBandwidthFrom::Flag => "--spill-bandwidth",
            SpillBandwidthFrom::History => "as fast as the recipe's recorded spills were written",
            SpillBandwidthFrom::Measured => {
                "as fast as the spill folder's disk wrote 12 MiB of spills just now: no recorded run of the recipe \
                 spilled"
            }
            SpillBandwidthFrom::Default | SpillBandwidthFrom::AsWritten => {
                "the default: no recorded run of the recipe spilled"
            }
        };
        let read_back = match self.read_back_from {
            SpillBandwidthFrom::Flag => "--spill-bandwidth",
            SpillBandwidthFrom::History => {
                "as fast as the recipe's recorded tasks read theirs back from disk; a step's tasks as its own did, where \
                 they did"
            }
            SpillBandwidthFrom::AsWritten | SpillBandwidthFrom::Default | SpillBandwidthFrom::Measured => {
                "as written: no recorded task read a spilled input back from disk"
            }
        };
        format!(
            "written at {}/s ({written}), read back at {}/s ({read_back})",
            format_size(self.bytes_per_second),
            format_size(self.read_back_bytes_per_second)
        )
    }
}

/// Predicts with `predict` on `options` at the spill speeds `spill` gives. A prediction that
/// spills with nothing recorded or given to go by is made again at the speed the disk of the spill folder
/// (`spill_dir`, as `run --spill-dir` takes it) writes spills now, measured once: `probed` keeps
/// it for a command's later predictions (`None` until measured; `Some(None)`: it could not be).
/// Learning from the same history twice moves nothing: the second prediction differs from the
/// first only in its spills' speed.
pub fn predict_measuring_spills(
    spill: SpillBandwidth,
    options: &SimOptions,
    spill_dir: Option<&Path>,
    probed: &mut Option<Option<u64>>,
    mut predict: impl FnMut(&SimOptions) -> Prediction,
) -> (Prediction, SpillBandwidth) {
    let mut predict = |spill: SpillBandwidth| predict(&SimOptions { spill: spill.rates(), ..options.clone() });
    let prediction = predict(spill);
    if spill.from != SpillBandwidthFrom::Default || prediction.simulated.report.spilled_bytes == 0 {
        return (prediction, spill);
    }
    let speed = *probed.get_or_insert_with(|| match crate::memory::spill::probe_write_speed(spill_dir) {
        Ok(speed) => Some(speed),
        Err(e) => {
            tracing::warn!("cannot measure how fast spills are written here ({e}): the prediction takes the default");
            None
        }
    });
    match speed {
        Some(speed) => {
            let spill = spill.measured(speed);
            (predict(spill), spill)
        }
        None => (prediction, spill),
    }
}

/// Workers, budget and spill speed: `run`'s defaults, or a cluster's (no local budget).
pub fn sim_options(args: &SimulateArgs, cluster: bool, spill: SpillBandwidth) -> anyhow::Result<SimOptions> {
    let cpus = crate::scheduler::cpus_here();
    let default_workers = if cluster { SLURM_JOBS_IN_FLIGHT } else { cpus };
    let budget = match (args.budget, cluster) {
        (Some(budget), _) => budget,
        (None, true) => NO_LOCAL_BUDGET,
        (None, false) => {
            crate::budget::choose(None)
                .map_err(|e| anyhow::anyhow!("cannot choose a default budget ({e}); pass --budget"))?
                .bytes
        }
    };
    Ok(SimOptions {
        workers: args.workers.map_or(default_workers, |w| w as usize),
        budget,
        spill: spill.rates(),
        read_every_task: args.read_every_task,
        // A cluster's CPUs are its nodes'.
        cpus: (!cluster).then(|| args.cpus.map_or(cpus, |cpus| cpus as usize)),
        // `runner run` is a new process: its interpreters start with it, and stop before its end.
        interpreters: Interpreters::Cold,
        keep_services: false,
    })
}

/// The cluster of `--executor slurm`, checked: `--nodes` and `--node-memory` are needed.
fn cluster_shape(args: &SimulateArgs) -> anyhow::Result<Option<ClusterShape>> {
    let cluster_flags = [
        ("--nodes", args.nodes.is_some()),
        ("--node-memory", args.node_memory.is_some()),
        ("--node-cpus", args.node_cpus.is_some()),
        ("--cpus-per-task", args.cpus_per_task.is_some()),
        ("--queue-wait", args.queue_wait.is_some()),
        ("--job-start", args.job_start.is_some()),
    ];
    if args.executor != ExecutorKind::Slurm {
        if let Some((flag, _)) = cluster_flags.iter().find(|(_, given)| *given) {
            return Err(
                UsageError(format!("{flag} describes a simulated cluster; expected it with --executor slurm")).into()
            );
        }
        return Ok(None);
    }
    if args.cpus.is_some() {
        return Err(UsageError(
            "--cpus are a local simulation's; a simulated cluster's CPUs are its nodes' (--node-cpus C)".into(),
        )
        .into());
    }
    let (Some(nodes), Some(node_memory)) = (args.nodes, args.node_memory) else {
        return Err(UsageError(
            "--executor slurm simulates a cluster: expected --nodes K and --node-memory SIZE (and --node-cpus C, \
             default 1), e.g. --nodes 4 --node-memory 256GiB --node-cpus 64"
                .into(),
        )
        .into());
    };
    let node_cpus = args.node_cpus.unwrap_or(1);
    let cpus_per_task = args.cpus_per_task.unwrap_or(1);
    if cpus_per_task > node_cpus {
        return Err(UsageError(format!(
            "--cpus-per-task {cpus_per_task} is more than a node's {node_cpus} CPUs (--node-cpus); no job could start"
        ))
        .into());
    }
    Ok(Some(ClusterShape {
        nodes,
        node_memory,
        node_cpus,
        cpus_per_task,
        queue_wait: args.queue_wait.unwrap_or(std::time::Duration::from_secs(30)),
        job_start: args.job_start.unwrap_or(std::time::Duration::from_secs(1)),
    }))
}

/// A predicted run's summary: a real run's fields and `"predicted": true`, with what only a
/// prediction has.
#[derive(Debug, Serialize)]
pub struct PredictedSummary {
    #[serde(flatten)]
    pub run: RunSummary,
    pub predicted: bool,
    /// Tasks whose time was the default (their step had no recorded times).
    pub guesses: u64,
    /// Bytes of estimate a second a guessed task runs at.
    pub guess_speed_bytes: u64,
    pub critical_path: CriticalPathSummary,
    /// The recorded cycles (nearest in vars) whose output sizes and data-following estimates
    /// the prediction took.
    pub alike_cycles: Vec<String>,
    /// The numbers among the cycle's vars outside every recorded run's values of them: what
    /// follows the data is the nearest run's, and may be far off.
    pub vars_beyond_history: Vec<Beyond>,
    /// The steps whose figures were carried on past the recorded range, as a power of the
    /// number that sets their size (their args), and by how much.
    pub grown_past_history: Vec<Grown>,
    /// The steps whose args that number sets where the runs had one value of it: not grown,
    /// for want of a second value to measure how (taken as at the recorded value).
    pub not_grown_past_history: Vec<NotGrown>,
    /// The steps whose data-following figures were carried along the line through the two
    /// farthest-apart runs past the recorded range, and by how much.
    pub carried_past_history: Vec<Carried>,
    /// How the run finds its interpreters, and what each step's first tasks wait for theirs.
    pub interpreter_waits: AddedWaits,
    /// How fast spills were taken to be written and read back.
    pub spill_bandwidth: SpillBandwidth,
    /// Seconds of `wall_s` for what a run costs beyond its tasks and the machine's pace, as
    /// the simulator missed them on the alike and recent runs (`null`: no recorded alike run,
    /// or a cluster).
    pub overhead_s: Option<f64>,
    /// The CPUs the local workers shared when more of them were busy (`null`: none shared —
    /// as many CPUs as workers, times recorded with more workers than CPUs, or a cluster).
    pub cpus_shared: Option<usize>,
    /// The range over the dealings of where the recorded weather falls (`null`: the recorded
    /// tasks' figures kept to their tasks).
    pub dealings: Option<DealingsSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSummary>,
}

/// What the dealings of a prediction gave ([`crate::simulate::deal`]).
#[derive(Debug, Serialize)]
pub struct DealingsSummary {
    pub count: u64,
    /// The dims whose coordinates the recorded figures were dealt out over.
    pub dims: Vec<String>,
    pub peak_reserved_bytes: Range<u64>,
    pub wall_s: Range<f64>,
}

#[derive(Debug, Serialize)]
pub struct Range<T> {
    pub min: T,
    pub max: T,
}

#[derive(Debug, Serialize)]
pub struct CriticalPathSummary {
    pub steps: Vec<String>,
    pub wall_s: f64,
}

#[derive(Debug, Serialize)]
pub struct ClusterSummary {
    pub nodes: u32,
    pub node_memory_bytes: u64,
    pub node_cpus: u32,
    pub jobs: u64,
    /// The nodes for the predicted wall.
    pub node_hours: f64,
    /// Of those, what the jobs held (their share of a node times their run time).
    pub busy_node_hours: f64,
    pub peak_per_node_bytes: Vec<u64>,
}

impl PredictedSummary {
    pub fn new(
        compiled: &Compiled,
        prediction: &Prediction,
        guess_speed: u64,
        spill_bandwidth: SpillBandwidth,
    ) -> PredictedSummary {
        let simulated = &prediction.simulated;
        let mut run = RunSummary::new(&compiled.recipe, &simulated.report, simulated.peak_memory);
        let cluster = simulated.cluster.as_ref().map(|cluster| {
            run.executor = Executor::Slurm;
            let shape = cluster.shape();
            ClusterSummary {
                nodes: shape.nodes,
                node_memory_bytes: shape.node_memory,
                node_cpus: shape.node_cpus,
                jobs: cluster.jobs,
                node_hours: shape.nodes as f64 * simulated.report.wall.as_secs_f64() / 3600.0,
                busy_node_hours: cluster.busy_node_hours(),
                peak_per_node_bytes: cluster.peak_per_node().to_vec(),
            }
        });
        let names = prediction.critical_path.steps.iter().map(|&s| compiled.recipe.steps[s].name.clone()).collect();
        PredictedSummary {
            run,
            predicted: true,
            guesses: simulated.guesses,
            guess_speed_bytes: guess_speed,
            critical_path: CriticalPathSummary { steps: names, wall_s: prediction.critical_path.length.as_secs_f64() },
            alike_cycles: prediction.alike_cycles.clone(),
            vars_beyond_history: prediction.beyond.clone(),
            grown_past_history: prediction.grown.clone(),
            not_grown_past_history: prediction.not_grown.clone(),
            carried_past_history: prediction.carried.clone(),
            interpreter_waits: prediction.waits.clone(),
            spill_bandwidth,
            overhead_s: prediction.overhead,
            cpus_shared: match prediction.cpus {
                CpuSharing::Shared(cpus) => Some(cpus),
                _ => None,
            },
            dealings: prediction.dealt.as_ref().map(|dealt| DealingsSummary {
                count: dealt.dealings,
                dims: dealt.dims.clone(),
                peak_reserved_bytes: Range { min: dealt.peak_reserved.0, max: dealt.peak_reserved.1 },
                wall_s: Range { min: dealt.wall.0.as_secs_f64(), max: dealt.wall.1.as_secs_f64() },
            }),
            cluster,
        }
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        crate::values::write_atomically(path, text.as_bytes()).context("writing the summary")
    }

    /// The closing lines `run` prints, for the predicted run, then per step, the critical path
    /// and the guesses.
    pub fn print(&self, prediction: &Prediction) {
        let run = &self.run;
        let outcome = if run.tasks_failed == 0 && run.internal_error.is_none() { "ok" } else { "FAILED" };
        let budget = if run.budget_bytes >= NO_LOCAL_BUDGET {
            "· no local budget".to_string()
        } else {
            format!("of {} budget", format_size(run.budget_bytes))
        };
        say!(
            "{} {}: predicted {outcome} — {} ({} ok, {} failed, {} skipped) in {:.2} s on {} workers · peak \
             reserved {} {budget} · peak memory {} · spilled {} in {} buffers · {} oversized · {}",
            run.recipe,
            run.cycle,
            super::summary::tasks(run.tasks_total),
            run.tasks_ok,
            run.tasks_failed,
            run.tasks_skipped,
            run.wall_s,
            run.workers,
            format_size(run.peak_reserved_bytes),
            format_size(run.peak_rss_bytes),
            format_size(run.spilled_bytes),
            run.spill_count,
            run.oversized,
            super::summary::over_estimate(run.underestimates),
        );
        if let Some(error) = &run.internal_error {
            say!("  {error} ({} tasks not run)", run.tasks_not_run);
        }
        run.print_failures();
        say!("  {:<20} {:>8} {:>10} {:>12} {:>12}  time per task", "step", "tasks", "wall", "estimate p50", "peak p50");
        for (id, step) in run.steps.iter().enumerate() {
            let learned = match prediction.durations.get(id).and_then(Option::as_ref) {
                Some(model) => model.to_string(),
                None => format!("no history: its estimate at {}/s (a guess)", format_size(self.guess_speed_bytes)),
            };
            say!(
                "  {:<20} {:>8} {:>9.2}s {:>12} {:>12}  {learned}",
                step.step,
                step.tasks,
                step.wall.as_secs_f64(),
                format_size(step.estimate_p50),
                format_size(step.peak_p50),
            );
        }
        say!(
            "  critical path: {} — {:.2} s (no schedule finishes sooner)",
            self.critical_path.steps.join(" → "),
            self.critical_path.wall_s
        );
        if !self.alike_cycles.is_empty() {
            say!(
                "  output sizes and data-following estimates as recorded for the cycle with the nearest vars: {}",
                self.alike_cycles.join(", ")
            );
        }
        for beyond in &self.vars_beyond_history {
            let taken = if self.carried_past_history.is_empty() && self.grown_past_history.is_empty() {
                "is the nearest run's, off by as much as the data differs"
            } else {
                "is the nearest run's, but where it moved between the runs along the number (below)"
            };
            say!("  {}: what follows the data (estimates from inputs, files, task times) {taken}", beyond_text(beyond));
        }
        for grown in &self.grown_past_history {
            say!("  {}", grown_text(grown));
        }
        for not_grown in &self.not_grown_past_history {
            say!("  {}", not_grown_text(not_grown));
        }
        for carried in &self.carried_past_history {
            say!("  {}", carried_text(carried));
        }
        if let Some(text) = self.interpreter_waits.text() {
            say!("  {text}");
        }
        if let Some(dealt) = &self.dealings {
            say!(
                "  peak reserved {} to {} and wall {:.2} to {:.2} s over {} dealings of the recorded figures over {} \
                 (the median dealing shown): the recent runs' tasks did not keep their sizes from run to run",
                format_size(dealt.peak_reserved_bytes.min),
                format_size(dealt.peak_reserved_bytes.max),
                dealt.wall_s.min,
                dealt.wall_s.max,
                dealt.count,
                dealt.dims.join(" × "),
            );
        }
        if run.spilled_bytes > 0 {
            say!("  spills {}", self.spill_bandwidth.said());
        }
        if run.peak_reserved_standing_bytes > 0 {
            let ran_on = prediction.standing_workers;
            let other_workers = if ran_on > 0 && run.workers != ran_on {
                format!(
                    " (theirs on {ran_on} workers, for the {} here: each interpreter's own share, and the pages \
                     forked ones share once)",
                    run.workers
                )
            } else {
                String::new()
            };
            say!(
                "  of the peak reserved, {} is warm interpreters at their baseline between tasks, as the recorded \
                 runs held them at their peaks{other_workers}",
                format_size(run.peak_reserved_standing_bytes)
            );
        }
        if let Some(seconds) = self.overhead_s {
            say!(
                "  {:+.1} ms of the wall beyond the tasks (starting, claiming and recording tasks, freeing buffers, \
                 the machine's pace): what the simulation missed of the alike and recent runs' recorded walls",
                seconds * 1e3
            );
        }
        match prediction.cpus {
            CpuSharing::Shared(cpus) => say!(
                "  {} workers on {cpus} CPUs: with more than {cpus} tasks running, each ran at {cpus}/n of the speed it \
                 was recorded at or guessed (every task taken to compute throughout; --cpus)",
                run.workers
            ),
            CpuSharing::AsRecorded(cpus) => say!(
                "  {} workers, {cpus} CPUs: the recorded runs had more workers than the CPUs here, so their task times \
                 hold the sharing they met; each task takes the time it was recorded to take",
                run.workers
            ),
            CpuSharing::Own => {}
        }
        if self.guesses > 0 {
            say!(
                "  {} of {} tasks are guesses: their steps have no recorded times, each was taken to run for its \
                 memory estimate at {}/s (--guess-speed)",
                self.guesses,
                run.tasks_total,
                format_size(self.guess_speed_bytes)
            );
        }
        if let Some(cluster) = &self.cluster {
            let peak = cluster.peak_per_node_bytes.iter().copied().max().unwrap_or(0);
            say!(
                "  cluster: {} jobs on {} nodes of {} and {} CPUs · {:.3} node-hours for the wall, {:.3} used by jobs · \
                 peak per node {} (highest)",
                cluster.jobs,
                cluster.nodes,
                format_size(cluster.node_memory_bytes),
                cluster.node_cpus,
                cluster.node_hours,
                cluster.busy_node_hours,
                format_size(peak),
            );
            let shown: Vec<String> = cluster.peak_per_node_bytes.iter().take(16).map(|&b| format_size(b)).collect();
            let more = if cluster.peak_per_node_bytes.len() > 16 { ", …" } else { "" };
            say!("  peak per node: {}{more}", shown.join(", "));
        }
    }
}

/// `wet = 0.45 is outside the recorded runs' 0.03 to 0.05` (or `... runs' 0.05`), and for a
/// list `thresholds has 5 items, outside the recorded runs' 2 to 3`.
pub fn beyond_text(beyond: &Beyond) -> String {
    let Beyond { var, of, value, recorded_min: low, recorded_max: high } = beyond;
    let range = if low == high { format!("{low}") } else { format!("{low} to {high}") };
    match of {
        Measure::Value => format!("{var} = {value} is outside the recorded runs' {range}"),
        Measure::Length => {
            let items = if *value == 1.0 { "item" } else { "items" };
            format!("{var} has {value} {items}, outside the recorded runs' {range}")
        }
    }
}
