//! The progress bar on a terminal: tasks done/total, an ETA once a step's task times are known,
//! the tasks running, memory (the live heap against the budget, with the buffers kept for
//! consumers), reserved, spilled and failures. It reads the scheduler's atomic counters and the
//! allocator's live total from its own thread, ten times a second, so the scheduler pays
//! nothing. Off when stderr is not a terminal.
//!
//! The ETA is the work left — each step's tasks not yet run at that step's mean task time so far
//! (the run's mean for a step none of whose tasks has run yet) — over how many tasks ran at once
//! recently. So it is right as soon as one task of a slow step has finished, however many quick
//! tasks came before; with no per-step figures (a `Progress` not sized for the recipe) it falls
//! back to the rate of tasks finished recently.
//!
//! While the bar is drawn, log lines go through [`suspended`] so that a warning is printed on
//! its own line instead of being glued to (or wiped by) the bar.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use runner_plugin::size::format_size;

use crate::measure;
use crate::scheduler::{Progress, StepProgress};

/// How often the bar is redrawn.
const REFRESH: Duration = Duration::from_millis(100);
/// The ETA divides the work left by the tasks running at once over this much recent time (or,
/// without per-step figures, follows the rate of tasks finished over it), so that it adapts when
/// the budget lets fewer or more tasks run.
const RATE_WINDOW: Duration = Duration::from_secs(20);

/// The bar being drawn, for [`suspended`].
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Runs `write` with the bar (if one is drawn) cleared, and draws the bar again after it.
pub fn suspended<R>(write: impl FnOnce() -> R) -> R {
    let bar = ACTIVE.lock().ok().and_then(|active| active.clone());
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// Starts drawing `progress` on stderr if it is a terminal; nothing otherwise.
pub fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    progress: &'scope Progress,
) -> Option<ScopedJoinHandle<'scope, ()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(scope.spawn(move || draw(progress)))
}

/// What the bar shows, read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub total: u64,
    /// Tasks done: succeeded, failed or skipped.
    pub finished: u64,
    pub failed: u64,
    pub running: u64,
    /// What the ledger counts: running tasks' reservations (or live bytes) plus resident buffers.
    pub reserved: u64,
    pub budget: u64,
    /// Every live heap block of the process; the resident buffers are among them.
    pub live_heap: u64,
    /// Buffers kept in memory for their consumers.
    pub resident: u64,
    pub spilled: u64,
}

impl Snapshot {
    fn read(progress: &Progress) -> Snapshot {
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        Snapshot {
            total: load(&progress.total),
            finished: load(&progress.finished),
            failed: load(&progress.failed),
            running: load(&progress.running),
            reserved: load(&progress.reserved),
            budget: load(&progress.budget),
            live_heap: measure::live_bytes(),
            resident: load(&progress.resident),
            spilled: load(&progress.spilled),
        }
    }

    /// The text after `done/total tasks`:
    /// `ETA 1m12s · 3 running · mem 412 MiB / 2.00 GiB (buffers 120 MiB) · reserved 1.20 GiB · spilled 40.0 MiB · 2 failed`.
    /// The memory gauge is the live heap, which is what the live guard holds under the budget;
    /// the buffers are part of it, shown because they are what spills.
    pub fn message(&self, eta: Option<Duration>) -> String {
        let mut parts = Vec::with_capacity(6);
        if let Some(eta) = eta.filter(|_| self.finished < self.total) {
            parts.push(format!("ETA {}", format_duration(eta)));
        }
        parts.push(format!("{} running", self.running));
        parts.push(format!(
            "mem {} / {} (buffers {})",
            format_size(self.live_heap),
            format_size(self.budget),
            format_size(self.resident)
        ));
        parts.push(format!("reserved {}", format_size(self.reserved)));
        if self.spilled > 0 {
            parts.push(format!("spilled {}", format_size(self.spilled)));
        }
        if self.failed > 0 {
            parts.push(format!("{} failed", self.failed));
        }
        parts.join(" · ")
    }
}

/// `45s`, `3m12s`, `2h05m`: precise enough for an estimate, short enough for a bar; rounded up,
/// so that time is left until the work is done.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs_f64().ceil() as u64;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// One step's figures at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepTimes {
    pub tasks: u64,
    /// Tasks that ran (succeeded or failed).
    pub ran: u64,
    /// Their summed wall time.
    pub wall: Duration,
}

impl StepTimes {
    fn read(step: &StepProgress) -> StepTimes {
        StepTimes {
            tasks: step.tasks,
            ran: step.ran.load(Ordering::Relaxed),
            wall: Duration::from_nanos(step.wall_nanos.load(Ordering::Relaxed)),
        }
    }
}

/// Task-seconds of work left: each step's tasks not yet run at its mean task time, the run's mean
/// task time for a step none of whose tasks has run; `None` until some task has run. Tasks that
/// will never run (skipped) still count in their step's `tasks`, so when fewer tasks are `left`
/// in the run than the steps have unrun, the work is scaled down to match.
pub fn work_left(steps: &[StepTimes], left: u64) -> Option<f64> {
    let ran: u64 = steps.iter().map(|s| s.ran).sum();
    if ran == 0 {
        return None;
    }
    let run_mean = steps.iter().map(|s| s.wall.as_secs_f64()).sum::<f64>() / ran as f64;
    let (mut work, mut unrun) = (0.0, 0u64);
    for step in steps {
        let mean = if step.ran > 0 { step.wall.as_secs_f64() / step.ran as f64 } else { run_mean };
        let not_yet = step.tasks.saturating_sub(step.ran);
        work += not_yet as f64 * mean;
        unrun += not_yet;
    }
    Some(if unrun > left && unrun > 0 { work * left as f64 / unrun as f64 } else { work })
}

/// Estimates the time left from each step's task times and the tasks running at once.
#[derive(Debug)]
pub struct Eta {
    /// `(when, tasks finished by then, tasks running then)`, oldest first, spanning at most
    /// [`RATE_WINDOW`].
    samples: VecDeque<(Instant, u64, u64)>,
    started: Instant,
}

impl Eta {
    pub fn new(started: Instant) -> Eta {
        Eta { samples: VecDeque::new(), started }
    }

    /// Records the figures of `now` and returns the time the `total - finished` tasks left
    /// should take: the work left in `steps` ([`work_left`]) over the mean of the tasks running
    /// at once in the window (at least one). Without per-step figures (`steps` empty), the rate
    /// of tasks finished in the window, or over the whole run when none finished within it.
    /// `None` until some task has finished.
    pub fn update(
        &mut self,
        now: Instant,
        finished: u64,
        total: u64,
        running: u64,
        steps: &[StepTimes],
    ) -> Option<Duration> {
        self.samples.push_back((now, finished, running));
        while self.samples.front().is_some_and(|&(at, _, _)| now.duration_since(at) > RATE_WINDOW) {
            self.samples.pop_front();
        }
        if finished == 0 {
            return None;
        }
        let left = total.saturating_sub(finished);
        if !steps.is_empty() {
            let at_once = self.samples.iter().map(|s| s.2).sum::<u64>() as f64 / self.samples.len() as f64;
            return work_left(steps, left).map(|work| Duration::from_secs_f64(work / at_once.max(1.0)));
        }
        let &(oldest, finished_then, _) = self.samples.front()?;
        let window = now.duration_since(oldest).as_secs_f64();
        let recent = (finished - finished_then) as f64;
        let per_second = if recent > 0.0 && window > 0.0 {
            recent / window
        } else {
            let elapsed = now.duration_since(self.started).as_secs_f64();
            if elapsed <= 0.0 {
                return None;
            }
            finished as f64 / elapsed
        };
        Some(Duration::from_secs_f64(left as f64 / per_second))
    }
}

fn draw(progress: &Progress) {
    let started = Instant::now();
    // Nothing to draw until the scheduler has counted the tasks.
    while progress.total.load(Ordering::Relaxed) == 0 && !progress.done.load(Ordering::Relaxed) {
        std::thread::sleep(REFRESH / 10);
    }
    // Hidden until its first figures are in, so no line shows a bar without them.
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} tasks · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    if let Ok(mut active) = ACTIVE.lock() {
        *active = Some(bar.clone());
    }
    let mut eta = Eta::new(started);
    let mut steps = vec![StepTimes::default(); progress.steps.len()];
    loop {
        let done = progress.done.load(Ordering::Relaxed);
        let snapshot = Snapshot::read(progress);
        for (times, step) in steps.iter_mut().zip(&progress.steps) {
            *times = StepTimes::read(step);
        }
        bar.set_length(snapshot.total);
        bar.set_position(snapshot.finished);
        let left = eta.update(Instant::now(), snapshot.finished, snapshot.total, snapshot.running, &steps);
        bar.set_message(snapshot.message(left));
        if bar.is_hidden() {
            bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        }
        if done {
            break;
        }
        // Unparked when the scheduler is done, so the run's end does not wait out the refresh.
        std::thread::park_timeout(REFRESH);
    }
    if let Ok(mut active) = ACTIVE.lock() {
        *active = None;
    }
    bar.finish_and_clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn snapshot() -> Snapshot {
        Snapshot {
            total: 100,
            finished: 40,
            failed: 0,
            running: 3,
            reserved: 1200 * MIB,
            budget: 2048 * MIB,
            live_heap: 412 * MIB,
            resident: 120 * MIB,
            spilled: 0,
        }
    }

    #[test]
    fn the_message_shows_running_memory_and_eta() {
        let s = snapshot();
        assert_eq!(
            s.message(Some(Duration::from_secs(72))),
            "ETA 1m12s · 3 running · mem 412 MiB / 2.00 GiB (buffers 120 MiB) · reserved 1.17 GiB"
        );
        let s = Snapshot { spilled: 40 * MIB, failed: 2, ..s };
        assert_eq!(
            s.message(None),
            "3 running · mem 412 MiB / 2.00 GiB (buffers 120 MiB) · reserved 1.17 GiB · spilled 40.0 MiB · 2 failed"
        );
        // Nothing left: no ETA.
        let s = Snapshot { finished: 100, ..s };
        assert!(!s.message(Some(Duration::from_secs(3))).contains("ETA"));
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_millis(400)), "1s");
        assert_eq!(format_duration(Duration::from_millis(58_200)), "59s");
        assert_eq!(format_duration(Duration::from_secs(60)), "1m00s");
        assert_eq!(format_duration(Duration::from_secs(3599)), "59m59s");
        assert_eq!(format_duration(Duration::from_secs(7500)), "2h05m");
    }

    #[test]
    fn without_step_figures_the_eta_follows_the_recent_rate() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut eta = Eta::new(t0);
        assert_eq!(eta.update(t0, 0, 100, 2, &[]), None, "nothing finished yet");
        assert_eq!(eta.update(at(5), 0, 100, 2, &[]), None);
        // 10 tasks in the 10 s since the first sample: 1 task/s, 90 to go.
        assert_eq!(eta.update(at(10), 10, 100, 2, &[]), Some(Duration::from_secs(90)));
        // Later the run speeds up: 60 tasks in the last 20 s (the window), 3 task/s, 30 to go.
        eta.update(at(30), 10, 100, 2, &[]);
        assert_eq!(eta.update(at(50), 70, 100, 2, &[]), Some(Duration::from_secs(10)));
        // Nothing finished for a whole window: the run's average.
        eta.update(at(80), 70, 100, 2, &[]);
        let slow = eta.update(at(100), 70, 100, 2, &[]).unwrap();
        // 70 tasks in the 100 s since the start: 30 more take 30 / 0.7 s.
        assert!((slow.as_secs_f64() - 30.0 / 0.7).abs() < 1e-6, "{slow:?}");
    }

    fn step(tasks: u64, ran: u64, wall_secs: u64) -> StepTimes {
        StepTimes { tasks, ran, wall: Duration::from_secs(wall_secs) }
    }

    #[test]
    fn work_left_is_each_steps_unrun_tasks_at_its_mean_time() {
        assert_eq!(work_left(&[step(10, 0, 0), step(4, 0, 0)], 14), None, "no task time known yet");
        // 990 quick tasks done in 10 s, 1 of 10 slow ones (30 s): 9 × 30 s + 10 × 10/990 s.
        let steps = [step(1000, 990, 10), step(10, 1, 30)];
        assert!((work_left(&steps, 19).unwrap() - (9.0 * 30.0 + 10.0 * 10.0 / 990.0)).abs() < 1e-9);
        // A step none of whose tasks ran yet goes at the run's mean: 40 s over 4 tasks.
        let steps = [step(4, 4, 40), step(3, 0, 0)];
        assert_eq!(work_left(&steps, 3), Some(30.0));
        // 2 of the 3 unrun tasks were skipped (1 left in the run): the work scales down.
        assert_eq!(work_left(&steps, 1), Some(10.0));
    }

    #[test]
    fn the_eta_is_right_once_one_task_of_a_slow_step_has_finished() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut eta = Eta::new(t0);
        assert_eq!(eta.update(t0, 0, 1010, 0, &[step(1000, 0, 0), step(10, 0, 0)]), None);
        // 1000 quick tasks (5 s of work) in 5 s, 2 at a time: the rate alone would promise the
        // last 10 tasks in 0.05 s. The first slow task took 20 s; 9 more at 20 s, 2 at once: 90 s.
        let steps = [step(1000, 1000, 10), step(10, 1, 20)];
        eta.update(at(1), 500, 1010, 2, &[step(1000, 500, 5), step(10, 0, 0)]);
        assert_eq!(eta.update(at(25), 1001, 1010, 2, &steps), Some(Duration::from_secs(90)));
        // The budget lets only one run at a time from then on: the mean over the window falls to
        // 1.5 (the samples of 25 s and 26 s; older ones have left the window), and later to 1.
        let once = eta.update(at(26), 1001, 1010, 1, &steps).unwrap();
        assert!((once.as_secs_f64() - 180.0 / 1.5).abs() < 1e-9, "{once:?}");
        eta.update(at(50), 1001, 1010, 1, &steps);
        assert_eq!(eta.update(at(60), 1001, 1010, 1, &steps), Some(Duration::from_secs(180)));
    }
}
