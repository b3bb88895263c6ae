//! When a simulated task's reservation grows to its predicted peak, where that is above what it
//! reserved: as it starts, as a task announcing its allocation does ([`Loop::grow_to_peak`], at
//! its claim), or half way through its own time where its step's peaks were sampled from a
//! process of its own — a command's, a warm interpreter's — whose memory a run's ledger sees
//! only as the process grows ([`Loop::grow`], at [`Event::Grew`]).

use super::{Event, Loop};
use crate::scheduler::{Picked, State};
use crate::simulate::predict::TaskPrediction;

impl Loop<'_> {
    /// An [`Event::Grew`] for each of `worker`'s claimed tasks that grows as it runs.
    pub(super) fn schedule_growth(&mut self, worker: u32) {
        for index in 0..self.workers[worker as usize].growing.len() {
            let (at, _) = self.workers[worker as usize].growing[index];
            self.schedule(at, worker, Event::Grew);
        }
    }

    /// `worker`'s tasks that have reached their peak by now, grown to it in the ledger. A task
    /// sampled from its own process holds little as it starts (its interpreter still imports, its
    /// command reads): the tasks admitted beside it meanwhile were admitted beside its
    /// reservation alone, as in a run. Half way through its own time stands for when its memory
    /// is there (the samples do not say how each task's grew).
    pub(super) fn grow(&mut self, state: &mut State<'_>, worker: u32) {
        let held = &mut self.workers[worker as usize];
        let now = self.now;
        held.growing.retain(|&(at, position)| {
            if at > now {
                return true;
            }
            let (picked, prediction) = &held.claimed[position];
            Self::grow_to_peak(state, picked, prediction);
            false
        });
    }

    /// `picked`'s reservation grown to its predicted peak, where that is more.
    pub(super) fn grow_to_peak(state: &mut State<'_>, picked: &Picked, prediction: &TaskPrediction) {
        if prediction.peak > picked.reserved && !state.ledger.try_resize(picked.slot(), prediction.peak) {
            state.ledger.stop_growing(picked.slot());
        }
    }
}
