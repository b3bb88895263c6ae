//! What a task's use of a service measured: the tree's resident anonymous + shared memory
//! sampled every [`SAMPLE_INTERVAL`] above the baseline, the root's high-water mark, and the
//! kills for a timeout, a cancellation or the memory limit.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use runner_plugin::service::Rebase;

use super::super::cgroup::{self, CgroupVersion};
use super::super::log::HandedLog;
use super::super::tree::{self, Tree};
use super::super::{SAMPLE_INTERVAL, TaskCommand};
use super::{Kill, Service};
use crate::measure::external;

pub(super) struct Sampler {
    pid: i32,
    cgroup: Option<(std::path::PathBuf, CgroupVersion)>,
    baseline: AtomicU64,
    /// What the run's standing memory counts for the service: its baseline, from each rebase.
    standing: AtomicU64,
    /// `VmRSS` and `RssFile` of the root process when the baseline was taken.
    root_rss: AtomicU64,
    root_file: AtomicU64,
    /// The engine's shared memory and the file pages the root had resident at its peak beyond
    /// its baseline, as the task reported.
    mapped_shared: AtomicU64,
    mapped_file: AtomicU64,
    sampled_peak: AtomicU64,
    stop: AtomicBool,
    pub(super) killed: Mutex<Option<Kill>>,
    started: Instant,
    tree: Mutex<Tree>,
}

pub(super) struct RebaseHandle<'a> {
    pub(super) sampler: &'a Sampler,
}

impl Rebase for RebaseHandle<'_> {
    fn rebase(&mut self) {
        self.sampler.rebase();
    }

    fn mapped(&mut self, shared: u64, file: u64) {
        self.sampler.mapped_shared.fetch_max(shared, Ordering::Relaxed);
        self.sampler.mapped_file.fetch_max(file, Ordering::Relaxed);
    }
}

impl Sampler {
    pub(super) fn new(service: &Service) -> Sampler {
        Sampler {
            pid: service.pid,
            cgroup: service.cgroup.as_ref().map(|c| (c.dir.clone(), c.version())),
            baseline: AtomicU64::new(0),
            standing: AtomicU64::new(service.standing),
            root_rss: AtomicU64::new(0),
            root_file: AtomicU64::new(0),
            mapped_shared: AtomicU64::new(0),
            mapped_file: AtomicU64::new(0),
            sampled_peak: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            killed: Mutex::new(None),
            started: Instant::now(),
            tree: Mutex::new(Tree::new(service.pid)),
        }
    }

    /// The tree's resident anonymous + shared bytes now.
    pub(super) fn sample(&self) -> u64 {
        match &self.cgroup {
            Some((dir, version)) => resident_of(self.pid, Some((dir.as_path(), *version))),
            // One tree for the task's samples: its buffers are reused from one walk to the next.
            None => self.tree.lock().unwrap_or_else(|p| p.into_inner()).resident(),
        }
    }

    /// What the tree holds now is the baseline, and what the run's standing memory counts for
    /// the service (the figure taken as its last task's reply came may still have held that
    /// task's garbage); the root's high-water mark starts again here.
    pub(super) fn rebase(&self) {
        reset_high_water_mark(self.pid);
        if let Some(status) = ProcStatus::of(self.pid) {
            self.root_rss.store(status.rss, Ordering::Relaxed);
            self.root_file.store(status.rss_file, Ordering::Relaxed);
        }
        let now = self.sample();
        self.baseline.store(now, Ordering::Relaxed);
        self.sampled_peak.store(now, Ordering::Relaxed);
        external::set_service_standing(self.standing.swap(now, Ordering::Relaxed), now);
    }

    /// What the run's standing memory counts for the service now ([`Sampler::rebase`]).
    pub(super) fn counted_standing(&self) -> u64 {
        self.standing.load(Ordering::Relaxed)
    }

    /// The task's peak above the baseline: the larger of the tree's sampled peak and the root's
    /// high-water mark, neither counting the engine's shared memory the task mapped (its input
    /// values, counted as the engine's) nor, in the mark, file-backed pages (spilled inputs it
    /// mapped, files it read). A cgroup's samples never include either: shared pages are charged
    /// to the runner's cgroup, which wrote them, and file pages are page cache. `VmHWM` and a
    /// `/proc` walk count them as the process's; the task reports what it had mapped at its
    /// call's end (inputs still mapped), and the file pages still mapped at the task's end are
    /// known here.
    pub(super) fn peak_above_baseline(&self) -> u64 {
        let shared = self.mapped_shared.load(Ordering::Relaxed);
        let sampled = self.sampled_peak.load(Ordering::Relaxed).max(self.sample());
        let mut from_samples = sampled.saturating_sub(self.baseline.load(Ordering::Relaxed));
        if self.cgroup.is_none() {
            from_samples = from_samples.saturating_sub(shared);
        }
        let from_hwm = ProcStatus::of(self.pid).map_or(0, |s| {
            let file_growth = s.rss_file.saturating_sub(self.root_file.load(Ordering::Relaxed));
            let file = file_growth.max(self.mapped_file.load(Ordering::Relaxed));
            s.hwm.saturating_sub(self.root_rss.load(Ordering::Relaxed)).saturating_sub(file + shared)
        });
        from_samples.max(from_hwm)
    }

    /// Until told to stop ([`Sampler::finish`]): publishes the task's bytes above the baseline, keeps the peak, keeps
    /// the task's output in `log` within its limit ([`HandedLog::bound`]), and kills the service
    /// at the task's timeout, on cancellation or past its memory limit.
    pub(super) fn watch(&self, task: &TaskCommand<'_>, log: &HandedLog) {
        let watched = crate::measure::preempt::Watched::start(task.tag, task.reserved);
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.sample();
            self.sampled_peak.fetch_max(now, Ordering::Relaxed);
            let above = now.saturating_sub(self.baseline.load(Ordering::Relaxed));
            external::set(task.tag, above);
            super::super::tree_peak::note();
            log.bound();
            let preempted = watched.as_ref().is_some_and(|w| w.should_yield(above));
            let reason = if preempted {
                Some(Kill::Preempted { reserved: task.reserved, held: above })
            } else {
                self.reason_to_kill(task, above)
            };
            if let Some(reason) = reason {
                *self.killed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                if let Some((dir, version)) = &self.cgroup {
                    cgroup::kill_cgroup(dir, *version);
                }
                tree::signal_group(self.pid, libc::SIGKILL);
                return;
            }
            // Woken early by [`Sampler::finish`]: the task's end must not wait out an interval
            // (10 ms a task, more than a small call itself takes).
            std::thread::park_timeout(SAMPLE_INTERVAL);
        }
    }

    /// Stops [`Sampler::watch`] running on `watcher` and waits for it.
    pub(super) fn finish(&self, watcher: std::thread::ScopedJoinHandle<'_, ()>) {
        self.stop.store(true, Ordering::Relaxed);
        watcher.thread().unpark();
        let _ = watcher.join();
    }

    fn reason_to_kill(&self, task: &TaskCommand<'_>, above: u64) -> Option<Kill> {
        if let Some(timeout) = task.timeout.filter(|&t| self.started.elapsed() > t) {
            return Some(Kill::TimedOut(timeout));
        }
        if (task.cancelled)() {
            // The hosts cancel a task when its timeout (counted from the attempt's start, a
            // little before this service was lent) has passed; an interruption kills services
            // through the registry instead.
            return Some(task.timeout.map_or(Kill::Cancelled, Kill::TimedOut));
        }
        task.limit.filter(|&limit| above > limit).map(Kill::OverLimit)
    }
}

/// The resident anonymous + shared bytes of `pid`'s tree: from its cgroup when it has one.
pub(super) fn resident_of(pid: i32, cgroup: Option<(&std::path::Path, CgroupVersion)>) -> u64 {
    match cgroup {
        Some((dir, version)) => std::fs::read_to_string(dir.join("memory.stat"))
            .map(|stat| cgroup::resident_of_stat(&stat, version))
            .unwrap_or(0),
        None => Tree::new(pid).resident(),
    }
}

/// Figures of one process from `/proc/PID/status`, in bytes.
struct ProcStatus {
    rss: u64,
    rss_file: u64,
    hwm: u64,
}

impl ProcStatus {
    fn of(pid: i32) -> Option<ProcStatus> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let bytes = |name: &str| tree::status_bytes(&text, name);
        Some(ProcStatus { rss: bytes("VmRSS")?, rss_file: bytes("RssFile").unwrap_or(0), hwm: bytes("VmHWM")? })
    }
}

/// `VmHWM` starts again from the current resident size (writing 5 to `clear_refs`).
fn reset_high_water_mark(pid: i32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}
