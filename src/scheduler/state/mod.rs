//! The scheduler's bookkeeping, free of threads so it can be tested directly (and driven on a
//! virtual clock by [`crate::simulate`]): this file holds the run's whole mutable state — per
//! step its dependency counters, ready queue and source cursor; the live outputs; the ledger —
//! and reads it (ready tasks, a task's inputs and their bytes). What changes it lives beside:
//! [`pick`] (the next task and its admission), [`finish`] (a task's end and its consumers),
//! [`spill`] (victims and their swap); [`reach`] bounds how many tasks can still run at once.
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

use runner_plugin::{Storage, Value};

use crate::estimate::{Params, StepModel};
use crate::graph::Graph;
use crate::memory::spill::MappedBuffer;
use crate::memory::{Ledger, Meter};
use crate::plan::{EstimateSource, Plan};
use crate::recipe::{Recipe, StepId};
use crate::resume::Reuse;

mod finish;
mod pick;
mod reach;
mod spill;
#[cfg(test)]
mod testing;

use finish::Cascade;
pub use finish::{Outcome, SkipReason};
pub use pick::{Pick, Picked};
pub use spill::{SpillDone, SpillJob};

/// A task: its step and linear index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// Tasks concluded so far, however (run, skipped, reused).
    finished: u64,
    /// Tasks finished so far and their summed wall time, to tell quick steps.
    timed: u64,
    wall_nanos: u64,
    /// Tasks of the step holding a reservation now.
    running: u32,
    /// The step's estimate is a guess (no history, no hint, a plugin that says its estimate is
    /// not exact): one task runs until the first is measured (a slow start).
    on_probation: bool,
    /// What its plugin said of its last task estimated at dispatch (none yet: `None`).
    last_dispatch_estimate: Option<u64>,
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
    /// Tasks still waiting for other inputs that will be skipped when they become ready, and why.
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
    work: Vec<Cascade>,
    newly_ready: Vec<(TaskRef, Option<SkipReason>)>,
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
    /// The bytes those tasks are expected to reserve once estimated ([`pick::Estimating`]):
    /// room no other task is admitted into meanwhile.
    kept_for_estimates: u64,
    /// The task the spills being written make room for, and what it needs beyond what they
    /// free: room no other task is admitted into until they are written or it starts.
    kept_for_spill: Option<(TaskRef, u64)>,
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
    /// Which steps wait for all of which, once [`State::reach`] is first asked.
    waits: Option<reach::Waits>,
    /// Reused by [`State::reach`].
    chains: Vec<(StepId, u64)>,
    /// The lowest [`State::reach`] noted, and one not passed on yet.
    told_reach: u64,
    new_reach: Option<u64>,
}

/// What a task reads, in bytes.
#[derive(Debug, Clone, Copy, Default)]
struct InputSums {
    /// What it reads: its inputs' buffer bytes, resident or spilled, and their files' bytes.
    bytes: u64,
    /// Its inputs' buffer bytes, resident or spilled: held in memory while it runs.
    buffers: u64,
    /// Of those, the bytes in spill files: mapped (and resident) while the task reads them.
    spilled: u64,
}

/// What the scheduler asks of each step's plugin, once before a run or a simulation (never
/// under the lock): both drive the same [`State`] from it.
pub struct StepTraits {
    /// The plugin estimates each task from its inputs at dispatch.
    follows_data: Vec<bool>,
    /// The step's first task runs alone until measured: its estimate is the plugin's, and the
    /// plugin does not call it exact.
    on_probation: Vec<bool>,
}

impl StepTraits {
    /// What `recipe`'s plugins say of their steps, with `plan`'s estimate sources.
    pub fn of(recipe: &Recipe, plan: &Plan) -> StepTraits {
        let follows_data = recipe.steps.iter().map(|s| s.plugin.estimate_follows_data()).collect();
        let on_probation = (0..recipe.steps.len())
            .map(|id| {
                plan.steps[id].source == EstimateSource::Plugin
                    && !recipe.steps[id].plugin.estimate_is_exact(&crate::recipe::sample_args(recipe, id))
            })
            .collect();
        StepTraits { follows_data, on_probation }
    }

    /// `steps` steps whose plugins estimate before dispatch, none on probation.
    #[cfg(test)]
    pub fn plain(steps: usize) -> StepTraits {
        StepTraits { follows_data: vec![false; steps], on_probation: vec![false; steps] }
    }
}

impl<'g> State<'g> {
    pub fn new(
        graph: &'g Graph,
        plan: &Plan,
        traits: StepTraits,
        budget: u64,
        meter: &'g dyn Meter,
        reuse: Option<&'g Reuse>,
    ) -> State<'g> {
        let steps = graph
            .steps
            .iter()
            .zip(&traits.on_probation)
            .map(|(s, &on_probation)| StepState {
                pending: Vec::new(),
                next_source: 0,
                ready: VecDeque::new(),
                deferred: VecDeque::new(),
                last_dispatch_estimate: None,
                is_source: s.inputs.is_empty(),
                finished: 0,
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
            follows_data: traits.follows_data,
            // Until a spill fails.
            can_spill: true,
            spill_jobs: Vec::new(),
            spills_in_flight: 0,
            estimating: 0,
            kept_for_estimates: 0,
            kept_for_spill: None,
            spilled: 0,
            spill_count: 0,
            spill_error: None,
            garbage: Vec::new(),
            spare: Vec::new(),
            sleepers: 0,
            stuck: None,
            waits: None,
            chains: Vec::new(),
            told_reach: u64::MAX,
            new_reach: None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.finished == self.total
    }

    /// Tasks that will never run because the run is stuck.
    pub fn unfinished(&self) -> u64 {
        self.total - self.finished
    }

    /// Whether anything can still change what [`State::pick`] answers: a running task that will
    /// finish, a spill being written, an estimate being made. When nothing can and a pick still
    /// waits, the run is stuck.
    pub fn can_change(&self) -> bool {
        self.ledger.running() > 0 || self.spills_in_flight > 0 || self.estimating > 0
    }

    /// Whether `step` has a task to offer: one ready to start, or one deferred until it fits (a
    /// source's last task, its estimate grown at dispatch, is deferred after every task of its
    /// step has started: left out, it was never picked again and the run stopped as stuck).
    fn has_ready(&self, step: StepId) -> bool {
        let s = &self.steps[step];
        let ready = if s.is_source { s.next_source < self.graph.steps[step].tasks } else { !s.ready.is_empty() };
        ready || !s.deferred.is_empty()
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

    /// Calls `f` with each of `task`'s producers whose output is live, and that output.
    fn for_each_live_input(&self, task: TaskRef, mut f: impl FnMut(TaskRef, &LiveOutput)) {
        for &edge in &self.graph.steps[task.step].inputs {
            let step = self.graph.edges[edge].producer;
            self.graph.for_each_producer(edge, task.index, |index| {
                let producer = TaskRef { step, index };
                if let Some(live) = self.outputs.get(&producer) {
                    f(producer, live);
                }
            });
        }
    }

    /// Buffer bytes of `task`'s inputs, and how many of them are spilled.
    fn input_sums(&self, task: TaskRef) -> InputSums {
        let mut sums = InputSums::default();
        self.for_each_live_input(task, |_, live| {
            sums.bytes += live.bytes + live.file_bytes;
            sums.buffers += live.bytes;
            sums.spilled += live.bytes - live.resident_bytes;
        });
        sums
    }

    /// Bytes of `task`'s input buffers in spill files now.
    pub fn spilled_input_bytes(&self, task: TaskRef) -> u64 {
        self.input_sums(task).spilled
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

    /// Moves `step`'s source cursor past tasks that were taken over.
    fn skip_reused_sources(&mut self, step: StepId) {
        let Some(reuse) = self.reuse else { return };
        let shape = &self.graph.steps[step];
        let state = &mut self.steps[step];
        while state.next_source < shape.tasks && reuse.get(step, shape.nth_to_start(state.next_source)).is_some() {
            state.next_source += 1;
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
