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

use runner_plugin::{
    CommandOutcome, CommandSpec, DimValue, FailureKind, Host, Input, Inputs, InputsForEstimate, ServiceIo, ServiceSpec,
    TaskContext, TaskError, Value, task_tag,
};
use smallvec::SmallVec;

use crate::command;
use crate::executor::{RemoteExecutor, RemoteOutcome, Unit};
use crate::graph::Graph;
use crate::measure::{self, PeakSource, TaskMemory};
use crate::memory::spill::{SpillDir, release_value_pages};
use crate::memory::{Admission, TaskSlot};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::{OnMissing, Recipe, StepId};
use crate::resume::{Fingerprints, Reuse};
pub use meter::RunMeter;
use state::{Garbage, Pick, Picked, SpillDone, SpillJob, State};
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
const MAX_BATCH: usize = 64;

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
    };
    progress.total.store(graph.total_tasks(), Ordering::Relaxed);
    progress.budget.store(options.budget, Ordering::Relaxed);
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
        for SpillJob { task, value } in self.spill_jobs.drain(..) {
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
        let picked = match self.own_estimate(at) {
            Some(plugin_estimate) if plugin_estimate > picked.plugin_estimate => {
                self.regrow.push((picked, plugin_estimate));
                return None;
            }
            Some(plugin_estimate) => Picked { plugin_estimate, ..picked },
            None => picked,
        };
        let step_def = &self.shared.recipe.steps[step];
        let (on_missing, retries, timeout) = (step_def.on_missing, step_def.retries, step_def.timeout);
        let mut picked = picked;
        let mut attempts = 0;
        let (attempt, result, wall) = loop {
            attempts += 1;
            // The first attempt starts when the task does: one clock reading a task.
            let attempt_started = if attempts == 1 { started } else { Instant::now() };
            let attempt = self.attempt(at, &picked, timeout, attempt_started);
            match &attempt.result {
                // A missing input is not retried: `on_missing` says what it means.
                Err(error) if error.kind() != FailureKind::MissingInput && attempts <= retries => {
                    tracing::info!(
                        "task {}[{}] failed, attempt {attempts} of {}: {error}",
                        step_def.name,
                        self.key,
                        retries + 1
                    );
                    if error.kind() == FailureKind::OutOfMemory {
                        picked = self.grow_after_oom(picked, attempt.peak);
                    }
                }
                _ => {
                    let wall = if attempts == 1 { attempt.elapsed } else { started.elapsed() };
                    break (attempt.measured(started), attempt.result, wall);
                }
            }
        };
        let (outcome, output, error) = match result {
            Ok(output) => (Outcome::Ok, output, None),
            Err(error) => match (error.kind(), on_missing) {
                (FailureKind::MissingInput, OnMissing::Skip) => {
                    (Outcome::Skipped, Value::None, Some(error.to_string()))
                }
                (FailureKind::MissingInput, OnMissing::Ignore) => {
                    (Outcome::Dropped, Value::None, Some(error.to_string()))
                }
                _ => (Outcome::Failed, Value::None, Some(error.to_string())),
            },
        };
        let output_bytes = output.buffer_bytes();
        let file_bytes = match &output {
            Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            _ => 0,
        };
        let producers_hash = self.claimed[at].producers_hash;
        let (hashes, output_path) = if outcome == Outcome::Ok {
            self.hash_and_keep(picked.task, producers_hash, &output)
        } else {
            (None, None)
        };
        // Reported first: should the sink fail, the task is counted once, as the failure it becomes.
        let measured = Measured { output_bytes, wall, attempts, hashes, output_path, ..attempt };
        self.report(&picked, outcome, &measured, error.as_deref());
        self.count(&picked, measured.peak, wall);
        match outcome {
            Outcome::Ok => {
                self.stats[step].ok += 1;
                self.stats[step].output_bytes += output_bytes;
            }
            Outcome::Failed => self.stats[step].failed += 1,
            Outcome::Skipped | Outcome::Dropped | Outcome::Reused => self.stats[step].skipped += 1,
        }
        match (error, outcome) {
            (Some(error), Outcome::Failed) => self.fail(picked.task, error),
            (Some(error), _) => self.missing.push(self.failure(picked.task, error)),
            (None, _) => {}
        }
        self.claimed[at].picked = picked;
        let hash = hashes.map_or(0, |h| h.output);
        Some(Finished { outcome, output, file_bytes, hash, peak: measured.peak, wall })
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
        let hashes =
            TaskHashes { args: fingerprints.step(task.step), inputs, output: crate::resume::output_hash(output, kept) };
        (Some(hashes), path)
    }

    /// Runs the claimed tasks (of one step) as one unit on the remote executor, then each task
    /// that failed and may be retried again on its own — one that ran out of memory with a
    /// larger reservation, at least once (a job that outgrew its `--mem` is retried bigger) —
    /// and reports them all.
    fn run_remote(&mut self, remote: &dyn RemoteExecutor) {
        let Some(first) = self.claimed.first().map(|c| c.picked) else { return };
        let step = first.task.step;
        let step_def = &self.shared.recipe.steps[step];
        let (retries, on_missing) = (step_def.retries, step_def.on_missing);
        let started = Instant::now();
        let indices: Vec<u64> = self.claimed.iter().map(|c| c.picked.task.index).collect();
        let unit = Unit {
            step,
            step_name: &step_def.name,
            indices: &indices,
            mem_bytes: self.claimed.iter().map(|c| c.picked.reserved).max().unwrap_or(0),
            time_limit: job_time(step_def.timeout, self.shared.plan.steps[step].longest_task, indices.len()),
        };
        let outcomes = remote.run_unit(&unit);
        for (at, mut outcome) in outcomes.into_iter().enumerate() {
            let mut picked = self.claimed[at].picked;
            let mut attempts = 1;
            while let Err(error) = &outcome.result {
                let kind = error.kind();
                let allowed = if kind == FailureKind::OutOfMemory { retries.max(1) } else { retries };
                if kind == FailureKind::MissingInput || attempts > allowed {
                    break;
                }
                if kind == FailureKind::OutOfMemory {
                    picked = self.grow_after_oom(picked, outcome.peak.max(picked.reserved));
                }
                attempts += 1;
                let one = [picked.task.index];
                let time_limit = job_time(step_def.timeout, self.shared.plan.steps[step].longest_task, 1);
                let retry = Unit { indices: &one, mem_bytes: picked.reserved, time_limit, ..unit.clone() };
                match remote.run_unit(&retry).pop() {
                    Some(again) => outcome = again,
                    None => break,
                }
            }
            self.claimed[at].picked = picked;
            self.finish_remote(at, outcome, attempts, on_missing, started);
        }
        self.claimed.clear();
        self.values.clear();
        self.counts.clear();
    }

    /// Reports claimed task `at`, which ran remotely and ended with `outcome`.
    fn finish_remote(
        &mut self,
        at: usize,
        outcome: RemoteOutcome,
        attempts: u32,
        on_missing: OnMissing,
        started: Instant,
    ) {
        let picked = self.claimed[at].picked;
        let TaskRef { step, index } = picked.task;
        self.describe_task(step, index);
        let (outcome_kind, output, error) = match outcome.result {
            Ok(path) => (Outcome::Ok, Value::Path(path), None),
            Err(error) => match (error.kind(), on_missing) {
                (FailureKind::MissingInput, OnMissing::Skip) => {
                    (Outcome::Skipped, Value::None, Some(error.to_string()))
                }
                (FailureKind::MissingInput, OnMissing::Ignore) => {
                    (Outcome::Dropped, Value::None, Some(error.to_string()))
                }
                _ => (Outcome::Failed, Value::None, Some(error.to_string())),
            },
        };
        // Consumers learn from the size of the value file (the output's data), as from a buffer.
        let file_bytes = match &output {
            Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            _ => 0,
        };
        let measured = Measured {
            peak: outcome.peak,
            peak_source: outcome.peak_source,
            output_bytes: outcome.output_bytes,
            wall: outcome.wall,
            started,
            attempts,
            log_path: outcome.log_path,
            hashes: None,
            output_path: None,
        };
        self.report(&picked, outcome_kind, &measured, error.as_deref());
        self.count(&picked, measured.peak, measured.wall);
        match outcome_kind {
            Outcome::Ok => {
                self.stats[step].ok += 1;
                self.stats[step].output_bytes += measured.output_bytes;
            }
            Outcome::Failed => self.stats[step].failed += 1,
            Outcome::Skipped | Outcome::Dropped | Outcome::Reused => self.stats[step].skipped += 1,
        }
        match (error, outcome_kind) {
            (Some(error), Outcome::Failed) => self.fail(picked.task, error),
            (Some(error), _) => self.missing.push(self.failure(picked.task, error)),
            (None, _) => {}
        }
        let finished =
            Finished { outcome: outcome_kind, output, file_bytes, hash: 0, peak: measured.peak, wall: measured.wall };
        self.done.push((picked, finished));
    }

    /// One attempt at claimed task `at` under its reservation `picked`, starting at `started`:
    /// refused when it needs more than the machine could give, failed when it outran `timeout`.
    fn attempt(&self, at: usize, picked: &Picked, timeout: Option<Duration>, started: Instant) -> Attempt {
        let (result, memory, command) = match self.shared.options.memory_limit {
            Some(limit) if picked.reserved > limit => (Ok(Err(too_big_for_the_machine(picked, limit))), None, None),
            _ => self.run_plugin(at, picked.reserved, started),
        };
        let elapsed = started.elapsed();
        // A task that ran external commands or used a service holds its heap and their trees'
        // memory at once (as the ledger counts them): its peak is their sum, measured as theirs.
        let mut peak = memory.map_or(0, |m| m.peak_bytes);
        let mut peak_source = PeakSource::Allocator;
        if let Some(command) = &command {
            (peak, peak_source) = (peak.saturating_add(command.peak), command.source);
        }
        let result = match result {
            Ok(result) => result,
            Err(panic) => Err(TaskError::msg(format!("panicked: {}", crate::panics::message(&*panic)))),
        };
        // An in-process task cannot be stopped: one that returns after its timeout has failed.
        let result = match (result, timeout) {
            (Ok(_), Some(limit)) if elapsed > limit => Err(TaskError::of_kind(
                FailureKind::TimedOut,
                format!(
                    "timed out: it ran {:.1} s, its step's timeout is {:.1} s",
                    elapsed.as_secs_f64(),
                    limit.as_secs_f64()
                ),
            )),
            (result, _) => result,
        };
        Attempt { result, peak, peak_source, log_path: command.and_then(|c| c.log_path), elapsed }
    }

    /// An attempt ran out of memory under its reservation: the step's figure learns the peak,
    /// and the next attempt reserves more — twice as much, or half again the peak it reached,
    /// whichever is larger — waiting for the room.
    fn grow_after_oom(&self, picked: Picked, peak: u64) -> Picked {
        let reserved = picked.reserved.saturating_mul(2).max(peak.saturating_add(peak / 2));
        let estimate = picked.estimate.saturating_add(reserved - picked.reserved);
        let shared = self.shared;
        let mut state = shared.lock();
        state.note_underestimate(&picked, peak.max(estimate));
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

    /// Calls the plugin of claimed task `at` with its inputs, measured under a fresh tag and
    /// catching panics; returns what it returned, what it allocated (`None` when no measurement
    /// could be made, which the task's error then says), and what its external commands
    /// measured if it ran any.
    #[allow(clippy::type_complexity)]
    fn run_plugin(
        &self,
        at: usize,
        reserved: u64,
        started: Instant,
    ) -> (std::thread::Result<Result<Value, TaskError>>, Option<TaskMemory>, Option<CommandRecord>) {
        let shared = self.shared;
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &shared.recipe.steps[step_id];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        if let Err(message) = shared.output_claims.claim(shared.recipe, shared.graph, claimed.picked.task, &args) {
            return (Ok(Err(TaskError::msg(message))), None, None);
        }
        let tag = match measure::begin_new_task() {
            Ok(tag) => tag,
            Err(error) => return (Ok(Err(TaskError::msg(format!("cannot measure the task: {error}")))), None, None),
        };
        shared.meter.attach(claimed.picked.slot, tag);
        let host = TaskHost {
            shared,
            slot: claimed.picked.slot,
            tag,
            step: &step.name,
            key: &self.key,
            timeout: step.timeout,
            started,
            // `--enforce-memory`: a command's tree may hold its task's reservation and a quarter more.
            command_limit: shared.options.enforce_memory.then(|| reserved.saturating_add(reserved / 4)),
            commands: Mutex::new(None),
        };
        let ctx = TaskContext::new(&step.name, &self.key, &shared.recipe.cycle, &self.index, tag, &host);
        let result = self.with_inputs(step_id, claimed.values.clone(), claimed.counts.clone(), |inputs| {
            task_tag::with(tag, || catch_unwind(AssertUnwindSafe(|| step.plugin.run(&ctx, &args, inputs))))
        });
        shared.meter.detach(claimed.picked.slot);
        let commands = host.commands.into_inner().unwrap_or_else(|p| p.into_inner());
        (result, measure::end_task(tag).ok(), commands)
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

/// What one attempt at a task gave.
struct Attempt {
    result: Result<Value, TaskError>,
    peak: u64,
    peak_source: PeakSource,
    log_path: Option<PathBuf>,
    /// From its start to its end.
    elapsed: Duration,
}

impl Attempt {
    /// The attempt's figures, for the report of a task that started at `started`.
    fn measured(&self, started: Instant) -> Measured {
        Measured {
            peak: self.peak,
            peak_source: self.peak_source,
            output_bytes: 0,
            wall: Duration::ZERO,
            started,
            attempts: 1,
            log_path: self.log_path.clone(),
            hashes: None,
            output_path: None,
        }
    }
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

/// Makes a task key usable as a directory name.
fn sanitize(key: &str) -> String {
    if key.is_empty() {
        return "_".into();
    }
    key.chars().map(|c| if c.is_alphanumeric() || "=-_.,".contains(c) { c } else { '_' }).collect()
}

/// The engine services of one running task; built on the stack, so it costs nothing unless
/// the task asks for something.
struct TaskHost<'a, 'r> {
    shared: &'a Shared<'r>,
    slot: TaskSlot,
    tag: u32,
    step: &'a str,
    key: &'a str,
    /// The step's `timeout:`, which also bounds each command the task runs, and when this attempt
    /// started.
    timeout: Option<Duration>,
    started: Instant,
    /// The memory limit of the commands the task runs (`--enforce-memory`), unless the plugin
    /// sets its own.
    command_limit: Option<u64>,
    /// What the task's external commands measured, if it ran any.
    commands: Mutex<Option<CommandRecord>>,
}

/// The external commands of one task: their highest peak, how it was measured, their log.
#[derive(Debug, Clone)]
struct CommandRecord {
    peak: u64,
    source: PeakSource,
    log_path: Option<PathBuf>,
}

impl TaskHost<'_, '_> {
    /// Where a task's commands write when the plugin does not say: a file per task that
    /// outlives the run, relative to the directory the runner started in, like outputs:
    /// `runner-logs/<recipe>/<cycle>/<step>/<key>.log`.
    fn default_log_path(&self) -> PathBuf {
        let recipe = self.shared.recipe;
        PathBuf::from("runner-logs")
            .join(sanitize(&recipe.name))
            .join(sanitize(&recipe.cycle))
            .join(sanitize(self.step))
            .join(format!("{}.log", sanitize(self.key)))
    }

    fn note_command(&self, update: impl FnOnce(&mut CommandRecord)) {
        let mut record = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        update(record.get_or_insert(CommandRecord { peak: 0, source: PeakSource::Cgroup, log_path: None }));
    }
}

impl Host for TaskHost<'_, '_> {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self.shared.options.work_dir.join("scratch").join(self.step).join(sanitize(self.key));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// True once the attempt has run past its step's timeout (a plugin that polls it can stop).
    fn cancelled(&self) -> bool {
        self.timeout.is_some_and(|limit| self.started.elapsed() > limit)
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

    /// Runs the command as part of the task ([`crate::command`]): killed at the sooner of the
    /// spec's and the step's timeout or when the task is cancelled; its peak is kept for the
    /// task's record whatever happens.
    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        let cancelled = || self.cancelled();
        let task = command::TaskCommand {
            default_log: self.default_log_path(),
            timeout: self.timeout,
            limit: self.command_limit,
            tag: self.tag,
            cancelled: &cancelled,
        };
        command::run_for_task(spec, &task, |measured| self.note_measured(measured))
    }

    /// A spare service for the run's other workers ([`command::service::prestart`]).
    fn prestart(&self, spec: &ServiceSpec, warm: Box<dyn FnOnce(ServiceIo<'_>) -> Result<(), TaskError> + Send>) {
        let log = self.default_log_path().with_file_name("warm-up.log");
        command::service::prestart(spec, self.shared.options.workers, &log, warm);
    }

    /// Lends the task a service process ([`command::service`]), measured like a command.
    fn serve(
        &self,
        spec: &ServiceSpec,
        work: &mut dyn FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    ) -> Result<Value, TaskError> {
        let cancelled = || self.cancelled();
        let task = command::TaskCommand {
            default_log: self.default_log_path(),
            timeout: self.timeout,
            limit: self.command_limit,
            tag: self.tag,
            cancelled: &cancelled,
        };
        command::service::serve_for_task(spec, &task, work, |measured| self.note_measured(measured))
    }
}

impl TaskHost<'_, '_> {
    fn note_measured(&self, measured: &command::CommandMeasured) {
        self.note_command(|r| {
            r.log_path = Some(measured.log_path.clone());
            if measured.peak >= r.peak {
                (r.peak, r.source) = (measured.peak, measured.source);
            }
        })
    }
}
