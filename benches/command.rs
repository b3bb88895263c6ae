//! What running a task's command through `runner::testing::command` costs beyond the command itself:
//! spawning it (fork + exec, into a cgroup of its own), watching it (a sample every 10 ms,
//! stderr relayed, its exit noticed through a pidfd) and tearing down (leftovers looked for,
//! cgroup removed, log header and footer written).
//!
//! - `plain_spawn_wait`: `std::process::Command` running `/bin/true` and waiting: the floor;
//! - `overhead/cgroup`, `overhead/no_cgroup`: `command::run` of the same program minus the
//!   floor, measured in pairs (each `command::run` right after a plain spawn), so that a
//!   machine whose load drifts during the run does not bias the difference. `cgroup` is skipped,
//!   saying why, where no memory cgroup can be made.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use runner::testing::command::{self, Isolation, Request};

fn plain() -> Duration {
    let started = Instant::now();
    std::process::Command::new("/bin/true").status().expect("running /bin/true");
    started.elapsed()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("bench.log");
    let argv = [OsString::from("/bin/true")];
    c.bench_function("plain_spawn_wait", |b| b.iter(plain));
    let mut ways = vec![("no_cgroup", Isolation::NoCgroup)];
    match command::support() {
        Ok(_) => ways.insert(0, ("cgroup", Isolation::Auto)),
        Err(why) => eprintln!("overhead/cgroup skipped: no memory cgroup can be made here ({why})"),
    }
    let mut group = c.benchmark_group("overhead");
    for (name, isolation) in ways {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let (mut ours, mut floor) = (Duration::ZERO, Duration::ZERO);
                for _ in 0..iters {
                    floor += plain();
                    let mut request = Request::new(&argv, &log);
                    request.isolation = isolation;
                    let started = Instant::now();
                    let finished = command::run(&request).expect("running /bin/true");
                    ours += started.elapsed();
                    assert!(finished.success());
                    // The log is appended to on every run: keep it small.
                    let _ = std::fs::remove_file(&log);
                }
                ours.saturating_sub(floor)
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
