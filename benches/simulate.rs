//! `runner simulate` at scale: simulated tasks per second of a 10⁶-task map → group → reduce
//! recipe (no history: every task a guess), and how the scheduler's cost per task grows with
//! the workers — with the simulation's meter (the ledger counts reservations: O(1) an
//! admission) and with a meter like a local run's (the ledger reads every running task at each
//! admission: O(workers)). Then the cost of choosing spill victims (under the scheduler's
//! lock): a gather recipe whose budget holds a fraction of each gather's inputs, so that
//! tens of thousands of buffers are spilled. Run with `cargo bench --bench simulate`; it prints
//! two tables. `SIMULATE_TASKS=N` changes the number of source tasks of the first (default 10⁶).

use std::path::Path;
use std::time::Instant;

use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::simulate::{self, History, Interpreters, SimOptions, SpillRates};

fn compile(files: u64) -> Compiled {
    let yaml = format!(
        "recipe: many\ndims:\n  file: {files}\n  chunk: {{group: file, size: 5}}\nsteps:\n  cache:\n    plugin: noop\n    over: [file]\n  write:\n    plugin: noop\n    over: [chunk]\n    inputs: {{files: cache}}\n  finalise:\n    plugin: noop\n    inputs: {{chunks: write}}\n"
    );
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "bench".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("bench.yaml"), &yaml, &options, &registry).expect("a valid recipe")
}

/// `members × leads` fields of 100×100 float32 (40 KB), gathered per lead by a mean.
fn compile_gathers(members: u64, leads: u64) -> Compiled {
    let yaml = format!(
        "recipe: gathers\ndims:\n  member: {members}\n  lead: {leads}\nsteps:\n  field:\n    plugin: synth\n    over: [member, lead]\n    args: {{ny: 100, nx: 100, wet_fraction: 0.3, seed: \"{{member}}/{{lead}}\"}}\n  probability:\n    plugin: mean\n    over: [lead]\n    inputs: {{members: field}}\n"
    );
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "bench".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("gathers.yaml"), &yaml, &options, &registry).expect("a valid recipe")
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let files: u64 = std::env::var("SIMULATE_TASKS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    println!(
        "{:>8} {:>18} {:>10} {:>14} {:>12} {:>12}",
        "workers", "meter", "tasks", "simulated wall", "real time", "tasks/s"
    );
    for read_every_task in [false, true] {
        for workers in [16, 256, 4096] {
            if read_every_task && workers == 4096 && files > 200_000 {
                // The O(workers) meter at 4,096 workers is measured on a tenth of the tasks.
                run(files / 10, workers, read_every_task);
                continue;
            }
            run(files, workers, read_every_task);
        }
    }
    println!();
    println!(
        "{:>8} {:>10} {:>10} {:>12} {:>12} {:>14}",
        "budget", "tasks", "spills", "real time", "tasks/s", "µs per spill"
    );
    for budget_mib in [16u64, 4] {
        spill_heavy(budget_mib);
    }
}

/// 1,000 members × 100 leads under `budget_mib`: each lead's 40 MB of inputs exceeds it.
fn spill_heavy(budget_mib: u64) {
    let mut compiled = compile_gathers(1000, 100);
    let history = History::none(&compiled);
    let options = SimOptions {
        workers: 8,
        budget: budget_mib << 20,
        spill: SpillRates::at(1 << 30),
        read_every_task: false,
        cpus: None,
        interpreters: Interpreters::Cold,
        keep_services: false,
    };
    let started = Instant::now();
    let prediction = simulate::predict(&mut compiled, &history, &|_, _| None, &options, 1 << 30, None, false);
    let elapsed = started.elapsed();
    let tasks = compiled.graph.total_tasks();
    let spills = prediction.simulated.report.spill_count;
    assert_eq!(prediction.simulated.report.not_run, 0);
    println!(
        "{:>5}MiB {tasks:>10} {spills:>10} {:>11.2}s {:>12.0} {:>14.1}",
        budget_mib,
        elapsed.as_secs_f64(),
        tasks as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / spills.max(1) as f64,
    );
}

fn run(files: u64, workers: usize, read_every_task: bool) {
    let mut compiled = compile(files);
    let history = History::none(&compiled);
    let options = SimOptions {
        workers,
        budget: 64 << 30,
        spill: SpillRates::at(1 << 30),
        read_every_task,
        cpus: None,
        interpreters: Interpreters::Cold,
        keep_services: false,
    };
    let started = Instant::now();
    let prediction = simulate::predict(&mut compiled, &history, &|_, _| None, &options, 1 << 30, None, false);
    let elapsed = started.elapsed();
    let tasks = compiled.graph.total_tasks();
    assert_eq!(prediction.simulated.report.not_run, 0);
    println!(
        "{workers:>8} {:>18} {tasks:>10} {:>13.3}s {:>11.2}s {:>12.0}",
        if read_every_task { "every task read" } else { "reservations" },
        prediction.simulated.report.wall.as_secs_f64(),
        elapsed.as_secs_f64(),
        tasks as f64 / elapsed.as_secs_f64(),
    );
}
