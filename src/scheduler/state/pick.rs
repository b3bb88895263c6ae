//! The choice of the next task: the order (consumers before sources, deeper steps first,
//! sources in lockstep), admission against the ledger (one decision per task), reservations
//! started and resized, batches of a quick step's tasks, and the estimates they are made from
//! (the step's model, bumped in the run on an underestimate).

use std::time::Duration;

use super::{InputSums, Model, State, TaskRef};
use crate::estimate::StepModel;
use crate::memory::{Admission, Reservation, TaskSlot};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::StepId;

/// What a free worker should do.
#[derive(Debug)]
pub enum Pick {
    /// Run this task (its estimate is reserved).
    Run(Picked),
    /// Ask the plugin for this task's estimate (outside the lock), then [`State::estimated`] and
    /// [`State::admit_estimated`].
    Estimate(Estimating),
    /// Write the buffers in [`State::take_spill_jobs`] to disk (outside the lock), then
    /// [`State::finish_spills`]: a task waits for the room.
    Spill,
    /// Nothing can start now.
    Wait,
}

/// A task whose plugin a worker is asking for its estimate, and the room kept for it meanwhile
/// (see [`State::expected_at_dispatch`]). Neither `Copy` nor `Clone`: [`State::estimated`] takes
/// it back, so the room is given back once.
#[derive(Debug)]
pub struct Estimating {
    pub task: TaskRef,
    kept: u64,
}

/// A task the ledger cannot admit now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Blocked {
    pub task: TaskRef,
    /// What it would reserve: its estimate and its spilled inputs.
    pub needed: u64,
    pub estimate: u64,
    /// It needs more than the budget beside nothing else ([`State::oversized`]): it runs
    /// alone, once what runs has finished.
    pub oversized: bool,
}

/// An estimate the ledger admitted.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    estimate: u64,
    reserved: u64,
    source: EstimateSource,
    admission: Admission,
    input_bytes: u64,
    spilled_input_bytes: u64,
}

/// A task chosen to run, holding its reservation: neither `Copy` nor `Clone`, it is consumed
/// where the task ends ([`State::finish`]) or goes back to wait ([`State::reestimate`]).
#[derive(Debug)]
pub struct Picked {
    pub task: TaskRef,
    /// What the task is estimated to peak at (what learning compares its peak with).
    pub estimate: u64,
    /// Bytes reserved for it: its estimate plus the spilled inputs it will map.
    pub reserved: u64,
    pub source: EstimateSource,
    /// What the plugin itself estimated.
    pub plugin_estimate: u64,
    /// Its inputs' buffer bytes, resident or spilled.
    pub input_bytes: u64,
    /// Of those, the bytes in spill files when it was picked: mapped back in as it reads them.
    pub spilled_input_bytes: u64,
    /// Its reservation in the ledger.
    pub reservation: Reservation,
    pub admission: Admission,
}

impl Picked {
    /// The spilled input bytes it reads back from their files before it runs: all of them where
    /// it was admitted beside the rest (its reservation holds them, `State::pick`), none where
    /// it runs alone past the budget and streams through them as it reads them. A local worker
    /// reads them so, timed; a simulation charges that time.
    pub fn read_back_first(&self) -> u64 {
        if self.admission == Admission::Fits { self.spilled_input_bytes } else { 0 }
    }

    /// The slot of its reservation (what the meter measures it by).
    pub fn slot(&self) -> TaskSlot {
        self.reservation.slot()
    }
}

/// A step whose tasks take less than this on average is quick: workers claim its tasks in
/// batches, so the lock is taken once per batch rather than once per task.
const QUICK_TASK: Duration = Duration::from_micros(20);
/// Tasks of a step timed before it can count as quick.
const TIMED_BEFORE_BATCHING: u64 = 16;

impl<'g> State<'g> {
    /// Chooses what a free worker does next: the most preferred task the ledger admits (reserved
    /// in `slot`), a task whose plugin must first look at its inputs to estimate it (outside
    /// this lock), spill victims to write, or nothing.
    ///
    /// The order finishes what was started: consumers (deeper steps first) before sources, and
    /// sources in lockstep, each in an order that completes the gathers nearest to it first.
    /// Buffers are spilled only when waiting for running tasks cannot make room (see
    /// [`State::spill_for`]), so a budget that a good order fits never spills.
    ///
    /// A preferred task that can only run alone (oversized) is not passed over for less
    /// preferred work: nothing more starts until what runs has finished, and it runs. Passed
    /// over, it waited while the sources went on — a gather of six members over more than the
    /// budget ran after every lead's members, whose outputs piled up behind it and were spilled
    /// (`weather.yaml` at 10 MiB: 10 to 21 buffers a run, as the workers happened to be free
    /// together or not); waiting for it costs a worker the rest of one task.
    pub fn pick(&mut self, plan: &Plan, slot: TaskSlot) -> Pick {
        // A reservation whose guard was lost goes back before anything is admitted.
        self.ledger.reclaim_dropped();
        // What the most preferred task that did not fit needs.
        let mut blocked: Option<Blocked> = None;
        for i in 0..self.priority.len() {
            let step = self.priority[i];
            match self.pick_from(plan, step, slot) {
                Ok(pick) => return pick,
                // Preferred work that only a spill can make room for: make it now, rather than
                // let less preferred work take the room meanwhile (other workers go on).
                Err(Some(task)) if blocked.is_none() => match self.spill_for(&task) {
                    Some(relief) => return self.choose_victims(&task, relief),
                    None => blocked = Some(task),
                },
                Err(needed) => blocked = blocked.or(needed),
            }
            if blocked.is_some_and(|task| task.oversized) && self.waits_for_something() {
                return Pick::Wait;
            }
        }
        if let Some(step) = self.next_source_step() {
            match self.pick_from(plan, step, slot) {
                Ok(pick) => return pick,
                Err(needed) => blocked = blocked.or(needed),
            }
        }
        match blocked {
            Some(task) => match self.spill_for(&task) {
                Some(relief) => self.choose_victims(&task, relief),
                None => Pick::Wait,
            },
            _ => Pick::Wait,
        }
    }

    /// A pick from `step`, or `Err(Some(blocked))` when its next task needs bytes that do not
    /// fit, `Err(None)` when it has nothing to offer now.
    pub(super) fn pick_from(&mut self, plan: &Plan, step: StepId, slot: TaskSlot) -> Result<Pick, Option<Blocked>> {
        let state = &self.steps[step];
        if state.on_probation && state.running > 0 {
            return Err(None);
        }
        if let Some(&(index, plugin_estimate)) = state.deferred.front() {
            let task = TaskRef { step, index };
            let admitted = self.admit(plan, task, plugin_estimate)?;
            self.steps[step].deferred.pop_front();
            return Ok(Pick::Run(self.start(task, admitted, plugin_estimate, slot)));
        }
        let Some(index) = self.peek_ready(step) else { return Err(None) };
        let task = TaskRef { step, index };
        if self.follows_data[step] {
            self.pop_ready(step);
            self.estimating += 1;
            let kept = self.expected_at_dispatch(plan, task);
            self.kept_for_estimates += kept;
            return Ok(Pick::Estimate(Estimating { task, kept }));
        }
        let plugin_estimate = plan.steps[step].plugin_estimate;
        let admitted = self.admit(plan, task, plugin_estimate)?;
        self.pop_ready(step);
        Ok(Pick::Run(self.start(task, admitted, plugin_estimate, slot)))
    }

    /// Whether something will change what the ledger holds without a worker picking: a task
    /// runs, or a spill is being written.
    fn waits_for_something(&self) -> bool {
        self.ledger.running() > 0 || self.spills_in_flight > 0
    }

    /// The source step to start a task of next: the one least far through its tasks, so that
    /// sources whose outputs meet downstream advance together instead of one filling memory
    /// before the other starts.
    pub(super) fn next_source_step(&self) -> Option<StepId> {
        self.sources
            .iter()
            .copied()
            .filter(|&s| self.has_ready(s))
            .filter(|&s| !(self.steps[s].on_probation && self.steps[s].running > 0))
            .min_by(|&a, &b| {
                let progress = |s: StepId| self.steps[s].next_source as f64 / self.graph.steps[s].tasks as f64;
                progress(a).total_cmp(&progress(b))
            })
    }

    /// What `task`, about to be estimated by its plugin at dispatch, is expected to reserve:
    /// as much as its step's last task so estimated (the first, as the plan's estimate), from
    /// its own inputs.
    fn expected_at_dispatch(&self, plan: &Plan, task: TaskRef) -> u64 {
        let plugin_estimate =
            self.steps[task.step].last_dispatch_estimate.unwrap_or(plan.steps[task.step].plugin_estimate);
        let inputs = self.input_sums(task);
        self.predict(plan, task.step, plugin_estimate, inputs.bytes).0.saturating_add(inputs.spilled)
    }

    /// A worker is back with the estimate a [`Pick::Estimate`] asked for: the room kept for the
    /// task goes back. Returns the task.
    pub fn estimated(&mut self, estimating: Estimating) -> TaskRef {
        self.estimating -= 1;
        self.kept_for_estimates -= estimating.kept;
        estimating.task
    }

    /// The room kept from the admission of `task`: what the tasks being estimated are expected
    /// to take (see [`State::expected_at_dispatch`]), and what the task the spills being written
    /// are for needs, unless that is `task`. Without it, a worker admitted a less preferred task
    /// (a source's) into that room while another asked a plugin or wrote a spill, and the task
    /// the room was for found it taken and waited for a spill (again): a dry `weather.yaml`
    /// cycle at 10 MiB spilled 12 to 14 buffers where its simulation, whose estimates take no
    /// time, spilled 8, and a wet one's simulation spilled for one task 13 times over while the
    /// sources went on in the room each spill made.
    fn kept_from(&self, task: TaskRef) -> u64 {
        let for_spill = self.kept_for_spill.filter(|&(kept_for, _)| kept_for != task).map_or(0, |(_, bytes)| bytes);
        self.kept_for_estimates.saturating_add(for_spill)
    }

    /// Admits a task whose plugin has just estimated it at dispatch, or defers it (first in
    /// its step's line) until it fits.
    pub fn admit_estimated(
        &mut self,
        plan: &Plan,
        task: TaskRef,
        plugin_estimate: u64,
        slot: TaskSlot,
    ) -> Option<Picked> {
        self.steps[task.step].last_dispatch_estimate = Some(plugin_estimate);
        match self.admit(plan, task, plugin_estimate) {
            Ok(admitted) => Some(self.start(task, admitted, plugin_estimate, slot)),
            Err(_) => {
                self.steps[task.step].deferred.push_back((task.index, plugin_estimate));
                None
            }
        }
    }

    /// A claimed task turned out to need `plugin_estimate`, whose prediction is more than it
    /// reserved: grows its reservation if that fits, else gives the reservation back and defers
    /// it. Returns the task as it may now run, or `None` when deferred.
    pub fn reestimate(&mut self, plan: &Plan, picked: Picked, plugin_estimate: u64) -> Option<Picked> {
        let (estimate, source) = self.predict(plan, picked.task.step, plugin_estimate, picked.input_bytes);
        let reserved = estimate.saturating_add(picked.spilled_input_bytes);
        // Within the budget only: one that does not fit waits in line, where its admission
        // spills for it, or runs it alone and oversized, as for any task. Grown past the budget
        // here where nothing else ran, a gather ran beside buffers a spill could have moved,
        // over the budget and reported as fitting.
        if self.ledger.try_resize_within(picked.slot(), reserved) {
            return Some(Picked { estimate, reserved, source, plugin_estimate, ..picked });
        }
        self.ledger.stop_growing(picked.slot());
        self.ledger.release(picked.reservation);
        self.steps[picked.task.step].running -= 1;
        self.steps[picked.task.step].deferred.push_back((picked.task.index, plugin_estimate));
        None
    }

    /// Whether tasks of `step` are quick enough to be claimed in batches.
    pub fn is_quick(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        s.timed >= TIMED_BEFORE_BATCHING && s.wall_nanos < s.timed * QUICK_TASK.as_nanos() as u64
    }

    /// Claims up to `slots.len()` more ready tasks of `first`'s step, as many as fit beside what
    /// runs, each reserved in the next of `slots` and appended to `out`. The plugin is not asked
    /// again (quick tasks are claimed in batches to keep the lock's hold short): each task is
    /// estimated from `first`'s plugin estimate and its own inputs, and reserves its own spilled
    /// inputs besides.
    pub fn pick_more(
        &mut self,
        plan: &Plan,
        first: &Picked,
        slots: impl Iterator<Item = TaskSlot>,
        out: &mut Vec<Picked>,
    ) {
        let step = first.task.step;
        if !self.steps[step].deferred.is_empty() || self.steps[step].on_probation {
            return;
        }
        let mut room = self.ledger.batch_room().saturating_sub(self.kept_from(first.task));
        let from = out.len();
        for slot in slots {
            let Some(index) = self.peek_ready(step) else { break };
            let task = TaskRef { step, index };
            let inputs = self.input_sums(task);
            let (estimate, source) = self.predict(plan, step, first.plugin_estimate, inputs.bytes);
            let reserved = estimate.saturating_add(inputs.spilled);
            if reserved > room {
                break;
            }
            room -= reserved;
            self.pop_ready(step);
            out.push(Picked {
                task,
                input_bytes: inputs.bytes,
                spilled_input_bytes: inputs.spilled,
                reservation: self.ledger.reserve_unpeaked(slot, reserved),
                estimate,
                reserved,
                source,
                plugin_estimate: first.plugin_estimate,
                admission: first.admission,
            });
        }
        self.steps[step].running += (out.len() - from) as u32;
        self.ledger.note_peak();
    }

    /// The estimate of `task` whose plugin estimates `plugin_estimate`, and whether the ledger
    /// admits it now; `Err(Some(blocked))` (what it needs) when it must wait. One decision per
    /// task: the live guard reads counters other threads move, so asking twice could answer
    /// differently.
    fn admit(&self, plan: &Plan, task: TaskRef, plugin_estimate: u64) -> Result<Admitted, Option<Blocked>> {
        let inputs = self.input_sums(task);
        let (estimate, source) = self.predict(plan, task.step, plugin_estimate, inputs.bytes);
        // Spilled inputs are mapped back in as the task reads them: they count while it runs.
        let reserved = estimate.saturating_add(inputs.spilled);
        let kept = self.kept_from(task);
        if kept > 0 && self.ledger.used().saturating_add(reserved).saturating_add(kept) > self.ledger.budget() {
            // Not blocked for want of a spill: the room is free once the estimates are back or
            // the spills written.
            return Err(None);
        }
        let oversized = self.oversized(estimate, &inputs);
        let blocked = Blocked { task, needed: reserved, estimate, oversized };
        match self.ledger.admission(reserved) {
            Admission::Wait => Err(Some(blocked)),
            Admission::Alone { .. } if !self.nothing_could_free_memory_for(&blocked) => Err(Some(blocked)),
            admission => {
                let admission = match admission {
                    Admission::Alone { .. } => Admission::Alone { oversized },
                    Admission::Fits if oversized => Admission::Alone { oversized },
                    other => other,
                };
                Ok(Admitted {
                    estimate,
                    reserved,
                    source,
                    admission,
                    input_bytes: inputs.bytes,
                    spilled_input_bytes: inputs.spilled,
                })
            }
        }
    }

    /// Whether a task estimated at `estimate` reading `inputs` needs more than the budget alone:
    /// its estimate and its input buffers, resident or mapped back as it reads them (or what it
    /// reads, files too). No admission keeps the ledger within the budget for it, so it runs
    /// alone, reported as oversized — also when its plugin said so only at dispatch (a gather
    /// of the larger grid, planned as the smaller one's).
    fn oversized(&self, estimate: u64, inputs: &InputSums) -> bool {
        let budget = self.ledger.budget();
        estimate.saturating_add(inputs.buffers) > budget || inputs.bytes > budget
    }

    /// The estimate of a task of `step` and its source: from the step's model (learned from
    /// history, or set by this run's first measurements), else the hint, else the plugin's own.
    /// The model's margin never makes a task oversized: one expected to peak within the budget
    /// is estimated at most at the budget (and so runs alone).
    pub(super) fn predict(
        &self,
        plan: &Plan,
        step: StepId,
        plugin_estimate: u64,
        input_bytes: u64,
    ) -> (u64, EstimateSource) {
        match &self.models[step] {
            Some(Model { model, source }) => {
                let (estimate, budget) = (model.predict(plugin_estimate, input_bytes), self.ledger.budget());
                let within = estimate <= budget || model.predict_peak(plugin_estimate, input_bytes) > budget;
                (if within { estimate } else { budget }, *source)
            }
            None => plan.steps[step].estimate_for(None, plugin_estimate, input_bytes),
        }
    }

    /// Reserves the admitted estimate for `task` in `slot`.
    fn start(&mut self, task: TaskRef, admitted: Admitted, plugin_estimate: u64, slot: TaskSlot) -> Picked {
        let reservation = self.ledger.reserve(slot, admitted.reserved);
        if self.kept_for_spill.is_some_and(|(kept_for, _)| kept_for == task) {
            self.kept_for_spill = None;
        }
        self.steps[task.step].running += 1;
        let Admitted { estimate, reserved, source, admission, input_bytes, spilled_input_bytes } = admitted;
        Picked {
            task,
            estimate,
            reserved,
            source,
            plugin_estimate,
            input_bytes,
            spilled_input_bytes,
            reservation,
            admission,
        }
    }

    /// A task peaked at `peak` beyond its estimate: the step's footprint reacts at once, even
    /// without history (its first measurement sets the figure for the rest of the run).
    pub fn note_underestimate(&mut self, picked: &Picked, peak: u64) {
        match self.models[picked.task.step].as_mut() {
            Some(model) => model.model.bump(peak, picked.plugin_estimate, picked.input_bytes),
            None => {
                let model = StepModel::from_first_task(peak, picked.plugin_estimate, picked.input_bytes, self.params);
                self.models[picked.task.step] = Some(Model { model, source: picked.source });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{NoMemory, compiled, compiled_over};
    use crate::estimate::{Basis, Observation, Params, StepModel};
    use crate::memory::TaskSlot;
    use crate::scheduler::{Outcome, Pick, State, StepTraits};

    const MIB: u64 = 1 << 20;

    /// What a picked task reserved, of which its estimate, and its spilled inputs.
    type Claim = (u64, u64, u64);

    /// Three tasks of `a` finish with buffers of `sizes`, the second is spilled when `spill`,
    /// and a worker picks the first task of `b` (reading the first buffer, resident) and more
    /// of `b` beside it, `b` estimated by `model` when there is one: the first task's claim,
    /// then the batch's.
    fn batch_after(budget: u64, sizes: [u64; 3], spill: bool, model: Option<StepModel>) -> (Claim, Vec<Claim>) {
        let mut c = compiled("  a: {plugin: noop, over: [lead]}\n  b: {plugin: noop, over: [lead], inputs: {x: a}}\n");
        c.plan.steps[1].model = model;
        let steps = c.recipe.steps.len();
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(steps), budget, &NoMemory, None);
        let mut producers = Vec::new();
        for slot in 1..=3 {
            let Pick::Run(picked) = state.pick(&c.plan, TaskSlot(slot)) else { panic!("an `a` task fits") };
            producers.push(picked);
        }
        let tasks: Vec<_> = producers.iter().map(|p| p.task).collect();
        for (picked, bytes) in producers.into_iter().zip(sizes) {
            state.finish_virtual(picked, Outcome::Ok, bytes, 0, Duration::ZERO);
        }
        if spill {
            state.count_spilled(tasks[1]);
        }
        let Pick::Run(first) = state.pick(&c.plan, TaskSlot(0)) else { panic!("a `b` task fits") };
        assert_eq!((first.task.step, first.task.index), (1, tasks[0].index));
        let mut more = Vec::new();
        state.pick_more(&c.plan, &first, (4..8).map(TaskSlot), &mut more);
        let claim = |p: &super::Picked| (p.reserved, p.estimate, p.spilled_input_bytes);
        let claims = (claim(&first), more.iter().map(claim).collect());
        for picked in std::iter::once(first).chain(more) {
            state.finish_virtual(picked, Outcome::Ok, 0, 0, Duration::ZERO);
        }
        claims
    }

    fn batch_after_a_spill(budget: u64) -> (Claim, Vec<Claim>) {
        batch_after(budget, [4 * MIB; 3], true, None)
    }

    #[test]
    fn a_batch_reserves_each_task_s_own_spilled_inputs() {
        let ((reserved, estimate, spilled), more) = batch_after_a_spill(100 * MIB);
        assert_eq!((reserved, spilled), (estimate, 0), "the first task's input is resident");
        assert_eq!(more, [(estimate + 4 * MIB, estimate, 4 * MIB), (estimate, estimate, 0)]);
    }

    #[test]
    fn a_batch_stops_at_the_task_whose_spilled_inputs_do_not_fit() {
        // 8 MiB resident and the first `b` leave under 2 MiB: the next `b` maps 4 MiB back in.
        let (_, more) = batch_after_a_spill(10 * MIB);
        assert!(more.is_empty(), "{more:?}");
    }

    #[test]
    fn a_batched_task_is_estimated_by_the_learned_model_from_its_own_inputs() {
        // `b` was learned to peak at 3× its input bytes (its plugin's estimate, the same for
        // every task, explains nothing).
        let history: Vec<Observation> = [2, 4, 8, 2, 4, 8, 2, 4, 8]
            .map(|mib| Observation {
                age: 0,
                peak: 3 * mib * MIB,
                plugin_estimate: 64 << 10,
                input_bytes: mib * MIB,
                estimate: 0,
                from_history: false,
            })
            .to_vec();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!(model.basis, Basis::InputBytes);
        let ((_, first, _), more) = batch_after(1 << 40, [2 * MIB, 4 * MIB, 8 * MIB], false, Some(model.clone()));
        assert_eq!(first, model.predict(64 << 10, 2 * MIB));
        let own = |mib: u64| model.predict(64 << 10, mib * MIB);
        assert_eq!(
            more,
            [(own(4), own(4), 0), (own(8), own(8), 0)],
            "the first's {first} for each would be too little"
        );
    }

    #[test]
    fn a_task_estimated_at_dispatch_finds_the_room_it_is_expected_to_take() {
        let c = compiled(
            "  src: {plugin: noop, over: [lead], memory: 3MiB}\n  est: {plugin: noop, over: [lead], inputs: {x: src}, memory: 4MiB}\n",
        );
        let traits = StepTraits { follows_data: vec![false, true], on_probation: vec![false, false] };
        let mut state = State::new(&c.graph, &c.plan, traits, 10 * MIB, &NoMemory, None);
        let Pick::Run(first) = state.pick(&c.plan, TaskSlot(0)) else { panic!("a source's task fits") };
        state.finish_virtual(first, Outcome::Ok, 4 * MIB, 0, Duration::ZERO);
        let Pick::Estimate(estimating) = state.pick(&c.plan, TaskSlot(0)) else {
            panic!("the consumer, preferred, is estimated by its plugin at dispatch")
        };
        // Another worker, while the plugin is asked: a source's task of 3 MiB would fit beside
        // the 4 resident, but not beside the 4 the task being estimated is expected to take.
        assert!(matches!(state.pick(&c.plan, TaskSlot(1)), Pick::Wait), "the room is kept for the estimate");
        let task = state.estimated(estimating);
        let picked = state.admit_estimated(&c.plan, task, 4 * MIB, TaskSlot(0)).expect("the room was there");
        assert_eq!(picked.reserved, 4 * MIB);
        // Once it is back, what fits beside it starts: the source's task waits no more than for room.
        state.finish_virtual(picked, Outcome::Ok, 0, 0, Duration::ZERO);
        let Pick::Run(source) = state.pick(&c.plan, TaskSlot(1)) else { panic!("the source's next task fits now") };
        assert_eq!(source.task.step, 0);
        state.finish_virtual(source, Outcome::Ok, 0, 0, Duration::ZERO);
    }

    #[test]
    fn a_source_s_last_task_deferred_at_dispatch_is_picked_once_it_fits() {
        let c = compiled("  a: {plugin: noop, over: [lead]}\n");
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(1), 10 * MIB, &NoMemory, None);
        let mut picked: Vec<_> = (0..4)
            .map(|slot| match state.pick(&c.plan, TaskSlot(slot)) {
                Pick::Run(picked) => picked,
                _ => panic!("a noop task fits"),
            })
            .collect();
        let last = picked.pop().unwrap();
        let index = last.task.index;
        // Every task of the step has started; the last turns out to need 8 MiB beside one that
        // holds 4.
        let running = picked.pop().unwrap();
        state.ledger.try_resize(running.slot(), 4 * MIB);
        for done in picked {
            state.finish_virtual(done, Outcome::Ok, 0, 0, Duration::ZERO);
        }
        assert!(state.reestimate(&c.plan, last, 8 * MIB).is_none(), "8 + 4 MiB do not fit 10");
        state.finish_virtual(running, Outcome::Ok, 0, 0, Duration::ZERO);
        let Pick::Run(again) = state.pick(&c.plan, TaskSlot(0)) else { panic!("the deferred task is not picked") };
        assert_eq!(again.task.index, index);
        assert!(again.reserved >= 8 * MIB, "{}", again.reserved);
        state.finish_virtual(again, Outcome::Ok, 0, 0, Duration::ZERO);
    }

    #[test]
    fn a_task_grown_at_dispatch_past_the_budget_waits_for_a_spill_instead() {
        let c = compiled("  a: {plugin: noop, over: [lead]}\n  b: {plugin: noop, over: [lead], inputs: {x: a}}\n");
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(2), 20 * MIB, &NoMemory, None);
        let sources: Vec<_> = (0..4)
            .map(|slot| match state.pick(&c.plan, TaskSlot(slot)) {
                Pick::Run(picked) => picked,
                _ => panic!("a noop task fits"),
            })
            .collect();
        for done in sources {
            state.finish_virtual(done, Outcome::Ok, 4 * MIB, 0, Duration::ZERO);
        }
        let Pick::Run(reader) = state.pick(&c.plan, TaskSlot(0)) else { panic!("a reader fits") };
        // Alone beside 16 MiB of buffers, three of them others', it needs 8 MiB: it gives its
        // reservation back, and its admission spills for it, rather than run 4 MiB over.
        assert!(state.reestimate(&c.plan, reader, 8 * MIB).is_none());
        assert!(state.ledger.used() <= 20 * MIB);
        assert!(matches!(state.pick(&c.plan, TaskSlot(0)), Pick::Spill));
    }

    #[test]
    fn a_task_that_can_only_run_alone_is_not_passed_over_for_a_source_it_waits_for_what_runs() {
        // `g` (3 MiB) gathers the four `a` outputs of 2 MiB: 11 MiB, more than the budget of
        // 10 alone; the `s` tasks hold nothing, and fit beside the 8 MiB of buffers.
        let c = compiled_over(
            "{lead: 4, member: 8}",
            "  a: {plugin: noop, over: [lead]}\n  s: {plugin: noop, over: [member, lead]}\n  g: {plugin: noop, inputs: {x: a}, memory: 3MiB}\n",
        );
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(3), 10 * MIB, &NoMemory, None);
        let (mut a_done, mut sources_running) = (0, Vec::new());
        while a_done < 4 {
            let Pick::Run(picked) = state.pick(&c.plan, TaskSlot(sources_running.len() as u32 + 1)) else {
                panic!("a source fits: {a_done} `a` done, {} MiB held", state.ledger.used() / MIB)
            };
            if picked.task.step == 0 {
                state.finish_virtual(picked, Outcome::Ok, 2 * MIB, 0, Duration::ZERO);
                a_done += 1;
            } else if sources_running.is_empty() {
                sources_running.push(picked);
            } else {
                state.finish_virtual(picked, Outcome::Ok, 0, 0, Duration::ZERO);
            }
        }
        assert_eq!(sources_running.len(), 1, "an `s` task runs, and more are ready");
        // `g` is ready and preferred, and needs more than the budget: nothing else starts, though
        // an `s` task would fit.
        assert!(matches!(state.pick(&c.plan, TaskSlot(0)), Pick::Wait));
        for running in sources_running {
            state.finish_virtual(running, Outcome::Ok, 0, 0, Duration::ZERO);
        }
        // Nothing runs: it goes alone, after spilling what of its inputs the budget cannot hold.
        loop {
            match state.pick(&c.plan, TaskSlot(0)) {
                Pick::Spill => {
                    let mut jobs = Vec::new();
                    state.take_spill_jobs(&mut jobs);
                    let mut written: Vec<_> = jobs.drain(..).map(|job| job.task).collect();
                    assert!(!written.is_empty() && written.iter().all(|task| task.step == 0), "its own inputs");
                    state.finish_virtual_spills(&mut written);
                }
                Pick::Run(gather) => {
                    assert_eq!(gather.task.step, 2, "the gather, not a source");
                    state.finish_virtual(gather, Outcome::Ok, 0, 0, Duration::ZERO);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
