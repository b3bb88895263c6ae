//! Runs a compiled recipe on a pool of worker threads.
//!
//! Every worker loops: take the lock, record the tasks it has just run, claim the next ready
//! task that fits the memory budget with its inputs, release the lock, run the plugin. There is
//! no coordinator thread and no lock is held while a plugin runs. When a step's tasks prove
//! quick (under 20 µs on average), a worker claims up to 64 of them at once and reports them
//! together, so the lock is taken once per batch; slow tasks go one at a time, so memory
//! admission stays per task where it matters. The bookkeeping lives in [`state`]; per-step
//! statistics are gathered per worker in [`stats`] and merged at the end.

mod state;
pub mod stats;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use runner_plugin::{
    CommandOutcome, CommandPeakSource, CommandSpec, DimValue, Host, Input, Inputs, InputsForEstimate, TaskContext,
    TaskError, Value, task_tag,
};
use smallvec::SmallVec;

use crate::command;
use crate::graph::Graph;
use crate::measure::{self, PeakSource, TaskMemory};
use crate::memory::Admission;
use crate::memory::spill::SpillDir;
use crate::plan::{EstimateSource, Plan};
use crate::recipe::{Recipe, StepId};
pub use state::{Outcome, TaskRef};
use state::{Pick, Picked, State};
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
}

impl RunOptions {
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
}

/// One finished (or skipped) task, as the store records it.
#[derive(Debug, Clone, Copy)]
pub struct TaskReport<'a> {
    /// The worker that reports it, `0..workers`: a sink may buffer per worker.
    pub worker: usize,
    /// The step's index in the recipe, and its name.
    pub step_id: StepId,
    pub step: &'a str,
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
    pub error: Option<&'a str>,
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
}

impl RunReport {
    pub fn total(&self, f: impl Fn(&StepStats) -> u64) -> u64 {
        self.steps.iter().map(f).sum()
    }
}

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
    next_tag: AtomicU64,
    /// When the run started: task start times are offsets from it.
    started: Instant,
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
    let workers = options.workers.max(1);
    // Nested parallel work (TaskContext::join and friends) runs on rayon's global pool; size it
    // like the worker pool. It can only be set once per process, which is fine for the CLI.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(workers).build_global();
    install_panic_hook();
    let started = Instant::now();
    let follows_data = recipe.steps.iter().map(|s| s.plugin.estimate_follows_data()).collect();
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
    let shared = Shared {
        recipe,
        graph,
        plan,
        options,
        state: Mutex::new(State::new(graph, plan, follows_data, options.budget, Some(&spill))),
        wake: Condvar::new(),
        progress,
        sink,
        next_tag: AtomicU64::new(1),
        started,
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
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| WorkerResult::default())).collect()
    });
    progress.done.store(true, Ordering::Relaxed);
    let state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut steps = vec![StepStats::default(); recipe.steps.len()];
    let mut failures = Vec::new();
    for result in results {
        for (total, part) in steps.iter_mut().zip(&result.steps) {
            total.merge(part);
        }
        failures.extend(result.failures);
    }
    failures.sort_by(|a, b| (&a.step, &a.key).cmp(&(&b.step, &b.key)));
    let _ = std::fs::remove_dir_all(&options.work_dir);
    RunReport {
        steps,
        failures,
        wall: started.elapsed(),
        peak_reserved: state.ledger.peak_used(),
        spilled_bytes: state.spilled,
        spill_count: spill.spill_count(),
        spill_error: state.spill_error.clone(),
        workers,
        budget: options.budget,
    }
}

#[derive(Default)]
struct WorkerResult {
    steps: Vec<StepStats>,
    failures: Vec<Failure>,
}

/// Most tasks of a quick step a worker claims at once.
const MAX_BATCH: usize = 64;

/// One worker thread's loop and its reusable buffers.
struct Worker<'s, 'r> {
    shared: &'s Shared<'r>,
    /// This worker's number, `0..workers`.
    id: usize,
    stats: Vec<StepStats>,
    failures: Vec<Failure>,
    /// Tasks claimed under the lock, run in order outside it.
    claimed: Vec<Claimed>,
    /// Tasks run since the lock was last held, reported together at the next claim.
    done: Vec<(Picked, Finished)>,
    /// Input values of the claimed tasks, each task's at its `Claimed::values`.
    values: Vec<Arc<Value>>,
    /// Values per input of each claimed task, at its `Claimed::counts`.
    counts: Vec<usize>,
    /// What a run task's input slots are reset to, so its buffers can go while the batch goes on.
    none: Arc<Value>,
    key: String,
    index: Vec<(&'r str, DimValue)>,
    /// Tasks skipped since the last report, to record outside the lock.
    skipped: Vec<TaskRef>,
    /// Reused by batch claims.
    batch: Vec<Picked>,
}

/// A task claimed to run, with where its inputs are in the worker's buffers.
struct Claimed {
    picked: Picked,
    values: Range<usize>,
    counts: Range<usize>,
    /// Buffer bytes of its inputs.
    input_bytes: u64,
}

/// What running one task produced.
struct Finished {
    outcome: Outcome,
    output: Value,
    peak: u64,
    wall: Duration,
    input_bytes: u64,
}

impl<'s, 'r> Worker<'s, 'r> {
    fn new(shared: &'s Shared<'r>, id: usize) -> Self {
        Worker {
            shared,
            id,
            stats: vec![StepStats::default(); shared.recipe.steps.len()],
            failures: Vec::new(),
            claimed: Vec::with_capacity(MAX_BATCH),
            done: Vec::with_capacity(MAX_BATCH),
            values: Vec::new(),
            counts: Vec::new(),
            none: Arc::new(Value::None),
            key: String::new(),
            index: Vec::new(),
            skipped: Vec::new(),
            batch: Vec::with_capacity(MAX_BATCH),
        }
    }

    fn run(mut self) -> WorkerResult {
        while self.report_and_claim() {
            self.report_skipped();
            // One clock reading per task: each task starts when the one before it ended.
            let mut clock = Instant::now();
            for at in 0..self.claimed.len() {
                let finished = self.execute(at, clock);
                clock += finished.wall;
                // The task's inputs are no longer needed by this worker.
                let none = &self.none;
                self.values[self.claimed[at].values.clone()].iter_mut().for_each(|v| *v = none.clone());
                self.done.push((self.claimed[at].picked, finished));
            }
            self.claimed.clear();
            self.values.clear();
            self.counts.clear();
            self.flush_reports();
        }
        self.report_skipped();
        self.flush_reports();
        WorkerResult { steps: self.stats, failures: self.failures }
    }

    fn flush_reports(&self) {
        if let Some(sink) = self.shared.sink {
            sink.flush(self.id);
        }
    }

    /// Counts and records the tasks skipped because an input failed.
    fn report_skipped(&mut self) {
        let mut skipped = std::mem::take(&mut self.skipped);
        for task in skipped.drain(..) {
            self.stats[task.step].skipped += 1;
            if let Some(sink) = self.shared.sink {
                self.describe_task(task.step, task.index);
                let step = &self.shared.recipe.steps[task.step];
                let plan = &self.shared.plan.steps[task.step];
                sink.record(&TaskReport {
                    worker: self.id,
                    step_id: task.step,
                    step: &step.name,
                    key: &self.key,
                    plugin: step.plugin.name(),
                    outcome: Outcome::Skipped,
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
                    error: Some("an input failed"),
                });
            }
        }
        self.skipped = skipped;
    }

    /// Under the lock: records the tasks run since the last call, then waits for and claims
    /// the next task (a batch of them if its step is quick). False once every task is done.
    fn report_and_claim(&mut self) -> bool {
        let shared = self.shared;
        let plan = shared.plan;
        let fresh_tag = || measure::begin_new_task().unwrap_or_else(|_| next_tag(&shared.next_tag));
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if !self.done.is_empty() {
            for (picked, result) in self.done.drain(..) {
                if result.peak > picked.estimate {
                    state.note_underestimate(picked.task.step, result.peak, picked.plugin_estimate, result.input_bytes);
                }
                state.finish(picked.task, picked.tag, result.outcome, result.output, result.wall);
            }
            self.skipped.append(&mut state.skipped);
            self.publish(&state);
            if state.sleepers > 0 {
                shared.wake.notify_all();
            }
        }
        loop {
            if state.is_done() {
                if state.sleepers > 0 {
                    shared.wake.notify_all();
                }
                return false;
            }
            match state.pick(plan, fresh_tag) {
                Pick::Run(picked) => {
                    self.claim(&state, picked);
                    if picked.admission == Admission::Fits && state.is_quick(picked.task.step) {
                        let mut batch = std::mem::take(&mut self.batch);
                        state.pick_more(&picked, MAX_BATCH - 1, fresh_tag, &mut batch);
                        for more in batch.drain(..) {
                            self.claim(&state, more);
                        }
                        self.batch = batch;
                    }
                    self.publish(&state);
                    return true;
                }
                Pick::Estimate(task) => {
                    let (values, counts, _) = self.collect_inputs(&state, task);
                    drop(state);
                    let plugin_estimate = self.estimate_at_dispatch(task, values, counts);
                    self.values.clear();
                    self.counts.clear();
                    state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(picked) = state.admit_estimated(plan, task, plugin_estimate, fresh_tag) {
                        self.claim(&state, picked);
                        self.publish(&state);
                        return true;
                    }
                }
                Pick::Wait => {
                    state.sleepers += 1;
                    state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.sleepers -= 1;
                }
            }
        }
    }

    /// Adds `picked` to the claimed tasks, with its inputs.
    fn claim(&mut self, state: &State<'r>, picked: Picked) {
        let (values, counts, input_bytes) = self.collect_inputs(state, picked.task);
        self.claimed.push(Claimed { picked, values, counts, input_bytes });
    }

    /// Appends `task`'s inputs to the worker's buffers; returns where they are and their bytes.
    fn collect_inputs(&mut self, state: &State<'r>, task: TaskRef) -> (Range<usize>, Range<usize>, u64) {
        let (values_from, counts_from) = (self.values.len(), self.counts.len());
        let bytes = state.collect_inputs(task, &mut self.values, &mut self.counts);
        (values_from..self.values.len(), counts_from..self.counts.len(), bytes)
    }

    /// Asks the plugin of a data-following step what this task will need, given its inputs.
    /// Runs outside the lock; a panicking estimate falls back to the plan's.
    fn estimate_at_dispatch(&mut self, task: TaskRef, values: Range<usize>, counts: Range<usize>) -> u64 {
        self.describe_task(task.step, task.index);
        let step = &self.shared.recipe.steps[task.step];
        let plan = &self.shared.plan.steps[task.step];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        self.with_inputs(task.step, values, counts, |inputs| {
            catch_unwind(AssertUnwindSafe(|| {
                step.plugin.estimate(&args, InputsForEstimate::Dispatch(*inputs), &plan.output)
            }))
            .unwrap_or(plan.plugin_estimate)
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

    /// Runs claimed task `at`, which starts at `started`, outside the lock, and measures it.
    fn execute(&mut self, at: usize, started: Instant) -> Finished {
        let claimed = &self.claimed[at];
        let (assignment, input_bytes) = (claimed.picked, claimed.input_bytes);
        let TaskRef { step, index } = assignment.task;
        self.describe_task(step, index);
        let (result, memory, command) = self.run_plugin(at, assignment.tag);
        let wall = started.elapsed();
        // A task that ran external commands peaked at the larger of its own heap and their trees.
        let mut peak = memory.map_or(0, |m| m.peak_bytes);
        let mut peak_source = PeakSource::Allocator;
        if let Some(command) = &command
            && command.peak > peak
        {
            (peak, peak_source) = (command.peak, command.source);
        }
        let stats = &mut self.stats[step];
        stats.wall += wall;
        stats.estimate.record(assignment.estimate);
        stats.peak.record(peak);
        stats.estimate_sum += assignment.estimate;
        stats.peak_sum += peak;
        if assignment.admission == (Admission::Alone { oversized: true }) {
            stats.oversized += 1;
        }
        if peak > assignment.estimate {
            stats.underestimates += 1;
        }
        let (outcome, output, error) = match result {
            Ok(Ok(output)) => (Outcome::Ok, output, None),
            Ok(Err(error)) => (Outcome::Failed, Value::None, Some(error.to_string())),
            Err(panic) => (Outcome::Failed, Value::None, Some(format!("panicked: {}", panic_message(&*panic)))),
        };
        let output_bytes = output.buffer_bytes();
        match outcome {
            Outcome::Ok => {
                stats.ok += 1;
                stats.output_bytes += output_bytes;
            }
            _ => stats.failed += 1,
        }
        if let Some(sink) = self.shared.sink {
            let step_def = &self.shared.recipe.steps[step];
            sink.record(&TaskReport {
                worker: self.id,
                step_id: step,
                step: &step_def.name,
                key: &self.key,
                plugin: step_def.plugin.name(),
                outcome,
                input_bytes,
                estimate: assignment.estimate,
                source: assignment.source,
                plugin_estimate: assignment.plugin_estimate,
                peak,
                output_bytes,
                wall,
                started: started.saturating_duration_since(self.shared.started),
                attempts: 1,
                peak_source,
                log_path: command.as_ref().and_then(|c| c.log_path.as_deref()),
                error: error.as_deref(),
            });
        }
        if let Some(error) = error {
            self.shared.progress.failed.fetch_add(1, Ordering::Relaxed);
            let step_name = self.shared.recipe.steps[step].name.clone();
            self.failures.push(Failure { step: step_name, key: self.key.clone(), error });
        }
        Finished { outcome, output, peak, wall, input_bytes }
    }

    /// Calls the plugin with the collected inputs, under the task's allocation tag, catching
    /// panics; returns what it returned, what it allocated, and what its external commands
    /// measured if it ran any.
    #[allow(clippy::type_complexity)]
    fn run_plugin(
        &self,
        at: usize,
        tag: u32,
    ) -> (std::thread::Result<Result<Value, TaskError>>, Option<TaskMemory>, Option<CommandRecord>) {
        let shared = self.shared;
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &shared.recipe.steps[step_id];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        let host = TaskHost {
            shared,
            tag,
            step: &step.name,
            key: &self.key,
            timeout: step.timeout,
            commands: Mutex::new(None),
        };
        let ctx = TaskContext::new(&step.name, &self.key, &shared.recipe.cycle, &self.index, tag, &host);
        let result = self.with_inputs(step_id, claimed.values.clone(), claimed.counts.clone(), |inputs| {
            task_tag::with(tag, || catch_unwind(AssertUnwindSafe(|| step.plugin.run(&ctx, &args, inputs))))
        });
        // Fails only for a tag nobody measured (every counter slot was busy at dispatch).
        let memory = measure::end_task(tag).ok();
        let commands = host.commands.into_inner().unwrap_or_else(|p| p.into_inner());
        (result, memory, commands)
    }

    /// Fills the reusable key string and index pairs of task `index` of `step`.
    fn describe_task(&mut self, step: StepId, index: u64) {
        use std::fmt::Write as _;
        let recipe = self.shared.recipe;
        let shape = &self.shared.graph.steps[step];
        let coords = shape.coords(index);
        self.key.clear();
        self.index.clear();
        for (pos, &dim) in shape.dims.iter().enumerate() {
            let dim = &recipe.dims[dim];
            let value = dim.value(coords[pos]);
            if pos > 0 {
                self.key.push(',');
            }
            let _ = write!(self.key, "{}={}", dim.name, value);
            self.index.push((dim.name.as_str(), value));
        }
    }
}

fn next_tag(counter: &AtomicU64) -> u32 {
    loop {
        let tag = (counter.fetch_add(1, Ordering::Relaxed) % u32::MAX as u64) as u32;
        if tag != task_tag::NO_TASK {
            return tag;
        }
    }
}

thread_local! {
    /// Where the last panic on this thread happened, captured by [`install_panic_hook`].
    static PANIC_LOCATION: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// A task's panic is reported as the task's failure, so the default hook's message (printed
/// in the middle of the progress bar) is replaced by capturing where it happened.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if task_tag::current() == task_tag::NO_TASK {
                previous(info);
                return;
            }
            let location = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
            let _ = PANIC_LOCATION.try_with(|cell| *cell.borrow_mut() = location);
        }));
    });
}

/// The text of a panic payload, with where it happened when known.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_string()
    };
    match PANIC_LOCATION.try_with(|cell| cell.borrow_mut().take()).ok().flatten() {
        Some(location) => format!("{text} (at {location})"),
        None => text,
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
    tag: u32,
    step: &'a str,
    key: &'a str,
    /// The step's `timeout:`, which also bounds each command the task runs.
    timeout: Option<Duration>,
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

    /// Grows the task's reservation before a large allocation, waiting while the budget has
    /// no room and some other task can still make some (the ledger decides).
    fn will_allocate(&self, bytes: u64) {
        let shared = self.shared;
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        while !state.ledger.try_grow(self.tag, bytes) {
            // Woken when a task finishes; the timeout re-checks live bytes that fell without one.
            state = shared.wake.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        }
        state.ledger.stop_growing(self.tag);
        self.shared.progress.reserved.store(state.ledger.used(), Ordering::Relaxed);
    }

    /// Runs the command as part of the task ([`crate::command`]): killed at the sooner of the
    /// spec's and the step's timeout or when the task is cancelled; its peak is kept for the
    /// task's record whatever happens.
    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        let log_path = spec.log_path.clone().unwrap_or_else(|| self.default_log_path());
        self.note_command(|r| r.log_path = Some(log_path.clone()));
        let timeout = match (spec.timeout, self.timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let cancelled = || self.cancelled();
        let request = command::Request {
            argv: &spec.argv,
            env: &spec.env,
            log_path: &log_path,
            memory_limit: spec.memory_limit,
            timeout,
            tag: self.tag,
            cancelled: &cancelled,
            isolation: command::Isolation::Auto,
        };
        let finished = command::run(&request).map_err(|e| TaskError::msg(e.to_string()))?;
        self.note_command(|r| {
            if finished.peak_bytes >= r.peak {
                (r.peak, r.source) = (finished.peak_bytes, finished.peak_source);
            }
        });
        let exit = finished.exit()?;
        let source = match finished.peak_source {
            PeakSource::Cgroup => CommandPeakSource::Cgroup,
            _ => CommandPeakSource::Wait4Sampled,
        };
        Ok(CommandOutcome::new(
            finished.command,
            exit,
            finished.peak_bytes,
            source,
            finished.log_path,
            finished.wall,
            finished.stderr_tail,
        ))
    }
}
