//! The peak of the whole process tree of a run — the runner and every command it runs, at the
//! same moment — for the closing line and the summary's `peak_bytes` (the runner's own
//! `peak_rss_bytes` leaves the commands out). Noted as commands are sampled, at most once per
//! [`EVERY`] for the whole process: the runner's resident bytes now plus every command tree's
//! resident bytes now and what each task of a warm interpreter holds above its baseline
//! ([`crate::measure::external::total`]), plus the interpreters' baselines
//! ([`crate::measure::external::standing`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often at most the sum is taken.
const EVERY: Duration = Duration::from_millis(10);

static PEAK: AtomicU64 = AtomicU64::new(0);
/// When the sum was last taken, in microseconds after [`epoch`] (0: never).
static LAST: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Takes the sum now, unless another thread did within [`EVERY`].
pub(super) fn note() {
    // 0 is "never": the first call always takes the sum.
    let now = (epoch().elapsed().as_micros() as u64).max(1);
    let last = LAST.load(Ordering::Relaxed);
    if (last != 0 && now.saturating_sub(last) < EVERY.as_micros() as u64)
        || LAST.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        return;
    }
    let total = runner_resident() + crate::measure::external::total() + crate::measure::external::standing();
    PEAK.fetch_max(total, Ordering::Relaxed);
}

/// The highest sum noted since the last [`reset_tree_peak`] (0 if no command ran).
pub fn tree_peak() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// Starts over (each run of a replay reports its own).
pub fn reset_tree_peak() {
    PEAK.store(0, Ordering::Relaxed);
}

/// The runner's resident bytes now (`/proc/self/statm`).
fn runner_resident() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf takes an integer and returns one.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_includes_the_runner() {
        LAST.store(0, Ordering::Relaxed);
        note();
        assert!(tree_peak() >= runner_resident() / 2, "{}", tree_peak());
    }
}
