//! Dispatch throughput of the scheduler on `noop` tasks (flat map, map → group → reduce, a deep
//! chain), and the cost of compiling a recipe whose dim has 10⁶ values. Run with
//! `cargo bench --bench scheduler`; figures are per whole run, divide by the task count.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::scheduler::{self, Progress, RunOptions};

fn compile(yaml: &str) -> Compiled {
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "bench".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("bench.yaml"), yaml, &options, &registry).expect("a valid recipe")
}

fn run(compiled: &Compiled) {
    let work_dir = std::env::temp_dir().join(format!("runner-bench-{}", std::process::id()));
    let options = RunOptions::new(2, 8 << 30, work_dir);
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), None);
    assert!(report.failures.is_empty());
    black_box(report);
}

fn dispatch(c: &mut Criterion) {
    let flat = compile("recipe: flat\ndims:\n  i: 100000\nsteps:\n  a:\n    plugin: noop\n    over: [i]\n");
    let reduce = compile(
        "recipe: reduce\ndims:\n  file: 100000\n  chunk: {group: file, size: 5}\nsteps:\n  cache:\n    plugin: noop\n    over: [file]\n  write:\n    plugin: noop\n    over: [chunk]\n    inputs: {files: cache}\n  finalise:\n    plugin: noop\n    inputs: {chunks: write}\n",
    );
    let mut chain = String::from("recipe: chain\ndims:\n  i: 1000\nsteps:\n  s0:\n    plugin: noop\n    over: [i]\n");
    for s in 1..50 {
        chain.push_str(&format!("  s{s}:\n    plugin: noop\n    over: [i]\n    inputs: {{x: s{}}}\n", s - 1));
    }
    let chain = compile(&chain);
    let mut group = c.benchmark_group("dispatch");
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    for (name, compiled) in [("flat_map_100k", &flat), ("map_group_reduce_120k", &reduce), ("chain_50x1000", &chain)] {
        group.throughput(Throughput::Elements(compiled.graph.total_tasks()));
        group.bench_function(name, |b| b.iter(|| run(compiled)));
    }
    group.finish();
}

fn expansion(c: &mut Criterion) {
    let yaml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/many_inputs.yaml")).unwrap();
    let mut group = c.benchmark_group("expansion");
    group.bench_function("compile_many_inputs", |b| b.iter(|| black_box(compile(&yaml))));
    let compiled = compile(&yaml);
    let gather = compiled.graph.steps[1].inputs[0];
    group.throughput(Throughput::Elements(200_000));
    group.bench_function("producers_of_200k_chunks", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for chunk in 0..200_000 {
                compiled.graph.for_each_producer(gather, chunk, |p| sum += p);
            }
            black_box(sum)
        })
    });
    group.finish();
}

criterion_group!(benches, dispatch, expansion);
criterion_main!(benches);
