//! A worker's loop and the lock protocol. Under the lock: report what the last unit's tasks
//! did and the spills written (its reservations and inputs released, consumers made ready), then
//! wait for and claim the next unit — tasks of one step with their inputs, as many as the
//! executor's unit holds and the ledger admits — or spill victims to write. Outside it: free
//! what the state let go of, write the spills, or hand the unit to the run's executor. A panic
//! outside any plugin fails the tasks the worker held, instead of leaving them to wait forever.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use runner_plugin::{DimValue, Input, Inputs, Value};
use smallvec::SmallVec;

use super::shared::{Shared, WorkerResult};
use super::state::SpillDone;
use super::stats::StepStats;
use super::{Failure, Garbage, Outcome, Pick, Picked, SkipReason, SpillJob, SpillRecord, State, TaskRef};
use crate::executor::UnitSizing;
use crate::measure;
use crate::memory::{Admission, TaskSlot};
use crate::recipe::StepId;

/// Most tasks of a quick step a worker claims at once.
pub(crate) const MAX_BATCH: usize = 64;

/// One worker thread's loop and its reusable buffers.
pub(super) struct Worker<'s, 'r> {
    pub(super) shared: &'s Shared<'r>,
    /// This worker's number, `0..workers`.
    pub(super) id: usize,
    pub(super) stats: Vec<StepStats>,
    pub(super) failures: Vec<Failure>,
    /// Tasks whose input was missing, under `on_missing: skip` or `ignore` (gaps, not failures).
    pub(super) missing: Vec<Failure>,
    pub(super) internal_error: Option<String>,
    pub(super) spill_records: Vec<SpillRecord>,
    /// Tasks claimed under the lock, run in order outside it, and kept (with how they ended,
    /// `ended[at]`) until the next report under the lock: that is where their reservations go
    /// back. Apart, so that claiming a task moves only what it needs to run.
    pub(super) claimed: Vec<Claimed>,
    pub(super) ended: Vec<Ended>,
    /// Claimed tasks that turned out to need more than they reserved, with their estimates,
    /// while they are admitted again under the lock.
    pub(super) regrow: Vec<(Picked, u64)>,
    /// Claimed tasks the executor left without an outcome (a bug of its), failed when the lock
    /// is let go.
    pub(super) abandoned: Vec<TaskRef>,
    /// Input values of the claimed tasks, each task's at its `Claimed::values`.
    pub(super) values: Vec<Arc<Value>>,
    /// Values per input of each claimed task, at its `Claimed::counts`.
    pub(super) counts: Vec<usize>,
    /// What a run task's input slots are reset to, so its buffers can go while the batch goes on.
    pub(super) none: Arc<Value>,
    /// The key and dim values of the task [`Worker::described`] (reused buffers).
    pub(super) key: String,
    pub(super) index: Vec<(&'r str, DimValue)>,
    pub(super) described: Option<TaskRef>,
    /// Tasks skipped since the last report, to record outside the lock.
    pub(super) skipped: Vec<(TaskRef, SkipReason)>,
    /// Tasks `--resume` took over, to record outside the lock.
    pub(super) reused: Vec<TaskRef>,
    /// Reused by batch claims.
    pub(super) batch: Vec<Picked>,
    /// Buffers to spill, chosen under the lock, and what writing them gave.
    pub(super) spill_jobs: Vec<SpillJob>,
    pub(super) spilled: Vec<SpillDone>,
    /// Values to free once the lock is released.
    pub(super) garbage: Vec<Garbage>,
    /// Emptied output `Arc`s, handed back to the state for reuse at the next report.
    pub(super) shells: Vec<Arc<Value>>,
    /// Tasks run (and their wall) not yet published to the step's [`StepProgress`]: a batch of
    /// one step's tasks is published at once, not task by task.
    pub(super) unpublished: UnpublishedRuns,
    /// A fall of the run's reach ([`State::reach`]) to pass on to the executor outside the lock.
    reach: Option<u64>,
}

/// See [`Worker::unpublished`].
#[derive(Debug, Default)]
pub(super) struct UnpublishedRuns {
    pub(super) step: StepId,
    pub(super) ran: u64,
    pub(super) wall: Duration,
}

/// A task claimed to run, with where its inputs are in the worker's buffers.
pub(super) struct Claimed {
    pub(super) picked: Picked,
    pub(super) values: Range<usize>,
    pub(super) counts: Range<usize>,
    /// Its producers' output hashes, hashed (see [`crate::resume::ProducersHash`]).
    pub(super) producers_hash: u64,
    /// Attempts made that count against its `retries:`, and times it was preempted (which do
    /// not), so far in this unit.
    pub(super) attempts: u32,
    pub(super) preempted: u32,
    /// When its first attempt started.
    pub(super) started: Option<Instant>,
    /// When the attempts its record spans began: the first, or the first after its last
    /// preemption (a preempted attempt is given up and the task waits to run again: the run it
    /// is recorded by, on the timeline and for the time models, is the one after).
    pub(super) counted_from: Option<Instant>,
}

/// How a claimed task's turn with the executor ended, for the next report.
pub(super) enum Ended {
    /// Not (yet) by any of these.
    NotYet,
    /// Concluded: what it produced.
    Finished(Finished),
    /// Before it started, it proved to need more than it reserved (its plugin's own estimate).
    HandedBack { plugin_estimate: u64 },
}

impl Claimed {
    pub(super) fn new(picked: Picked, values: Range<usize>, counts: Range<usize>, producers_hash: u64) -> Claimed {
        Claimed { picked, values, counts, producers_hash, attempts: 0, preempted: 0, started: None, counted_from: None }
    }
}

/// What running one task produced.
pub(super) struct Finished {
    pub(super) outcome: Outcome,
    pub(super) output: Value,
    /// The size of the file a path output names (its consumers' input bytes).
    pub(super) file_bytes: u64,
    /// Its output's content hash, 0 when the run does not hash.
    pub(super) hash: u64,
    pub(super) peak: u64,
    pub(super) wall: Duration,
}

impl<'s, 'r> Worker<'s, 'r> {
    pub(super) fn new(shared: &'s Shared<'r>, id: usize) -> Self {
        Worker {
            shared,
            id,
            stats: vec![StepStats::default(); shared.recipe.steps.len()],
            failures: Vec::new(),
            missing: Vec::new(),
            internal_error: None,
            spill_records: Vec::new(),
            claimed: Vec::with_capacity(MAX_BATCH),
            ended: Vec::with_capacity(MAX_BATCH),
            regrow: Vec::new(),
            abandoned: Vec::new(),
            values: Vec::new(),
            counts: Vec::new(),
            none: Arc::new(Value::None),
            key: String::new(),
            index: Vec::new(),
            described: None,
            skipped: Vec::new(),
            reused: Vec::new(),
            batch: Vec::with_capacity(MAX_BATCH),
            spill_jobs: Vec::new(),
            spilled: Vec::new(),
            garbage: Vec::new(),
            shells: Vec::new(),
            unpublished: UnpublishedRuns::default(),
            reach: None,
        }
    }

    /// The reservation slot of this worker's `position`-th claimed task.
    fn slot(&self, position: usize) -> TaskSlot {
        TaskSlot((self.id * MAX_BATCH + position) as u32)
    }

    pub(super) fn run(mut self) -> WorkerResult {
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.turn())) {
                Ok(true) => {}
                Ok(false) => break,
                Err(panic) => self.fail_after_panic(&*panic),
            }
        }
        self.report_skipped();
        self.report_reused();
        self.flush_reports();
        WorkerResult {
            steps: self.stats,
            failures: self.failures,
            missing: self.missing,
            internal_error: self.internal_error,
            spills: self.spill_records,
        }
    }

    /// One round: report and claim under the lock, then outside it free what was let go, write
    /// chosen spills or run the claimed tasks. False once every task is done.
    fn turn(&mut self) -> bool {
        let more = self.report_and_claim();
        self.take_out_garbage();
        if !more {
            return false;
        }
        if let Some(tasks) = self.reach.take() {
            self.shared.executor.reach(tasks);
        }
        self.report_skipped();
        self.report_reused();
        self.report_abandoned();
        if !self.spill_jobs.is_empty() {
            self.write_spills();
            return true;
        }
        // Outside the lock: the executor runs the unit, telling it how each attempt ended.
        let shared = self.shared;
        if !self.claimed.is_empty() {
            if shared.local { super::Local::run_unit(self) } else { shared.executor.run(self) }
        }
        // The claimed tasks stay, with how they ended, until the next report; their inputs go.
        self.values.clear();
        self.counts.clear();
        self.flush_reports();
        true
    }

    /// Frees what the state let go of, outside the lock; keeps emptied output `Arc`s for reuse.
    pub(super) fn take_out_garbage(&mut self) {
        let mut spilled_copies = false;
        for garbage in self.garbage.drain(..) {
            spilled_copies |= garbage.is_spilled_copy();
            if let Garbage::Value(mut value) = garbage
                && let Some(inner) = Arc::get_mut(&mut value)
            {
                drop(std::mem::take(inner));
                self.shells.push(value);
            }
        }
        if spilled_copies {
            // jemalloc keeps freed pages for reuse; the point of a spill is to give them back.
            let _ = measure::purge_free_pages();
        }
    }

    /// At the end of a turn: the turn's tasks go to the sink's writer and to the progress bar.
    pub(super) fn flush_reports(&mut self) {
        self.publish_runs();
        if let Some(sink) = self.shared.sink {
            sink.flush(self.id);
        }
    }

    /// Under the lock: records the tasks run and the spills written since the last call, then
    /// waits for and claims the next task (a batch of them if its step is quick), or spill
    /// victims to write. False once every task is done.
    fn report_and_claim(&mut self) -> bool {
        let shared = self.shared;
        let plan = shared.plan;
        let mut state = shared.lock();
        let reported = !self.claimed.is_empty() || !self.spilled.is_empty();
        let mut claimed = std::mem::take(&mut self.claimed);
        debug_assert_eq!(claimed.len(), self.ended.len(), "each claimed task has its `ended`");
        for (Claimed { picked, .. }, ended) in claimed.drain(..).zip(self.ended.drain(..)) {
            match ended {
                Ended::Finished(result) => {
                    if result.peak > picked.estimate {
                        state.note_underestimate(&picked, result.peak);
                    }
                    state.finish(picked, result.outcome, result.output, result.file_bytes, result.hash, result.wall);
                }
                Ended::HandedBack { plugin_estimate } => self.regrow.push((picked, plugin_estimate)),
                Ended::NotYet => {
                    self.abandoned.push(picked.task);
                    state.finish(picked, Outcome::Failed, Value::None, 0, 0, Duration::ZERO);
                }
            }
        }
        self.claimed = claimed;
        state.finish_spills(&mut self.spilled);
        state.recycle(&mut self.shells);
        self.skipped.append(&mut state.skipped);
        self.reused.append(&mut state.reused);
        let mut regrown = false;
        if !self.regrow.is_empty() {
            let mut regrow = std::mem::take(&mut self.regrow);
            for (picked, plugin_estimate) in regrow.drain(..) {
                if let Some(picked) = state.reestimate(plan, picked, plugin_estimate) {
                    // Re-admitted tasks run first; their inputs are collected now.
                    regrown = true;
                    self.claim(&state, picked);
                }
            }
            self.regrow = regrow;
        }
        if reported && !shared.options.keep_services {
            state.note_reach(shared.options.workers as u64);
        }
        if reported {
            self.publish(&state);
            if state.sleepers > 0 {
                shared.wake.notify_all();
            }
        }
        let (more, mut state) = if regrown { (true, state) } else { self.claim_next(state) };
        std::mem::swap(&mut state.garbage, &mut self.garbage);
        self.reach = state.take_reach();
        drop(state);
        more
    }

    /// Waits for and claims the next work. False once every task is done (or the run is stuck).
    fn claim_next<'g>(&mut self, mut state: MutexGuard<'g, State<'r>>) -> (bool, MutexGuard<'g, State<'r>>)
    where
        's: 'g,
    {
        let shared = self.shared;
        let plan = shared.plan;
        loop {
            if state.is_done() || state.stuck.is_some() {
                if state.sleepers > 0 {
                    shared.wake.notify_all();
                }
                return (false, state);
            }
            match state.pick(plan, self.slot(0)) {
                Pick::Run(picked) => {
                    // Quick local tasks are claimed in batches; remote ones in the chunks a job runs.
                    let chunk = self.unit_size(picked.task.step, state.is_quick(picked.task.step));
                    self.claim_with_more(&mut state, picked, chunk);
                    self.publish(&state);
                    return (true, state);
                }
                Pick::Spill => {
                    state.take_spill_jobs(&mut self.spill_jobs);
                    return (true, state);
                }
                Pick::Estimate(estimating) => {
                    let task = estimating.task;
                    let (values, counts, _) = self.collect_inputs(&state, task);
                    drop(state);
                    let plugin_estimate = self.estimate_at_dispatch(task, values, counts);
                    self.values.clear();
                    self.counts.clear();
                    state = shared.lock();
                    state.estimated(estimating);
                    // Workers may have waited for the room kept for this estimate.
                    if state.sleepers > 0 {
                        shared.wake.notify_all();
                    }
                    if let Some(picked) = state.admit_estimated(plan, task, plugin_estimate, self.slot(0)) {
                        // A remote job runs a chunk of its step's tasks even when the step's
                        // estimate follows its data: the rest of the chunk is estimated from
                        // this task's plugin estimate, each with its own inputs (the job's
                        // `--mem` is the largest of them anyway), or a step of 10⁶ such tasks
                        // would become 10⁶ jobs.
                        let chunk = self.unit_size(task.step, false);
                        self.claim_with_more(&mut state, picked, chunk);
                        self.publish(&state);
                        return (true, state);
                    }
                }
                Pick::Wait => {
                    if !state.can_change() {
                        let unrun = state.unfinished();
                        state.give_up(format!(
                            "internal error: {unrun} tasks can never start (nothing runs, nothing is ready to run); \
                             the run stops instead of waiting forever"
                        ));
                        continue;
                    }
                    state.sleepers += 1;
                    state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.sleepers -= 1;
                }
            }
        }
    }

    /// How many tasks of `step` one unit of the run's executor holds (`quick`: see
    /// [`UnitSizing::quick`]).
    fn unit_size(&self, step: StepId, quick: bool) -> usize {
        let shared = self.shared;
        shared.executor.tasks_per_unit(&UnitSizing {
            tasks: shared.graph.steps[step].tasks,
            workers: shared.options.workers,
            longest_task: shared.plan.steps[step].longest_task,
            quick,
        })
    }

    /// Claims `picked` and up to `chunk - 1` more ready tasks of its step with its estimate,
    /// when it was admitted without waiting.
    fn claim_with_more(&mut self, state: &mut State<'r>, picked: Picked, chunk: usize) {
        if picked.admission != Admission::Fits || chunk <= 1 {
            self.claim(state, picked);
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        let slots = (1..chunk.min(MAX_BATCH)).map(|position| self.slot(position));
        state.pick_more(self.shared.plan, &picked, slots, &mut batch);
        self.claim(state, picked);
        for more in batch.drain(..) {
            self.claim(state, more);
        }
        self.batch = batch;
    }

    /// Adds `picked` to the claimed tasks, with its inputs.
    fn claim(&mut self, state: &State<'r>, picked: Picked) {
        let (values, counts, producers_hash) = self.collect_inputs(state, picked.task);
        self.claimed.push(Claimed::new(picked, values, counts, producers_hash));
        self.ended.push(Ended::NotYet);
    }

    /// Appends `task`'s inputs to the worker's buffers; returns where they are, and their hash.
    fn collect_inputs(&mut self, state: &State<'r>, task: TaskRef) -> (Range<usize>, Range<usize>, u64) {
        let (values_from, counts_from) = (self.values.len(), self.counts.len());
        let hash = state.collect_inputs(task, &mut self.values, &mut self.counts);
        (values_from..self.values.len(), counts_from..self.counts.len(), hash)
    }

    /// Calls `f` with the collected inputs of a task of `step_id` (at `values` and `counts` in
    /// the worker's buffers), named as the recipe names them.
    pub(super) fn with_inputs<R>(
        &self,
        step_id: StepId,
        values: Range<usize>,
        counts: Range<usize>,
        f: impl FnOnce(&Inputs<'_>) -> R,
    ) -> R {
        let shared = self.shared;
        let step = &shared.recipe.steps[step_id];
        let values = &self.values[values];
        let mut inputs: SmallVec<[Input<'_>; 4]> = SmallVec::new();
        let mut start = 0;
        for (&edge, &count) in shared.graph.steps[step_id].inputs.iter().zip(&self.counts[counts]) {
            let e = &shared.graph.edges[edge];
            inputs.push(Input::new(&step.inputs[e.input].name, e.gathered, &values[start..start + count]));
            start += count;
        }
        f(&Inputs::new(&inputs))
    }

    fn publish(&self, state: &State<'r>) {
        let p = self.shared.progress;
        p.finished.store(state.finished, Ordering::Relaxed);
        p.reserved.store(state.ledger.used(), Ordering::Relaxed);
        p.spilled.store(state.spilled, Ordering::Relaxed);
        p.resident.store(state.ledger.resident(), Ordering::Relaxed);
        p.running.store(state.ledger.running() as u64, Ordering::Relaxed);
        p.spills.store(state.spill_count, Ordering::Relaxed);
    }

    /// Writes the buffers chosen under the lock to spill files (the slow part, outside it); the
    /// files are swapped in at the next report.
    fn write_spills(&mut self) {
        for SpillJob { task, value, .. } in self.spill_jobs.drain(..) {
            let storage = match &*value {
                Value::Array(array) => array.storage(),
                Value::Bytes(storage) => storage,
                _ => continue,
            };
            let started = Instant::now();
            let result = self.shared.spill.spill(storage);
            if result.is_ok() {
                self.spill_records.push(SpillRecord {
                    started: started.saturating_duration_since(self.shared.started),
                    wall: started.elapsed(),
                    bytes: storage.bytes().len() as u64,
                });
            }
            // Let go of this worker's hold before the swap, which needs the only one.
            drop(value);
            self.spilled.push(SpillDone { task, result });
        }
    }

    /// A panic outside any plugin (an engine bug, or a sink's): the tasks this worker claimed
    /// and ran fail with its message, so their dependants are skipped and nothing waits for
    /// them forever; the run goes on and ends failed.
    pub(super) fn fail_after_panic(&mut self, panic: &(dyn std::any::Any + Send)) {
        let message = format!("internal error: a worker panicked: {}", crate::panics::message(panic));
        tracing::error!("{message}");
        self.internal_error.get_or_insert_with(|| message.clone());
        // Tasks that ran and were reported are finished as they ended; the others fail.
        let mut done: Vec<(Picked, Finished)> = Vec::new();
        let mut unrun: Vec<Picked> = Vec::new();
        for (claimed, ended) in self.claimed.drain(..).zip(self.ended.drain(..)) {
            match ended {
                Ended::Finished(finished) => done.push((claimed.picked, finished)),
                Ended::HandedBack { .. } | Ended::NotYet => unrun.push(claimed.picked),
            }
        }
        unrun.extend(self.regrow.drain(..).map(|(picked, _)| picked));
        unrun.append(&mut self.batch);
        self.values.clear();
        self.counts.clear();
        let mut spilled = std::mem::take(&mut self.spilled);
        let closed = || crate::memory::spill::SpillError::Closed { path: self.shared.spill.path().to_path_buf() };
        spilled.extend(self.spill_jobs.drain(..).map(|job| SpillDone { task: job.task, result: Err(closed()) }));
        let mut state = self.shared.lock();
        state.finish_spills(&mut spilled);
        for (picked, finished) in done {
            state.finish(picked, finished.outcome, finished.output, finished.file_bytes, finished.hash, finished.wall);
        }
        let unrun: Vec<TaskRef> = unrun
            .into_iter()
            .map(|picked| {
                let task = picked.task;
                state.finish(picked, Outcome::Failed, Value::None, 0, 0, Duration::ZERO);
                task
            })
            .collect();
        self.skipped.append(&mut state.skipped);
        std::mem::swap(&mut state.garbage, &mut self.garbage);
        self.publish(&state);
        self.shared.wake.notify_all();
        drop(state);
        self.take_out_garbage();
        for task in unrun {
            self.describe_task(task.step, task.index);
            self.stats[task.step].failed += 1;
            self.fail(task, message.clone());
        }
    }

    /// Fails the tasks the executor left without an outcome (see [`Ended::NotYet`]).
    fn report_abandoned(&mut self) {
        if self.abandoned.is_empty() {
            return;
        }
        let mut abandoned = std::mem::take(&mut self.abandoned);
        for task in abandoned.drain(..) {
            let message =
                format!("internal error: the {} executor returned without its outcome", self.shared.executor.name());
            tracing::error!("{message}");
            self.internal_error.get_or_insert_with(|| message.clone());
            self.describe_task(task.step, task.index);
            self.stats[task.step].failed += 1;
            self.fail(task, message);
        }
        self.abandoned = abandoned;
    }

    /// Fills the reusable key string and index pairs of task `index` of `step` (once: they
    /// stay until another task is described).
    pub(super) fn describe_task(&mut self, step: StepId, index: u64) {
        let task = TaskRef { step, index };
        if self.described != Some(task) {
            self.shared.graph.describe_task(self.shared.recipe, step, index, &mut self.key, &mut self.index);
            self.described = Some(task);
        }
    }
}
