//! The scheduler's promises seen from a recording sink: when each task started and ended, what
//! it measured, what the run reported. Spills are written outside the scheduler's lock, a task
//! that runs alone overlaps nothing, many workers never run out of measurement, and a panic
//! outside any plugin fails its tasks instead of hanging the run.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::scheduler::{self, Outcome, Progress, RunOptions, RunReport, TaskReport, TaskSink};

const MIB: u64 = 1 << 20;

/// One recorded task.
#[derive(Debug, Clone)]
struct Row {
    step: String,
    outcome: Outcome,
    attempts: u32,
    started: Duration,
    wall: Duration,
    peak: u64,
}

impl Row {
    fn ended(&self) -> Duration {
        self.started + self.wall
    }
}

/// Keeps every task report; panics on the `panic_at`-th one when set (a bug outside plugins).
#[derive(Default)]
struct Recorder {
    rows: Mutex<Vec<Row>>,
    seen: AtomicU64,
    panic_at: Option<u64>,
}

impl TaskSink for Recorder {
    fn record(&self, task: &TaskReport<'_>) {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.panic_at == Some(n) {
            panic!("the sink broke on its report {n}");
        }
        self.rows.lock().unwrap().push(Row {
            step: task.step.to_string(),
            attempts: task.figures.attempts,
            outcome: task.outcome,
            started: task.figures.started,
            wall: task.figures.wall,
            peak: task.figures.peak_bytes,
        });
    }
}

fn compile(yaml: &str) -> Compiled {
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "test".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("test.yaml"), yaml, &options, &registry).unwrap_or_else(|e| panic!("{e}"))
}

fn run(yaml: &str, workers: usize, budget: u64, sink: &Recorder) -> RunReport {
    let compiled = compile(yaml);
    let dir = tempfile::tempdir().unwrap();
    let options = RunOptions {
        spill_dir: Some(dir.path().join("spill")),
        ..RunOptions::new(workers, budget, dir.path().join("work"))
    };
    scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), Some(sink))
}

#[test]
fn other_workers_finish_quick_tasks_while_a_large_spill_is_written() {
    // Two 300 MiB buffers sit idle (their consumer waits for a slow gate) when `hungry`, which
    // starts only after both were made, needs 600 MiB of a 1 GiB budget: they must be spilled,
    // by one worker, while another runs the gate and a third works through the quick tasks
    // (which also start once both buffers were made).
    let yaml = "recipe: spill-lock\ndims:\n  i: 2\n  q: 1000\nsteps:\n  big:\n    plugin: alloc\n    over: [i]\n    \
                args: {bytes: 0, output_bytes: 300MiB}\n  gate:\n    plugin: alloc\n    args: {bytes: 0, hold_ms: 5000}\n  \
                use:\n    plugin: noop\n    over: [i]\n    inputs: {b: big, g: gate}\n  mark:\n    plugin: noop\n    \
                over: [i]\n    inputs: {b: big}\n  later:\n    plugin: alloc\n    inputs: {marks: mark}\n    \
                args: {bytes: 0, hold_ms: 200}\n  hungry:\n    plugin: alloc\n    inputs: {after: later}\n    \
                args: {bytes: 600MiB}\n  quick:\n    plugin: alloc\n    over: [q]\n    inputs: {marks: mark}\n    \
                args: {bytes: 4KiB, hold_ms: 2}\n";
    let sink = Recorder::default();
    let report = run(yaml, 3, 1 << 30, &sink);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.spilled_bytes >= 300 * MIB, "spilled {}", report.spilled_bytes);
    let rows = sink.rows.lock().unwrap();
    let during_a_spill =
        |row: &Row| report.spills.iter().any(|s| row.started >= s.started && row.ended() <= s.started + s.wall);
    let quick_during: Vec<&Row> = rows.iter().filter(|r| r.step == "quick" && during_a_spill(r)).collect();
    assert!(
        !quick_during.is_empty(),
        "no quick task ran while a spill was written: spills {:?}; quick tasks from {:?} to {:?}",
        report.spills,
        rows.iter().filter(|r| r.step == "quick").map(|r| r.started).min(),
        rows.iter().filter(|r| r.step == "quick").map(|r| r.ended()).max(),
    );
}

#[test]
fn a_task_that_runs_alone_overlaps_no_other() {
    let yaml = "recipe: alone\ndims:\n  i: 6\nsteps:\n  small:\n    plugin: alloc\n    over: [i]\n    \
                args: {bytes: 100MiB, hold_ms: 40}\n  huge:\n    plugin: alloc\n    args: {bytes: 1200MiB, hold_ms: 100}\n";
    let sink = Recorder::default();
    let report = run(yaml, 2, 1 << 30, &sink);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let rows = sink.rows.lock().unwrap();
    let huge = rows.iter().find(|r| r.step == "huge").unwrap();
    for other in rows.iter().filter(|r| r.step != "huge") {
        let overlaps = other.started < huge.ended() && huge.started < other.ended();
        assert!(!overlaps, "{other:?} overlapped the oversized {huge:?}");
    }
    assert_eq!(report.total(|s| s.oversized), 1);
}

#[test]
fn many_workers_never_run_out_of_measurement() {
    // 256 workers claim batches of up to 64 quick tasks: more claimed tasks than measurement
    // slots, but tags are issued when a task starts, so every task that allocated measured it.
    let yaml =
        "recipe: many\ndims:\n  i: 200000\nsteps:\n  a:\n    plugin: alloc\n    over: [i]\n    args: {bytes: 2KiB}\n";
    let sink = Recorder::default();
    let report = run(yaml, 256, 8 << 30, &sink);
    assert!(report.failures.is_empty(), "{:?}", &report.failures[..report.failures.len().min(3)]);
    let rows = sink.rows.lock().unwrap();
    assert_eq!(rows.len(), 200_000);
    assert!(rows.iter().all(|r| r.outcome == Outcome::Ok));
    let unmeasured = rows.iter().filter(|r| r.peak < 2048).count();
    assert_eq!(unmeasured, 0, "{unmeasured} tasks recorded a peak below what they allocated");
}

#[test]
fn a_panic_outside_any_plugin_fails_its_tasks_and_ends_the_run() {
    let yaml = "recipe: broken-sink\ndims:\n  i: 40\nsteps:\n  a:\n    plugin: alloc\n    over: [i]\n    \
                args: {bytes: 1KiB, hold_ms: 1}\n  b:\n    plugin: noop\n    over: [i]\n    inputs: {x: a}\n";
    let (done, finished) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let report = run(yaml, 2, 1 << 30, &Recorder { panic_at: Some(5), ..Recorder::default() });
        let _ = done.send(());
        report
    });
    // A hang is this test's failure, not a wait for CI's timeout.
    finished.recv_timeout(Duration::from_secs(60)).expect("the run hung after a panic outside a plugin");
    let report = runner.join().unwrap();
    let error = report.internal_error.as_deref().unwrap_or_default();
    assert!(error.contains("the sink broke on its report 5"), "{error:?}");
    assert!(!report.failures.is_empty());
    assert!(report.failures.iter().all(|f| f.error.contains("the sink broke")), "{:?}", report.failures);
    let ran = report.total(|s| s.ok + s.failed + s.skipped);
    assert_eq!(ran + report.not_run, 80, "every task is accounted for");
}

#[test]
fn a_task_needing_more_than_the_machine_fails_without_running() {
    let yaml = "recipe: huge\ndims:\n  i: 3\nsteps:\n  small:\n    plugin: alloc\n    over: [i]\n    args: {bytes: 1MiB}\n  \
                huge:\n    plugin: alloc\n    args: {bytes: 300MiB}\n  after:\n    plugin: noop\n    inputs: {h: huge}\n";
    let compiled = compile(yaml);
    let dir = tempfile::tempdir().unwrap();
    // As if this machine could give the process only 200 MiB.
    let options = RunOptions { memory_limit: Some(200 * MIB), ..RunOptions::new(2, 1 << 30, dir.path().join("work")) };
    let sink = Recorder::default();
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), Some(&sink));
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    let failure = &report.failures[0];
    assert_eq!(failure.step, "huge");
    assert!(
        failure.error.contains("not run: it needs 300 MiB") && failure.error.contains("200 MiB"),
        "{}",
        failure.error
    );
    let rows = sink.rows.lock().unwrap();
    let huge = rows.iter().find(|r| r.step == "huge").unwrap();
    assert_eq!(huge.peak, 0, "it did not allocate: it never ran");
    assert_eq!(report.total(|s| s.ok), 3);
    assert_eq!(report.total(|s| s.skipped), 1, "its dependant is skipped");
}

#[test]
fn enforce_memory_turns_a_runaway_into_an_oom_and_a_bigger_retry() {
    if let Err(why) = runner::testing::command::support() {
        panic!("this test needs a memory cgroup the runner can make ({why}); run it as root on Linux");
    }
    // Reserved 100 MiB (the hint), limited to 125 MiB by --enforce-memory, the command takes
    // 180 MiB: killed as out of memory, then run again with twice the reservation, and it fits.
    let yaml = "recipe: runaway\nsteps:\n  grow:\n    plugin: exec\n    memory: 100MiB\n    \
                args: {command: [python3, -c, \"x = b'x' * (180 << 20); print(len(x))\"]}\n";
    let dir = tempfile::tempdir().unwrap();
    let run = |retries: u32| {
        let mut compiled = compile(yaml);
        compiled.recipe.steps[0].retries = retries;
        let options = RunOptions {
            enforce_memory: true,
            log_dir: dir.path().join("runner-logs"),
            ..RunOptions::new(1, 1 << 30, dir.path().join("work"))
        };
        let sink = Recorder::default();
        let report = scheduler::run(
            &compiled.recipe,
            &compiled.graph,
            &compiled.plan,
            &options,
            &Progress::default(),
            Some(&sink),
        );
        let rows = sink.rows.lock().unwrap().clone();
        (report, rows)
    };
    let (once, _) = run(0);
    assert_eq!(once.failures.len(), 1);
    assert!(once.failures[0].error.contains("out of memory"), "{}", once.failures[0].error);
    let (retried, rows) = run(1);
    assert!(retried.failures.is_empty(), "{:?}", retried.failures);
    assert_eq!(rows[0].attempts, 2);
    assert!(rows[0].peak >= 180 * MIB, "peak {}", rows[0].peak);
}
