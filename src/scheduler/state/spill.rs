//! Spill victims: when a spill is the only way to make room, which idle resident buffers are
//! written (never the waiting task's own inputs; the one needed last first, then the largest),
//! and the written files swapped in for them (or, in a simulation, the same accounting without
//! files). The writing itself is the worker's, outside the lock.

use std::cmp::Reverse;
use std::ops::ControlFlow;
use std::sync::Arc;

use runner_plugin::Value;

use super::pick::Blocked;
use super::{Garbage, LiveOutput, Pick, State, TaskRef, UNTOUCHED};
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
    /// Spilling is the last resort, for a task `blocked` for want of room: only when waiting
    /// cannot make room — nothing runs, or the resident buffers alone leave too little even
    /// once every running task has finished — and no spill is being written. What spilling can
    /// do for it then ([`State::relief`]), or `None` when it should not spill.
    pub(super) fn spill_for(&self, blocked: &Blocked) -> Option<Relief> {
        let waiting_cannot_help =
            self.ledger.running() == 0 || self.ledger.resident().saturating_add(blocked.needed) > self.ledger.budget();
        if !(self.can_spill && waiting_cannot_help && self.spills_in_flight == 0) {
            return None;
        }
        self.relief(blocked)
    }

    /// A task `blocked` may still run alone when waiting cannot help: nothing runs or is being
    /// spilled, and spilling can do nothing more for it ([`State::relief`]), or is impossible.
    pub(super) fn nothing_could_free_memory_for(&self, blocked: &Blocked) -> bool {
        self.ledger.running() == 0 && self.spills_in_flight == 0 && (!self.can_spill || self.relief(blocked).is_none())
    }

    /// What spilling can do for `blocked` (`None`: nothing).
    ///
    /// Never spill its own inputs to make room for it beside other work: it maps a spilled
    /// input back as it reads it, and its reservation counts it (see [`State::input_sums`]),
    /// so the bytes stay in the ledger and only the writing and the reading back are added.
    /// Once it is to run alone, though, its spilled inputs stream through (each one's pages
    /// are released once read), so those its resident inputs hold beyond what the budget
    /// leaves beside its estimate are spilled, and no more.
    pub(super) fn relief(&self, blocked: &Blocked) -> Option<Relief> {
        if self.ledger.resident() == 0 {
            return None;
        }
        let (mut own_victims, mut own_resident) = (0, 0);
        self.for_each_live_input(blocked.task, |_, live| {
            if is_victim(live) {
                own_victims += 1;
                own_resident += live.resident_bytes;
            }
        });
        if self.outputs.values().filter(|live| is_victim(live)).nth(own_victims).is_some() {
            return Some(Relief::Others);
        }
        if self.ledger.running() > 0 {
            return None;
        }
        let over = (self.ledger.used().saturating_add(blocked.estimate))
            .saturating_sub(self.ledger.budget())
            .min(own_resident);
        (over > 0).then_some(Relief::OwnInputs(over))
    }

    /// Chooses the buffers to spill for `blocked`, as `relief` says ([`State::relief`]), and
    /// hands them to the worker to write: other idle resident buffers, the one needed last
    /// first (see [`State::needed_in`]), then the largest, until it would fit; or, for a task
    /// to run alone, the largest of its own inputs until it holds no more than the budget.
    pub(super) fn choose_victims(&mut self, blocked: &Blocked, relief: Relief) -> Pick {
        let mut own = Vec::new();
        self.for_each_live_input(blocked.task, |producer, live| {
            if is_victim(live) {
                own.push(producer);
            }
        });
        let (mut victims, to_free): (Vec<(NeededIn, u64, TaskRef)>, u64) = match relief {
            Relief::Others => {
                own.sort_unstable();
                let victims = self
                    .outputs
                    .iter()
                    .filter(|(producer, live)| is_victim(live) && own.binary_search(producer).is_err())
                    .map(|(producer, live)| (self.needed_in(*producer), live.resident_bytes, *producer))
                    .collect();
                let over = self.ledger.used().saturating_add(blocked.needed).saturating_sub(self.ledger.budget());
                (victims, over)
            }
            Relief::OwnInputs(over) => {
                let bytes = |producer: &TaskRef| self.outputs[producer].resident_bytes;
                (own.iter().map(|producer| (NeededIn(0), bytes(producer), *producer)).collect(), over)
            }
        };
        // What is needed last goes first (a buffer read back at once was written for nothing),
        // then the largest (fewest writes), then the newest.
        victims.sort_unstable_by_key(|&(needed_in, bytes, producer)| Reverse((needed_in, bytes, producer)));
        let mut freed = 0u64;
        for (_, bytes, producer) in victims {
            if freed >= to_free {
                break;
            }
            let live = self.outputs.get_mut(&producer).expect("a victim is a live output");
            live.spilling = true;
            self.spill_jobs.push(SpillJob { task: producer, value: live.value.clone(), bytes });
            freed += bytes;
        }
        if self.spill_jobs.is_empty() {
            return Pick::Wait;
        }
        self.spills_in_flight += self.spill_jobs.len();
        // What the spills free is still counted until they are written: what it needs beyond
        // that is kept.
        self.kept_for_spill = Some((blocked.task, blocked.needed.saturating_sub(freed)));
        Pick::Spill
    }

    /// How soon `producer`'s output will be read: by the first of its consumers (of at most
    /// [`CONSUMERS_LOOKED_AT`]) that is ready to run (or waits for room), else by one of them
    /// once its other producers, of which the fewest are unfinished, have finished.
    fn needed_in(&self, producer: TaskRef) -> NeededIn {
        let mut fewest = u32::MAX;
        let mut looked_at = 0;
        for &edge in &self.graph.steps[producer.step].outputs {
            let consumer = self.graph.edges[edge].consumer;
            let pending = &self.steps[consumer].pending;
            let flow = self.graph.try_for_each_consumer(edge, producer.index, |index| {
                // A consumer never counted has every producer still to finish.
                let unfinished = pending.get(index as usize).copied().unwrap_or(UNTOUCHED);
                fewest = fewest.min(unfinished);
                looked_at += 1;
                if unfinished == 0 || looked_at >= CONSUMERS_LOOKED_AT {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if flow.is_break() {
                break;
            }
        }
        NeededIn(fewest)
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
        self.spills_written();
    }

    /// The room kept for the task the spills were made for goes back once they are all written:
    /// it fits now, and is the first its worker picks.
    fn spills_written(&mut self) {
        if self.spills_in_flight == 0 {
            self.kept_for_spill = None;
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
        self.spills_written();
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

/// What spilling can do for a blocked task ([`State::relief`]), when it can do anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Relief {
    /// Idle buffers other than its inputs can go.
    Others,
    /// It is to run alone, and its resident inputs hold this many bytes beyond what the budget
    /// leaves beside its estimate.
    OwnInputs(u64),
}

/// How many of a consumer's producers must still finish before a buffer is read (0: a consumer
/// is ready): what is needed in the most goes to disk first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct NeededIn(u32);

/// Consumers of a buffer looked at to tell how soon it is needed (a buffer read by a million
/// tasks is judged by the first of them).
const CONSUMERS_LOOKED_AT: u32 = 64;

/// Only the scheduler holds it (no task reads it now), it is in memory, and no one is writing it.
fn is_victim(live: &LiveOutput) -> bool {
    live.resident_bytes > 0 && !live.spilling && Arc::strong_count(&live.value) == 1
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::TaskRef;
    use super::super::testing::{NoMemory, compiled, compiled_over};
    use super::SpillJob;
    use crate::memory::{Admission, TaskSlot};
    use crate::plan::Plan;
    use crate::scheduler::state::Picked;
    use crate::scheduler::{Outcome, Pick, State, StepTraits};

    const MIB: u64 = 1 << 20;

    /// The tasks whose outputs the last `Pick::Spill` chose, in the order chosen.
    fn victims(state: &mut State<'_>) -> Vec<TaskRef> {
        let mut jobs: Vec<SpillJob> = Vec::new();
        state.take_spill_jobs(&mut jobs);
        jobs.iter().map(|job| job.task).collect()
    }

    /// The four tasks of source step `a`, started.
    fn start_all_four(state: &mut State<'_>, plan: &Plan) -> Vec<Picked> {
        (0..4)
            .map(|slot| {
                let Pick::Run(picked) = state.pick(plan, TaskSlot(slot)) else { panic!("an `a` task fits") };
                picked
            })
            .collect()
    }

    #[test]
    fn a_gather_over_the_budget_spills_only_what_its_own_inputs_hold_beyond_it() {
        // `g` (1 MiB) gathers the four 10 MiB buffers of `a`: 40 MiB resident in a 32 MiB
        // budget. It runs alone, and its spilled inputs stream through it; spilling all four
        // would write 40 MiB where 10 keep it within the budget.
        let c = compiled(
            "  a: {plugin: noop, over: [lead], memory: 1MiB}\n  g: {plugin: noop, inputs: {x: a}, memory: 1MiB}\n",
        );
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(2), 32 * MIB, &NoMemory, None);
        let sources = start_all_four(&mut state, &c.plan);
        for picked in sources {
            state.finish_virtual(picked, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        }
        let Pick::Spill = state.pick(&c.plan, TaskSlot(0)) else { panic!("`g` holds 41 MiB with its inputs") };
        let mut written = victims(&mut state);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].step, 0);
        state.finish_virtual_spills(&mut written);
        let Pick::Run(gather) = state.pick(&c.plan, TaskSlot(0)) else { panic!("`g` runs alone") };
        assert_eq!(gather.task.step, 1);
        assert_eq!((gather.input_bytes, gather.spilled_input_bytes), (40 * MIB, 10 * MIB));
        assert!(matches!(gather.admission, Admission::Alone { oversized: true }), "{:?}", gather.admission);
        assert_eq!(state.spill_count, 1);
        state.finish_virtual(gather, Outcome::Ok, MIB, 0, Duration::ZERO);
    }

    #[test]
    fn the_room_a_spill_makes_is_kept_for_the_task_it_was_made_for() {
        // As below, over 8 leads, with sources of 6 MiB: b1 (15 MiB) waits for a spill of b0
        // (10 MiB) beside the 40 MiB resident in 50. While it is written, a source's next task
        // would fit beside the 40 (46), but once it ran b1 would not fit (30 + 6 + 15 = 51),
        // and b1 would wait for another spill, as a wet `weather.yaml` cycle's simulation at
        // 10 MiB did 13 times over for one task.
        let c = compiled_over(
            "{lead: 8}",
            concat!(
                "  a: {plugin: noop, over: [lead], memory: 6MiB}\n",
                "  b: {plugin: noop, over: [lead], inputs: {x: a}, memory: 15MiB}\n",
                "  g: {plugin: noop, inputs: {x: b}, memory: 1MiB}\n",
            ),
        );
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(3), 50 * MIB, &NoMemory, None);
        let mut sources = start_all_four(&mut state, &c.plan).into_iter();
        let first = sources.next().expect("four sources");
        state.finish_virtual(first, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        let Pick::Run(b0) = state.pick(&c.plan, TaskSlot(4)) else { panic!("b0 fits") };
        state.finish_virtual(b0, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        for picked in sources {
            state.finish_virtual(picked, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        }
        let Pick::Spill = state.pick(&c.plan, TaskSlot(0)) else { panic!("b1 needs a spill") };
        let mut written = victims(&mut state);
        assert_eq!(written.len(), 1, "{written:?}");
        assert!(matches!(state.pick(&c.plan, TaskSlot(1)), Pick::Wait), "a source's task took the room being made");
        state.finish_virtual_spills(&mut written);
        let Pick::Run(b1) = state.pick(&c.plan, TaskSlot(1)) else { panic!("b1 fits once the spill is written") };
        assert_eq!(b1.task.step, 1);
        assert_eq!(state.spill_count, 1);
        state.finish_virtual(b1, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
    }

    #[test]
    fn the_buffer_needed_last_is_spilled_first_and_never_the_waiting_tasks_own_input() {
        // a → b → g (g gathers b). b0 has run: its buffer waits for b1..b3 before `g` reads
        // it, while a1..a3 are read as soon as b1..b3 run. b1 (15 MiB) does not fit beside
        // the 40 MiB resident in a 50 MiB budget: one 10 MiB buffer must go.
        let c = compiled(concat!(
            "  a: {plugin: noop, over: [lead], memory: 1MiB}\n",
            "  b: {plugin: noop, over: [lead], inputs: {x: a}, memory: 15MiB}\n",
            "  g: {plugin: noop, inputs: {x: b}, memory: 1MiB}\n",
        ));
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(3), 50 * MIB, &NoMemory, None);
        let sources = start_all_four(&mut state, &c.plan);
        let mut sources = sources.into_iter();
        let first = sources.next().expect("four sources");
        let first_index = first.task.index;
        state.finish_virtual(first, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        let Pick::Run(b0) = state.pick(&c.plan, TaskSlot(4)) else { panic!("b0 fits") };
        assert_eq!((b0.task.step, b0.task.index), (1, first_index));
        state.finish_virtual(b0, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        for picked in sources {
            state.finish_virtual(picked, Outcome::Ok, 10 * MIB, 0, Duration::ZERO);
        }
        let Pick::Spill = state.pick(&c.plan, TaskSlot(0)) else { panic!("b1 needs a spill") };
        assert_eq!(victims(&mut state), vec![TaskRef { step: 1, index: first_index }]);
    }
}
