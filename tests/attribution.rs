//! Each task's measured peak is its own allocations at their highest — with nested parallel
//! work, frees by other threads, outputs that outlive their task and consumers that free their
//! inputs — within 5% of what the task really allocated.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runner::plugin::{ArgSpec, Args, Array, Inputs, Plugin, TaskContext, TaskError, Value};
use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::scheduler::{self, Progress, RunOptions, RunReport};

const MIB: usize = 1 << 20;

/// Touches every page so the allocation is real.
fn filled(bytes: usize) -> Vec<u8> {
    vec![1u8; bytes]
}

/// Test plugins, one behaviour each, chosen by `mode`.
struct Probe;

impl Plugin for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn about(&self) -> &'static str {
        "test plugin"
    }
    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[ArgSpec::required("mode", "what to do")];
        ARGS
    }
    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        match args.str("mode").map_err(|e| TaskError::msg(e.message))?.as_str() {
            // 8 × 16 MiB made on the rayon pool's threads (the worker thread only waits) and
            // all alive until `drop`: peak 128 MiB, all of it allocated on other threads.
            "nested" => {
                let parts = ctx.par_map(8, |_| filled(16 * MIB));
                drop(parts);
                Ok(Value::None)
            }
            // 64 MiB handed to another thread that frees it later: the task's peak is 64 MiB
            // and a second 32 MiB allocation afterwards does not stack on top of it.
            "cross_thread_free" => {
                let block = filled(64 * MIB);
                std::thread::spawn(move || drop(block)).join().unwrap();
                let again = filled(32 * MIB);
                drop(again);
                Ok(Value::None)
            }
            // Returns 100 MiB: its peak includes it, and it outlives the task.
            "output" => Ok(Value::Array(Array::from_vec(vec![100 * MIB], filled(100 * MIB)).unwrap())),
            // Reads a 100 MiB input and allocates 10 MiB of its own.
            "consume" => {
                let input = inputs.one("big")?.as_array().map_err(TaskError::msg)?;
                let own = filled(10 * MIB);
                std::thread::sleep(Duration::from_millis(20));
                Ok(Value::Json((own.len() + input.bytes().len()).into()))
            }
            other => Err(TaskError::msg(format!("unknown mode {other}"))),
        }
    }
}

fn run(yaml: &str) -> (Compiled, RunReport) {
    let registry = Registry::new([Arc::new(Probe) as Arc<dyn Plugin>]);
    let options = CompileOptions { cycle: "C".into(), ..CompileOptions::default() };
    let compiled =
        Compiled::from_text(Path::new("t.yaml"), yaml, &options, &registry).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let options = RunOptions::new(2, 8 << 30, dir.path().join("run"));
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), None);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    (compiled, report)
}

fn peak_of(compiled: &Compiled, report: &RunReport, step: &str) -> usize {
    let id = compiled.recipe.step_id(step).unwrap();
    report.steps[id].peak.max() as usize
}

fn assert_close(what: &str, measured: usize, truth: usize) {
    let error = (measured as f64 / truth as f64 - 1.0).abs();
    assert!(error <= 0.05, "{what}: measured {measured} vs truth {truth} ({:.1}% off)", error * 100.0);
}

#[test]
fn nested_parallel_work_is_charged_to_its_task() {
    let (compiled, report) = run("recipe: t\nsteps:\n  n:\n    plugin: probe\n    args: {mode: nested}\n");
    assert_close("nested", peak_of(&compiled, &report, "n"), 128 * MIB);
}

#[test]
fn a_free_on_another_thread_is_credited_to_the_maker() {
    let (compiled, report) = run("recipe: t\nsteps:\n  x:\n    plugin: probe\n    args: {mode: cross_thread_free}\n");
    assert_close("cross-thread free", peak_of(&compiled, &report, "x"), 64 * MIB);
}

#[test]
fn outputs_belong_to_their_maker_and_inputs_are_not_the_consumers() {
    let (compiled, report) = run(
        "recipe: t\ndims:\n  i: 2\nsteps:\n  make:\n    plugin: probe\n    over: [i]\n    args: {mode: output}\n  use:\n    plugin: probe\n    over: [i]\n    inputs: {big: make}\n    args: {mode: consume}\n",
    );
    assert_close("producer", peak_of(&compiled, &report, "make"), 100 * MIB);
    let make = compiled.recipe.step_id("make").unwrap();
    assert_close("output bytes", report.steps[make].output_bytes as usize / 2, 100 * MIB);
    // The consumer's peak is its own 10 MiB; the 100 MiB input it reads (and whose last reader
    // it is) is not charged to it.
    assert_close("consumer", peak_of(&compiled, &report, "use"), 10 * MIB);
}
