//! Spill throughput: writing a buffer to a spill file (write, sync, map, drop from the page
//! cache) and reading a spilled buffer back through its view.
//!
//! - `write/<size>`: `SpillDir::spill_bytes` of a resident buffer, file deleted after each;
//! - `read_released/<size>`: one full pass over the f32 view of a spilled buffer whose pages
//!   were released just before (`release_pages`), so the bytes come from the file;
//! - `read_mapped/<size>`: the same pass with the pages already mapped (memory speed), for
//!   comparison.
//!
//! The spill folder is under `RUNNER_SPILL_BENCH_DIR` if set, else the system temp dir; the
//! figures are the disk's (and its cache's) more than this code's.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use runner::testing::memory::spill::{MappedBuffer, SpillDir};
use runner_plugin::ExternalBytes;

const MIB: usize = 1 << 20;
const SIZES: [usize; 2] = [64 * MIB, 256 * MIB];

fn spill_dir() -> SpillDir {
    let parent = std::env::var_os("RUNNER_SPILL_BENCH_DIR").map(PathBuf::from);
    let dir = SpillDir::new(parent.as_deref());
    eprintln!("spilling under {}", dir.parent().display());
    dir
}

/// Sums a spilled buffer as f32s in 16 lanes (vectorised: the pass is bound by the bytes).
fn sum_f32(buffer: &MappedBuffer) -> f32 {
    let bytes = buffer.bytes();
    // SAFETY: the mapping is page-aligned and its length a multiple of 4 (whole f32s); every bit
    // pattern is a valid f32.
    let floats = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) };
    let mut lanes = [0f32; 16];
    for chunk in floats.chunks_exact(16) {
        for (lane, x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum()
}

fn spill(c: &mut Criterion) {
    let dir = spill_dir();
    let mut group = c.benchmark_group("spill");
    group.sampling_mode(SamplingMode::Flat);
    for size in SIZES {
        let data: Vec<f32> = (0..size / 4).map(|i| (i % 1000) as f32).collect();
        // SAFETY: viewing initialised f32s as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), size) };
        group.throughput(Throughput::Bytes(size as u64));
        let label = format!("{}MiB", size / MIB);

        group.bench_function(BenchmarkId::new("write", &label), |b| {
            b.iter(|| drop(black_box(dir.spill_bytes(bytes).expect("spill"))));
        });

        let mapped = dir.spill_bytes(bytes).expect("spill");
        group.bench_function(BenchmarkId::new("read_released", &label), |b| {
            b.iter(|| {
                mapped.release_pages();
                black_box(sum_f32(&mapped))
            });
        });
        group.bench_function(BenchmarkId::new("read_mapped", &label), |b| b.iter(|| black_box(sum_f32(&mapped))));
    }
    group.finish();
    eprintln!("spilled {} MiB in {} files", dir.spilled_bytes() / MIB as u64, dir.spill_count());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sample_size(10);
    targets = spill
}
criterion_main!(benches);
