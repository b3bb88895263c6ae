//! A run's memory over time, for `runner report`: a thread next to the progress bar reads the
//! scheduler's atomic counters ([`Progress`]), the process's live heap and RSS about ten times
//! a second, and hands the figures to the run's store writer, which commits them with the task
//! rows. A sample that repeats the last one written is skipped (but one a second is always
//! written), and a rise in the spill count is a spill event.
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
        let due = match &written {
            None => true,
            Some((last, at)) => done || !same_figures(last, &sample) || now.duration_since(*at) >= AT_LEAST_EVERY,
        };
        if due {
            recorder.sample(sample);
            written = Some((sample, now));
        }
        if done {
            return;
        }
        std::thread::sleep(INTERVAL);
    }
}

fn same_figures(a: &Sample, b: &Sample) -> bool {
    Sample { t_ms: 0, ..*a } == Sample { t_ms: 0, ..*b }
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

/// Resident bytes of the external commands' processes the run is running now. The measurement
/// of external commands (`crate::measure::external::total()`) is being added beside this; until
/// it is here no task runs an external process whose memory is tracked, so this is 0.
fn external_bytes() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

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
