//! The discrete-event loop: virtual workers call the real scheduler's [`State`] — `pick`,
//! `pick_more`, `admit_estimated`, `finish_virtual`, the spill victims it chooses — exactly
//! where the worker loop in [`crate::scheduler`] calls them, on a virtual clock. A task "runs"
//! for its predicted time holding its predicted peak; its output is a virtual buffer of its
//! predicted size (a virtual buffer: `Produced::Virtual` in the scheduler's state), counted by the ledger and
//! spillable, with no bytes behind it; a spill "writes" at a stated bandwidth.
//!
//! Nothing here decides order, admission, batching or victims: that is the one policy, in
//! `State`. What is the simulator's: when events happen, and (with a [`Cluster`]) where a
//! unit's job runs and when it may start.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use runner_plugin::Value;

use crate::executor::slurm::tasks_per_job;
use crate::memory::{Admission, Meter, Standing, TaskSlot};
use crate::plan::Compiled;
use crate::scheduler::stats::StepStats;
use crate::scheduler::{
    Failure, Garbage, MAX_BATCH, Outcome, Pick, Picked, RunReport, SpillJob, SpillRecord, State, StepTraits, TaskRef,
};

mod growth;
mod jobs;

use super::SimOptions;
use super::cluster::{Cluster, Job};
use super::cpus::SharedCpus;
use super::meter::ReservationsOnly;
use super::outcome::{MemoryPoint, Simulated, SimulatedTask};
use super::predict::{Predictor, TaskPrediction};
use super::service_wait::{Interpreters, Readiness};

/// Memory points kept at most: one every so often, whatever the run's length.
const MEMORY_POINTS: usize = 4000;

/// An event on the virtual clock: what a worker finishes or may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Its tasks are done.
    Ran,
    /// Its spills are written.
    Spilled,
    /// Its job has waited in the queue and may start where it fits.
    Eligible,
    /// A task it runs has grown toward its peak ([`VirtualWorker::growing`]).
    Grew,
}

/// A virtual worker's claimed work.
#[derive(Default)]
struct VirtualWorker {
    claimed: Vec<(Picked, TaskPrediction)>,
    /// Held inputs of the claimed tasks (so that the victim choice sees them read).
    inputs: Vec<Arc<Value>>,
    counts: Vec<usize>,
    spills: Vec<TaskRef>,
    /// Its job and node (a cluster), and when the job started.
    job: Option<(Job, usize, u64)>,
    /// When its unit started on shared CPUs.
    started: u64,
    /// Its claimed tasks whose memory the ledger sees grow while they run
    /// ([`TaskPrediction::sampled`]): when each reaches its peak, and its place in `claimed`.
    growing: Vec<(u64, usize)>,
}

/// The simulator's state beside the scheduler's.
struct Loop<'a> {
    compiled: &'a Compiled,
    predictor: &'a Predictor,
    options: &'a SimOptions,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, u32, Event)>>,
    workers: Vec<VirtualWorker>,
    idle: Vec<u32>,
    /// Jobs eligible to start but without room, in submission order.
    pending: VecDeque<u32>,
    stats: Vec<StepStats>,
    longest: Vec<Duration>,
    guesses: u64,
    held: u64,
    peak_memory: u64,
    /// Its standing bytes are part of [`Simulated::peak_memory`].
    meter: &'a ReservationsOnly,
    record_tasks: bool,
    tasks: Vec<SimulatedTask>,
    memory: Vec<MemoryPoint>,
    memory_every: u64,
    next_point: u64,
    spills: Vec<SpillRecord>,
    spill_jobs: Vec<SpillJob>,
    batch: Vec<Picked>,
    shells: Vec<Arc<Value>>,
    cluster: Option<Cluster>,
    /// The CPUs the workers share, when fewer than the workers ([`SimOptions::cpus`]).
    cpus: Option<SharedCpus>,
    failed: Vec<(Picked, TaskPrediction)>,
    /// When each step's services are ready (a cluster's: each job's own, from its start).
    readiness: Readiness,
    /// Why tasks failed, as a run lists them (a job no node could hold).
    failures: Vec<Failure>,
    /// Of each task deferred after its plugin estimated it from its data, the bytes of its
    /// inputs in spill files at the estimate (which read them in).
    spilled_at_estimate: HashMap<TaskRef, u64>,
}

/// Simulates `compiled` (whose plan has learned from the history `predictor` was made from).
/// With `cluster`, each unit is a job placed on its nodes. `record_tasks`: keep every task and
/// the memory over time, for a report.
pub fn simulate(
    compiled: &Compiled,
    predictor: &Predictor,
    options: &SimOptions,
    cluster: Option<Cluster>,
    record_tasks: bool,
) -> Simulated {
    let recipe = &compiled.recipe;
    let plan = &compiled.plan;
    let traits = StepTraits::of(recipe, plan);
    let standing = if cluster.is_none() { predictor.standing_on(options.workers.max(1)) } else { Standing::default() };
    let retires = !options.keep_services && standing.services > 0;
    let meter = ReservationsOnly::new(options.read_every_task, standing, retires);
    let workers = options.workers.max(1);
    let mut state = State::new(&compiled.graph, plan, traits, options.budget, &meter, None);
    let mut sim = Loop {
        compiled,
        predictor,
        options,
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        workers: (0..workers).map(|_| VirtualWorker::default()).collect(),
        idle: (0..workers as u32).rev().collect(),
        pending: VecDeque::new(),
        stats: vec![StepStats::default(); recipe.steps.len()],
        longest: vec![Duration::ZERO; recipe.steps.len()],
        guesses: 0,
        held: 0,
        peak_memory: 0,
        meter: &meter,
        record_tasks,
        tasks: Vec::new(),
        memory: Vec::new(),
        memory_every: 0,
        next_point: 0,
        spills: Vec::new(),
        spill_jobs: Vec::new(),
        batch: Vec::with_capacity(MAX_BATCH),
        shells: Vec::new(),
        cpus: options.cpus.filter(|&cpus| cluster.is_none() && cpus < workers).map(SharedCpus::new),
        cluster,
        failed: Vec::new(),
        readiness: Readiness::new(recipe.steps.len()),
        failures: Vec::new(),
        spilled_at_estimate: HashMap::new(),
    };
    sim.run(&mut state);
    let report = RunReport {
        steps: std::mem::take(&mut sim.stats),
        failures: std::mem::take(&mut sim.failures),
        wall: Duration::from_nanos(sim.now),
        peak_reserved: state.ledger.peak_used(),
        standing_at_peak: state.ledger.standing_at_peak(),
        spilled_bytes: state.spilled,
        spill_count: state.spill_count,
        spill_error: None,
        workers,
        budget: options.budget,
        internal_error: state.stuck.clone(),
        not_run: state.unfinished(),
        spills: std::mem::take(&mut sim.spills),
        missing: Vec::new(),
    };
    Simulated {
        report,
        guesses: sim.guesses,
        peak_memory: sim.peak_memory,
        longest: sim.longest,
        tasks: sim.tasks,
        memory: sim.memory,
        cluster: sim.cluster,
        cpus_shared: sim.cpus.as_ref().map(SharedCpus::cpus),
    }
}

impl Loop<'_> {
    fn slot(worker: u32, position: usize) -> TaskSlot {
        TaskSlot(worker * MAX_BATCH as u32 + position as u32)
    }

    fn run(&mut self, state: &mut State<'_>) {
        loop {
            self.dispatch(state);
            if state.is_done() || state.stuck.is_some() {
                break;
            }
            let Some((worker, event)) = self.next_event() else {
                let unrun = state.unfinished();
                state.give_up(format!(
                    "internal error: {unrun} tasks can never start in the simulation (nothing runs, nothing is \
                     ready to run)"
                ));
                break;
            };
            match event {
                Event::Ran => self.finish_tasks(state, worker),
                Event::Spilled => {
                    state.finish_virtual_spills(&mut self.workers[worker as usize].spills);
                    self.idle.push(worker);
                }
                Event::Eligible => self.pending.push_back(worker),
                Event::Grew => self.grow(state, worker),
            }
            self.take_out_garbage(state);
            self.start_pending_jobs();
            self.note_memory(state);
        }
        self.note_memory(state);
    }

    /// The next event, the clock moved to it: the soonest of those scheduled and the end of a
    /// unit on shared CPUs.
    fn next_event(&mut self) -> Option<(u32, Event)> {
        let scheduled = self.events.peek().map(|&Reverse((at, ..))| at);
        let unit_end = self.cpus.as_ref().and_then(SharedCpus::next_end).map(|after| self.now + after);
        if let Some(at) = unit_end.filter(|&end| scheduled.is_none_or(|scheduled| end < scheduled)) {
            let cpus = self.cpus.as_mut()?;
            cpus.advance(at - self.now);
            self.now = at;
            return cpus.end().map(|worker| (worker, Event::Ran));
        }
        let Reverse((at, _, worker, event)) = self.events.pop()?;
        if let Some(cpus) = &mut self.cpus {
            cpus.advance(at - self.now);
        }
        self.now = at;
        Some((worker, event))
    }

    /// Hands work to idle workers until the scheduler says wait: whatever one worker is told
    /// to wait for, the next would be too.
    fn dispatch(&mut self, state: &mut State<'_>) {
        while let Some(&worker) = self.idle.last() {
            if !self.claim_next(state, worker) {
                break;
            }
            self.idle.pop();
        }
    }

    /// What `Worker::claim_next` does, for virtual worker `worker`: true when it got work.
    fn claim_next(&mut self, state: &mut State<'_>, worker: u32) -> bool {
        let plan = &self.compiled.plan;
        loop {
            if state.is_done() || state.stuck.is_some() {
                return false;
            }
            match state.pick(plan, Self::slot(worker, 0)) {
                Pick::Run(picked) => {
                    let chunk = self.chunk(state, picked.task.step);
                    self.claim_with_more(state, worker, picked, chunk);
                    self.start(state, worker);
                    return true;
                }
                Pick::Estimate(estimating) => {
                    // Estimates take no time here: the room kept for it goes back at once.
                    let task = state.estimated(estimating);
                    let plugin_estimate = self.predictor.dispatch_estimate(task.step, task.index);
                    if let Some(picked) = state.admit_estimated(plan, task, plugin_estimate, Self::slot(worker, 0)) {
                        let chunk = if self.cluster.is_some() { self.chunk(state, task.step) } else { 1 };
                        self.claim_with_more(state, worker, picked, chunk);
                        self.start(state, worker);
                        return true;
                    }
                    // Deferred: nothing was spilled since the estimate read its inputs in.
                    self.spilled_at_estimate.insert(task, state.spilled_input_bytes(task));
                }
                Pick::Spill => {
                    state.take_spill_jobs(&mut self.spill_jobs);
                    let mut bytes = 0;
                    for SpillJob { task, bytes: size, .. } in self.spill_jobs.drain(..) {
                        self.workers[worker as usize].spills.push(task);
                        bytes += size;
                    }
                    let wall = Duration::from_secs_f64(bytes as f64 / self.options.spill.written.max(1) as f64);
                    self.spills.push(SpillRecord { started: Duration::from_nanos(self.now), wall, bytes });
                    self.schedule(self.now + wall.as_nanos() as u64, worker, Event::Spilled);
                    return true;
                }
                Pick::Wait => return false,
            }
        }
    }

    /// Tasks a unit of `step` holds: a job's chunk on a cluster, a batch of a quick step here.
    fn chunk(&self, state: &State<'_>, step: usize) -> usize {
        match &self.cluster {
            Some(_) => tasks_per_job(
                self.compiled.graph.steps[step].tasks,
                self.options.workers,
                self.compiled.plan.steps[step].longest_task,
            ),
            None if state.is_quick(step) => MAX_BATCH,
            None => 1,
        }
    }

    /// Takes `picked` on, with up to `chunk - 1` more of its step (as `Worker::claim_with_more`).
    fn claim_with_more(&mut self, state: &mut State<'_>, worker: u32, picked: Picked, chunk: usize) {
        let mut batch = std::mem::take(&mut self.batch);
        if picked.admission == Admission::Fits && chunk > 1 {
            let slots = (1..chunk.min(MAX_BATCH)).map(|position| Self::slot(worker, position));
            state.pick_more(&self.compiled.plan, &picked, slots, &mut batch);
        }
        self.claim(state, worker, picked);
        for more in batch.drain(..) {
            self.claim(state, worker, more);
        }
        self.batch = batch;
    }

    /// Takes `picked` on at `worker`: its inputs held, its time and peak predicted, its
    /// reservation grown to a predicted peak above it (or, measured in its own process, as it runs).
    fn claim(&mut self, state: &mut State<'_>, worker: u32, picked: Picked) {
        let step = picked.task.step;
        let plan = &self.compiled.plan;
        let as_planned = self.predictor.as_planned(step, plan.steps[step].input_bytes, picked.input_bytes);
        // A task not as planned: the worker asks its plugin again, and one that needs more than
        // it reserved goes back to be re-admitted (or deferred).
        let picked = match self.predictor.own_estimate(step, picked.task.index) {
            Some(plugin_estimate) if !as_planned && plugin_estimate > picked.plugin_estimate => {
                let Some(regrown) = state.reestimate(plan, picked, plugin_estimate) else { return };
                regrown
            }
            Some(plugin_estimate) if !as_planned => Picked { plugin_estimate, ..picked },
            _ => picked,
        };
        let held = &mut self.workers[worker as usize];
        state.collect_inputs(picked.task, &mut held.inputs, &mut held.counts);
        let mut prediction = self.predictor.task(
            step,
            picked.task.index,
            as_planned,
            picked.plugin_estimate,
            picked.input_bytes,
            plan.steps[step].model.as_ref(),
            picked.estimate,
        );
        // Its spilled inputs are read back first as a real run's worker reads them (timed, which
        // the recorded tasks' own times leave out; `Picked::read_back_first`: none run alone).
        let waited = &mut self.spilled_at_estimate;
        let at_estimate = if waited.is_empty() { None } else { waited.remove(&picked.task) };
        let (spill, spilled) = (&self.options.spill, picked.read_back_first());
        prediction.duration += self.predictor.read_back_time(step, spilled, at_estimate, spill);
        // A task whose memory the ledger reads from its own process grows in the ledger as it
        // runs (`Loop::grow`); one announcing its allocation, as it starts.
        prediction.sampled &= self.cluster.is_none();
        if !prediction.sampled {
            Self::grow_to_peak(state, &picked, &prediction);
        }
        self.held += picked.reserved.max(prediction.peak);
        self.guesses += u64::from(prediction.guessed);
        self.workers[worker as usize].claimed.push((picked, prediction));
    }

    /// The claimed unit starts: here at once, on a cluster once its job has queued.
    fn start(&mut self, state: &State<'_>, worker: u32) {
        self.note_memory(state);
        match &self.cluster {
            None => self.run_claimed(worker),
            Some(cluster) => {
                // sbatch refuses a job no node can hold as it is submitted: it never queues.
                let job = cluster.job(self.largest_reservation(worker));
                let wait = if cluster.can_ever_place(job) { cluster.shape().queue_wait.as_nanos() as u64 } else { 0 };
                self.schedule(self.now + wait, worker, Event::Eligible);
            }
        }
    }

    /// Runs `worker`'s claimed tasks one after another from now (on shared CPUs, until the
    /// clock of work says they are done: [`Self::stretch`] places them).
    fn run_claimed(&mut self, worker: u32) {
        self.wait_for_services(worker);
        if let Some(cpus) = &mut self.cpus {
            let held = &mut self.workers[worker as usize];
            held.started = self.now;
            cpus.start(held.claimed.iter().map(|(_, p)| p.duration.as_nanos() as u64).sum(), worker);
            return;
        }
        let mut clock = self.now;
        if let Some(cluster) = &self.cluster {
            clock += cluster.shape().job_start.as_nanos() as u64;
        }
        let record = self.record_tasks;
        for (picked, prediction) in &self.workers[worker as usize].claimed {
            if record {
                self.tasks.push(SimulatedTask {
                    task: picked.task,
                    worker,
                    start: Duration::from_nanos(clock),
                    wall: prediction.duration,
                    estimate: picked.estimate,
                    peak: prediction.peak,
                });
            }
            clock += prediction.duration.as_nanos() as u64;
        }
        self.schedule(clock, worker, Event::Ran);
    }

    /// `worker`'s claimed tasks, one after another from now, wait for their steps' services
    /// where these are not ready yet ([`Readiness`]); a cluster's job starts its own, cold.
    fn wait_for_services(&mut self, worker: u32) {
        let (start, mut clock) = match &self.cluster {
            None => (self.options.interpreters, self.now),
            Some(cluster) => {
                self.readiness.reset();
                (Interpreters::Cold, self.now + cluster.shape().job_start.as_nanos() as u64)
            }
        };
        let held = &mut self.workers[worker as usize];
        for (position, (picked, prediction)) in held.claimed.iter_mut().enumerate() {
            let step = picked.task.step;
            let wait = self.readiness.wait(step, clock, self.predictor.service_wait(step, start));
            if prediction.sampled && prediction.peak > picked.reserved {
                held.growing.push((clock + (wait + prediction.duration / 2).as_nanos() as u64, position));
            }
            prediction.duration += wait;
            clock += prediction.duration.as_nanos() as u64;
        }
        self.schedule_growth(worker);
    }

    /// What `Worker::report_and_claim` does with a finished unit: its inputs let go, each task
    /// finished (the model bumped first if it peaked over its estimate), counted.
    fn finish_tasks(&mut self, state: &mut State<'_>, worker: u32) {
        let held = &mut self.workers[worker as usize];
        held.inputs.clear();
        held.counts.clear();
        if let (Some((job, node, started)), Some(cluster)) = (held.job.take(), self.cluster.as_mut()) {
            cluster.release(node, job, Duration::from_nanos(self.now - started));
        }
        held.growing.clear();
        let stretch = self.stretch(worker);
        let mut claimed = std::mem::take(&mut self.workers[worker as usize].claimed);
        for (picked, prediction) in claimed.drain(..) {
            if prediction.peak > picked.estimate {
                state.note_underestimate(&picked, prediction.peak);
            }
            let ran = prediction.duration.mul_f64(stretch);
            self.count(&picked, &prediction, ran, false);
            state.finish_virtual(picked, Outcome::Ok, prediction.output_bytes, prediction.file_bytes, ran);
        }
        for (picked, prediction) in std::mem::take(&mut self.failed) {
            self.count(&picked, &prediction, Duration::ZERO, true);
            state.finish_virtual(picked, Outcome::Failed, 0, 0, Duration::ZERO);
        }
        self.workers[worker as usize].claimed = claimed;
        for (task, _) in state.skipped.drain(..) {
            self.stats[task.step].skipped += 1;
        }
        self.meter.retire(state, self.workers.len());
        self.idle.push(worker);
    }

    /// How much longer than recorded `worker`'s unit, ending now, took on the shared CPUs (1
    /// without sharing), its tasks placed one after another from its start for the report,
    /// each stretched alike.
    fn stretch(&mut self, worker: u32) -> f64 {
        if self.cpus.is_none() {
            return 1.0;
        }
        let held = &self.workers[worker as usize];
        let recorded: u64 = held.claimed.iter().map(|(_, p)| p.duration.as_nanos() as u64).sum();
        let stretch = if recorded == 0 { 1.0 } else { (self.now - held.started) as f64 / recorded as f64 };
        if self.record_tasks {
            let mut clock = Duration::from_nanos(held.started);
            for (picked, prediction) in &held.claimed {
                let wall = prediction.duration.mul_f64(stretch);
                self.tasks.push(SimulatedTask {
                    task: picked.task,
                    worker,
                    start: clock,
                    wall,
                    estimate: picked.estimate,
                    peak: prediction.peak,
                });
                clock += wall;
            }
        }
        stretch
    }

    /// A task's figures into its step's statistics (as `Worker::count` does): `ran`, how long
    /// it ran (its predicted time, stretched on shared CPUs); the step's longest task at its
    /// predicted time, which no schedule shortens.
    fn count(&mut self, picked: &Picked, prediction: &TaskPrediction, ran: Duration, failed: bool) {
        self.held -= picked.reserved.max(prediction.peak);
        let stats = &mut self.stats[picked.task.step];
        if failed {
            stats.failed += 1;
            return;
        }
        stats.ok += 1;
        stats.wall += ran;
        stats.estimate.record(picked.estimate);
        stats.peak.record(prediction.peak);
        stats.estimate_sum += picked.estimate;
        stats.peak_sum += prediction.peak;
        stats.output_bytes += prediction.output_bytes;
        if picked.admission == (Admission::Alone { oversized: true }) {
            stats.oversized += 1;
        }
        if prediction.peak > picked.estimate {
            stats.underestimates += 1;
        }
        let longest = &mut self.longest[picked.task.step];
        *longest = (*longest).max(prediction.duration);
    }

    /// Values let go are dropped (they hold no bytes); their `Arc`s go back for reuse.
    fn take_out_garbage(&mut self, state: &mut State<'_>) {
        for garbage in state.garbage.drain(..) {
            if let Garbage::Value(mut value) = garbage
                && Arc::get_mut(&mut value).is_some()
            {
                self.shells.push(value);
            }
        }
        state.recycle(&mut self.shells);
        self.shells.clear();
    }

    fn schedule(&mut self, at: u64, worker: u32, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, worker, event)));
    }

    /// The peak of what is held, and (for a report) a point of memory over time now and then.
    fn note_memory(&mut self, state: &State<'_>) {
        let resident = state.ledger.resident();
        self.peak_memory = self.peak_memory.max(self.held + resident + Meter::standing(self.meter));
        if !self.record_tasks || self.now < self.next_point {
            return;
        }
        if self.memory.len() >= MEMORY_POINTS {
            // Thin out to every other point and sample half as often from here.
            let mut keep = false;
            self.memory.retain(|_| {
                keep = !keep;
                keep
            });
            self.memory_every = self.memory_every.max(1) * 2;
        }
        self.memory.push(MemoryPoint {
            at: Duration::from_nanos(self.now),
            reserved: state.ledger.used(),
            resident,
            spilled: state.spilled,
        });
        self.next_point = self.now + self.memory_every;
    }
}
