//! The admission ledger's operations, each done under the scheduler's lock once or more per
//! task, beside `running` other running tasks (1, 8 or 64; a run has at most one per worker).
//!
//! - `ledger/admit_start_finish/<running>`: a task's life in the ledger: `admission` of its estimate
//!   (it fits), `start` with that reservation, `finish`;
//! - `ledger/grow/<running>`: what `TaskContext::will_allocate` costs the engine: a started task's
//!   `try_grow` past its reservation (it fits), `stop_growing`, then `finish`;
//! - `ledger/grow_refused/<running>`: a running task's `try_grow` that does not fit, so that it
//!   must wait, and `stop_growing`;
//! - `ledger/used/<running>`: `used()`, which reads every running task's live bytes.
//!
//! The tasks are measured (`measure::begin_new_task`), as in a run, so the ledger reads their
//! real counters; they allocate nothing, so their live bytes are 0 and only reservations count.
//!
//! Run with `cargo bench --bench ledger` (4 groups of 3, about 8 s each).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use runner::measure;
use runner::memory::{Admission, Ledger};

const GIB: u64 = 1 << 30;
/// Far above this process's own heap, which the ledger's live guard compares with the budget.
const BUDGET: u64 = 1024 * GIB;
/// What each of the other running tasks has reserved.
const RESERVED: u64 = GIB;
const RUNNING: [usize; 3] = [1, 8, 64];

/// A ledger with `running` measured tasks holding [`RESERVED`] each, and a measured tag for the
/// task under test. The tags stay measured until [`Bench::end`].
struct Bench {
    ledger: Ledger,
    others: Vec<u32>,
    tag: u32,
}

impl Bench {
    fn new(running: usize) -> Bench {
        let mut ledger = Ledger::new(BUDGET);
        let others: Vec<u32> = (0..running).map(|_| measure::begin_new_task().expect("a free slot")).collect();
        for &tag in &others {
            ledger.start(tag, RESERVED);
        }
        ledger.add_resident(4 * GIB);
        let tag = measure::begin_new_task().expect("a free slot");
        Bench { ledger, others, tag }
    }

    /// Stops measuring every tag.
    fn end(self) {
        for tag in self.others.into_iter().chain([self.tag]) {
            measure::end_task(tag).expect("a measured tag");
        }
    }
}

/// Benchmarks `operation` as group `ledger/<name>`, once per count of other running tasks, on
/// a ledger that `prepare` has readied for the task under test (its tag is the second argument).
fn bench_operation<R>(
    c: &mut Criterion,
    name: &str,
    prepare: impl Fn(&mut Ledger, u32),
    mut operation: impl FnMut(&mut Ledger, u32) -> R,
) {
    let mut group = c.benchmark_group(format!("ledger/{name}"));
    for running in RUNNING {
        let mut bench = Bench::new(running);
        let tag = bench.tag;
        prepare(&mut bench.ledger, tag);
        group.bench_function(BenchmarkId::from_parameter(running), |b| {
            b.iter(|| black_box(operation(&mut bench.ledger, tag)))
        });
        bench.end();
    }
    group.finish();
}

fn admit_start_finish(c: &mut Criterion) {
    let prepare = |ledger: &mut Ledger, _| assert_eq!(ledger.admission(GIB), Admission::Fits);
    bench_operation(c, "admit_start_finish", prepare, |ledger, tag| {
        let admission = ledger.admission(black_box(GIB));
        ledger.start(tag, GIB);
        ledger.finish(black_box(tag));
        admission
    });
}

fn grow(c: &mut Criterion) {
    let grow_once = |ledger: &mut Ledger, tag| {
        ledger.start(tag, GIB);
        let grown = ledger.try_grow(tag, black_box(2 * GIB));
        ledger.stop_growing(tag);
        ledger.finish(tag);
        grown
    };
    let prepare = |ledger: &mut Ledger, tag| assert!(grow_once(ledger, tag), "a growth that fits is granted");
    bench_operation(c, "grow", prepare, grow_once);
}

fn grow_refused(c: &mut Criterion) {
    // The task asks for the whole budget, which the others' reservations and the resident
    // buffers leave no room for: it must wait.
    let prepare = |ledger: &mut Ledger, tag| {
        ledger.start(tag, GIB);
        assert!(!ledger.try_grow(tag, BUDGET), "a growth past the budget waits");
        ledger.stop_growing(tag);
    };
    bench_operation(c, "grow_refused", prepare, |ledger, tag| {
        let grown = ledger.try_grow(tag, black_box(BUDGET));
        ledger.stop_growing(tag);
        grown
    });
}

fn used(c: &mut Criterion) {
    bench_operation(c, "used", |_, _| {}, |ledger, _| ledger.used());
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotters backend takes longer than the measurements.
    config = Criterion::default()
        .without_plots()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = admit_start_finish, grow, grow_refused, used
}
criterion_main!(benches);
