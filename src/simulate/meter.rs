//! The meter a simulation's ledger reads: a virtual task holds no bytes, only its reservation.

use crate::memory::{Meter, Standing, TaskSlot};

/// The meter of a simulation: no task ever holds more than its reservation (one predicted to
/// peak higher grows its reservation as it starts, as a task announcing its allocation does),
/// so the ledger counts reservations and never reads a task.
pub struct ReservationsOnly {
    /// See [`super::SimOptions::read_every_task`].
    pub read_every_task: bool,
    /// See [`super::predict::Predictor::standing_on`] (none on a cluster, whose jobs' services are the nodes').
    pub standing: Standing,
}

impl Meter for ReservationsOnly {
    fn task_live(&self, _slot: TaskSlot) -> u64 {
        0
    }
    fn process_live(&self) -> u64 {
        0
    }
    fn holds_reservations_only(&self) -> bool {
        !self.read_every_task
    }
    fn standing(&self) -> u64 {
        self.standing.bytes
    }
    fn standing_parts(&self) -> Standing {
        self.standing
    }
}
