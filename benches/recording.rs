//! The feedback store's cost, writing and reading, in a temporary directory.
//!
//! - `record/100k_tasks`: a run of 100 000 task rows recorded as `runner run` records them: a
//!   worker hands each finished task's `TaskRecord` to `RunRecorder::record` (a channel send), the
//!   writer thread inserts them in batched transactions, and `RunRecorder::finish` waits for the
//!   last batch and completes the run row. Rows are those of a dataset builder (`cache` over
//!   `file`, a `write_chunk` over each block of 5 files). Each iteration writes a fresh database
//!   file (created outside the timing); throughput is in rows, so the time per element is the
//!   cost of one row. The writer thread's own write and CPU time per row are printed.
//! - `history/task_history_16x5000`: the estimator's read of one step before a run: the rows of
//!   its last 16 runs, at most 5000 per run (the limits `runner run` uses), turned into
//!   observations; the store holds 16 runs of 10 000 tasks.
//! - `history/plan_learn`: that read followed by fitting the step's model (`Plan::learn`).
//! - `runner_history/16_runs`: `runner history`'s per-step aggregates (with medians) over the
//!   same 16 runs.
//!
//! Run with `cargo bench --bench recording` (3 groups, under 10 s each; flat sampling, as an
//! iteration takes 0.05 to 0.3 s). The figures depend on the disk under the system temp dir
//! (WAL mode, `synchronous=NORMAL`: no fsync per transaction).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use runner::testing::cli::step_observations;
use runner::testing::estimate::{HISTORY_RUNS, HISTORY_TASKS_PER_RUN, Observation, Params};
use runner::testing::plan::Compiled;
use runner::testing::plan::EstimateSource;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::store::{
    RunFilter, RunOutcome, RunRecorder, RunStart, RunStatus, RunWritten, Store, TaskFigures, TaskRecord, TaskStatus,
};

/// Rows per recorded run in `record`.
const ROWS: u64 = 100_000;
/// Tasks per run in the history the readers read (as many runs as `runner run` reads).
const HISTORY_TASKS: u64 = 10_000;
const RECIPE: &str = "bench-recording";

/// The recipe the history belongs to: 10 000 `noop` tasks of one step, `cache`.
const HISTORY_RECIPE: &str =
    "recipe: bench-recording\ndims:\n  file: 10000\nsteps:\n  cache:\n    plugin: noop\n    over: [file]\n";

/// Step names, shared by every record of a step as the engine shares them.
struct Steps {
    cache: Arc<str>,
    write_chunk: Arc<str>,
}

impl Steps {
    fn new() -> Steps {
        Steps { cache: Arc::from("cache"), write_chunk: Arc::from("write_chunk") }
    }

    /// Row `i` of a run in finishing order: five `cache` tasks, then the `write_chunk` of their
    /// block. Sizes vary deterministically with `i`.
    fn record(&self, i: u64) -> TaskRecord {
        let (block, position) = (i / 6, i % 6);
        let (step, key, plugin) = if position == 5 {
            (&self.write_chunk, format!("chunk={block}"), "write_npy")
        } else {
            (&self.cache, format!("file={}", block * 5 + position), "read_npy")
        };
        let jitter = (runner_std_plugins::fnv1a64(&i.to_le_bytes()) % 4096) << 10;
        TaskRecord {
            figures: TaskFigures {
                input_bytes: 4 << 20,
                estimate_bytes: 10 << 20,
                estimate_source: EstimateSource::History,
                plugin_estimate_bytes: 8 << 20,
                peak_bytes: (6 << 20) + jitter,
                output_bytes: 4 << 20,
                wall: Duration::from_millis(i % 50),
                started: Duration::from_millis(i / 20),
                attempts: 1,
                ..TaskFigures::default()
            },
            task_index: Some(i),
            key: Some(key),
            worker: (i % 2) as u32,
            ..TaskRecord::new(step.clone(), plugin, TaskStatus::Ok)
        }
    }
}

fn start(store: &Store, cycle: &str) -> RunRecorder {
    store.start_run(&RunStart::new(RECIPE, cycle, 8 << 30, 2)).expect("the run row is inserted")
}

fn finish(recorder: RunRecorder) -> RunWritten {
    recorder
        .finish(RunOutcome { wall: std::time::Duration::from_millis(1), ..RunOutcome::new(RunStatus::Ok) })
        .expect("every row is written")
}

/// Records `rows` rows of `steps` into a new run and waits until they are committed.
fn record_run(store: &Store, steps: &Steps, cycle: &str, rows: u64) -> RunWritten {
    let recorder = start(store, cycle);
    for i in 0..rows {
        recorder.record(steps.record(i));
    }
    let written = finish(recorder);
    assert_eq!(written.rows, rows);
    written
}

fn open(dir: &Path) -> Store {
    Store::open(dir.join("runner.db")).expect("a new store opens")
}

fn record(c: &mut Criterion) {
    let steps = Steps::new();
    let mut group = c.benchmark_group("record");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(ROWS));
    let mut last: Option<RunWritten> = None;
    group.bench_function("100k_tasks", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let store = open(dir.path());
                (dir, store)
            },
            |(dir, store)| {
                last = Some(record_run(&store, &steps, "c0", ROWS));
                // Returned so that closing the store and deleting the file are not timed.
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    if let Some(written) = last {
        let per_row = |d: Duration| d.as_nanos() as f64 / written.rows as f64;
        eprintln!(
            "record/100k_tasks, last run: {} batches; writer thread per row: {:.0} ns writing, {:.0} ns CPU",
            written.batches,
            per_row(written.write_time),
            per_row(written.cpu_time)
        );
    }
}

/// The estimator's observations of `step`, read as a run reads them before `Plan::learn`.
fn observations(store: &Store, step: &str) -> Vec<Observation> {
    step_observations(store, RECIPE, step).expect("the history is readable")
}

fn history(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = open(dir.path());
    let steps = Steps::new();
    for run in 0..HISTORY_RUNS {
        // Rows 0, 1, 2, 3, 4 of every block of 6 are `cache` tasks: 6/5 of them give 10 000.
        record_run(&store, &steps, &format!("c{run}"), HISTORY_TASKS * 6 / 5);
    }
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "bench".into(), ..CompileOptions::default() };
    let mut compiled =
        Compiled::from_text(Path::new("bench.yaml"), HISTORY_RECIPE, &options, &registry).expect("a valid recipe");

    let read = (HISTORY_RUNS as u64) * HISTORY_TASKS_PER_RUN;
    assert_eq!(observations(&store, "cache").len() as u64, read);
    let mut group = c.benchmark_group("history");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(read));
    group.bench_function("task_history_16x5000", |b| b.iter(|| black_box(observations(&store, "cache"))));
    group.bench_function("plan_learn", |b| {
        b.iter(|| {
            compiled.plan.learn(&compiled.recipe, &|step| observations(&store, step), Params::default());
            black_box(&compiled.plan);
        })
    });
    group.finish();

    // A group of its own: it takes the longest.
    let mut group = c.benchmark_group("runner_history");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(HISTORY_RUNS as u64 * HISTORY_TASKS * 6 / 5));
    group.bench_function("16_runs", |b| {
        b.iter(|| {
            black_box(
                store
                    .step_history(Some(RECIPE), None, HISTORY_RUNS, RunFilter::default())
                    .expect("the history is readable"),
            )
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotters backend takes longer than the measurements.
    config = Criterion::default()
        .without_plots()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = record, history
}
criterion_main!(benches);
