//! The scheduler's bookkeeping, free of threads so it can be tested directly: dependency
//! counters, ready queues, live outputs, the memory ledger, the choice of the next task, and
//! what happens when a task finishes, fails or is skipped.
//!
//! Per pending task the only state is one `u32` counter of unfinished inputs, allocated per
//! step when its first producer finishes. Source tasks (steps without inputs) are a cursor, not
//! a queue. Outputs live in a map only while some consumer still needs them.
//!
//! Nothing slow happens here, because all of it runs under the scheduler's one lock: spill
//! victims are *chosen* here ([`Pick::Spill`]) and written by the worker outside the lock
//! ([`State::finish_spills`] swaps the mapped files in); values whose last consumer is done, and
//! outputs nobody reads, go to [`State::garbage`] for the worker to drop outside the lock.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use runner_plugin::{Storage, Value};

use crate::estimate::{Params, StepModel};
use crate::graph::Graph;
use crate::memory::spill::{MappedBuffer, swap_in};
use crate::memory::{Admission, Ledger, Meter, TaskSlot};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::StepId;
use crate::resume::Reuse;

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
    /// Buffer bytes, wherever they are.
    bytes: u64,
    /// Bytes of the file a path value names (what a consumer reading it learns from, with
    /// `bytes`, as its input bytes; never mapped by the engine).
    file_bytes: u64,
    /// Buffer bytes counted in the ledger while resident (0 once spilled).
    resident_bytes: u64,
    /// A worker is writing it to a spill file: not a victim again until that is done.
    spilling: bool,
    /// Its content hash, for its consumers' inputs hash (0 when not hashed).
    hash: u64,
}

/// Per-step scheduling state.
struct StepState {
    /// Unfinished producer tasks per consumer task (`UNTOUCHED` until first needed).
    pending: Vec<u32>,
    /// Next source index to dispatch (steps without inputs).
    next_source: u64,
    ready: VecDeque<u64>,
    /// Tasks whose own estimate (asked of the plugin at dispatch) did not fit yet, with it.
    deferred: VecDeque<(u64, u64)>,
    is_source: bool,
    /// Tasks finished so far and their summed wall time, to tell quick steps.
    timed: u64,
    wall_nanos: u64,
    /// Tasks of the step holding a reservation now.
    running: u32,
    /// The step's estimate is a guess (no history, no hint, a plugin that says its estimate is
    /// not exact): one task runs until the first is measured (a slow start).
    on_probation: bool,
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    /// Not run because an input failed or is missing, or run and found its own input missing
    /// under `on_missing: skip`: it and everything downstream are skipped, and that is no failure.
    Skipped,
    /// Found its input missing under `on_missing: ignore`: it is left out of its consumers'
    /// gathers (a gather left empty is skipped; a consumer reading it alone is skipped).
    Dropped,
    /// Not run: `--resume` took its output over from the run it resumes.
    Reused,
}

/// What a finished task hands its consumers: its value, or in a simulation only its size (a
/// virtual value holds no buffer, yet the ledger, the victim choice and the consumers' input
/// bytes see it as a buffer of that many bytes).
#[derive(Debug)]
pub enum Produced {
    Value(Value),
    Virtual { bytes: u64 },
}

impl Produced {
    fn buffer_bytes(&self) -> u64 {
        match self {
            Produced::Value(value) => value.buffer_bytes(),
            Produced::Virtual { bytes } => *bytes,
        }
    }
}

/// A task to count as finished, in [`State::complete`]'s work list.
struct Completion {
    task: TaskRef,
    outcome: Outcome,
    output: Produced,
    /// The size of the file a path output names.
    file_bytes: u64,
    /// Its output's content hash (for its consumers' inputs hash), 0 when unknown.
    hash: u64,
    /// Its consumers are skipped, for this reason.
    poison: Option<SkipReason>,
}

/// Why a task was skipped without running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// An input failed: the run fails because of that input.
    InputFailed,
    /// An input is missing (`on_missing: skip` or `ignore` upstream): not a failure.
    InputMissing,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::InputFailed => "an input failed",
            SkipReason::InputMissing => "an input is missing",
        }
    }
}

/// What a free worker should do.
#[derive(Debug)]
pub enum Pick {
    /// Run this task (its estimate is reserved).
    Run(Picked),
    /// Ask the plugin for this task's estimate (outside the lock), then [`State::admit_estimated`].
    Estimate(TaskRef),
    /// Write the buffers in [`State::take_spill_jobs`] to disk (outside the lock), then
    /// [`State::finish_spills`]: a task waits for the room.
    Spill,
    /// Nothing can start now.
    Wait,
}

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

/// Something to free outside the lock.
#[expect(dead_code, reason = "held only to be dropped once the lock is released")]
pub enum Garbage {
    Value(Arc<Value>),
    Storage(Storage),
    Mapped(MappedBuffer),
}

impl Garbage {
    /// A heap copy a spill replaced: freeing it should give its pages back to the OS.
    pub fn is_spilled_copy(&self) -> bool {
        matches!(self, Garbage::Storage(_))
    }
}

/// An estimate the ledger admitted.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    estimate: u64,
    reserved: u64,
    source: EstimateSource,
    admission: Admission,
    input_bytes: u64,
}

/// A task chosen to run.
#[derive(Debug, Clone, Copy)]
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
    /// Its reservation in the ledger.
    pub slot: TaskSlot,
    pub admission: Admission,
}

/// A step's learned figure for this run, and where it came from.
#[derive(Debug, Clone)]
struct Model {
    model: StepModel,
    /// `History` when learned from the store; otherwise the source of the estimate it corrects.
    source: EstimateSource,
}

/// The whole mutable state of a run, guarded by one lock.
pub struct State<'g> {
    graph: &'g Graph,
    steps: Vec<StepState>,
    outputs: HashMap<TaskRef, LiveOutput>,
    /// Tasks that will be skipped when they become ready, and why.
    poisoned: HashMap<TaskRef, SkipReason>,
    /// Tasks that found their input missing under `on_missing: ignore`: left out of gathers.
    dropped: HashSet<TaskRef>,
    /// Non-source steps ordered by preference: deeper first (their tasks free memory).
    priority: Vec<StepId>,
    /// Source steps; they start in lockstep (see [`State::next_source_step`]).
    sources: Vec<StepId>,
    pub finished: u64,
    pub total: u64,
    pub ledger: Ledger<'g>,
    /// Tasks skipped without running (an input failed or is missing), since the caller last
    /// drained them.
    pub skipped: Vec<(TaskRef, SkipReason)>,
    /// Tasks `--resume` took over, since the caller last drained them.
    pub reused: Vec<TaskRef>,
    reuse: Option<&'g Reuse>,
    none: Arc<Value>,
    /// Reused buffers, so finishing a task allocates nothing in the steady state.
    work: Vec<Completion>,
    newly_ready: Vec<TaskRef>,
    /// Each step's learned footprint, bumped within the run on under-estimates.
    models: Vec<Option<Model>>,
    params: Params,
    /// Steps whose plugin estimates each task from its inputs at dispatch.
    follows_data: Vec<bool>,
    /// Whether spilling is possible: false without a spill dir, and once it failed.
    can_spill: bool,
    /// Buffers chosen for spilling, for the worker that chose them.
    spill_jobs: Vec<SpillJob>,
    /// Spills being written by some worker.
    spills_in_flight: usize,
    /// Tasks whose plugin some worker is asking for an estimate (they hold no reservation yet).
    estimating: usize,
    /// Bytes moved to disk so far, in how many spills.
    pub spilled: u64,
    pub spill_count: u64,
    /// Why spilling stopped, if it did.
    pub spill_error: Option<String>,
    /// What workers drop once they have let go of the lock.
    pub garbage: Vec<Garbage>,
    /// Emptied `Arc`s of outputs whose consumers are done, reused for new outputs so that
    /// passing values allocates nothing per task in the steady state.
    spare: Vec<Arc<Value>>,
    /// Workers waiting for something to change: only then is there anyone to wake.
    pub sleepers: usize,
    /// Set when no task can ever start again although some never ran (an engine bug, or a
    /// worker that died): every worker stops instead of waiting forever.
    pub stuck: Option<String>,
}

/// A step whose tasks take less than this on average is quick: workers claim its tasks in
/// batches, so the lock is taken once per batch rather than once per task.
const QUICK_TASK: Duration = Duration::from_micros(20);
/// Tasks of a step timed before it can count as quick.
const TIMED_BEFORE_BATCHING: u64 = 16;

/// What a task reads, in bytes.
#[derive(Debug, Clone, Copy, Default)]
struct InputSums {
    /// Buffer bytes of all its inputs, resident or spilled.
    bytes: u64,
    /// Of those, the bytes in spill files: mapped (and resident) while the task reads them.
    spilled: u64,
}

impl<'g> State<'g> {
    /// `on_probation[step]`: the step's first task runs alone until measured.
    pub fn new(
        graph: &'g Graph,
        plan: &Plan,
        follows_data: Vec<bool>,
        on_probation: Vec<bool>,
        budget: u64,
        meter: &'g dyn Meter,
        reuse: Option<&'g Reuse>,
    ) -> State<'g> {
        let steps = graph
            .steps
            .iter()
            .zip(&on_probation)
            .map(|(s, &on_probation)| StepState {
                pending: Vec::new(),
                next_source: 0,
                ready: VecDeque::new(),
                deferred: VecDeque::new(),
                is_source: s.inputs.is_empty(),
                timed: 0,
                wall_nanos: 0,
                running: 0,
                on_probation,
            })
            .collect();
        let (sources, mut priority): (Vec<StepId>, Vec<StepId>) =
            (0..graph.steps.len()).partition(|&s| graph.steps[s].inputs.is_empty());
        priority.sort_by_key(|&s| (std::cmp::Reverse(graph.steps[s].depth), s));
        State {
            graph,
            steps,
            outputs: HashMap::new(),
            poisoned: HashMap::new(),
            dropped: HashSet::new(),
            priority,
            sources,
            finished: 0,
            total: graph.total_tasks(),
            ledger: Ledger::new(budget, meter),
            skipped: Vec::new(),
            reused: Vec::new(),
            reuse,
            none: Arc::new(Value::None),
            work: Vec::new(),
            newly_ready: Vec::new(),
            models: plan
                .steps
                .iter()
                .map(|s| s.model.clone().map(|model| Model { model, source: EstimateSource::History }))
                .collect(),
            params: Params::default(),
            follows_data,
            // Until a spill fails.
            can_spill: true,
            spill_jobs: Vec::new(),
            spills_in_flight: 0,
            estimating: 0,
            spilled: 0,
            spill_count: 0,
            spill_error: None,
            garbage: Vec::new(),
            spare: Vec::new(),
            sleepers: 0,
            stuck: None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.finished == self.total
    }

    /// Tasks that will never run because the run is stuck.
    pub fn unfinished(&self) -> u64 {
        self.total - self.finished
    }

    /// Chooses what a free worker does next: the most preferred task the ledger admits (reserved
    /// in `slot`), a task whose plugin must first look at its inputs to estimate it (outside
    /// this lock), spill victims to write, or nothing.
    ///
    /// The order finishes what was started: consumers (deeper steps first) before sources, and
    /// sources in lockstep, each in an order that completes the gathers nearest to it first.
    /// Buffers are spilled only when waiting for running tasks cannot make room (see
    /// [`State::should_spill`]), so a budget that a good order fits never spills.
    pub fn pick(&mut self, plan: &Plan, slot: TaskSlot) -> Pick {
        // What the most preferred task that did not fit needs.
        let mut blocked: Option<u64> = None;
        for i in 0..self.priority.len() {
            let step = self.priority[i];
            match self.pick_from(plan, step, slot) {
                Ok(pick) => return pick,
                // Preferred work that only a spill can make room for: make it now, rather than
                // let less preferred work take the room meanwhile (other workers go on).
                Err(Some(needed)) if blocked.is_none() && self.should_spill(needed) => {
                    return self.choose_victims(needed);
                }
                Err(needed) => blocked = blocked.or(needed),
            }
        }
        if let Some(step) = self.next_source_step() {
            match self.pick_from(plan, step, slot) {
                Ok(pick) => return pick,
                Err(needed) => blocked = blocked.or(needed),
            }
        }
        match blocked {
            Some(needed) if self.should_spill(needed) => self.choose_victims(needed),
            _ => Pick::Wait,
        }
    }

    /// A pick from `step`, or `Err(Some(bytes))` when its next task needs `bytes` that do not
    /// fit, `Err(None)` when it has nothing to offer now.
    fn pick_from(&mut self, plan: &Plan, step: StepId, slot: TaskSlot) -> Result<Pick, Option<u64>> {
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
            return Ok(Pick::Estimate(task));
        }
        let plugin_estimate = plan.steps[step].plugin_estimate;
        let admitted = self.admit(plan, task, plugin_estimate)?;
        self.pop_ready(step);
        Ok(Pick::Run(self.start(task, admitted, plugin_estimate, slot)))
    }

    /// The source step to start a task of next: the one least far through its tasks, so that
    /// sources whose outputs meet downstream advance together instead of one filling memory
    /// before the other starts.
    fn next_source_step(&self) -> Option<StepId> {
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

    /// A worker is back with the estimate a [`Pick::Estimate`] asked for.
    pub fn estimated(&mut self) {
        self.estimating -= 1;
    }

    /// Whether anything can still change what [`State::pick`] answers: a running task that will
    /// finish, a spill being written, an estimate being made. When nothing can and a pick still
    /// waits, the run is stuck.
    pub fn can_change(&self) -> bool {
        self.ledger.running() > 0 || self.spills_in_flight > 0 || self.estimating > 0
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
        let reserved = estimate.saturating_add(picked.reserved - picked.estimate);
        if self.ledger.try_resize(picked.slot, reserved) {
            self.ledger.stop_growing(picked.slot);
            return Some(Picked { estimate, reserved, source, plugin_estimate, ..picked });
        }
        self.ledger.stop_growing(picked.slot);
        self.ledger.finish(picked.slot);
        self.steps[picked.task.step].running -= 1;
        self.steps[picked.task.step].deferred.push_back((picked.task.index, plugin_estimate));
        None
    }

    /// Whether tasks of `step` are quick enough to be claimed in batches.
    pub fn is_quick(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        s.timed >= TIMED_BEFORE_BATCHING && s.wall_nanos < s.timed * QUICK_TASK.as_nanos() as u64
    }

    /// Claims up to `slots.len()` more ready tasks of `first`'s step with the same estimate, as
    /// many as fit beside what runs, each reserved in the next of `slots`, appended to `out`.
    pub fn pick_more(&mut self, first: &Picked, slots: impl Iterator<Item = TaskSlot>, out: &mut Vec<Picked>) {
        let step = first.task.step;
        if !self.steps[step].deferred.is_empty() || self.steps[step].on_probation {
            return;
        }
        let (lower, upper) = slots.size_hint();
        let admitted = self.ledger.admit_many(first.reserved, upper.unwrap_or(lower));
        let from = out.len();
        for slot in slots.take(admitted) {
            let Some(index) = self.pop_ready(step) else { break };
            let task = TaskRef { step, index };
            let input_bytes = self.input_sums(task).bytes;
            out.push(Picked { task, slot, input_bytes, ..*first });
        }
        self.steps[step].running += (out.len() - from) as u32;
        self.ledger.start_all(out[from..].iter().map(|picked| picked.slot), first.reserved);
    }

    /// The estimate of `task` whose plugin estimates `plugin_estimate`, and whether the ledger
    /// admits it now; `Err(Some(bytes))` (what it needs) when it must wait. One decision per
    /// task: the live guard reads counters other threads move, so asking twice could answer
    /// differently.
    fn admit(&self, plan: &Plan, task: TaskRef, plugin_estimate: u64) -> Result<Admitted, Option<u64>> {
        let inputs = self.input_sums(task);
        let (estimate, source) = self.predict(plan, task.step, plugin_estimate, inputs.bytes);
        // The margin never makes a task oversized: one expected to peak within the budget
        // reserves at most the budget (and so runs alone).
        let budget = self.ledger.budget();
        let estimate = match &self.models[task.step] {
            Some(m) if estimate > budget && m.model.predict_peak(plugin_estimate, inputs.bytes) <= budget => budget,
            _ => estimate,
        };
        // Spilled inputs are mapped back in as the task reads them: they count while it runs.
        let reserved = estimate.saturating_add(inputs.spilled);
        match self.ledger.admission(reserved) {
            Admission::Wait => Err(Some(reserved)),
            Admission::Alone { .. } if !self.nothing_could_free_memory() => Err(Some(reserved)),
            admission => {
                let oversized = reserved > self.ledger.budget() || inputs.bytes > self.ledger.budget();
                let admission = match admission {
                    Admission::Alone { .. } => Admission::Alone { oversized },
                    Admission::Fits if oversized => Admission::Alone { oversized },
                    other => other,
                };
                Ok(Admitted { estimate, reserved, source, admission, input_bytes: inputs.bytes })
            }
        }
    }

    /// A task that does not fit may still run alone when waiting cannot help: nothing runs or is
    /// being spilled, and nothing spillable is left (or spilling is impossible).
    fn nothing_could_free_memory(&self) -> bool {
        self.ledger.running() == 0 && self.spills_in_flight == 0 && (!self.can_spill || !self.has_spill_victim())
    }

    /// The estimate of a task of `step` and its source: from the step's model (learned from
    /// history, or set by this run's first measurements), else the hint, else the plugin's own.
    fn predict(&self, plan: &Plan, step: StepId, plugin_estimate: u64, input_bytes: u64) -> (u64, EstimateSource) {
        match &self.models[step] {
            Some(Model { model, source }) => (model.predict(plugin_estimate, input_bytes), *source),
            None => plan.steps[step].estimate_for(None, plugin_estimate, input_bytes),
        }
    }

    /// Reserves the admitted estimate for `task` in `slot`.
    fn start(&mut self, task: TaskRef, admitted: Admitted, plugin_estimate: u64, slot: TaskSlot) -> Picked {
        self.ledger.start(slot, admitted.reserved);
        self.steps[task.step].running += 1;
        let Admitted { estimate, reserved, source, admission, input_bytes } = admitted;
        Picked { task, estimate, reserved, source, plugin_estimate, input_bytes, slot, admission }
    }

    /// Spilling is the last resort, for a task needing `needed` bytes that does not fit: only
    /// when waiting cannot make room — nothing runs, or the resident buffers alone leave too
    /// little even once every running task has finished — and no spill is being written.
    fn should_spill(&self, needed: u64) -> bool {
        let waiting_cannot_help =
            self.ledger.running() == 0 || self.ledger.resident().saturating_add(needed) > self.ledger.budget();
        self.can_spill && waiting_cannot_help && self.spills_in_flight == 0 && self.has_spill_victim()
    }

    /// A resident buffer that no running task reads (only the scheduler holds it).
    fn has_spill_victim(&self) -> bool {
        self.ledger.resident() > 0 && self.outputs.values().any(is_victim)
    }

    /// Chooses resident buffers that no running task is reading, largest first, until a task
    /// needing `needed` bytes would fit, and hands them to the worker to write.
    fn choose_victims(&mut self, needed: u64) -> Pick {
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
    fn count_spilled(&mut self, task: TaskRef) {
        let Some(live) = self.outputs.get_mut(&task) else { return };
        let moved = live.resident_bytes;
        live.resident_bytes = 0;
        self.ledger.remove_resident(moved);
        self.spilled += moved;
        self.spill_count += 1;
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

    fn has_ready(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        if s.is_source { s.next_source < self.graph.steps[step].tasks } else { !s.ready.is_empty() }
    }

    fn peek_ready(&self, step: StepId) -> Option<u64> {
        let s = &self.steps[step];
        if s.is_source {
            (s.next_source < self.graph.steps[step].tasks).then(|| self.graph.steps[step].nth_to_start(s.next_source))
        } else {
            s.ready.front().copied()
        }
    }

    fn pop_ready(&mut self, step: StepId) -> Option<u64> {
        let index = self.peek_ready(step)?;
        let s = &mut self.steps[step];
        if s.is_source {
            s.next_source += 1;
            self.skip_reused_sources(step);
        } else {
            s.ready.pop_front();
        }
        Some(index)
    }

    /// Buffer bytes of `task`'s inputs, and how many of them are spilled.
    fn input_sums(&self, task: TaskRef) -> InputSums {
        let mut sums = InputSums::default();
        for &edge in &self.graph.steps[task.step].inputs {
            let producer = self.graph.edges[edge].producer;
            self.graph.for_each_producer(edge, task.index, |index| {
                if let Some(live) = self.outputs.get(&TaskRef { step: producer, index }) {
                    sums.bytes += live.bytes + live.file_bytes;
                    sums.spilled += live.bytes - live.resident_bytes;
                }
            });
        }
        sums
    }

    /// Appends `task`'s input values, edge by edge in gather order, to `out`, and the number
    /// of values per input to `counts`.
    /// Returns the inputs' hash (their producers' output hashes in gather order).
    pub fn collect_inputs(&self, task: TaskRef, out: &mut Vec<Arc<Value>>, counts: &mut Vec<usize>) -> u64 {
        let mut hash = crate::resume::ProducersHash::default();
        for &edge in &self.graph.steps[task.step].inputs {
            let before = out.len();
            let producer = self.graph.edges[edge].producer;
            self.graph.for_each_producer(edge, task.index, |index| {
                let key = TaskRef { step: producer, index };
                let output_hash = match self.outputs.get(&key) {
                    Some(live) => {
                        out.push(live.value.clone());
                        live.hash
                    }
                    // Dropped (`on_missing: ignore`) producers are left out of gathers.
                    None if self.dropped.contains(&key) => return,
                    None => {
                        out.push(self.none.clone());
                        crate::resume::NONE_HASH
                    }
                };
                hash.add(output_hash);
            });
            counts.push(out.len() - before);
        }
        hash.finish()
    }

    /// Records the end of a running task that took `wall`: frees its reservation and inputs,
    /// keeps its output for its consumers, and makes ready the consumers whose last input this was.
    /// `file_bytes`: the size of the file a path output names (0 otherwise), which its consumers
    /// count as input bytes.
    /// `hash`: its output's content hash (0 when not hashed), for its consumers' inputs hash.
    pub fn finish(
        &mut self,
        picked: &Picked,
        outcome: Outcome,
        output: Value,
        file_bytes: u64,
        hash: u64,
        wall: Duration,
    ) {
        self.finish_produced(picked, outcome, Produced::Value(output), file_bytes, hash, wall);
    }

    /// [`State::finish`] for a simulated task, whose output is `output_bytes` of virtual buffer
    /// (see [`Produced::Virtual`]).
    pub fn finish_virtual(&mut self, picked: &Picked, outcome: Outcome, output_bytes: u64, wall: Duration) {
        self.finish_produced(picked, outcome, Produced::Virtual { bytes: output_bytes }, 0, 0, wall);
    }

    fn finish_produced(
        &mut self,
        picked: &Picked,
        outcome: Outcome,
        output: Produced,
        file_bytes: u64,
        hash: u64,
        wall: Duration,
    ) {
        self.ledger.finish(picked.slot);
        let step = &mut self.steps[picked.task.step];
        step.running -= 1;
        step.on_probation = false;
        step.timed += 1;
        step.wall_nanos = step.wall_nanos.saturating_add(wall.as_nanos().try_into().unwrap_or(u64::MAX));
        self.complete(picked.task, outcome, output, file_bytes, hash);
    }

    fn complete(&mut self, task: TaskRef, outcome: Outcome, output: Produced, file_bytes: u64, hash: u64) {
        let mut work = std::mem::take(&mut self.work);
        let mut ready = std::mem::take(&mut self.newly_ready);
        let poison = match outcome {
            Outcome::Failed => Some(SkipReason::InputFailed),
            Outcome::Skipped => Some(SkipReason::InputMissing),
            Outcome::Ok | Outcome::Dropped | Outcome::Reused => None,
        };
        work.push(Completion { task, outcome, output, file_bytes, hash, poison });
        while let Some(Completion { task, outcome, output, file_bytes, hash, poison }) = work.pop() {
            self.finished += 1;
            self.release_inputs(task);
            match outcome {
                Outcome::Ok | Outcome::Reused => self.keep_output(task, output, file_bytes, hash),
                Outcome::Dropped => {
                    self.dropped.insert(task);
                    self.discard(output);
                }
                Outcome::Failed | Outcome::Skipped => self.discard(output),
            }
            self.notify_consumers(task, poison, outcome == Outcome::Dropped, &mut ready);
            for newly_ready in ready.drain(..) {
                let skip = |outcome, poison| Completion {
                    task: newly_ready,
                    outcome,
                    output: Produced::Value(Value::None),
                    file_bytes: 0,
                    hash: 0,
                    poison,
                };
                if let Some(reason) = self.poisoned.remove(&newly_ready) {
                    self.skipped.push((newly_ready, reason));
                    work.push(skip(Outcome::Skipped, Some(reason)));
                } else if let Some(reason) = self.gathers_nothing(newly_ready) {
                    // A gather that `ignore` left empty is skipped, and dropped in turn from
                    // the gathers downstream (a store's finalize still runs without the chunk).
                    self.skipped.push((newly_ready, reason));
                    work.push(skip(Outcome::Dropped, None));
                } else if let Some(reused) = self.reuse.and_then(|r| r.get(newly_ready.step, newly_ready.index)) {
                    // Taken over from the resumed run: finished at once, its output had again.
                    self.reused.push(newly_ready);
                    work.push(reused_completion(newly_ready, reused));
                } else {
                    self.steps[newly_ready.step].ready.push_back(newly_ready.index);
                }
            }
        }
        self.work = work;
        self.newly_ready = ready;
    }

    /// Completes the reused tasks of source steps (the others follow as their producers are
    /// completed), before any task runs.
    pub fn take_over_reused(&mut self) {
        let Some(reuse) = self.reuse else { return };
        for step in self.sources.clone() {
            let mut indices: Vec<u64> = reuse.of_step(step).collect();
            indices.sort_unstable();
            for index in indices {
                let task = TaskRef { step, index };
                let reused = reuse.get(step, index).expect("listed");
                self.reused.push(task);
                let Completion { outcome, output, file_bytes, hash, .. } = reused_completion(task, reused);
                self.complete(task, outcome, output, file_bytes, hash);
            }
            self.skip_reused_sources(step);
        }
    }

    /// Moves `step`'s source cursor past tasks that were taken over.
    fn skip_reused_sources(&mut self, step: StepId) {
        let Some(reuse) = self.reuse else { return };
        let shape = &self.graph.steps[step];
        let state = &mut self.steps[step];
        while state.next_source < shape.tasks && reuse.get(step, shape.nth_to_start(state.next_source)).is_some() {
            state.next_source += 1;
        }
    }

    /// `InputMissing` when every producer of one of `task`'s gathered inputs was dropped (a
    /// gather left empty is skipped).
    fn gathers_nothing(&self, task: TaskRef) -> Option<SkipReason> {
        if self.dropped.is_empty() {
            return None;
        }
        let graph = self.graph;
        let empty = graph.steps[task.step].inputs.iter().any(|&edge| {
            let producer = graph.edges[edge].producer;
            let mut any_left = false;
            graph.for_each_producer(edge, task.index, |index| {
                any_left |= !self.dropped.contains(&TaskRef { step: producer, index });
            });
            graph.edges[edge].gathered && !any_left
        });
        empty.then_some(SkipReason::InputMissing)
    }

    /// A value nobody will read: freed outside the lock when it holds a buffer.
    fn discard(&mut self, output: Produced) {
        if let Produced::Value(value) = output
            && value.buffer_bytes() > 0
        {
            self.garbage.push(Garbage::Value(Arc::new(value)));
        }
    }

    fn keep_output(&mut self, task: TaskRef, output: Produced, file_bytes: u64, hash: u64) {
        let nothing = match &output {
            Produced::Value(value) => matches!(value, Value::None),
            Produced::Virtual { bytes } => *bytes == 0 && file_bytes == 0,
        };
        if nothing {
            return; // consumers get the shared `None`; nothing to store or free.
        }
        let consumers: u64 =
            self.graph.steps[task.step].outputs.iter().map(|&e| self.graph.consumer_count(e, task.index)).sum();
        if consumers == 0 {
            self.discard(output);
            return;
        }
        let bytes = output.buffer_bytes();
        let (output, resident) = match output {
            Produced::Value(value) => {
                let resident = is_resident(&value);
                (value, resident)
            }
            // A virtual buffer is resident until it is (virtually) spilled; its `Arc` holds
            // nothing, but counts its readers as a real one does, for the victim choice.
            Produced::Virtual { .. } => (Value::None, true),
        };
        let resident_bytes = if resident { bytes } else { 0 };
        self.ledger.add_resident(resident_bytes);
        let value = match self.spare.pop() {
            Some(mut shell) => match Arc::get_mut(&mut shell) {
                Some(slot) => {
                    *slot = output;
                    shell
                }
                None => Arc::new(output),
            },
            None => Arc::new(output),
        };
        self.outputs.insert(
            task,
            LiveOutput {
                value,
                remaining_consumers: consumers,
                bytes,
                file_bytes,
                resident_bytes,
                spilling: false,
                hash,
            },
        );
    }

    /// Takes emptied output `Arc`s back for reuse (a bounded number; the rest are freed with
    /// `shells` by the caller, outside the lock).
    pub fn recycle(&mut self, shells: &mut Vec<Arc<Value>>) {
        const KEPT: usize = 4096;
        let room = KEPT.saturating_sub(self.spare.len());
        let from = shells.len().saturating_sub(room);
        self.spare.extend(shells.drain(from..));
    }

    /// Counts `task` as finished for each consumer; appends consumers now free to go. With
    /// `poison`, its consumers will be skipped for that reason; a `dropped` task leaves its
    /// consumers' gathers, and skips a consumer that reads it alone.
    fn notify_consumers(&mut self, task: TaskRef, poison: Option<SkipReason>, dropped: bool, ready: &mut Vec<TaskRef>) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].outputs {
            let consumer = graph.edges[edge].consumer;
            let tasks = graph.steps[consumer].tasks as usize;
            let pending = &mut self.steps[consumer].pending;
            if pending.is_empty() {
                pending.resize(tasks, UNTOUCHED);
            }
            let poison = match (poison, dropped && !graph.edges[edge].gathered) {
                (Some(reason), _) => Some(reason),
                (None, true) => Some(SkipReason::InputMissing),
                (None, false) => None,
            };
            graph.for_each_consumer(edge, task.index, |index| {
                let counter = &mut self.steps[consumer].pending[index as usize];
                if *counter == UNTOUCHED {
                    let inputs: u64 =
                        graph.steps[consumer].inputs.iter().map(|&e| graph.producer_count(e, index)).sum();
                    *counter = u32::try_from(inputs).unwrap_or(u32::MAX - 1);
                }
                *counter -= 1;
                let consumer_task = TaskRef { step: consumer, index };
                if let Some(reason) = poison {
                    // A failure upstream outweighs a missing input: the consumer is skipped
                    // because of the failure.
                    let entry = self.poisoned.entry(consumer_task).or_insert(reason);
                    if reason == SkipReason::InputFailed {
                        *entry = reason;
                    }
                }
                if *counter == 0 {
                    ready.push(consumer_task);
                }
            });
        }
    }

    /// Each input value of `task` has one consumer fewer; the last consumer's value goes to the
    /// garbage, to be freed outside the lock.
    fn release_inputs(&mut self, task: TaskRef) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].inputs {
            let producer = graph.edges[edge].producer;
            graph.for_each_producer(edge, task.index, |index| {
                let key = TaskRef { step: producer, index };
                if let Some(live) = self.outputs.get_mut(&key) {
                    live.remaining_consumers -= 1;
                    if live.remaining_consumers == 0 {
                        let live = self.outputs.remove(&key).expect("present");
                        self.ledger.remove_resident(live.resident_bytes);
                        self.garbage.push(Garbage::Value(live.value));
                    }
                }
            });
        }
    }

    /// Gives up on the tasks that have not run: the run is stuck (see [`State::stuck`]).
    pub fn give_up(&mut self, why: String) {
        if self.stuck.is_none() {
            tracing::error!("{why}");
            self.stuck = Some(why);
        }
    }
}

/// How a task taken over by `--resume` counts as finished.
fn reused_completion(task: TaskRef, reused: &crate::resume::ReusedTask) -> Completion {
    let output = reused.value();
    let file_bytes = match &output {
        Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
        _ => 0,
    };
    Completion {
        task,
        outcome: Outcome::Reused,
        output: Produced::Value(output),
        file_bytes,
        hash: reused.output_hash,
        poison: None,
    }
}

/// Only the scheduler holds it (no task reads it now), it is in memory, and no one is writing it.
fn is_victim(live: &LiveOutput) -> bool {
    live.resident_bytes > 0 && !live.spilling && Arc::strong_count(&live.value) == 1
}

/// Whether a value's buffer is on the heap (an output can already be a mapped file).
fn is_resident(value: &Value) -> bool {
    match value {
        Value::Array(array) => array.storage().is_resident(),
        Value::Bytes(storage) => storage.is_resident(),
        _ => true,
    }
}
