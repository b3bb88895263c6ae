//! "No allocation per task on the dispatch path": the allocator's own request counters
//! (jemalloc's `nrequests`, which count every allocation including those served from thread
//! caches) must not grow with the number of tasks a run dispatches. Runs of 20k and 200k `noop`
//! tasks are compared, for a flat map, for map → group → reduce, and for a map whose every task
//! returns a value that another task consumes (the plugin itself allocates nothing for it).
//!
//! The same holds for a run recorded as `runner run` records it (a `StoreSink` over a store in a
//! temporary directory), for a flat map (keys spelled from task indices) and for a step over a
//! list dim (keys stored as text). What is counted there is every Rust allocation of the process
//! from the first task to the last row committed: the workers', and the store's writer thread's
//! (the batches it receives and hands back, rusqlite's statement cache) — but not SQLite's own,
//! which the bundled library makes with the C library's `malloc`, not jemalloc (only Rust's
//! global allocator is jemalloc here). The writer's allocations per commit are a few; commits
//! come at most every 20 ms, so a bound per task still fails if a row costs an allocation.

use std::path::Path;

use std::sync::{Arc, Mutex, MutexGuard};

use runner::plugin::{ArgSpec, Args, Inputs, Plugin, TaskContext, TaskError, Value};
use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::scheduler::{self, Progress, RunOptions, TaskSink};
use runner::testing::store::MAX_BATCHES;
use runner::testing::store::{RunOutcome, RunStatus, Store};
use runner::testing::store::{StoreSink, run_start};
use tikv_jemalloc_ctl::{epoch, raw};

/// Returns a value that needs no allocation (JSON `true`), so that every allocation a run of it
/// makes is the engine's.
struct Flag;

impl Plugin for Flag {
    fn name(&self) -> &'static str {
        "flag"
    }
    fn about(&self) -> &'static str {
        "returns JSON true"
    }
    fn args(&self) -> &'static [ArgSpec] {
        &[]
    }
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }
    fn run(&self, _ctx: &TaskContext, _args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        Ok(Value::Json(serde_json::Value::Bool(true)))
    }
}

fn compile(yaml: &str) -> Compiled {
    let registry = Registry::new(runner_std_plugins::all().into_iter().chain([Arc::new(Flag) as Arc<dyn Plugin>]));
    let options = CompileOptions { cycle: "test".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("test.yaml"), yaml, &options, &registry).expect("a valid recipe")
}

/// Allocation requests served so far, all arenas (thread caches are merged in when their
/// threads exit, which a run's workers have done by the time it returns).
fn allocation_requests() -> u64 {
    epoch::advance().unwrap();
    let read = |name: &[u8]| unsafe { raw::read::<u64>(name) }.unwrap();
    read(b"stats.arenas.4096.small.nrequests\0") + read(b"stats.arenas.4096.large.nrequests\0")
}

fn options(dir: &Path) -> RunOptions {
    RunOptions { spill_dir: Some(dir.into()), ..RunOptions::new(2, 8 << 30, dir.join("work")) }
}

/// Allocation requests made by one run of `compiled` on 2 workers.
fn requests_of_run(compiled: &Compiled) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path());
    let before = allocation_requests();
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), None);
    let after = allocation_requests();
    assert!(report.failures.is_empty());
    after - before
}

/// Allocation requests made by one run of `compiled` on 2 workers recorded into a new store, as
/// `runner run` records it, from its first task until its last row is committed (the writer
/// thread has ended, so its thread cache's counts are in).
/// Also returns how many record batches and rows the run made new (a `Vec` each, and a key
/// string a row where keys are text: a fixed cost bounded by `MAX_BATCHES`, not per task).
fn requests_of_recorded_run(compiled: &Compiled) -> (u64, (u64, u64)) {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path());
    let store = Store::open(dir.path().join("runner.db")).expect("a new store");
    let start = run_start(compiled, &options);
    let recorder = store.start_run(&start).expect("the run row is inserted");
    let sink = StoreSink::new(recorder, &start, compiled, options.workers);
    let before = allocation_requests();
    let report = scheduler::run(
        &compiled.recipe,
        &compiled.graph,
        &compiled.plan,
        &options,
        &Progress::default(),
        Some(&sink as &dyn TaskSink),
    );
    let rows_made = sink.rows_made();
    let written = sink.finish(RunOutcome::new(RunStatus::Ok)).expect("every row is written");
    let after = allocation_requests();
    assert!(report.failures.is_empty());
    assert_eq!(written.rows, compiled.graph.total_tasks(), "every task is recorded");
    assert!(written.batches_made <= MAX_BATCHES, "{} batches made", written.batches_made);
    (after - before, (written.batches_made, rows_made))
}

fn flat(tasks: u64) -> Compiled {
    compile(&format!("recipe: flat\ndims:\n  i: {tasks}\nsteps:\n  a:\n    plugin: noop\n    over: [i]\n"))
}

fn reduce(files: u64) -> Compiled {
    compile(&format!(
        "recipe: reduce\ndims:\n  file: {files}\n  chunk: {{group: file, size: 5}}\nsteps:\n  cache:\n    plugin: noop\n    \
         over: [file]\n  write:\n    plugin: noop\n    over: [chunk]\n    inputs: {{files: cache}}\n  finalise:\n    \
         plugin: noop\n    inputs: {{chunks: write}}\n"
    ))
}

/// Each task of `make` returns a value that the matching task of `take` reads.
fn passed_on(tasks: u64) -> Compiled {
    compile(&format!(
        "recipe: pass\ndims:\n  i: {tasks}\nsteps:\n  make:\n    plugin: flag\n    over: [i]\n  take:\n    \
         plugin: noop\n    over: [i]\n    inputs: {{value: make}}\n"
    ))
}

/// A map over a list dim and a count: its keys (`model=b,i=17`) are stored as text.
fn listed(tasks: u64) -> Compiled {
    compile(&format!(
        "recipe: listed\ndims:\n  model: [alpha, beta, gamma, delta]\n  i: {}\nsteps:\n  a:\n    plugin: noop\n    \
         over: [model, i]\n",
        tasks / 4
    ))
}

/// Fails if a run of `large` makes 0.01 allocations or more per task it has beyond `small`'s.
fn assert_no_allocation_per_task(shape: &str, small: &Compiled, large: &Compiled, requests: fn(&Compiled) -> u64) {
    // A first run warms up what is allocated once per process (thread pools, caches).
    requests(small);
    let (few, many) = (requests(small), requests(large));
    let extra_tasks = (large.graph.total_tasks() - small.graph.total_tasks()) as f64;
    let per_task = (many as f64 - few as f64) / extra_tasks;
    println!(
        "{shape}: {few} allocations for {} tasks, {many} for {}",
        small.graph.total_tasks(),
        large.graph.total_tasks()
    );
    // Growing buffers (a ready queue, a step's pending counters) allocate O(log n) times.
    assert!(per_task < 0.01, "{shape}: {per_task:.3} allocations per task ({few} → {many})");
}

/// The counters are the process's: the tests take turns, compiling included.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn take_turn() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn dispatching_more_tasks_allocates_no_more() {
    let _turn = take_turn();
    for (shape, small, large) in [
        ("flat map", flat(20_000), flat(200_000)),
        ("map-group-reduce", reduce(20_000), reduce(200_000)),
        ("values passed on", passed_on(20_000), passed_on(200_000)),
    ] {
        assert_no_allocation_per_task(shape, &small, &large, requests_of_run);
    }
}

#[test]
fn recording_more_tasks_allocates_no_more() {
    let _turn = take_turn();
    assert!(run_start(&listed(1000), &options(Path::new("."))).keys.is_empty(), "a list dim's keys are stored as text");
    // What a row made new costs: a key string where keys are text.
    for (shape, small, large, per_row) in [
        ("recorded flat map", flat(20_000), flat(200_000), 0),
        ("recorded list dim", listed(20_000), listed(200_000), 1),
    ] {
        requests_of_recorded_run(&small);
        let ((few, made_few), (many, made_many)) = (requests_of_recorded_run(&small), requests_of_recorded_run(&large));
        // How many batches a run makes depends on how far its writer lags (at most
        // MAX_BATCHES): that fixed cost is taken out, what remains must not grow with the tasks.
        let made = |(batches, rows): (u64, u64)| (batches + per_row * rows) as f64;
        let batches = made(made_many) - made(made_few);
        let extra_tasks = (large.graph.total_tasks() - small.graph.total_tasks()) as f64;
        let per_task = (many as f64 - few as f64 - batches) / extra_tasks;
        println!(
            "{shape}: {few} allocations ({made_few:?} batches, rows made) for {} tasks, {many} ({made_many:?}) for {}",
            small.graph.total_tasks(),
            large.graph.total_tasks()
        );
        assert!(per_task < 0.01, "{shape}: {per_task:.3} allocations per task ({few} → {many})");
    }
}
