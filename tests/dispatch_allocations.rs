//! "No allocation per task on the dispatch path": the allocator's own request counters
//! (jemalloc's `nrequests`, which count every allocation including those served from thread
//! caches) must not grow with the number of tasks a run dispatches. Runs of 20k and 200k `noop`
//! tasks are compared, for a flat map and for map → group → reduce with outputs passed on.

use std::path::Path;

use runner::Compiled;
use runner::recipe::CompileOptions;
use runner::registry::Registry;
use runner::scheduler::{self, Progress, RunOptions};
use tikv_jemalloc_ctl::{epoch, raw};

fn compile(yaml: &str) -> Compiled {
    let registry = Registry::new(runner_std_plugins::all());
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
    let options = RunOptions {
        workers: 2,
        budget: 8 << 30,
        work_dir: dir.path().join("work"),
        spill_dir: Some(dir.path().into()),
    };
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

#[test]
fn dispatching_more_tasks_allocates_no_more() {
    for (shape, small, large) in
        [("flat map", flat(20_000), flat(200_000)), ("map-group-reduce", reduce(20_000), reduce(200_000))]
    {
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
