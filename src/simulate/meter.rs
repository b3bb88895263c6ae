//! The meter a simulation's ledger reads: a virtual task holds no bytes, only its reservation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::memory::{Meter, Standing, TaskSlot};
use crate::scheduler::State;

/// The meter of a simulation: no task ever holds more than its reservation (one predicted to
/// peak higher grows its reservation as it starts, as a task announcing its allocation does, or
/// as it runs where its memory is sampled from a process of its own),
/// so the ledger counts reservations and never reads a task.
pub struct ReservationsOnly {
    /// See [`super::SimOptions::read_every_task`].
    pub read_every_task: bool,
    /// Bytes, shared bytes and services ([`Standing`]) of [`super::predict::Predictor::standing_on`]
    /// (none on a cluster, whose jobs' services are the nodes'); fewer near the end, as
    /// [`ReservationsOnly::retire`] says. Atomic only because a meter is `Sync`.
    standing: [AtomicU64; 3],
    /// Whether services no task left can use are stopped near the run's end (not when the run
    /// keeps them for the next, [`super::SimOptions::keep_services`]).
    retires: bool,
}

impl ReservationsOnly {
    pub fn new(read_every_task: bool, standing: Standing, retires: bool) -> ReservationsOnly {
        let standing = [standing.bytes, standing.shared, standing.services].map(AtomicU64::new);
        ReservationsOnly { read_every_task, standing, retires }
    }

    /// What the services stand at now.
    pub fn standing_now(&self) -> Standing {
        let [bytes, shared, services] = self.standing.each_ref().map(|part| part.load(Relaxed));
        Standing { bytes, shared, services }
    }

    /// After tasks finished, as a run does ([`State::note_reach`]): near the end, the services
    /// beyond the most tasks that can still run at once are stopped, and their own baselines
    /// leave the ledger (the pages forked ones share stay while one does). A run's last tasks —
    /// often a gather, its largest — have that memory again: IMPROVER's suite at 185 MiB
    /// reserved 152 MB at its gather where it had reserved 188 MB, and a simulation holding
    /// every interpreter to the end went past the budget there.
    pub fn retire(&self, state: &mut State<'_>, workers: usize) {
        if !self.retires {
            return;
        }
        state.note_reach(workers as u64);
        if let Some(reach) = state.take_reach() {
            let standing = self.standing_now();
            let fewer = standing.with_services(standing.services.min(reach.max(1)));
            for (part, value) in self.standing.iter().zip([fewer.bytes, fewer.shared, fewer.services]) {
                part.store(value, Relaxed);
            }
        }
    }
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
        self.standing[0].load(Relaxed)
    }
    fn standing_parts(&self) -> Standing {
        self.standing_now()
    }
}
