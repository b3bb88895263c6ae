//! The standard plugins' kernels on a UK 2 km field (970×1042 f32, 3.9 MiB), each called as the
//! engine calls a task: through `Plugin::run` with a `TaskContext`, measured under a task tag
//! (so the counting allocator charges the task as in a run), on the global rayon pool.
//!
//! - `synth/970x1042_wet0.3`: one synthetic precipitation field;
//! - `threshold/{1,8}_thresholds`: exceedance probabilities of a synth field;
//! - `nbhood/{square_r4,circle_r7}/{1_slice,3_slices}`: neighbourhood means of a thresholded field
//!   (thresholds 0.5, or 0.5, 2 and 8 mm/h);
//! - `mean/8_members`: element-wise mean of 8 members' synth fields;
//! - `npy/{write,read}`: `write_npy` of a synth field to a temp dir (write + rename, no fsync, so
//!   mostly the page cache), and `read_npy` of that file.
//!
//! Inputs are made once with `synth` and `threshold`, outside the timed loop. Throughput is the
//! bytes of the task's inputs (of its output for `synth`, of the array written or read for
//! `npy`), so the figures read as GB/s. The host admits every announced allocation (no budget).
//! Before each group the kernels' peak bytes, as the engine would record them, are printed.
//!
//! Run with `cargo bench --bench kernels` (about 40 s; each group under 10 s), one group with
//! e.g. `cargo bench --bench kernels -- nbhood/`. Samples are flat (10 of equal iteration
//! counts): the kernels take milliseconds.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use runner::testing::measure::{self, TaskMemory};
use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{Args, DimValue, Host, Input, Inputs, Plugin, TaskContext, Value, task_tag};

const NY: usize = 970;
const NX: usize = 1042;
/// Bytes of one f32 field.
const FIELD_BYTES: u64 = (NY * NX * 4) as u64;
const MIB: f64 = (1 << 20) as f64;

/// The engine services a benchmarked task may ask for: a scratch directory, and a ledger that
/// admits every announced allocation at once.
struct BenchHost {
    scratch: tempfile::TempDir,
}

impl Host for BenchHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        Ok(self.scratch.path().to_path_buf())
    }

    fn will_allocate(&self, _bytes: u64) {}
}

/// One named input: a single value, or a gathered list in dim order.
struct NamedInput {
    name: &'static str,
    gathered: bool,
    values: Vec<Arc<Value>>,
}

fn single(name: &'static str, value: Arc<Value>) -> NamedInput {
    NamedInput { name, gathered: false, values: vec![value] }
}

/// A task ready to run again and again: its plugin, its checked arguments and its inputs.
struct Task {
    plugin: Arc<dyn Plugin>,
    args: Args,
    inputs: Vec<NamedInput>,
}

impl Task {
    /// A task of the standard plugin `name`, its arguments checked as the recipe compiler would.
    fn new(name: &str, args: Json, inputs: Vec<NamedInput>) -> Task {
        let plugin = runner_std_plugins::all()
            .into_iter()
            .find(|p| p.name() == name)
            .unwrap_or_else(|| panic!("no standard plugin `{name}`"));
        let args = Args::new(args.as_object().expect("arguments are a JSON object").clone());
        plugin.check(&args).unwrap_or_else(|e| panic!("{name}: {}", e.message));
        Task { plugin, args, inputs }
    }

    /// Bytes of all the task's input buffers.
    fn input_bytes(&self) -> u64 {
        self.inputs.iter().flat_map(|i| &i.values).map(|v| v.buffer_bytes()).sum()
    }

    /// Runs the task once as the engine's worker does: under a fresh measured tag, with the
    /// index of member 0. Returns its output and what it allocated.
    fn run(&self, host: &BenchHost) -> (Value, TaskMemory) {
        let tag = measure::begin_new_task().expect("a free measurement slot");
        let index = [("member", DimValue::Int(0))];
        let ctx = TaskContext::new(self.plugin.name(), "member=0", "bench", &index, tag, host);
        let list: Vec<Input<'_>> = self.inputs.iter().map(|i| Input::new(i.name, i.gathered, &i.values)).collect();
        let result = task_tag::with(tag, || self.plugin.run(&ctx, &self.args, &Inputs::new(&list)));
        let memory = measure::end_task(tag).expect("the task's tag is still measured");
        let value = result.unwrap_or_else(|e| panic!("{} failed: {e}", self.plugin.name()));
        (value, memory)
    }

    /// The task's output, from one run.
    fn output(&self, host: &BenchHost) -> Arc<Value> {
        Arc::new(self.run(host).0)
    }

    /// Runs the task once and prints its peak bytes, labelled `label`.
    fn print_peak(&self, label: &str, host: &BenchHost) {
        let (_, memory) = self.run(host);
        eprintln!("{label}: peak {:.1} MiB", memory.peak_bytes as f64 / MIB);
    }
}

fn synth_task(member: u32) -> Task {
    Task::new("synth", json!({"ny": NY, "nx": NX, "wet_fraction": 0.3, "seed": format!("bench/{member}")}), vec![])
}

/// Exceedance probabilities of `field` above `thresholds` (mm/h).
fn threshold_task(field: &Arc<Value>, thresholds: &[f64]) -> Task {
    Task::new("threshold", json!({"thresholds": thresholds}), vec![single("field", field.clone())])
}

/// Eight thresholds spanning drizzle to heavy rain.
const EIGHT_THRESHOLDS: [f64; 8] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];

/// Inputs every group starts from, made once.
struct Fields {
    host: BenchHost,
    /// Member 0's field.
    field: Arc<Value>,
    /// Exceedance of 0.5 mm/h: [1, ny, nx].
    one_slice: Arc<Value>,
    /// Exceedance of 0.5, 2 and 8 mm/h: [3, ny, nx].
    three_slices: Arc<Value>,
}

impl Fields {
    fn new() -> Fields {
        let host = BenchHost { scratch: tempfile::tempdir().expect("a temporary directory") };
        let field = synth_task(0).output(&host);
        let one_slice = threshold_task(&field, &[0.5]).output(&host);
        let three_slices = threshold_task(&field, &[0.5, 2.0, 8.0]).output(&host);
        Fields { host, field, one_slice, three_slices }
    }
}

fn synth(c: &mut Criterion, fields: &Fields) {
    let task = synth_task(0);
    task.print_peak("synth", &fields.host);
    let mut group = c.benchmark_group("synth");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Bytes(FIELD_BYTES));
    group.bench_function("970x1042_wet0.3", |b| b.iter(|| black_box(task.run(&fields.host))));
    group.finish();
}

fn threshold(c: &mut Criterion, fields: &Fields) {
    let mut group = c.benchmark_group("threshold");
    group.sampling_mode(SamplingMode::Flat);
    for thresholds in [&[0.5][..], &EIGHT_THRESHOLDS[..]] {
        let task = threshold_task(&fields.field, thresholds);
        let label = format!("{}_thresholds", thresholds.len());
        task.print_peak(&format!("threshold/{label}"), &fields.host);
        group.throughput(Throughput::Bytes(task.input_bytes()));
        group.bench_function(label, |b| b.iter(|| black_box(task.run(&fields.host))));
    }
    group.finish();
}

/// One group per window, so that each stays short.
fn nbhood(c: &mut Criterion, fields: &Fields) {
    for (shape, radius) in [("square", 4), ("circle", 7)] {
        let mut group = c.benchmark_group(format!("nbhood/{shape}_r{radius}"));
        group.sampling_mode(SamplingMode::Flat);
        for (slices, input) in [("1_slice", &fields.one_slice), ("3_slices", &fields.three_slices)] {
            let args = json!({"radius": radius, "shape": shape});
            let task = Task::new("nbhood", args, vec![single("field", input.clone())]);
            task.print_peak(&format!("nbhood/{shape}_r{radius}/{slices}"), &fields.host);
            group.throughput(Throughput::Bytes(task.input_bytes()));
            group.bench_function(slices, |b| b.iter(|| black_box(task.run(&fields.host))));
        }
        group.finish();
    }
}

fn mean(c: &mut Criterion, fields: &Fields) {
    let members = (0..8).map(|m| synth_task(m).output(&fields.host)).collect();
    let task = Task::new("mean", json!({}), vec![NamedInput { name: "members", gathered: true, values: members }]);
    task.print_peak("mean/8_members", &fields.host);
    let mut group = c.benchmark_group("mean");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Bytes(task.input_bytes()));
    group.bench_function("8_members", |b| b.iter(|| black_box(task.run(&fields.host))));
    group.finish();
}

fn npy(c: &mut Criterion, fields: &Fields) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("out").join("field.npy");
    let path = path.to_str().expect("a UTF-8 temporary path");
    let write = Task::new("write_npy", json!({"path": path}), vec![single("array", fields.field.clone())]);
    let read = Task::new("read_npy", json!({"path": path}), vec![]);
    write.print_peak("npy/write", &fields.host);
    read.print_peak("npy/read", &fields.host);
    let mut group = c.benchmark_group("npy");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Bytes(FIELD_BYTES));
    group.bench_function("write", |b| b.iter(|| black_box(write.run(&fields.host))));
    group.bench_function("read", |b| b.iter(|| black_box(read.run(&fields.host))));
    group.finish();
}

fn kernels(c: &mut Criterion) {
    let fields = Fields::new();
    synth(c, &fields);
    threshold(c, &fields);
    nbhood(c, &fields);
    mean(c, &fields);
    npy(c, &fields);
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotters backend takes longer than the measurements.
    config = Criterion::default()
        .without_plots()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = kernels
}
criterion_main!(benches);
