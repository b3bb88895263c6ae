//! The in-process executor: a unit's tasks run on the worker thread that claimed them, one
//! after another (each starting when the one before it ended: one clock reading a task), each
//! attempt through [`attempt::attempt`] at a [`LocalSite`] — the run's output claims, its meter,
//! its ledger for reservations that grow as a task announces allocations.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use runner_plugin::TaskError;

use super::Picked;
use super::TaskRef;
use super::shared::Shared;
use super::worker::{MAX_BATCH, Worker};
use crate::executor::attempt::{self, TaskOutcome};
use crate::executor::{Attempt, Executor, Next, Ran, Unit, UnitSizing};
use crate::memory::TaskSlot;
use crate::memory::spill::{self, ReadBack};

/// Runs tasks on the worker threads of this process (the default executor).
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Executor for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn runs_in_process(&self) -> bool {
        true
    }

    /// Quick tasks in batches (the lock taken once for the lot), any other one at a time, so
    /// that memory admission stays per task where it matters.
    fn tasks_per_unit(&self, step: &UnitSizing) -> usize {
        if step.quick { MAX_BATCH } else { 1 }
    }

    fn run(&self, unit: &mut dyn Unit<'_>) {
        Local::run_unit(unit);
    }

    /// Stops the idle services no task left can use ([`crate::command::service::keep_at_most`]).
    fn reach(&self, tasks: u64) {
        crate::command::service::keep_at_most(usize::try_from(tasks).unwrap_or(usize::MAX));
    }

    /// Kills the process trees of the commands the run's tasks are running, and refuses new
    /// ones: for when the process is about to exit (Ctrl-C), as [`crate::command::kill_all`]
    /// says — the threads that ran them wait for the exit instead of reporting them.
    fn cancel_all(&self) {
        crate::command::kill_all();
    }
}

impl Local {
    /// Runs a unit's tasks one after another, each attempt through [`Unit::attempt_here`]:
    /// [`Executor::run`], and what the scheduler's worker calls directly for a local run.
    pub(super) fn run_unit<'r, U: Unit<'r> + ?Sized>(unit: &mut U) {
        // One clock reading per task: each task starts when the one before it ended.
        let mut clock = Instant::now();
        for at in 0..unit.tasks() {
            let mut started = clock;
            loop {
                // Handed back to be admitted again: it never started.
                let Some(outcome) = unit.attempt_here(at, started) else { break };
                match unit.attempted(at, Attempt { outcome, started, ran: Ran::Here }) {
                    Next::Retry => started = Instant::now(),
                    Next::Done { wall } => {
                        clock += wall;
                        break;
                    }
                }
            }
        }
    }
}

impl<'s, 'r> Worker<'s, 'r> {
    /// One attempt at claimed task `at` under its reservation `picked`, starting at `started`
    /// (its commands stopped if they break the budget, when `preemptible`): refused when it
    /// needs more than the machine could give.
    pub(super) fn attempt(&self, at: usize, picked: &Picked, started: Instant, preemptible: bool) -> TaskOutcome {
        let shared = self.shared;
        if let Some(limit) = shared.options.memory_limit
            && picked.reserved > limit
        {
            return TaskOutcome::failed(too_big_for_the_machine(picked, limit), started);
        }
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &shared.recipe.steps[step_id];
        let site = LocalSite { shared, task: picked.task, slot: picked.slot() };
        let limits = attempt::Limits {
            started,
            timeout: step.timeout,
            // `--enforce-memory`: a command's tree may hold its task's reservation and a quarter more.
            command_limit: shared.options.enforce_memory.then(|| picked.reserved.saturating_add(picked.reserved / 4)),
            reserved: if preemptible { picked.reserved } else { 0 },
        };
        // Read in first, timed (how fast spills are read back is what a simulation charges their
        // readers), only within its reservation (`Picked::read_back_first`): reading them in for
        // a task run alone past the budget would break it.
        let read_back = if picked.read_back_first() > 0 {
            spill::read_back(self.values[claimed.values.clone()].iter().map(|value| &**value))
        } else {
            ReadBack::default()
        };
        let mut outcome = self.with_inputs(step_id, claimed.values.clone(), claimed.counts.clone(), |inputs| {
            let task =
                attempt::TaskToRun { step, key: &self.key, index: &self.index, cycle: &shared.recipe.cycle, inputs };
            attempt::attempt(&task, &site, &limits)
        });
        outcome.read_back = read_back;
        outcome
    }
}

/// The failure of a task that needs more memory than the process could ever have.
fn too_big_for_the_machine(picked: &Picked, limit: u64) -> TaskError {
    use runner_plugin::size::format_size;
    TaskError::of_kind(
        runner_plugin::FailureKind::OutOfMemory,
        format!(
            "not run: it needs {} ({} estimate), more than the {} this machine can give the process; \
             --allow-oversized runs it anyway",
            format_size(picked.reserved),
            picked.source,
            format_size(limit)
        ),
    )
}

/// Where a local task's attempt runs: its outputs claimed in this run, its live bytes read by
/// the ledger through its reservation slot, its reservation grown as it announces allocations.
struct LocalSite<'a, 'r> {
    shared: &'a Shared<'r>,
    task: TaskRef,
    slot: TaskSlot,
}

impl attempt::Site for LocalSite<'_, '_> {
    fn claim_outputs(&self, args: &runner_plugin::Args) -> Result<(), String> {
        let shared = self.shared;
        shared.output_claims.claim(shared.recipe, shared.graph, self.task, args)
    }

    fn scratch_root(&self) -> &std::path::Path {
        &self.shared.scratch_root
    }

    /// A file per task that outlives the run, relative to the directory the runner started in,
    /// like outputs: `runner-logs/<recipe>/<cycle>/<step>/<key>.log`.
    fn log_root(&self) -> &std::path::Path {
        &self.shared.log_root
    }

    fn measured(&self, tag: u32) {
        self.shared.meter.attach(self.slot, tag);
    }

    fn unmeasured(&self) {
        self.shared.meter.detach(self.slot);
    }

    fn workers(&self) -> usize {
        self.shared.options.workers
    }

    /// Grows the task's reservation before a large allocation, waiting while the budget has
    /// no room and some other task can still make some (the ledger decides). A waiter counts
    /// as a sleeper, so a finishing task wakes it.
    fn will_allocate(&self, bytes: u64) {
        let shared = self.shared;
        let mut state = shared.lock();
        while !state.ledger.try_grow(self.slot, bytes) {
            state.sleepers += 1;
            // The timeout re-checks live bytes that fell without a task finishing.
            state = shared.wake.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            state.sleepers -= 1;
        }
        state.ledger.stop_growing(self.slot);
        shared.progress.reserved.store(state.ledger.used(), Ordering::Relaxed);
    }
}
