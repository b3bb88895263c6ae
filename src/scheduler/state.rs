//! The scheduler's bookkeeping, free of threads so it can be tested directly: dependency
//! counters, ready queues, live outputs, the memory ledger, and what happens when a task
//! finishes, fails or is skipped.
//!
//! Per pending task the only state is one `u32` counter of unfinished inputs, allocated per
//! step when its first producer finishes. Source tasks (steps without inputs) are a cursor, not
//! a queue. Outputs live in a map only while some consumer still needs them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use runner_plugin::Value;

use crate::estimate::StepModel;
use crate::graph::Graph;
use crate::memory::spill::{SpillDir, release_value_pages, spill_value};
use crate::memory::{Admission, Ledger};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::StepId;

/// A task: its step and linear index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskRef {
    pub step: StepId,
    pub index: u64,
}

/// Marks a counter that has not been initialised yet.
const UNTOUCHED: u32 = u32::MAX;

/// An output some consumers still need.
struct LiveOutput {
    value: Arc<Value>,
    remaining_consumers: u64,
    /// Buffer bytes counted in the ledger while resident.
    resident_bytes: u64,
}

/// Per-step scheduling state.
struct StepState {
    /// Unfinished producer tasks per consumer task (`UNTOUCHED` until first needed).
    pending: Vec<u32>,
    /// Next source index to dispatch (steps without inputs).
    next_source: u64,
    ready: VecDeque<u64>,
    /// Tasks whose plugin estimate (at dispatch) did not fit yet, with that estimate.
    deferred: VecDeque<(u64, u64)>,
    is_source: bool,
    /// Tasks finished so far and their summed wall time, to tell quick steps.
    timed: u64,
    wall_nanos: u64,
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    Skipped,
}

/// What a free worker should do.
#[derive(Debug)]
pub enum Pick {
    /// Run this task (its estimate is reserved).
    Run(Picked),
    /// Ask the plugin for this task's estimate (outside the lock), then [`State::admit_estimated`].
    Estimate(TaskRef),
    /// Nothing can start now.
    Wait,
}

/// An estimate the ledger admitted.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    estimate: u64,
    source: EstimateSource,
    admission: Admission,
}

/// A task chosen to run.
#[derive(Debug, Clone, Copy)]
pub struct Picked {
    pub task: TaskRef,
    /// Bytes reserved for it.
    pub estimate: u64,
    pub source: EstimateSource,
    /// What the plugin itself estimated.
    pub plugin_estimate: u64,
    /// Its measurement tag.
    pub tag: u32,
    pub admission: Admission,
}

/// The whole mutable state of a run, guarded by one lock.
pub struct State<'g> {
    graph: &'g Graph,
    steps: Vec<StepState>,
    outputs: HashMap<TaskRef, LiveOutput>,
    poisoned: HashSet<TaskRef>,
    /// Steps ordered by preference: deeper first (their tasks free memory), sources last.
    priority: Vec<StepId>,
    pub finished: u64,
    pub total: u64,
    pub ledger: Ledger,
    /// Tasks skipped because an input failed, since the caller last drained them.
    pub skipped: Vec<TaskRef>,
    none: Arc<Value>,
    /// Reused buffers, so finishing a task allocates nothing in the steady state.
    work: Vec<(TaskRef, Outcome, Value)>,
    newly_ready: Vec<TaskRef>,
    /// Each step's learned footprint, bumped within the run on under-estimates.
    models: Vec<Option<StepModel>>,
    /// Steps whose plugin estimates each task from its inputs at dispatch.
    follows_data: Vec<bool>,
    /// Where buffers go when a reservation cannot fit; `None` once spilling failed.
    spill: Option<&'g SpillDir>,
    /// Bytes moved to disk so far, in how many spills.
    pub spilled: u64,
    pub spill_count: u64,
    /// Why spilling stopped, if it did.
    pub spill_error: Option<String>,
    /// Workers waiting for something to change: only then is there anyone to wake.
    pub sleepers: usize,
}

/// A step whose tasks take less than this on average is quick: workers claim its tasks in
/// batches, so the lock is taken once per batch rather than once per task.
const QUICK_TASK: Duration = Duration::from_micros(20);
/// Tasks of a step timed before it can count as quick.
const TIMED_BEFORE_BATCHING: u64 = 16;

impl<'g> State<'g> {
    pub fn new(
        graph: &'g Graph,
        plan: &Plan,
        follows_data: Vec<bool>,
        budget: u64,
        spill: Option<&'g SpillDir>,
    ) -> State<'g> {
        let steps = graph
            .steps
            .iter()
            .map(|s| StepState {
                pending: Vec::new(),
                next_source: 0,
                ready: VecDeque::new(),
                deferred: VecDeque::new(),
                is_source: s.inputs.is_empty(),
                timed: 0,
                wall_nanos: 0,
            })
            .collect();
        let mut priority: Vec<StepId> = (0..graph.steps.len()).collect();
        priority.sort_by_key(|&s| (graph.steps[s].inputs.is_empty(), std::cmp::Reverse(graph.steps[s].depth), s));
        State {
            graph,
            steps,
            outputs: HashMap::new(),
            poisoned: HashSet::new(),
            priority,
            finished: 0,
            total: graph.total_tasks(),
            ledger: Ledger::new(budget),
            skipped: Vec::new(),
            none: Arc::new(Value::None),
            work: Vec::new(),
            newly_ready: Vec::new(),
            models: plan.steps.iter().map(|s| s.model.clone()).collect(),
            follows_data,
            spill,
            spilled: 0,
            spill_count: 0,
            spill_error: None,
            sleepers: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.finished == self.total
    }

    /// Chooses what a free worker does next: the most preferred task the ledger admits (its
    /// estimate reserved under the measurement tag `tag_for()` gives it), or a task of a step
    /// whose plugin must first look at the inputs to estimate (outside this lock). A task that
    /// does not fit runs only when nothing else is running, then alone.
    pub fn pick(&mut self, plan: &Plan, tag_for: impl Fn() -> u32 + Copy) -> Pick {
        for i in 0..self.priority.len() {
            let step = self.priority[i];
            if let Some(&(index, plugin_estimate)) = self.steps[step].deferred.front() {
                let Some(admitted) = self.admit(plan, step, plugin_estimate) else { continue };
                self.steps[step].deferred.pop_front();
                return Pick::Run(self.start(TaskRef { step, index }, admitted, plugin_estimate, tag_for));
            }
            if !self.has_ready(step) {
                continue;
            }
            if self.follows_data[step] {
                let Some(index) = self.pop_ready(step) else { continue };
                return Pick::Estimate(TaskRef { step, index });
            }
            let plugin_estimate = plan.steps[step].plugin_estimate;
            let Some(admitted) = self.admit(plan, step, plugin_estimate) else { continue };
            let Some(index) = self.pop_ready(step) else { continue };
            return Pick::Run(self.start(TaskRef { step, index }, admitted, plugin_estimate, tag_for));
        }
        Pick::Wait
    }

    /// Admits a task whose plugin has just estimated it at dispatch, or defers it (first in
    /// its step's line) until it fits.
    pub fn admit_estimated(
        &mut self,
        plan: &Plan,
        task: TaskRef,
        plugin_estimate: u64,
        tag_for: impl Fn() -> u32 + Copy,
    ) -> Option<Picked> {
        match self.admit(plan, task.step, plugin_estimate) {
            Some(admitted) => Some(self.start(task, admitted, plugin_estimate, tag_for)),
            None => {
                self.steps[task.step].deferred.push_back((task.index, plugin_estimate));
                None
            }
        }
    }

    /// Whether tasks of `step` are quick enough to be claimed in batches.
    pub fn is_quick(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        s.timed >= TIMED_BEFORE_BATCHING && s.wall_nanos < s.timed * QUICK_TASK.as_nanos() as u64
    }

    /// Claims up to `wanted` more ready tasks of `first`'s step with the same estimate, as many
    /// as fit beside what runs, each reserved under its own tag, appended to `out`.
    pub fn pick_more(&mut self, first: &Picked, wanted: usize, tag_for: impl Fn() -> u32, out: &mut Vec<Picked>) {
        let step = first.task.step;
        if !self.steps[step].deferred.is_empty() {
            return;
        }
        let admitted = self.ledger.admit_many(first.estimate, wanted);
        let from = out.len();
        for _ in 0..admitted {
            let Some(index) = self.pop_ready(step) else { break };
            out.push(Picked { task: TaskRef { step, index }, tag: tag_for(), ..*first });
        }
        self.ledger.start_all(out[from..].iter().map(|picked| picked.tag), first.estimate);
    }

    /// The estimate of a task of `step` whose plugin estimates `plugin_estimate`, and whether
    /// the ledger admits it (after spilling to make room); `None` when it must wait. One
    /// decision per task: the live guard reads counters other threads move, so asking twice
    /// could answer differently.
    fn admit(&mut self, plan: &Plan, step: StepId, plugin_estimate: u64) -> Option<Admitted> {
        let step_plan = &plan.steps[step];
        let (estimate, source) =
            step_plan.estimate_for(self.models[step].as_ref(), plugin_estimate, step_plan.input_bytes);
        self.make_room(estimate);
        match self.ledger.admission(estimate) {
            Admission::Wait => None,
            admission => Some(Admitted { estimate, source, admission }),
        }
    }

    /// Reserves the admitted estimate for `task` under a fresh measurement tag.
    fn start(&mut self, task: TaskRef, admitted: Admitted, plugin_estimate: u64, tag_for: impl Fn() -> u32) -> Picked {
        let tag = tag_for();
        self.ledger.start(tag, admitted.estimate);
        let Admitted { estimate, source, admission } = admitted;
        Picked { task, estimate, source, plugin_estimate, tag, admission }
    }

    /// Spills resident buffers that no running task is reading, largest first, until a task
    /// estimated at `estimate` fits the budget or nothing is left to spill. Disk trouble is
    /// reported once and the run goes on without spilling.
    fn make_room(&mut self, estimate: u64) {
        let Some(spill) = self.spill else { return };
        let budget = self.ledger.budget();
        if self.ledger.resident() == 0 || self.ledger.used().saturating_add(estimate) <= budget {
            return;
        }
        // Victims: buffers only the scheduler holds (no task has them as inputs right now).
        let mut victims: Vec<(u64, TaskRef)> = self
            .outputs
            .iter()
            .filter(|(_, live)| live.resident_bytes > 0 && Arc::strong_count(&live.value) == 1)
            .map(|(task, live)| (live.resident_bytes, *task))
            .collect();
        victims.sort_unstable_by_key(|&(bytes, _)| std::cmp::Reverse(bytes));
        for (_, task) in victims {
            if self.ledger.used().saturating_add(estimate) <= budget {
                break;
            }
            let Some(live) = self.outputs.get_mut(&task) else { continue };
            let Some(value) = Arc::get_mut(&mut live.value) else { continue };
            match spill_value(spill, value) {
                Ok(moved) => {
                    live.resident_bytes -= moved.min(live.resident_bytes);
                    self.ledger.remove_resident(moved);
                    self.spilled += moved;
                    self.spill_count += 1;
                }
                Err(error) => {
                    tracing::warn!("spilling failed, going on without spilling: {error}");
                    self.spill_error = Some(error.to_string());
                    self.spill = None;
                    return;
                }
            }
        }
    }

    /// A task peaked at `peak` beyond its estimate: the step's learned footprint reacts at once.
    pub fn note_underestimate(&mut self, step: StepId, peak: u64, plugin_estimate: u64, input_bytes: u64) {
        if let Some(model) = self.models[step].as_mut() {
            model.bump(peak, plugin_estimate, input_bytes);
        }
    }

    fn has_ready(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        if s.is_source { s.next_source < self.graph.steps[step].tasks } else { !s.ready.is_empty() }
    }

    fn pop_ready(&mut self, step: StepId) -> Option<u64> {
        if !self.has_ready(step) {
            return None;
        }
        let s = &mut self.steps[step];
        if s.is_source {
            let n = s.next_source;
            s.next_source += 1;
            Some(self.graph.steps[step].nth_to_start(n))
        } else {
            s.ready.pop_front()
        }
    }

    /// Appends `task`'s input values, edge by edge in gather order, to `out`, and the number
    /// of values per input to `counts`.
    /// Returns the inputs' buffer bytes.
    pub fn collect_inputs(&self, task: TaskRef, out: &mut Vec<Arc<Value>>, counts: &mut Vec<usize>) -> u64 {
        let mut bytes = 0;
        for &edge in &self.graph.steps[task.step].inputs {
            let before = out.len();
            let producer = self.graph.edges[edge].producer;
            self.graph.for_each_producer(edge, task.index, |index| {
                if let Some(live) = self.outputs.get(&TaskRef { step: producer, index }) {
                    bytes += live.resident_bytes;
                    out.push(live.value.clone());
                } else {
                    out.push(self.none.clone());
                }
            });
            counts.push(out.len() - before);
        }
        bytes
    }

    /// Records the end of a running task that took `wall`: frees its reservation and inputs,
    /// keeps its output for its consumers, and makes ready the consumers whose last input this was.
    pub fn finish(&mut self, task: TaskRef, tag: u32, outcome: Outcome, output: Value, wall: Duration) {
        self.ledger.finish(tag);
        let step = &mut self.steps[task.step];
        step.timed += 1;
        step.wall_nanos = step.wall_nanos.saturating_add(wall.as_nanos().try_into().unwrap_or(u64::MAX));
        self.complete(task, outcome, output);
    }

    fn complete(&mut self, task: TaskRef, outcome: Outcome, output: Value) {
        let mut work = std::mem::take(&mut self.work);
        let mut ready = std::mem::take(&mut self.newly_ready);
        work.push((task, outcome, output));
        while let Some((task, outcome, output)) = work.pop() {
            self.finished += 1;
            self.release_inputs(task);
            if outcome == Outcome::Ok {
                self.keep_output(task, output);
            } else {
                drop(output);
            }
            self.notify_consumers(task, outcome != Outcome::Ok, &mut ready);
            for newly_ready in ready.drain(..) {
                if self.poisoned.remove(&newly_ready) {
                    self.skipped.push(newly_ready);
                    work.push((newly_ready, Outcome::Skipped, Value::None));
                } else {
                    self.steps[newly_ready.step].ready.push_back(newly_ready.index);
                }
            }
        }
        self.work = work;
        self.newly_ready = ready;
    }

    fn keep_output(&mut self, task: TaskRef, output: Value) {
        if matches!(output, Value::None) {
            return; // consumers get the shared `None`; nothing to store or free.
        }
        let consumers: u64 =
            self.graph.steps[task.step].outputs.iter().map(|&e| self.graph.consumer_count(e, task.index)).sum();
        if consumers == 0 {
            return;
        }
        let resident_bytes = output.buffer_bytes();
        self.ledger.add_resident(resident_bytes);
        self.outputs
            .insert(task, LiveOutput { value: Arc::new(output), remaining_consumers: consumers, resident_bytes });
    }

    /// Counts `task` as finished for each consumer; appends consumers now free to go.
    fn notify_consumers(&mut self, task: TaskRef, poison: bool, ready: &mut Vec<TaskRef>) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].outputs {
            let consumer = graph.edges[edge].consumer;
            let tasks = graph.steps[consumer].tasks as usize;
            let pending = &mut self.steps[consumer].pending;
            if pending.is_empty() {
                pending.resize(tasks, UNTOUCHED);
            }
            graph.for_each_consumer(edge, task.index, |index| {
                let counter = &mut self.steps[consumer].pending[index as usize];
                if *counter == UNTOUCHED {
                    let inputs: u64 =
                        graph.steps[consumer].inputs.iter().map(|&e| graph.producer_count(e, index)).sum();
                    *counter = u32::try_from(inputs).unwrap_or(u32::MAX - 1);
                }
                *counter -= 1;
                let consumer_task = TaskRef { step: consumer, index };
                if poison {
                    self.poisoned.insert(consumer_task);
                }
                if *counter == 0 {
                    ready.push(consumer_task);
                }
            });
        }
    }

    /// Each input value of `task` has one consumer fewer; the last consumer frees it.
    fn release_inputs(&mut self, task: TaskRef) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].inputs {
            let producer = graph.edges[edge].producer;
            graph.for_each_producer(edge, task.index, |index| {
                let key = TaskRef { step: producer, index };
                if let Some(live) = self.outputs.get_mut(&key) {
                    // A spilled input's pages go back once its reader is done, so a gather over
                    // more than the budget streams through its inputs.
                    release_value_pages(&live.value);
                    live.remaining_consumers -= 1;
                    if live.remaining_consumers == 0 {
                        let live = self.outputs.remove(&key).expect("present");
                        self.ledger.remove_resident(live.resident_bytes);
                    }
                }
            });
        }
    }
}
