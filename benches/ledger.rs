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
//! The tasks are measured (`measure::begin_new_task`) and attached to their reservation slots in
//! the engine's meter, as in a run, so the ledger reads their real counters; they allocate
//! nothing, so their live bytes are 0 and only reservations count.
//!
//! Run with `cargo bench --bench ledger` (4 groups of 3, about 8 s each).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use runner::testing::measure;
use runner::testing::memory::{Admission, Ledger, Standing, TaskSlot};
use runner::testing::scheduler::RunMeter;

const GIB: u64 = 1 << 30;
/// Far above this process's own heap, which the ledger's live guard compares with the budget.
const BUDGET: u64 = 1024 * GIB;
/// What each of the other running tasks has reserved.
const RESERVED: u64 = GIB;
const RUNNING: [usize; 3] = [1, 8, 64];

/// The slot of the task under test; the others take the slots after it.
const SLOT: TaskSlot = TaskSlot(0);

/// `running` measured tasks holding [`RESERVED`] each, and a measured tag for the task under
/// test, each in its reservation slot of `meter`. The tags stay measured until [`Bench::end`].
struct Bench {
    tags: Vec<u32>,
}

impl Bench {
    fn new(meter: &RunMeter, running: usize) -> Bench {
        let tags: Vec<u32> = (0..=running).map(|_| measure::begin_new_task().expect("a free slot")).collect();
        for (slot, &tag) in tags.iter().enumerate() {
            meter.attach(TaskSlot(slot as u32), tag);
        }
        Bench { tags }
    }

    /// A ledger in which every task but the one under test holds its reservation.
    fn ledger<'m>(&self, meter: &'m RunMeter) -> Ledger<'m> {
        let mut ledger = Ledger::new(BUDGET, meter);
        for slot in 1..self.tags.len() {
            ledger.start(TaskSlot(slot as u32), RESERVED);
        }
        ledger.add_resident(4 * GIB);
        ledger
    }

    /// Stops measuring every tag.
    fn end(self) {
        for tag in self.tags {
            measure::end_task(tag).expect("a measured tag");
        }
    }
}

/// Benchmarks `operation` as group `ledger/<name>`, once per count of other running tasks, on
/// a ledger that `prepare` has readied for the task under test (in slot [`SLOT`]).
fn bench_operation<R>(
    c: &mut Criterion,
    name: &str,
    prepare: impl Fn(&mut Ledger),
    mut operation: impl FnMut(&mut Ledger) -> R,
) {
    let mut group = c.benchmark_group(format!("ledger/{name}"));
    let meter = RunMeter::new(1 + RUNNING[RUNNING.len() - 1], Standing::default());
    for running in RUNNING {
        let bench = Bench::new(&meter, running);
        let mut ledger = bench.ledger(&meter);
        prepare(&mut ledger);
        group.bench_function(BenchmarkId::from_parameter(running), |b| b.iter(|| black_box(operation(&mut ledger))));
        bench.end();
    }
    group.finish();
}

fn admit_start_finish(c: &mut Criterion) {
    let prepare = |ledger: &mut Ledger| assert_eq!(ledger.admission(GIB), Admission::Fits);
    bench_operation(c, "admit_start_finish", prepare, |ledger| {
        let admission = ledger.admission(black_box(GIB));
        ledger.start(SLOT, GIB);
        ledger.finish(black_box(SLOT));
        admission
    });
}

fn grow(c: &mut Criterion) {
    let grow_once = |ledger: &mut Ledger| {
        ledger.start(SLOT, GIB);
        let grown = ledger.try_grow(SLOT, black_box(2 * GIB));
        ledger.stop_growing(SLOT);
        ledger.finish(SLOT);
        grown
    };
    let prepare = |ledger: &mut Ledger| assert!(grow_once(ledger), "a growth that fits is granted");
    bench_operation(c, "grow", prepare, grow_once);
}

fn grow_refused(c: &mut Criterion) {
    // The task asks for the whole budget, which the others' reservations and the resident
    // buffers leave no room for: it must wait.
    let prepare = |ledger: &mut Ledger| {
        ledger.start(SLOT, GIB);
        assert!(!ledger.try_grow(SLOT, BUDGET), "a growth past the budget waits");
        ledger.stop_growing(SLOT);
    };
    bench_operation(c, "grow_refused", prepare, |ledger| {
        let grown = ledger.try_grow(SLOT, black_box(BUDGET));
        ledger.stop_growing(SLOT);
        grown
    });
}

fn used(c: &mut Criterion) {
    bench_operation(c, "used", |_| {}, |ledger| ledger.used());
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
