//! Spill victims: when a spill is the only way to make room, which idle resident buffers are
//! written (largest first), and the written files swapped in for them (or, in a simulation,
//! the same accounting without files). The writing itself is the worker's, outside the lock.

use std::sync::Arc;

use runner_plugin::Value;

use super::{Garbage, LiveOutput, Pick, State, TaskRef};
use crate::memory::spill::{MappedBuffer, swap_in};

/// A buffer chosen to be spilled, for a worker to write outside the lock.
pub struct SpillJob {
    pub task: TaskRef,
    pub value: Arc<Value>,
    /// Its resident bytes (what a simulation "writes"; a real spill writes the value's buffer).
    pub bytes: u64,
}

/// A spill a worker has written (or failed to write).
pub struct SpillDone {
    pub task: TaskRef,
    pub result: Result<MappedBuffer, crate::memory::spill::SpillError>,
}

impl<'g> State<'g> {
    /// Spilling is the last resort, for a task needing `needed` bytes that does not fit: only
    /// when waiting cannot make room — nothing runs, or the resident buffers alone leave too
    /// little even once every running task has finished — and no spill is being written.
    pub(super) fn should_spill(&self, needed: u64) -> bool {
        let waiting_cannot_help =
            self.ledger.running() == 0 || self.ledger.resident().saturating_add(needed) > self.ledger.budget();
        self.can_spill && waiting_cannot_help && self.spills_in_flight == 0 && self.has_spill_victim()
    }

    /// A resident buffer that no running task reads (only the scheduler holds it).
    pub(super) fn has_spill_victim(&self) -> bool {
        self.ledger.resident() > 0 && self.outputs.values().any(is_victim)
    }

    /// Chooses resident buffers that no running task is reading, largest first, until a task
    /// needing `needed` bytes would fit, and hands them to the worker to write.
    pub(super) fn choose_victims(&mut self, needed: u64) -> Pick {
        let budget = self.ledger.budget();
        let mut victims: Vec<(u64, TaskRef)> = self
            .outputs
            .iter()
            .filter(|(_, live)| is_victim(live))
            .map(|(task, live)| (live.resident_bytes, *task))
            .collect();
        victims.sort_unstable_by_key(|&(bytes, task)| (std::cmp::Reverse(bytes), task.step, task.index));
        let mut freed = 0u64;
        for (bytes, task) in victims {
            if self.ledger.used().saturating_sub(freed).saturating_add(needed) <= budget {
                break;
            }
            let live = self.outputs.get_mut(&task).expect("a victim is a live output");
            live.spilling = true;
            self.spill_jobs.push(SpillJob { task, value: live.value.clone(), bytes });
            freed += bytes;
        }
        if self.spill_jobs.is_empty() {
            return Pick::Wait;
        }
        self.spills_in_flight += self.spill_jobs.len();
        Pick::Spill
    }

    /// The spill jobs chosen by the last [`Pick::Spill`], swapped into `into` (empty).
    pub fn take_spill_jobs(&mut self, into: &mut Vec<SpillJob>) {
        std::mem::swap(&mut self.spill_jobs, into);
    }

    /// Swaps written spill files in for the buffers they copy. A buffer that a task started
    /// reading meanwhile keeps its memory (its file is dropped); one whose consumers all
    /// finished meanwhile is gone already. Disk trouble is reported once and the run goes on
    /// without spilling. The freed heap copies go to [`State::garbage`].
    pub fn finish_spills(&mut self, done: &mut Vec<SpillDone>) {
        for SpillDone { task, result } in done.drain(..) {
            self.spills_in_flight -= 1;
            let mapped = match result {
                Ok(mapped) => mapped,
                Err(error) => {
                    if self.can_spill {
                        tracing::warn!("spilling failed, going on without spilling: {error}");
                        self.spill_error = Some(error.to_string());
                        self.can_spill = false;
                    }
                    if let Some(live) = self.outputs.get_mut(&task) {
                        live.spilling = false;
                    }
                    continue;
                }
            };
            let Some(live) = self.outputs.get_mut(&task) else {
                self.garbage.push(Garbage::Mapped(mapped));
                continue;
            };
            live.spilling = false;
            let Some(value) = Arc::get_mut(&mut live.value) else {
                self.garbage.push(Garbage::Mapped(mapped));
                continue;
            };
            match swap_in(value, mapped) {
                Ok(heap) => self.garbage.push(Garbage::Storage(heap)),
                // Only buffers are chosen as victims; nothing to swap otherwise.
                Err(mapped) => {
                    self.garbage.push(Garbage::Mapped(mapped));
                    continue;
                }
            }
            self.count_spilled(task);
        }
    }

    /// [`State::finish_spills`] for virtual buffers (a simulation): the spills of `written` are
    /// taken as written, nothing is swapped, the accounting is the same.
    pub fn finish_virtual_spills(&mut self, written: &mut Vec<TaskRef>) {
        for task in written.drain(..) {
            self.spills_in_flight -= 1;
            let Some(live) = self.outputs.get_mut(&task) else { continue };
            live.spilling = false;
            // As with a real file: a buffer a task started reading meanwhile keeps its memory.
            if Arc::get_mut(&mut live.value).is_some() {
                self.count_spilled(task);
            }
        }
    }

    /// The live output of `task` is now in its spill file: out of the ledger, into the totals.
    pub(super) fn count_spilled(&mut self, task: TaskRef) {
        let Some(live) = self.outputs.get_mut(&task) else { return };
        let moved = live.resident_bytes;
        live.resident_bytes = 0;
        self.ledger.remove_resident(moved);
        self.spilled += moved;
        self.spill_count += 1;
    }
}

/// Only the scheduler holds it (no task reads it now), it is in memory, and no one is writing it.
fn is_victim(live: &LiveOutput) -> bool {
    live.resident_bytes > 0 && !live.spilling && Arc::strong_count(&live.value) == 1
}
