//! What the counting allocator adds to jemalloc, per alloc+free pair.
//!
//! This binary links the `runner` lib, so its global allocator is `CountingAlloc`: the
//! `counting_*` cases go through `std::alloc` (as all Rust code does), the `jemalloc` case calls
//! jemalloc directly. `counting_tagged` runs under a measured task, the engine's usual case;
//! `counting_untagged` outside any. `jemalloc_plus_header` asks jemalloc directly for the 16
//! bytes more that the counting allocator asks for, which separates the cost of jemalloc's
//! (possibly larger) size class from the counting itself. `counting_tagged_2_threads` has two
//! threads of one task allocating at once, sharing its counters (wall time per pair per thread:
//! meaningful only on an otherwise idle machine with two free cores).
//!
//! Single-thread cases are timed in thread CPU time, not wall time, so that other processes
//! taking the CPU (builds on a small shared machine) do not count as allocator time.

use std::alloc::{GlobalAlloc, Layout, handle_alloc_error};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use runner::testing::measure;
use runner_plugin::task_tag;
use tikv_jemallocator::Jemalloc;

const SIZES: [usize; 2] = [64, 4096];

/// One allocation and its free through the global allocator.
fn pair_global(layout: Layout) {
    // SAFETY: a non-zero-size layout; the block is freed once, with that layout.
    unsafe {
        let block = std::alloc::alloc(layout);
        if block.is_null() {
            handle_alloc_error(layout);
        }
        std::alloc::dealloc(black_box(block), layout);
    }
}

/// One allocation and its free through jemalloc alone.
fn pair_jemalloc(layout: Layout) {
    // SAFETY: as in `pair_global`.
    unsafe {
        let block = Jemalloc.alloc(layout);
        if block.is_null() {
            handle_alloc_error(layout);
        }
        Jemalloc.dealloc(black_box(block), layout);
    }
}

/// Wall time for `iters` pairs on each of two threads of task `tag` running at once.
fn two_threads(tag: u32, layout: Layout, iters: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                task_tag::with(tag, || {
                    for _ in 0..iters {
                        pair_global(layout);
                    }
                })
            });
        }
    });
    start.elapsed()
}

fn alloc_free(c: &mut Criterion) {
    let tag = measure::begin_new_task().expect("a free counter slot");
    for size in SIZES {
        let layout = Layout::from_size_align(size, 8).expect("valid layout");
        let mut group = c.benchmark_group(format!("alloc_free_{size}B"));
        group.bench_function("jemalloc", |b| b.iter(|| pair_jemalloc(layout)));
        let with_header = Layout::from_size_align(size + 16, 8).expect("valid layout");
        group.bench_function("jemalloc_plus_header", |b| b.iter(|| pair_jemalloc(with_header)));
        group.bench_function("counting_untagged", |b| b.iter(|| pair_global(layout)));
        group.bench_function("counting_tagged", |b| task_tag::with(tag, || b.iter(|| pair_global(layout))));
        group.bench_function("counting_tagged_2_threads", |b| b.iter_custom(|iters| two_threads(tag, layout, iters)));
        group.finish();
    }
    measure::end_task(tag).expect("task still running");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = alloc_free
}
criterion_main!(benches);
