//! A run's memory over time, for `runner report`: a thread next to the progress bar reads the
//! scheduler's atomic counters ([`Progress`]), the process's live heap and RSS about ten times
//! a second, and hands the figures to the run's store writer, which commits them with the task
//! rows. A sample is written only when it differs from the last one written — another count of
//! running tasks, or a figure that moved by at least [`RESOLUTION`] of the budget — and at least
//! once a second, so a busy minute costs a few KB rather than 600 rows; a rise in the spill
//! count is a spill event.
//!
//! Times are ms since the sampler started, which is when the scheduler starts its clock too
//! (within a few ms), so samples and task start times share one axis.

use std::sync::atomic::Ordering;
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use crate::measure;
use crate::scheduler::Progress;
use crate::store::{EventKind, RunEvent, RunRecorder, Sample};

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// A sample is written at least this often, even when nothing changed.
const AT_LEAST_EVERY: Duration = Duration::from_secs(1);
/// The share of the budget a figure must move by to be worth a sample of its own (a chart of
/// memory against the budget shows nothing finer).
pub const RESOLUTION: f64 = 1.0 / 200.0;

/// Starts sampling `progress` into `recorder` until the scheduler says it is done.
pub fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    progress: &'scope Progress,
    recorder: &'scope RunRecorder,
) -> std::io::Result<ScopedJoinHandle<'scope, ()>> {
    std::thread::Builder::new().name("runner-sampler".into()).spawn_scoped(scope, move || sample(progress, recorder))
}

fn sample(progress: &Progress, recorder: &RunRecorder) {
    let started = Instant::now();
    let mut written: Option<(Sample, Instant)> = None;
    let (mut spills, mut spilled) = (0, 0);
    loop {
        let done = progress.done.load(Ordering::Acquire);
        let now = Instant::now();
        let sample = Sample {
            t_ms: now.duration_since(started).as_millis() as u64,
            reserved_bytes: progress.reserved.load(Ordering::Relaxed),
            live_bytes: measure::live_bytes(),
            rss_bytes: rss_bytes(),
            resident_bytes: progress.resident.load(Ordering::Relaxed),
            spilled_bytes: progress.spilled.load(Ordering::Relaxed),
            running_tasks: progress.running.load(Ordering::Relaxed),
            external_bytes: external_bytes(),
        };
        let spill_count = progress.spills.load(Ordering::Relaxed);
        if spill_count > spills {
            recorder.event(RunEvent {
                t_ms: sample.t_ms,
                kind: EventKind::Spill,
                bytes: Some(sample.spilled_bytes.saturating_sub(spilled)),
                detail: Some(format!("{} buffers", spill_count - spills)),
            });
            (spills, spilled) = (spill_count, sample.spilled_bytes);
        }
        let resolution = (progress.budget.load(Ordering::Relaxed) as f64 * RESOLUTION) as u64;
        let due = match &written {
            None => true,
            Some((last, at)) => {
                done || !looks_the_same(last, &sample, resolution) || now.duration_since(*at) >= AT_LEAST_EVERY
            }
        };
        if due {
            recorder.sample(sample);
            written = Some((sample, now));
        }
        if done {
            return;
        }
        // Unparked when the scheduler is done, so the run's end does not wait out the interval.
        std::thread::park_timeout(INTERVAL);
    }
}

/// Whether `b` would draw where `a` does: the same running tasks, every byte figure within
/// `resolution` of `a`'s.
fn looks_the_same(a: &Sample, b: &Sample, resolution: u64) -> bool {
    let bytes =
        |s: &Sample| [s.reserved_bytes, s.live_bytes, s.rss_bytes, s.resident_bytes, s.spilled_bytes, s.external_bytes];
    a.running_tasks == b.running_tasks && bytes(a).iter().zip(bytes(b)).all(|(x, y)| x.abs_diff(y) <= resolution)
}

/// Resident bytes of this process, from `/proc/self/statm` (its second field, in pages): one
/// small read, cheaper than `/proc/self/status`. 0 where it cannot be read.
pub fn rss_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Resident bytes of the external commands' process trees the run's tasks are running now.
fn external_bytes() -> u64 {
    crate::measure::external::total()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_that_would_draw_the_same_are_skipped() {
        let a = Sample { t_ms: 0, reserved_bytes: 1000, live_bytes: 500, running_tasks: 2, ..Sample::default() };
        assert!(looks_the_same(&a, &Sample { t_ms: 100, live_bytes: 505, ..a }, 10));
        assert!(!looks_the_same(&a, &Sample { live_bytes: 511, ..a }, 10));
        assert!(!looks_the_same(&a, &Sample { running_tasks: 3, ..a }, 10));
        assert!(!looks_the_same(&a, &Sample { spilled_bytes: 11, ..a }, 10));
    }

    #[test]
    fn rss_is_read_from_proc() {
        let rss = rss_bytes();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        // Both are read a moment apart; the process is not growing fast here.
        let status_bytes = kib * 1024;
        assert!(rss > 0 && rss.abs_diff(status_bytes) < 16 << 20, "statm {rss}, status {status_bytes}");
    }
}
