//! "No allocation per task on the dispatch path": the allocator's own request counters
//! (jemalloc's `nrequests`, which count every allocation including those served from thread
//! caches) must not grow with the number of tasks a run dispatches. Runs of 20k and 200k `noop`
//! tasks are compared, for a flat map, for map → group → reduce, and for a map whose every task
//! returns a value that another task consumes (the plugin itself allocates nothing for it).

use std::path::Path;

use std::sync::Arc;

use runner::Compiled;
use runner::plugin::{ArgSpec, Args, Inputs, Plugin, TaskContext, TaskError, Value};
use runner::recipe::CompileOptions;
use runner::registry::Registry;
use runner::scheduler::{self, Progress, RunOptions};
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
    let options = CompileOptions { cycle: "test".into(), set: vec![] };
    Compiled::from_text(Path::new("test.yaml"), yaml, &options, &registry).expect("a valid recipe")
}

/// Allocation requests served so far, all arenas (thread caches are merged in when their
/// threads exit, which a run's workers have done by the time it returns).
fn allocation_requests() -> u64 {
    epoch::advance().unwrap();
    let read = |name: &[u8]| unsafe { raw::read::<u64>(name) }.unwrap();
    read(b"stats.arenas.4096.small.nrequests\0") + read(b"stats.arenas.4096.large.nrequests\0")
}

/// Allocation requests made by one run of `compiled` on 2 workers.
fn requests_of_run(compiled: &Compiled) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let options =
        RunOptions { spill_dir: Some(dir.path().into()), ..RunOptions::new(2, 8 << 30, dir.path().join("work")) };
    let before = allocation_requests();
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), None);
    let after = allocation_requests();
    assert!(report.failures.is_empty());
    after - before
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

#[test]
fn dispatching_more_tasks_allocates_no_more() {
    for (shape, small, large) in [
        ("flat map", flat(20_000), flat(200_000)),
        ("map-group-reduce", reduce(20_000), reduce(200_000)),
        ("values passed on", passed_on(20_000), passed_on(200_000)),
    ] {
        // A first run warms up what is allocated once per process (thread pools, caches).
        requests_of_run(&small);
        let (few, many) = (requests_of_run(&small), requests_of_run(&large));
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
}
