//! The budget held for commands by default: when the run's memory (the runner's heap, the
//! running tasks' commands and services, the services' baselines) goes over the budget while
//! some task's commands hold more than the task reserved, the newest such task is told to yield
//! ([`Watched::should_yield`]): its command is killed, and the task runs again with a reservation
//! grown past what it was measured at (`FailureKind::Preempted`, not counted against `retries`).
//!
//! The run is judged by where it will be at the next sample, not where it is: the yielding
//! task's growth since its last sample is added to what the run holds. A command filling
//! memory at NumPy's pace grows by tens of MiB an interval, and its memory is freed only some
//! milliseconds after the kill, so a run that waited to be over its budget would end well past it.
//!
//! Only tasks that went over their reservation are candidates — a task within what it reserved
//! is exactly what admission promised room for — and a task alone is never preempted: running
//! it again alone would change nothing. Each watcher (one per running command or service) checks
//! for itself on every sample; the state is one word per slot, written by its owner, read by the
//! others only while the run is over its budget.

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use runner_plugin::task_tag::NO_TASK;

use super::{SLOTS, external};

/// The run's budget; 0 when nothing may be preempted.
static BUDGET: AtomicU64 = AtomicU64::new(0);
/// Start order of watched tasks: the newest has the largest.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);
/// Tasks whose commands or services are watched now.
static WATCHED: AtomicUsize = AtomicUsize::new(0);
/// Per slot: the sequence number of the task there while its processes hold more than it
/// reserved, else 0.
static OVER: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Tasks may be preempted to keep the run within `budget` (0: never) from now on.
pub fn set_budget(budget: u64) {
    BUDGET.store(budget, Relaxed);
}

/// A task whose command or service is being watched, for as long as it is.
#[derive(Debug)]
pub struct Watched {
    slot: usize,
    seq: u64,
    reserved: u64,
    /// What its processes held at the last sample.
    last_above: Cell<u64>,
}

impl Watched {
    /// Starts watching task `tag`, which reserved `reserved` bytes; `None` when it may not be
    /// preempted (no budget to hold, no task, or its attempt is not preemptible: `reserved` 0).
    pub fn start(tag: u32, reserved: u64) -> Option<Watched> {
        if tag == NO_TASK || reserved == 0 || BUDGET.load(Relaxed) == 0 {
            return None;
        }
        WATCHED.fetch_add(1, Relaxed);
        Some(Watched {
            slot: tag as usize & (SLOTS - 1),
            seq: NEXT_SEQ.fetch_add(1, Relaxed),
            reserved,
            last_above: Cell::new(0),
        })
    }

    /// Whether the task must give way now that its processes hold `above` bytes.
    pub fn should_yield(&self, above: u64) -> bool {
        let growth = above.saturating_sub(self.last_above.replace(above));
        let over = above > self.reserved;
        OVER[self.slot].store(if over { self.seq } else { 0 }, Relaxed);
        if !over || WATCHED.load(Relaxed) < 2 {
            return false;
        }
        let live = super::live_bytes() + external::total() + external::standing();
        if live + growth <= BUDGET.load(Relaxed) {
            return false;
        }
        OVER.iter().map(|s| s.load(Relaxed)).max() == Some(self.seq)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = OVER[self.slot].compare_exchange(self.seq, 0, Relaxed, Relaxed);
        WATCHED.fetch_sub(1, Relaxed);
    }
}
