//! Runs a compiled recipe on a pool of worker threads.
//!
//! Every worker loops: take the lock, record the task it just finished, pick the next ready
//! task that fits the memory budget, collect its inputs, release the lock, run the plugin. So
//! there is one short critical section per task, no coordinator thread, and no lock is held
//! while a plugin runs. The bookkeeping lives in [`state`]; per-step statistics are gathered per
//! worker in [`stats`] and merged at the end.

mod state;
pub mod stats;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use runner_plugin::{DimValue, Host, Input, Inputs, TaskContext, TaskError, Value, task_tag};
use smallvec::SmallVec;

use crate::graph::Graph;
use crate::measure::{self, TaskMemory};
use crate::memory::Admission;
use crate::plan::Plan;
use crate::recipe::{Recipe, StepId};
pub use state::{Outcome, TaskRef};
use state::{Picked, State};
use stats::StepStats;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub workers: usize,
    pub budget: u64,
    /// Where tasks' scratch directories go; removed when the run ends.
    pub work_dir: PathBuf,
}

/// Counters a progress display can read at any time without taking the scheduler's lock.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    pub reserved: AtomicU64,
    pub budget: AtomicU64,
    pub spilled: AtomicU64,
    pub done: AtomicBool,
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
    next_tag: AtomicU64,
}

/// Runs every task of `recipe` and reports what happened.
pub fn run(recipe: &Recipe, graph: &Graph, plan: &Plan, options: &RunOptions, progress: &Progress) -> RunReport {
    let workers = options.workers.max(1);
    // Nested parallel work (TaskContext::join and friends) runs on rayon's global pool; size it
    // like the worker pool. It can only be set once per process, which is fine for the CLI.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(workers).build_global();
    install_panic_hook();
    let started = Instant::now();
    let shared = Shared {
        recipe,
        graph,
        plan,
        options,
        state: Mutex::new(State::new(graph, options.budget)),
        wake: Condvar::new(),
        progress,
        next_tag: AtomicU64::new(1),
    };
    progress.total.store(graph.total_tasks(), Ordering::Relaxed);
    progress.budget.store(options.budget, Ordering::Relaxed);
    let results: Vec<WorkerResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("runner-worker-{i}"))
                    .spawn_scoped(scope, move || Worker::new(shared).run())
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
        workers,
        budget: options.budget,
    }
}

#[derive(Default)]
struct WorkerResult {
    steps: Vec<StepStats>,
    failures: Vec<Failure>,
}

/// One worker thread's loop and its reusable buffers.
struct Worker<'s, 'r> {
    shared: &'s Shared<'r>,
    stats: Vec<StepStats>,
    failures: Vec<Failure>,
    values: Vec<Arc<Value>>,
    counts: Vec<usize>,
    key: String,
    index: Vec<(&'r str, DimValue)>,
}

/// What running one task produced.
struct Finished {
    outcome: Outcome,
    output: Value,
}

impl<'s, 'r> Worker<'s, 'r> {
    fn new(shared: &'s Shared<'r>) -> Self {
        Worker {
            shared,
            stats: vec![StepStats::default(); shared.recipe.steps.len()],
            failures: Vec::new(),
            values: Vec::new(),
            counts: Vec::new(),
            key: String::new(),
            index: Vec::new(),
        }
    }

    fn run(mut self) -> WorkerResult {
        let mut finished: Option<(Picked, Finished)> = None;
        while let Some(assignment) = self.next(finished.take()) {
            let result = self.execute(&assignment);
            finished = Some((assignment, result));
        }
        WorkerResult { steps: self.stats, failures: self.failures }
    }

    /// Under the lock: records the finished task, then waits for and claims the next one.
    fn next(&mut self, finished: Option<(Picked, Finished)>) -> Option<Picked> {
        let shared = self.shared;
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((assignment, result)) = finished {
            state.finish(assignment.task, assignment.tag, result.outcome, result.output);
            self.count_skipped(&mut state);
            self.publish(&state);
            shared.wake.notify_all();
        }
        loop {
            if state.is_done() {
                shared.wake.notify_all();
                return None;
            }
            let plan = shared.plan;
            let fresh_tag = || measure::begin_new_task().unwrap_or_else(|_| next_tag(&shared.next_tag));
            if let Some(picked) = state.pick(|step| plan.steps[step].estimate, fresh_tag) {
                self.values.clear();
                self.counts.clear();
                state.collect_inputs(picked.task, &mut self.values, &mut self.counts);
                self.publish(&state);
                return Some(picked);
            }
            state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn count_skipped(&mut self, state: &mut MutexGuard<'_, State<'r>>) {
        for task in state.skipped.drain(..) {
            self.stats[task.step].skipped += 1;
        }
    }

    fn publish(&self, state: &State<'r>) {
        let p = self.shared.progress;
        p.finished.store(state.finished, Ordering::Relaxed);
        p.reserved.store(state.ledger.used(), Ordering::Relaxed);
    }

    /// Runs one task outside the lock and measures it.
    fn execute(&mut self, assignment: &Picked) -> Finished {
        let TaskRef { step, index } = assignment.task;
        self.describe_task(step, index);
        let started = Instant::now();
        let (result, memory) = self.run_plugin(step, assignment.tag);
        let wall = started.elapsed();
        let peak = memory.map_or(0, |m| m.peak_bytes);
        let stats = &mut self.stats[step];
        stats.wall += wall;
        stats.estimate.record(assignment.estimate);
        stats.peak.record(peak);
        if assignment.admission == (Admission::Alone { oversized: true }) {
            stats.oversized += 1;
        }
        if peak > assignment.estimate {
            stats.underestimates += 1;
        }
        match result {
            Ok(Ok(output)) => {
                stats.ok += 1;
                stats.output_bytes += output.buffer_bytes();
                Finished { outcome: Outcome::Ok, output }
            }
            Ok(Err(error)) => self.fail(step, error.to_string()),
            Err(panic) => self.fail(step, format!("panicked: {}", panic_message(&*panic))),
        }
    }

    /// Calls the plugin with the collected inputs, under the task's allocation tag, catching
    /// panics; returns what it returned and what it allocated.
    fn run_plugin(
        &self,
        step_id: StepId,
        tag: u32,
    ) -> (std::thread::Result<Result<Value, TaskError>>, Option<TaskMemory>) {
        let shared = self.shared;
        let step = &shared.recipe.steps[step_id];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        let mut inputs: SmallVec<[Input<'_>; 4]> = SmallVec::new();
        let mut start = 0;
        for (&edge, &count) in shared.graph.steps[step_id].inputs.iter().zip(&self.counts) {
            let e = &shared.graph.edges[edge];
            inputs.push(Input::new(&step.inputs[e.input].name, e.gathered, &self.values[start..start + count]));
            start += count;
        }
        let inputs = Inputs::new(&inputs);
        let host = TaskHost { shared, tag, step: &step.name, key: &self.key };
        let ctx = TaskContext::new(&step.name, &self.key, &shared.recipe.cycle, &self.index, tag, &host);
        let result = task_tag::with(tag, || catch_unwind(AssertUnwindSafe(|| step.plugin.run(&ctx, &args, &inputs))));
        // Fails only for a tag nobody measured (every counter slot was busy at dispatch).
        let memory = measure::end_task(tag).ok();
        (result, memory)
    }

    fn fail(&mut self, step: StepId, error: String) -> Finished {
        self.stats[step].failed += 1;
        self.shared.progress.failed.fetch_add(1, Ordering::Relaxed);
        let step_name = self.shared.recipe.steps[step].name.clone();
        self.failures.push(Failure { step: step_name, key: self.key.clone(), error });
        Finished { outcome: Outcome::Failed, output: Value::None }
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
}
