//! What a progress display (or a sampler) reads while a run goes on, without the scheduler's
//! lock: atomics the workers publish.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Counters a progress display can read at any time without taking the scheduler's lock.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    /// What the ledger counts: running tasks' reservations (or live bytes) plus resident buffers.
    pub reserved: AtomicU64,
    /// Bytes of buffers kept in memory for their consumers.
    pub resident: AtomicU64,
    /// Tasks running now.
    pub running: AtomicU64,
    pub budget: AtomicU64,
    pub spilled: AtomicU64,
    /// Spills so far (a sampler sees a spill event when it grows).
    pub spills: AtomicU64,
    pub done: AtomicBool,
    /// Per step (by `StepId`), when whoever made the `Progress` sized it for the recipe (the
    /// progress bar's ETA uses them); empty otherwise, and then nothing is published per step.
    pub steps: Box<[StepProgress]>,
}

/// One step's tasks and, as they finish, how many ran and their summed wall time.
#[derive(Debug, Default)]
pub struct StepProgress {
    /// The step's tasks in this run.
    pub tasks: u64,
    /// Tasks of the step that ran (succeeded or failed; not the skipped ones).
    pub ran: AtomicU64,
    pub wall_nanos: AtomicU64,
}

impl StepProgress {
    /// Publishes `tasks` of the step that ran for `wall` together.
    pub fn ran(&self, tasks: u64, wall: Duration) {
        self.wall_nanos.fetch_add(u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.ran.fetch_add(tasks, Ordering::Relaxed);
    }
}
