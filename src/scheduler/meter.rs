//! The engine's [`Meter`]: what a running task holds — its heap blocks as the counting allocator
//! counts them, plus the resident bytes of the external commands it runs, as their sampler
//! publishes them ([`measure::external`]).
//!
//! The ledger names reservations by [`TaskSlot`]s that the scheduler hands out when it claims a
//! task; the measurement tag exists only once the task starts executing (a task claimed in a
//! batch has none yet). This table links the two: the worker attaches the tag when the task
//! starts and detaches it when it ends, each one relaxed store, so the ledger can read the live
//! bytes of exactly the tasks that run.
//!
//! Service processes at their baseline are the run's standing memory. The services a run is
//! expected to start (from its recipe's history) count from the start, each until a service
//! stands in its place: an interpreter is started by the first task that needs it, after the
//! ledger admitted that task.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use runner_plugin::task_tag::NO_TASK;

use crate::measure;
use crate::memory::{Meter, Standing, TaskSlot};

/// Slot → measurement tag of the task running there (`NO_TASK` when none).
pub struct RunMeter {
    tags: Box<[AtomicU32]>,
    /// The service processes the run is expected to start, counted as standing until that
    /// many have stood ([`Standing::awaiting`]).
    expected: Standing,
    /// The most services that stood at once this run.
    seen: AtomicU64,
}

impl RunMeter {
    /// A meter for reservation slots `0..slots`, counting `expected` services' baseline from
    /// the start ([`Standing::default`]: none).
    pub fn new(slots: usize, expected: Standing) -> RunMeter {
        RunMeter { tags: (0..slots).map(|_| AtomicU32::new(NO_TASK)).collect(), expected, seen: AtomicU64::new(0) }
    }

    /// The task in `slot` is now measured under `tag`.
    pub fn attach(&self, slot: TaskSlot, tag: u32) {
        self.tags[slot.0 as usize].store(tag, Ordering::Relaxed);
    }

    /// The task in `slot` is no longer measured.
    pub fn detach(&self, slot: TaskSlot) {
        self.tags[slot.0 as usize].store(NO_TASK, Ordering::Relaxed);
    }
}

impl Meter for RunMeter {
    fn task_live(&self, slot: TaskSlot) -> u64 {
        match self.tags.get(slot.0 as usize).map(|t| t.load(Ordering::Relaxed)) {
            Some(NO_TASK) | None => 0,
            Some(tag) => measure::task_live(tag) + measure::external::of(tag),
        }
    }

    fn process_live(&self) -> u64 {
        measure::live_bytes() + measure::external::total() + measure::external::standing()
    }

    fn standing(&self) -> u64 {
        if self.expected.services == 0 {
            return measure::external::standing();
        }
        self.standing_parts().bytes
    }

    fn standing_parts(&self) -> Standing {
        let now = measure::external::standing_parts();
        if self.expected.services == 0 {
            return now;
        }
        let seen = self.seen.fetch_max(now.services, Ordering::Relaxed).max(now.services);
        now.awaiting(self.expected, seen)
    }
}
