//! Runs a compiled recipe on a pool of worker threads.
//!
//! Every worker loops: take the lock, record the tasks it has just run, claim the next ready
//! task that fits the memory budget with its inputs, release the lock, run the plugin. There is
//! no coordinator thread and no lock is held while a plugin runs. When a step's tasks prove
//! quick (under 20 µs on average), a worker claims up to 64 of them at once and reports them
//! together, so the lock is taken once per batch; slow tasks go one at a time, so memory
//! admission stays per task where it matters. The bookkeeping lives in [`state`]; per-step
//! statistics are gathered per worker in [`stats`] and merged at the end.

mod meter;
mod output_claims;
mod state;
pub mod stats;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use runner_plugin::{DimValue, FailureKind, Input, Inputs, InputsForEstimate, TaskError, Value};
use smallvec::SmallVec;

use crate::executor::attempt::{self, TaskOutcome};
use crate::executor::{RemoteExecutor, RemoteOutcome, Unit};
use crate::graph::Graph;
use crate::measure::{self, PeakSource};
use crate::memory::spill::{SpillDir, release_value_pages};
use crate::memory::{Admission, TaskSlot};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::{OnMissing, Recipe, StepId};
use crate::resume::{Fingerprints, Reuse};
pub use meter::RunMeter;
use state::SpillDone;
pub(crate) use state::{Garbage, Pick, Picked, SpillJob, State};
pub use state::{Outcome, SkipReason, TaskRef};
use stats::StepStats;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub workers: usize,
    pub budget: u64,
    /// Where tasks' scratch directories go; removed when the run ends.
    pub work_dir: PathBuf,
    /// `--spill-dir`: where spilled buffers go [default: a folder in the system temp dir].
    pub spill_dir: Option<PathBuf>,
    /// The most memory the process could ever have (`None`: no limit is enforced, as with
    /// `--allow-oversized`): a task that needs more fails without running, instead of taking
    /// the machine down with it.
    pub memory_limit: Option<u64>,
    /// `--enforce-memory`: each external command's process tree is limited to its task's
    /// reservation and a quarter more (a runaway is killed as out of memory, and retried with
    /// a larger reservation if its step has `retries`).
    pub enforce_memory: bool,
}

impl RunOptions {
    /// `workers` under `budget`, scratch files in `work_dir`, spills in the default folder, no
    /// memory limit enforced.
    pub fn new(workers: usize, budget: u64, work_dir: PathBuf) -> RunOptions {
        RunOptions { workers, budget, work_dir, spill_dir: None, memory_limit: None, enforce_memory: false }
    }

    /// The folder holding every run's spill folder.
    pub fn spill_parent(&self) -> PathBuf {
        self.spill_dir.clone().unwrap_or_else(SpillDir::default_parent)
    }
}

/// Counters a progress display can read at any time without taking the scheduler's lock.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    /// What the ledger counts: running tasks' reservations (or live bytes) plus resident buffers.
    pub reserved: AtomicU64,
    /// Bytes of buffers kept in memory for their consumers.
    pub resident: AtomicU64,
    /// Tasks running now.
    pub running: AtomicU64,
    pub budget: AtomicU64,
    pub spilled: AtomicU64,
    /// Spills so far (a sampler sees a spill event when it grows).
    pub spills: AtomicU64,
    pub done: AtomicBool,
    /// Per step (by [`StepId`]), when whoever made the `Progress` sized it for the recipe (the
    /// progress bar's ETA uses them); empty otherwise, and then nothing is published per step.
    pub steps: Box<[StepProgress]>,
}

/// One step's tasks and, as they finish, how many ran and their summed wall time.
#[derive(Debug, Default)]
pub struct StepProgress {
    /// The step's tasks in this run.
    pub tasks: u64,
    /// Tasks of the step that ran (succeeded or failed; not the skipped ones).
    pub ran: AtomicU64,
    pub wall_nanos: AtomicU64,
}

impl StepProgress {
    /// Publishes `tasks` of the step that ran for `wall` together.
    pub fn ran(&self, tasks: u64, wall: Duration) {
        self.wall_nanos.fetch_add(u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.ran.fetch_add(tasks, Ordering::Relaxed);
    }
}

/// A job's learned time per task is its step's longest recorded task times this (tasks on a
/// cluster's nodes may run slower than they did here or last cycle).
const LEARNED_TIME_FACTOR: u32 = 3;

/// How long a job of `tasks` tasks of a step may run: each task its `timeout:`, or without one
/// [`LEARNED_TIME_FACTOR`] × the step's longest recorded task; `None` (the partition's default)
/// for a step with neither.
fn job_time(timeout: Option<Duration>, longest_task: Option<Duration>, tasks: usize) -> Option<Duration> {
    let per_task = timeout.or_else(|| longest_task.map(|longest| longest * LEARNED_TIME_FACTOR))?;
    Some(per_task.saturating_mul(tasks.max(1) as u32))
}

/// One finished (or skipped) task, as the store records it.
#[derive(Debug, Clone, Copy)]
pub struct TaskReport<'a> {
    /// The worker that reports it, `0..workers`: a sink may buffer per worker.
    pub worker: usize,
    /// The step's index in the recipe, and its name.
    pub step_id: StepId,
    pub step: &'a str,
    /// The task's linear index in its step (row-major over its `over` dims), and its key.
    pub index: u64,
    pub key: &'a str,
    pub plugin: &'static str,
    pub outcome: Outcome,
    pub input_bytes: u64,
    pub estimate: u64,
    pub source: EstimateSource,
    pub plugin_estimate: u64,
    pub peak: u64,
    pub output_bytes: u64,
    pub wall: Duration,
    /// When the task started, since the run started (zero for a skipped task).
    pub started: Duration,
    /// Attempts made (0 for a task that never ran).
    pub attempts: u32,
    /// How `peak` was measured.
    pub peak_source: PeakSource,
    /// The file holding what the task printed (external commands), if there is one.
    pub log_path: Option<&'a std::path::Path>,
    /// Content hashes for `--resume` (what it was asked, what it read, what it made), when
    /// the run records them, and the file its output is: a path output, or its kept value.
    pub hashes: Option<TaskHashes>,
    pub output_path: Option<&'a std::path::Path>,
    pub error: Option<&'a str>,
}

/// A task's content hashes (see [`crate::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskHashes {
    pub args: u64,
    pub inputs: u64,
    pub output: u64,
}

/// Where finished tasks are reported, by workers, outside the scheduler's lock.
pub trait TaskSink: Sync {
    fn record(&self, task: &TaskReport<'_>);

    /// Worker `worker` has reported a batch of tasks: anything the sink buffered for it should
    /// go on its way now. Called after each batch a worker runs, and when it stops.
    fn flush(&self, worker: usize) {
        let _ = worker;
    }
}

/// A task that failed, for the report.
#[derive(Debug, Clone)]
pub struct Failure {
    pub step: String,
    pub key: String,
    pub error: String,
    /// Where the task is: its step's position in the recipe and its index (failures are listed
    /// in this order, so `i=2` comes before `i=10`).
    pub step_id: StepId,
    pub index: u64,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub steps: Vec<StepStats>,
    pub failures: Vec<Failure>,
    pub wall: Duration,
    pub peak_reserved: u64,
    pub spilled_bytes: u64,
    pub spill_count: u64,
    /// Why spilling stopped during the run (it went on without), if it did.
    pub spill_error: Option<String>,
    pub workers: usize,
    pub budget: u64,
    /// An engine failure that ended the run early (a worker's panic outside any plugin, or a
    /// run left with tasks that could never start), and how many tasks it left unrun.
    pub internal_error: Option<String>,
    pub not_run: u64,
    /// Each spill written (when, how long, how many bytes), in the order they started.
    pub spills: Vec<SpillRecord>,
    /// Tasks that found an input missing under `on_missing: skip` or `ignore`: the gaps.
    pub missing: Vec<Failure>,
}

/// One buffer written to a spill file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillRecord {
    /// When writing started, since the run started.
    pub started: Duration,
    pub wall: Duration,
    pub bytes: u64,
}

impl RunReport {
    pub fn total(&self, f: impl Fn(&StepStats) -> u64) -> u64 {
        self.steps.iter().map(f).sum()
    }
}

/// Most tasks of a quick step a worker claims at once.
pub(crate) const MAX_BATCH: usize = 64;

/// How often one task may be preempted; after that its commands run to the end, over the
/// budget if they must (a task that keeps growing past what it held must still finish).
const MAX_PREEMPTIONS: u32 = 2;

/// Everything workers share.
struct Shared<'r> {
    recipe: &'r Recipe,
    graph: &'r Graph,
    plan: &'r Plan,
    options: &'r RunOptions,
    state: Mutex<State<'r>>,
    wake: Condvar,
    progress: &'r Progress,
    sink: Option<&'r dyn TaskSink>,
    meter: &'r RunMeter,
    spill: &'r SpillDir,
    /// When the run started: task start times are offsets from it.
    started: Instant,
    /// Where tasks run when not in this process.
    remote: Option<&'r dyn RemoteExecutor>,
    /// Tasks taken over from the resumed run.
    reuse: Option<&'r Reuse>,
    /// What each step is asked, when the run is recorded (for a later `--resume`).
    fingerprints: Option<Fingerprints>,
    /// The output paths tasks have claimed: two tasks never write one file.
    output_claims: output_claims::OutputClaims,
    /// Where tasks' scratch folders go (removed with the work dir) and their commands' logs
    /// (kept: `runner-logs/<recipe>/<cycle>`).
    scratch_root: PathBuf,
    log_root: PathBuf,
}

impl<'r> Shared<'r> {
    fn lock(&self) -> MutexGuard<'_, State<'r>> {
        // A worker that panicked while holding the lock is handled where it panicked; the state
        // it left is still the best there is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs every task of `recipe` and reports what happened.
pub fn run(
    recipe: &Recipe,
    graph: &Graph,
    plan: &Plan,
    options: &RunOptions,
    progress: &Progress,
    sink: Option<&dyn TaskSink>,
) -> RunReport {
    run_with(recipe, graph, plan, options, progress, sink, RunExtras::default())
}

/// What a run may do besides running every task here.
#[derive(Default, Clone, Copy)]
pub struct RunExtras<'a> {
    /// Tasks run there (e.g. as Slurm jobs) instead of in this process: the order, the ledger
    /// and the recording are the same.
    pub remote: Option<&'a dyn RemoteExecutor>,
    /// Tasks taken over from the run being resumed (`--resume`).
    pub reuse: Option<&'a Reuse>,
}

/// [`run`], with [`RunExtras`].
pub fn run_with(
    recipe: &Recipe,
    graph: &Graph,
    plan: &Plan,
    options: &RunOptions,
    progress: &Progress,
    sink: Option<&dyn TaskSink>,
    extras: RunExtras<'_>,
) -> RunReport {
    let RunExtras { remote, reuse } = extras;
    let workers = options.workers.clamp(1, measure::SLOTS);
    // Nested parallel work (TaskContext::join and friends) runs on rayon's global pool; size it
    // like the worker pool. It can only be set once per process, which is fine for the CLI.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(workers).build_global();
    crate::panics::install_hook();
    let started = Instant::now();
    let follows_data = recipe.steps.iter().map(|s| s.plugin.estimate_follows_data()).collect();
    let on_probation = (0..recipe.steps.len())
        .map(|id| {
            plan.steps[id].source == EstimateSource::Plugin
                && !recipe.steps[id].plugin.estimate_is_exact(&crate::plan::sample_args(recipe, id))
        })
        .collect();
    // Folders of killed runs go first; this run's is created on its first spill and removed
    // when `spill` drops at the end of this function, also on error.
    if let Err(error) = SpillDir::remove_stale(&options.spill_parent()) {
        tracing::warn!("cannot clean up old spill folders: {error}");
    }
    let spill = SpillDir::new(options.spill_dir.as_deref());
    if spill.is_on_tmpfs() {
        tracing::warn!(
            "the spill dir {} is on tmpfs, where spilled buffers still take memory; pass --spill-dir on a disk",
            spill.parent().display()
        );
    }
    if let (Some(remote), Some(reuse)) = (remote, reuse) {
        hand_over_reused(recipe, graph, reuse, remote);
    }
    let meter = RunMeter::new(workers * MAX_BATCH);
    let mut state = State::new(graph, plan, follows_data, on_probation, options.budget, &meter, reuse);
    state.take_over_reused();
    let shared = Shared {
        recipe,
        graph,
        plan,
        options,
        state: Mutex::new(state),
        wake: Condvar::new(),
        progress,
        sink,
        meter: &meter,
        spill: &spill,
        started,
        remote,
        reuse,
        fingerprints: sink.map(|_| Fingerprints::new(recipe)),
        output_claims: output_claims::OutputClaims::new(recipe),
        scratch_root: options.work_dir.join("scratch"),
        log_root: PathBuf::from("runner-logs")
            .join(attempt::file_name(&recipe.name))
            .join(attempt::file_name(&recipe.cycle)),
    };
    progress.total.store(graph.total_tasks(), Ordering::Relaxed);
    progress.budget.store(options.budget, Ordering::Relaxed);
    // Local commands and services that break the budget are preempted (remote ones have the
    // limits of their jobs).
    crate::measure::preempt::set_budget(if remote.is_some() { 0 } else { options.budget });
    let results: Vec<WorkerResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("runner-worker-{i}"))
                    .spawn_scoped(scope, move || Worker::new(shared, i).run())
                    .expect("spawning a worker thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    progress.done.store(true, Ordering::Relaxed);
    let mut state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    drop(std::mem::take(&mut state.garbage));
    let mut steps = vec![StepStats::default(); recipe.steps.len()];
    let mut failures = Vec::new();
    let mut internal_error = state.stuck.clone();
    let mut spills = Vec::new();
    let mut missing = Vec::new();
    for result in results {
        for (total, part) in steps.iter_mut().zip(&result.steps) {
            total.merge(part);
        }
        failures.extend(result.failures);
        missing.extend(result.missing);
        spills.extend(result.spills);
        internal_error = internal_error.or(result.internal_error);
    }
    spills.sort_by_key(|s: &SpillRecord| s.started);
    failures.sort_by_key(|f| (f.step_id, f.index));
    missing.sort_by_key(|f| (f.step_id, f.index));
    let _ = std::fs::remove_dir_all(&options.work_dir);
    RunReport {
        steps,
        failures,
        wall: started.elapsed(),
        peak_reserved: state.ledger.peak_used(),
        spilled_bytes: state.spilled,
        spill_count: state.spill_count,
        spill_error: state.spill_error.clone(),
        workers,
        budget: options.budget,
        internal_error,
        not_run: state.unfinished(),
        spills,
        missing,
    }
}

/// Gives `remote` the outputs of the tasks `--resume` takes over that a task that runs again
/// reads (each once), so that its jobs find them as they find the outputs of this run's tasks.
fn hand_over_reused(recipe: &Recipe, graph: &Graph, reuse: &Reuse, remote: &dyn RemoteExecutor) {
    let mut handed: Vec<std::collections::HashSet<u64>> = vec![Default::default(); recipe.steps.len()];
    for &step in &graph.topo {
        for index in (0..graph.steps[step].tasks).filter(|&index| reuse.get(step, index).is_none()) {
            for &edge in &graph.steps[step].inputs {
                let producer = graph.edges[edge].producer;
                graph.for_each_producer(edge, index, |p| {
                    let Some(task) = reuse.get(producer, p) else { return };
                    if !handed[producer].insert(p) {
                        return;
                    }
                    let name = &recipe.steps[producer].name;
                    if let Err(error) = remote.adopt(name, p, &task.value()) {
                        tracing::warn!(
                            "cannot hand the kept output of {name} task {p} to the {} jobs: {error}",
                            remote.name()
                        );
                    }
                });
            }
        }
    }
}

#[derive(Default)]
struct WorkerResult {
    steps: Vec<StepStats>,
    failures: Vec<Failure>,
    missing: Vec<Failure>,
    internal_error: Option<String>,
    spills: Vec<SpillRecord>,
}

/// One worker thread's loop and its reusable buffers.
struct Worker<'s, 'r> {
    shared: &'s Shared<'r>,
    /// This worker's number, `0..workers`.
    id: usize,
    stats: Vec<StepStats>,
    failures: Vec<Failure>,
    /// Tasks whose input was missing, under `on_missing: skip` or `ignore` (gaps, not failures).
    missing: Vec<Failure>,
    internal_error: Option<String>,
    spill_records: Vec<SpillRecord>,
    /// Tasks claimed under the lock, run in order outside it.
    claimed: Vec<Claimed>,
    /// Tasks run since the lock was last held, reported together at the next claim.
    done: Vec<(Picked, Finished)>,
    /// Claimed tasks that turned out to need more than they reserved, with their estimates.
    regrow: Vec<(Picked, u64)>,
    /// Input values of the claimed tasks, each task's at its `Claimed::values`.
    values: Vec<Arc<Value>>,
    /// Values per input of each claimed task, at its `Claimed::counts`.
    counts: Vec<usize>,
    /// What a run task's input slots are reset to, so its buffers can go while the batch goes on.
    none: Arc<Value>,
    key: String,
    index: Vec<(&'r str, DimValue)>,
    /// Tasks skipped since the last report, to record outside the lock.
    skipped: Vec<(TaskRef, SkipReason)>,
    /// Tasks `--resume` took over, to record outside the lock.
    reused: Vec<TaskRef>,
    /// Reused by batch claims.
    batch: Vec<Picked>,
    /// Buffers to spill, chosen under the lock, and what writing them gave.
    spill_jobs: Vec<SpillJob>,
    spilled: Vec<SpillDone>,
    /// Values to free once the lock is released.
    garbage: Vec<Garbage>,
    /// Emptied output `Arc`s, handed back to the state for reuse at the next report.
    shells: Vec<Arc<Value>>,
    /// Tasks run (and their wall) not yet published to the step's [`StepProgress`]: a batch of
    /// one step's tasks is published at once, not task by task.
    unpublished: UnpublishedRuns,
}

/// See [`Worker::unpublished`].
#[derive(Debug, Default)]
struct UnpublishedRuns {
    step: StepId,
    ran: u64,
    wall: Duration,
}

/// A task claimed to run, with where its inputs are in the worker's buffers.
struct Claimed {
    picked: Picked,
    values: Range<usize>,
    counts: Range<usize>,
    /// Its producers' output hashes, hashed (see [`crate::resume::ProducersHash`]).
    producers_hash: u64,
}

/// What running one task produced.
struct Finished {
    outcome: Outcome,
    output: Value,
    /// The size of the file a path output names (its consumers' input bytes).
    file_bytes: u64,
    /// Its output's content hash, 0 when the run does not hash.
    hash: u64,
    peak: u64,
    wall: Duration,
}

impl<'s, 'r> Worker<'s, 'r> {
    fn new(shared: &'s Shared<'r>, id: usize) -> Self {
        Worker {
            shared,
            id,
            stats: vec![StepStats::default(); shared.recipe.steps.len()],
            failures: Vec::new(),
            missing: Vec::new(),
            internal_error: None,
            spill_records: Vec::new(),
            claimed: Vec::with_capacity(MAX_BATCH),
            done: Vec::with_capacity(MAX_BATCH),
            regrow: Vec::new(),
            values: Vec::new(),
            counts: Vec::new(),
            none: Arc::new(Value::None),
            key: String::new(),
            index: Vec::new(),
            skipped: Vec::new(),
            reused: Vec::new(),
            batch: Vec::with_capacity(MAX_BATCH),
            spill_jobs: Vec::new(),
            spilled: Vec::new(),
            garbage: Vec::new(),
            shells: Vec::new(),
            unpublished: UnpublishedRuns::default(),
        }
    }

    /// The reservation slot of this worker's `position`-th claimed task.
    fn slot(&self, position: usize) -> TaskSlot {
        TaskSlot((self.id * MAX_BATCH + position) as u32)
    }

    fn run(mut self) -> WorkerResult {
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.turn())) {
                Ok(true) => {}
                Ok(false) => break,
                Err(panic) => self.fail_after_panic(&*panic),
            }
        }
        self.report_skipped();
        self.report_reused();
        self.flush_reports();
        WorkerResult {
            steps: self.stats,
            failures: self.failures,
            missing: self.missing,
            internal_error: self.internal_error,
            spills: self.spill_records,
        }
    }

    /// One round: report and claim under the lock, then outside it free what was let go, write
    /// chosen spills or run the claimed tasks. False once every task is done.
    fn turn(&mut self) -> bool {
        let more = self.report_and_claim();
        self.take_out_garbage();
        if !more {
            return false;
        }
        self.report_skipped();
        self.report_reused();
        if !self.spill_jobs.is_empty() {
            self.write_spills();
            return true;
        }
        if let Some(remote) = self.shared.remote {
            self.run_remote(remote);
            self.flush_reports();
            return true;
        }
        // One clock reading per task: each task starts when the one before it ended.
        let mut clock = Instant::now();
        for at in 0..self.claimed.len() {
            let Some(finished) = self.execute(at, clock) else { continue };
            clock += finished.wall;
            let claimed = &self.claimed[at];
            // Spilled inputs' pages go back once this reader is done, so a gather over more than
            // the budget streams through them; then the task's inputs are no longer needed here.
            for value in &self.values[claimed.values.clone()] {
                release_value_pages(value);
            }
            let none = &self.none;
            self.values[claimed.values.clone()].iter_mut().for_each(|v| *v = none.clone());
            self.done.push((claimed.picked, finished));
        }
        self.claimed.clear();
        self.values.clear();
        self.counts.clear();
        self.flush_reports();
        true
    }

    /// Frees what the state let go of, outside the lock; keeps emptied output `Arc`s for reuse.
    fn take_out_garbage(&mut self) {
        let mut spilled_copies = false;
        for garbage in self.garbage.drain(..) {
            spilled_copies |= garbage.is_spilled_copy();
            if let Garbage::Value(mut value) = garbage
                && let Some(inner) = Arc::get_mut(&mut value)
            {
                drop(std::mem::take(inner));
                self.shells.push(value);
            }
        }
        if spilled_copies {
            // jemalloc keeps freed pages for reuse; the point of a spill is to give them back.
            let _ = measure::purge_free_pages();
        }
    }

    /// At the end of a turn: the turn's tasks go to the sink's writer and to the progress bar.
    fn flush_reports(&mut self) {
        self.publish_runs();
        if let Some(sink) = self.shared.sink {
            sink.flush(self.id);
        }
    }

    /// Counts and records the tasks `--resume` took over, with what the run they come from
    /// recorded of them (so that a later resume can take them over again).
    fn report_reused(&mut self) {
        let Some(reuse) = self.shared.reuse else { return };
        let mut reused = std::mem::take(&mut self.reused);
        for task in reused.drain(..) {
            self.stats[task.step].reused += 1;
            if let Some(recorded) = reuse.get(task.step, task.index) {
                let hashes =
                    TaskHashes { args: recorded.args_hash, inputs: recorded.inputs_hash, output: recorded.output_hash };
                self.report_not_run(task, Outcome::Reused, Some(hashes), recorded.output_path.as_deref(), None);
            }
        }
        self.reused = reused;
    }

    /// Counts and records the tasks skipped because an input failed.
    fn report_skipped(&mut self) {
        let mut skipped = std::mem::take(&mut self.skipped);
        for (task, reason) in skipped.drain(..) {
            self.stats[task.step].skipped += 1;
            self.report_not_run(task, Outcome::Skipped, None, None, Some(reason.as_str()));
        }
        self.skipped = skipped;
    }

    /// Hands the sink a task that did not run here (skipped, or taken over by `--resume`): its
    /// step's planned estimate, nothing measured.
    fn report_not_run(
        &mut self,
        task: TaskRef,
        outcome: Outcome,
        hashes: Option<TaskHashes>,
        output_path: Option<&std::path::Path>,
        error: Option<&str>,
    ) {
        let Some(sink) = self.shared.sink else { return };
        self.describe_task(task.step, task.index);
        let step = &self.shared.recipe.steps[task.step];
        let plan = &self.shared.plan.steps[task.step];
        sink.record(&TaskReport {
            worker: self.id,
            step_id: task.step,
            step: &step.name,
            index: task.index,
            key: &self.key,
            plugin: step.plugin.name(),
            outcome,
            input_bytes: 0,
            estimate: plan.estimate,
            source: plan.source,
            plugin_estimate: plan.plugin_estimate,
            peak: 0,
            output_bytes: 0,
            wall: Duration::ZERO,
            started: Duration::ZERO,
            attempts: 0,
            peak_source: PeakSource::Allocator,
            log_path: None,
            hashes,
            output_path,
            error,
        });
    }

    /// Under the lock: records the tasks run and the spills written since the last call, then
    /// waits for and claims the next task (a batch of them if its step is quick), or spill
    /// victims to write. False once every task is done.
    fn report_and_claim(&mut self) -> bool {
        let shared = self.shared;
        let plan = shared.plan;
        let mut state = shared.lock();
        let reported = !self.done.is_empty() || !self.spilled.is_empty() || !self.regrow.is_empty();
        for (picked, result) in self.done.drain(..) {
            if result.peak > picked.estimate {
                state.note_underestimate(&picked, result.peak);
            }
            state.finish(&picked, result.outcome, result.output, result.file_bytes, result.hash, result.wall);
        }
        state.finish_spills(&mut self.spilled);
        state.recycle(&mut self.shells);
        self.skipped.append(&mut state.skipped);
        self.reused.append(&mut state.reused);
        let mut regrown = false;
        for (picked, plugin_estimate) in self.regrow.drain(..) {
            if let Some(picked) = state.reestimate(plan, picked, plugin_estimate) {
                regrown = true;
                self.claimed.push(Claimed { picked, values: 0..0, counts: 0..0, producers_hash: 0 });
            }
        }
        if reported {
            self.publish(&state);
            if state.sleepers > 0 {
                shared.wake.notify_all();
            }
        }
        let (more, mut state) = if regrown {
            // Re-admitted tasks run first; their inputs are collected now.
            let claimed = std::mem::take(&mut self.claimed);
            for claimed in claimed {
                self.claim(&state, claimed.picked);
            }
            (true, state)
        } else {
            self.claim_next(state)
        };
        std::mem::swap(&mut state.garbage, &mut self.garbage);
        drop(state);
        more
    }

    /// Waits for and claims the next work. False once every task is done (or the run is stuck).
    fn claim_next<'g>(&mut self, mut state: MutexGuard<'g, State<'r>>) -> (bool, MutexGuard<'g, State<'r>>)
    where
        's: 'g,
    {
        let shared = self.shared;
        let plan = shared.plan;
        loop {
            if state.is_done() || state.stuck.is_some() {
                if state.sleepers > 0 {
                    shared.wake.notify_all();
                }
                return (false, state);
            }
            match state.pick(plan, self.slot(0)) {
                Pick::Run(picked) => {
                    self.claim(&state, picked);
                    // Quick local tasks are claimed in batches; remote ones in the chunks a job runs.
                    let chunk = match shared.remote {
                        Some(remote) => remote.tasks_per_job(
                            shared.graph.steps[picked.task.step].tasks,
                            shared.options.workers,
                            shared.plan.steps[picked.task.step].longest_task,
                        ),
                        None if state.is_quick(picked.task.step) => MAX_BATCH,
                        None => 1,
                    };
                    self.claim_more(&mut state, &picked, chunk);
                    self.publish(&state);
                    return (true, state);
                }
                Pick::Spill => {
                    state.take_spill_jobs(&mut self.spill_jobs);
                    return (true, state);
                }
                Pick::Estimate(task) => {
                    let (values, counts, _) = self.collect_inputs(&state, task);
                    drop(state);
                    let plugin_estimate = self.estimate_at_dispatch(task, values, counts);
                    self.values.clear();
                    self.counts.clear();
                    state = shared.lock();
                    state.estimated();
                    if let Some(picked) = state.admit_estimated(plan, task, plugin_estimate, self.slot(0)) {
                        self.claim(&state, picked);
                        // A remote job runs a chunk of its step's tasks even when the step's
                        // estimate follows its data: the rest of the chunk shares this task's
                        // reservation (the job's `--mem` is the largest of them anyway), or a
                        // step of 10⁶ such tasks would become 10⁶ jobs.
                        if let Some(remote) = shared.remote {
                            let chunk = remote.tasks_per_job(
                                shared.graph.steps[task.step].tasks,
                                shared.options.workers,
                                shared.plan.steps[task.step].longest_task,
                            );
                            self.claim_more(&mut state, &picked, chunk);
                        }
                        self.publish(&state);
                        return (true, state);
                    }
                }
                Pick::Wait => {
                    if !state.can_change() {
                        let unrun = state.unfinished();
                        state.give_up(format!(
                            "internal error: {unrun} tasks can never start (nothing runs, nothing is ready to run); \
                             the run stops instead of waiting forever"
                        ));
                        continue;
                    }
                    state.sleepers += 1;
                    state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.sleepers -= 1;
                }
            }
        }
    }

    /// Claims up to `chunk - 1` more ready tasks of `picked`'s step under its reservation, when
    /// it was admitted without waiting.
    fn claim_more(&mut self, state: &mut State<'r>, picked: &Picked, chunk: usize) {
        if picked.admission != Admission::Fits || chunk <= 1 {
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        let slots = (1..chunk.min(MAX_BATCH)).map(|position| self.slot(position));
        state.pick_more(picked, slots, &mut batch);
        for more in batch.drain(..) {
            self.claim(state, more);
        }
        self.batch = batch;
    }

    /// Adds `picked` to the claimed tasks, with its inputs.
    fn claim(&mut self, state: &State<'r>, picked: Picked) {
        let (values, counts, producers_hash) = self.collect_inputs(state, picked.task);
        self.claimed.push(Claimed { picked, values, counts, producers_hash });
    }

    /// Appends `task`'s inputs to the worker's buffers; returns where they are, and their hash.
    fn collect_inputs(&mut self, state: &State<'r>, task: TaskRef) -> (Range<usize>, Range<usize>, u64) {
        let (values_from, counts_from) = (self.values.len(), self.counts.len());
        let hash = state.collect_inputs(task, &mut self.values, &mut self.counts);
        (values_from..self.values.len(), counts_from..self.counts.len(), hash)
    }

    /// Asks the plugin what task `task` will need, given its inputs (at `values` and `counts` in
    /// the worker's buffers). Runs outside the lock; a panicking estimate falls back to the plan's.
    fn estimate_at_dispatch(&mut self, task: TaskRef, values: Range<usize>, counts: Range<usize>) -> u64 {
        self.describe_task(task.step, task.index);
        let input_bytes = self.values[values.clone()].iter().map(|v| v.buffer_bytes()).sum();
        self.task_estimate(task.step, values, counts, input_bytes)
            .unwrap_or(self.shared.plan.steps[task.step].plugin_estimate)
    }

    /// The plugin's estimate of the described task of `step_id` with the inputs at `values` and
    /// `counts` (holding `input_bytes`), from its own args and, when they are not what the plan
    /// assumed, its own output's shape. `None` when the plugin panicked.
    fn task_estimate(
        &self,
        step_id: StepId,
        values: Range<usize>,
        counts: Range<usize>,
        input_bytes: u64,
    ) -> Option<u64> {
        let step = &self.shared.recipe.steps[step_id];
        let plan = &self.shared.plan.steps[step_id];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        let as_planned = !step.args.is_per_task() && input_bytes == plan.input_bytes;
        self.with_inputs(step_id, values, counts, |inputs| {
            catch_unwind(AssertUnwindSafe(|| {
                let output =
                    if as_planned { plan.output.clone() } else { task_output(&*step.plugin, &args, inputs, plan) };
                step.plugin.estimate(&args, InputsForEstimate::Dispatch(*inputs), &output)
            }))
            .ok()
        })
    }

    /// Calls `f` with the collected inputs of a task of `step_id` (at `values` and `counts` in
    /// the worker's buffers), named as the recipe names them.
    fn with_inputs<R>(
        &self,
        step_id: StepId,
        values: Range<usize>,
        counts: Range<usize>,
        f: impl FnOnce(&Inputs<'_>) -> R,
    ) -> R {
        let shared = self.shared;
        let step = &shared.recipe.steps[step_id];
        let values = &self.values[values];
        let mut inputs: SmallVec<[Input<'_>; 4]> = SmallVec::new();
        let mut start = 0;
        for (&edge, &count) in shared.graph.steps[step_id].inputs.iter().zip(&self.counts[counts]) {
            let e = &shared.graph.edges[edge];
            inputs.push(Input::new(&step.inputs[e.input].name, e.gathered, &values[start..start + count]));
            start += count;
        }
        f(&Inputs::new(&inputs))
    }

    fn publish(&self, state: &State<'r>) {
        let p = self.shared.progress;
        p.finished.store(state.finished, Ordering::Relaxed);
        p.reserved.store(state.ledger.used(), Ordering::Relaxed);
        p.spilled.store(state.spilled, Ordering::Relaxed);
        p.resident.store(state.ledger.resident(), Ordering::Relaxed);
        p.running.store(state.ledger.running() as u64, Ordering::Relaxed);
        p.spills.store(state.spill_count, Ordering::Relaxed);
    }

    /// Writes the buffers chosen under the lock to spill files (the slow part, outside it); the
    /// files are swapped in at the next report.
    fn write_spills(&mut self) {
        for SpillJob { task, value, .. } in self.spill_jobs.drain(..) {
            let storage = match &*value {
                Value::Array(array) => array.storage(),
                Value::Bytes(storage) => storage,
                _ => continue,
            };
            let started = Instant::now();
            let result = self.shared.spill.spill(storage);
            if result.is_ok() {
                self.spill_records.push(SpillRecord {
                    started: started.saturating_duration_since(self.shared.started),
                    wall: started.elapsed(),
                    bytes: storage.bytes().len() as u64,
                });
            }
            // Let go of this worker's hold before the swap, which needs the only one.
            drop(value);
            self.spilled.push(SpillDone { task, result });
        }
    }

    /// Runs claimed task `at`, which starts at `started`, outside the lock, and measures it.
    /// `None` when it turned out to need more than it reserved (it is re-admitted first).
    fn execute(&mut self, at: usize, started: Instant) -> Option<Finished> {
        let picked = self.claimed[at].picked;
        let TaskRef { step, index } = picked.task;
        self.describe_task(step, index);
        let mut picked = match self.own_estimate(at) {
            Some(plugin_estimate) if plugin_estimate > picked.plugin_estimate => {
                self.regrow.push((picked, plugin_estimate));
                return None;
            }
            Some(plugin_estimate) => Picked { plugin_estimate, ..picked },
            None => picked,
        };
        let step_def = &self.shared.recipe.steps[step];
        let (mut attempts, mut preempted) = (0, 0);
        let outcome = loop {
            attempts += 1;
            // The first attempt starts when the task does: one clock reading a task.
            let attempt_started = if attempts == 1 { started } else { Instant::now() };
            let preemptible = preempted < MAX_PREEMPTIONS;
            let outcome = self.attempt(at, &picked, attempt_started, preemptible);
            match &outcome.result {
                Err(error) if error.kind() == FailureKind::Preempted => {
                    tracing::info!("task {}[{}] preempted to keep the budget: {error}", step_def.name, self.key);
                    // Not an attempt that counts: it runs again, its reservation grown past what it held.
                    (attempts, preempted) = (attempts - 1, preempted + 1);
                    picked = self.grow_after_oom(picked, outcome.peak);
                }
                Err(error) if attempt::may_retry(error, attempts, step_def.retries) => {
                    tracing::info!(
                        "task {}[{}] failed, attempt {attempts} of {}: {error}",
                        step_def.name,
                        self.key,
                        step_def.retries + 1
                    );
                    if error.kind() == FailureKind::OutOfMemory {
                        picked = self.grow_after_oom(picked, outcome.peak);
                    }
                }
                _ => break outcome,
            }
        };
        let wall = if attempts == 1 { outcome.elapsed } else { started.elapsed() };
        self.claimed[at].picked = picked;
        Some(self.conclude(at, outcome, attempts, wall, started, None))
    }

    /// Applies what follows an outcome, once, wherever the task ran: `on_missing`, the resume
    /// hashes and kept value, the record, the step's statistics, the failure for the report.
    /// `remote_output_bytes` is what a task run elsewhere said its output held (its value here
    /// is a value file, which holds no buffer).
    fn conclude(
        &mut self,
        at: usize,
        outcome: TaskOutcome,
        attempts: u32,
        wall: Duration,
        started: Instant,
        remote_output_bytes: Option<u64>,
    ) -> Finished {
        let picked = self.claimed[at].picked;
        let TaskRef { step, index } = picked.task;
        let on_missing = self.shared.recipe.steps[step].on_missing;
        let (result, output, error) = match outcome.result {
            Ok(output) => (Outcome::Ok, output, None),
            Err(error) => {
                let result = match (error.kind(), on_missing) {
                    (FailureKind::MissingInput, OnMissing::Skip) => Outcome::Skipped,
                    (FailureKind::MissingInput, OnMissing::Ignore) => Outcome::Dropped,
                    _ => Outcome::Failed,
                };
                (result, Value::None, Some(error.to_string()))
            }
        };
        let output_bytes = remote_output_bytes.unwrap_or_else(|| output.buffer_bytes());
        // Consumers learn from the size of a path output's file (for a task run elsewhere, its
        // value file: the output's data), as from a buffer.
        let file_bytes = match &output {
            Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            _ => 0,
        };
        let (hashes, output_path) = match result {
            Outcome::Ok => {
                let producers_hash = self.claimed[at].producers_hash;
                match (remote_output_bytes, &output) {
                    // Hashed as the task returned it: the value its value file holds.
                    (Some(_), Value::Path(file)) => match file.parent().map(|dir| crate::values::map(dir, index)) {
                        Some(Ok(returned)) => self.hash_and_keep(picked.task, producers_hash, &returned),
                        _ => (None, None),
                    },
                    _ => self.hash_and_keep(picked.task, producers_hash, &output),
                }
            }
            _ => (None, None),
        };
        // Reported first: should the sink fail, the task is counted once, as the failure it becomes.
        let measured = Measured {
            peak: outcome.peak,
            peak_source: outcome.peak_source,
            output_bytes,
            wall,
            started,
            attempts,
            log_path: outcome.log_path,
            hashes,
            output_path,
        };
        self.report(&picked, result, &measured, error.as_deref());
        self.count(&picked, measured.peak, wall);
        match result {
            Outcome::Ok => {
                self.stats[step].ok += 1;
                self.stats[step].output_bytes += output_bytes;
            }
            Outcome::Failed => self.stats[step].failed += 1,
            Outcome::Skipped | Outcome::Dropped | Outcome::Reused => self.stats[step].skipped += 1,
        }
        match (error, result) {
            (Some(error), Outcome::Failed) => self.fail(picked.task, error),
            (Some(error), _) => self.missing.push(self.failure(picked.task, error)),
            (None, _) => {}
        }
        let hash = hashes.map_or(0, |h| h.output);
        Finished { outcome: result, output, file_bytes, hash, peak: measured.peak, wall }
    }

    /// For `--resume`, when the run is recorded: the hashes of what the task (described in
    /// `self.key`/`self.index`) was asked, read and made, and the file its output is — a path
    /// output itself, or, for a `cache: true` step, its value written to `runner-cache/`.
    fn hash_and_keep(&self, task: TaskRef, producers: u64, output: &Value) -> (Option<TaskHashes>, Option<PathBuf>) {
        let Some(fingerprints) = &self.shared.fingerprints else { return (None, None) };
        let recipe = self.shared.recipe;
        let step = &recipe.steps[task.step];
        let inputs = fingerprints.inputs_hash(recipe, task.step, producers, &self.index);
        let path = match output {
            Value::Path(path) => Some(path.clone()),
            Value::None => None,
            _ if step.cache => {
                let dir = crate::resume::cache_dir(&recipe.name, &recipe.cycle, &step.name);
                match crate::values::write(&dir, task.index, output) {
                    Ok(path) => Some(path),
                    Err(error) => {
                        tracing::warn!("cannot keep the value of {}[{}] for --resume: {error}", step.name, self.key);
                        None
                    }
                }
            }
            _ => None,
        };
        let kept = path.is_some();
        let hashes = TaskHashes {
            args: fingerprints.step(task.step),
            inputs,
            output: fingerprints.output_hash(task.step, output, kept),
        };
        (Some(hashes), path)
    }

    /// Runs the claimed tasks (of one step) as one unit on the remote executor, then each task
    /// that failed and may be retried again on its own (one that ran out of memory with a
    /// larger reservation), and reports them all. Each task's output paths are claimed here,
    /// before it is handed over: a task whose claim fails is not submitted.
    fn run_remote(&mut self, remote: &dyn RemoteExecutor) {
        let Some(first) = self.claimed.first().map(|c| c.picked) else { return };
        let step = first.task.step;
        let shared = self.shared;
        let step_def = &shared.recipe.steps[step];
        let started = Instant::now();
        let mut refused: Vec<(usize, TaskError)> = Vec::new();
        for at in 0..self.claimed.len() {
            let task = self.claimed[at].picked.task;
            self.describe_task(task.step, task.index);
            let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
            let args = step_def.args.for_task(&lookup);
            if let Err(message) = shared.output_claims.claim(shared.recipe, shared.graph, task, &args) {
                refused.push((at, TaskError::msg(message)));
            }
        }
        let submitted: Vec<usize> =
            (0..self.claimed.len()).filter(|at| !refused.iter().any(|(r, _)| r == at)).collect();
        let indices: Vec<u64> = submitted.iter().map(|&at| self.claimed[at].picked.task.index).collect();
        let unit = Unit {
            step,
            step_name: &step_def.name,
            indices: &indices,
            mem_bytes: submitted.iter().map(|&at| self.claimed[at].picked.reserved).max().unwrap_or(0),
            time_limit: job_time(step_def.timeout, shared.plan.steps[step].longest_task, indices.len()),
        };
        let mut outcomes: Vec<(usize, RemoteOutcome)> = if indices.is_empty() {
            Vec::new()
        } else {
            submitted.iter().copied().zip(remote.run_unit(&unit)).collect()
        };
        let refused_at: Vec<usize> = refused.iter().map(|(at, _)| *at).collect();
        outcomes.extend(refused.into_iter().map(|(at, error)| {
            let index = self.claimed[at].picked.task.index;
            (at, RemoteOutcome { index, outcome: TaskOutcome::failed(error, started), output_bytes: 0 })
        }));
        for (at, mut remote_outcome) in outcomes {
            let mut picked = self.claimed[at].picked;
            let mut attempts = 1;
            while let Err(error) = &remote_outcome.outcome.result {
                // A task whose outputs another task claimed is never submitted.
                if refused_at.contains(&at) || !attempt::may_retry(error, attempts, step_def.retries) {
                    break;
                }
                if error.kind() == FailureKind::OutOfMemory {
                    picked = self.grow_after_oom(picked, remote_outcome.outcome.peak.max(picked.reserved));
                }
                attempts += 1;
                let one = [picked.task.index];
                let time_limit = job_time(step_def.timeout, shared.plan.steps[step].longest_task, 1);
                let retry = Unit { indices: &one, mem_bytes: picked.reserved, time_limit, ..unit.clone() };
                match remote.run_unit(&retry).pop() {
                    Some(again) => remote_outcome = again,
                    None => break,
                }
            }
            self.claimed[at].picked = picked;
            self.describe_task(picked.task.step, picked.task.index);
            let wall = remote_outcome.outcome.elapsed;
            let output_bytes = Some(remote_outcome.output_bytes);
            let finished = self.conclude(at, remote_outcome.outcome, attempts, wall, started, output_bytes);
            self.done.push((picked, finished));
        }
        self.claimed.clear();
        self.values.clear();
        self.counts.clear();
    }

    /// One attempt at claimed task `at` under its reservation `picked`, starting at `started`
    /// (its commands stopped if they break the budget, when `preemptible`): refused when it
    /// needs more than the machine could give.
    fn attempt(&self, at: usize, picked: &Picked, started: Instant, preemptible: bool) -> TaskOutcome {
        let shared = self.shared;
        if let Some(limit) = shared.options.memory_limit
            && picked.reserved > limit
        {
            return TaskOutcome::failed(too_big_for_the_machine(picked, limit), started);
        }
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &shared.recipe.steps[step_id];
        let site = LocalSite { shared, task: picked.task, slot: picked.slot };
        let limits = attempt::Limits {
            started,
            timeout: step.timeout,
            // `--enforce-memory`: a command's tree may hold its task's reservation and a quarter more.
            command_limit: shared.options.enforce_memory.then(|| picked.reserved.saturating_add(picked.reserved / 4)),
            reserved: if preemptible { picked.reserved } else { 0 },
        };
        self.with_inputs(step_id, claimed.values.clone(), claimed.counts.clone(), |inputs| {
            let task =
                attempt::TaskToRun { step, key: &self.key, index: &self.index, cycle: &shared.recipe.cycle, inputs };
            attempt::attempt(&task, &site, &limits)
        })
    }

    /// An attempt ran out of memory under its reservation (or yielded it): the step's figure
    /// learns what it reached — at least its reservation, which it outgrew — and the next
    /// attempt reserves more — twice as much, or half again the peak it reached,
    /// whichever is larger, but never more than the budget (a task that needs more fails when
    /// it runs out again with the whole budget reserved) — waiting for the room.
    fn grow_after_oom(&self, picked: Picked, peak: u64) -> Picked {
        let shared = self.shared;
        let mut state = shared.lock();
        let ceiling = state.ledger.budget().max(picked.reserved);
        let reserved = picked.reserved.saturating_mul(2).max(peak.saturating_add(peak / 2)).min(ceiling);
        let estimate = picked.estimate.saturating_add(reserved - picked.reserved);
        state.note_underestimate(&picked, peak.max(picked.reserved));
        // Between two attempts the task holds nothing: it lets its reservation go while it
        // waits for the larger one, so that two tasks growing at once wait for each other
        // instead of one of them taking room the budget does not have.
        state.ledger.try_resize(picked.slot, 0);
        shared.wake.notify_all();
        while !state.ledger.try_resize(picked.slot, reserved) {
            state.sleepers += 1;
            state = shared.wake.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            state.sleepers -= 1;
        }
        state.ledger.stop_growing(picked.slot);
        Picked { reserved, estimate, ..picked }
    }

    /// The plugin's own estimate of claimed task `at`, asked (outside the lock) when it may
    /// differ from the plan's: its args are rendered per task, or its inputs are not the size
    /// the plan assumed. `None` when the plan's estimate stands.
    fn own_estimate(&self, at: usize) -> Option<u64> {
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &self.shared.recipe.steps[step_id];
        let plan = &self.shared.plan.steps[step_id];
        let follows_data = step.plugin.estimate_follows_data();
        if follows_data || (!step.args.is_per_task() && claimed.picked.input_bytes == plan.input_bytes) {
            return None;
        }
        self.task_estimate(step_id, claimed.values.clone(), claimed.counts.clone(), claimed.picked.input_bytes)
            .filter(|&e| e != claimed.picked.plugin_estimate)
    }

    /// Adds a task that ran to its step's statistics.
    fn count(&mut self, picked: &Picked, peak: u64, wall: Duration) {
        if self.unpublished.step != picked.task.step {
            self.publish_runs();
            self.unpublished.step = picked.task.step;
        }
        self.unpublished.ran += 1;
        self.unpublished.wall += wall;
        let stats = &mut self.stats[picked.task.step];
        stats.wall += wall;
        stats.estimate.record(picked.estimate);
        stats.peak.record(peak);
        stats.estimate_sum += picked.estimate;
        stats.peak_sum += peak;
        if picked.admission == (Admission::Alone { oversized: true }) {
            stats.oversized += 1;
        }
        if peak > picked.estimate {
            stats.underestimates += 1;
        }
    }

    /// Adds the tasks run since the last call to their step's progress (for the ETA).
    fn publish_runs(&mut self) {
        let step = self.unpublished.step;
        let runs = std::mem::replace(&mut self.unpublished, UnpublishedRuns { step, ..Default::default() });
        if runs.ran > 0
            && let Some(progress) = self.shared.progress.steps.get(step)
        {
            progress.ran(runs.ran, runs.wall);
        }
    }

    /// Hands a task that ran to the sink.
    fn report(&self, picked: &Picked, outcome: Outcome, measured: &Measured, error: Option<&str>) {
        let Some(sink) = self.shared.sink else { return };
        let step = &self.shared.recipe.steps[picked.task.step];
        sink.record(&TaskReport {
            worker: self.id,
            step_id: picked.task.step,
            step: &step.name,
            index: picked.task.index,
            key: &self.key,
            plugin: step.plugin.name(),
            outcome,
            input_bytes: picked.input_bytes,
            estimate: picked.estimate,
            source: picked.source,
            plugin_estimate: picked.plugin_estimate,
            peak: measured.peak,
            output_bytes: measured.output_bytes,
            wall: measured.wall,
            started: measured.started.saturating_duration_since(self.shared.started),
            attempts: measured.attempts,
            peak_source: measured.peak_source,
            log_path: measured.log_path.as_deref(),
            hashes: measured.hashes,
            output_path: measured.output_path.as_deref(),
            error,
        });
    }

    /// Notes a failed task for the run's report (its key is in `self.key`).
    fn fail(&mut self, task: TaskRef, error: String) {
        self.shared.progress.failed.fetch_add(1, Ordering::Relaxed);
        let failure = self.failure(task, error);
        self.failures.push(failure);
    }

    /// `task` (whose key is in `self.key`) and what went wrong, for the run's report.
    fn failure(&self, task: TaskRef, error: String) -> Failure {
        let step = self.shared.recipe.steps[task.step].name.clone();
        Failure { step, key: self.key.clone(), error, step_id: task.step, index: task.index }
    }

    /// A panic outside any plugin (an engine bug, or a sink's): the tasks this worker claimed
    /// and ran fail with its message, so their dependants are skipped and nothing waits for
    /// them forever; the run goes on and ends failed.
    fn fail_after_panic(&mut self, panic: &(dyn std::any::Any + Send)) {
        let message = format!("internal error: a worker panicked: {}", crate::panics::message(panic));
        tracing::error!("{message}");
        self.internal_error.get_or_insert_with(|| message.clone());
        // Tasks that ran and were reported are finished as they ended; the others fail.
        let done: Vec<(Picked, Finished)> = self.done.drain(..).collect();
        let unrun: Vec<Picked> = self
            .claimed
            .drain(..)
            .map(|c| c.picked)
            .filter(|p| !done.iter().any(|(d, _)| d.task == p.task))
            .chain(self.regrow.drain(..).map(|(picked, _)| picked))
            .collect();
        self.values.clear();
        self.counts.clear();
        let mut spilled = std::mem::take(&mut self.spilled);
        let closed = || crate::memory::spill::SpillError::Closed { path: self.shared.spill.path().to_path_buf() };
        spilled.extend(self.spill_jobs.drain(..).map(|job| SpillDone { task: job.task, result: Err(closed()) }));
        let mut state = self.shared.lock();
        state.finish_spills(&mut spilled);
        for (picked, finished) in done {
            state.finish(&picked, finished.outcome, finished.output, finished.file_bytes, finished.hash, finished.wall);
        }
        for picked in &unrun {
            state.finish(picked, Outcome::Failed, Value::None, 0, 0, Duration::ZERO);
        }
        self.skipped.append(&mut state.skipped);
        std::mem::swap(&mut state.garbage, &mut self.garbage);
        self.publish(&state);
        self.shared.wake.notify_all();
        drop(state);
        self.take_out_garbage();
        for picked in unrun {
            self.describe_task(picked.task.step, picked.task.index);
            self.stats[picked.task.step].failed += 1;
            self.fail(picked.task, message.clone());
        }
    }

    /// Fills the reusable key string and index pairs of task `index` of `step`.
    fn describe_task(&mut self, step: StepId, index: u64) {
        self.shared.graph.describe_task(self.shared.recipe, step, index, &mut self.key, &mut self.index);
    }
}

/// How a task that ran was measured, for its report.
struct Measured {
    peak: u64,
    peak_source: PeakSource,
    output_bytes: u64,
    wall: Duration,
    started: Instant,
    attempts: u32,
    log_path: Option<PathBuf>,
    hashes: Option<TaskHashes>,
    output_path: Option<PathBuf>,
}

/// The failure of a task that needs more memory than the process could ever have.
fn too_big_for_the_machine(picked: &Picked, limit: u64) -> TaskError {
    use runner_plugin::size::format_size;
    TaskError::of_kind(
        runner_plugin::FailureKind::OutOfMemory,
        format!(
            "not run: it needs {} ({} estimate), more than the {} this machine can give the process; \
             --allow-oversized runs it anyway",
            format_size(picked.reserved),
            picked.source,
            format_size(limit)
        ),
    )
}

/// What the plugin says a task's output will be, given its own args and inputs (the plan's
/// output when the plugin cannot say).
fn task_output(
    plugin: &dyn runner_plugin::Plugin,
    args: &runner_plugin::Args,
    inputs: &Inputs<'_>,
    plan: &crate::plan::StepPlan,
) -> runner_plugin::ValueMeta {
    let metas: Vec<runner_plugin::InputMeta> = inputs
        .iter()
        .map(|input| runner_plugin::InputMeta {
            name: input.name().to_string(),
            gathered: input.is_gathered().then(|| input.len()),
            item: input.values().next().map(Value::meta).unwrap_or_default(),
        })
        .collect();
    match plugin.output(args, &metas) {
        Ok(runner_plugin::ValueMeta::Unknown) | Err(_) => plan.output.clone(),
        Ok(meta) => meta,
    }
}

/// Where a local task's attempt runs: its outputs claimed in this run, its live bytes read by
/// the ledger through its reservation slot, its reservation grown as it announces allocations.
struct LocalSite<'a, 'r> {
    shared: &'a Shared<'r>,
    task: TaskRef,
    slot: TaskSlot,
}

impl attempt::Site for LocalSite<'_, '_> {
    fn claim_outputs(&self, args: &runner_plugin::Args) -> Result<(), String> {
        let shared = self.shared;
        shared.output_claims.claim(shared.recipe, shared.graph, self.task, args)
    }

    fn scratch_root(&self) -> &std::path::Path {
        &self.shared.scratch_root
    }

    /// A file per task that outlives the run, relative to the directory the runner started in,
    /// like outputs: `runner-logs/<recipe>/<cycle>/<step>/<key>.log`.
    fn log_root(&self) -> &std::path::Path {
        &self.shared.log_root
    }

    fn measured(&self, tag: u32) {
        self.shared.meter.attach(self.slot, tag);
    }

    fn unmeasured(&self) {
        self.shared.meter.detach(self.slot);
    }

    fn workers(&self) -> usize {
        self.shared.options.workers
    }

    /// Grows the task's reservation before a large allocation, waiting while the budget has
    /// no room and some other task can still make some (the ledger decides). A waiter counts
    /// as a sleeper, so a finishing task wakes it.
    fn will_allocate(&self, bytes: u64) {
        let shared = self.shared;
        let mut state = shared.lock();
        while !state.ledger.try_grow(self.slot, bytes) {
            state.sleepers += 1;
            // The timeout re-checks live bytes that fell without a task finishing.
            state = shared.wake.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            state.sleepers -= 1;
        }
        state.ledger.stop_growing(self.slot);
        shared.progress.reserved.store(state.ledger.used(), Ordering::Relaxed);
    }
}
