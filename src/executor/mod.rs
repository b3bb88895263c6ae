//! Where tasks run. The scheduler's policy — counters, ready queues, order, ledger, estimates,
//! the retry rule, what follows an outcome — is the same whatever the executor; what differs is
//! who runs a claimed task, and that is an [`Executor`]:
//! - [`Local`](crate::scheduler::Local) (the default): the worker thread itself, in this
//!   process, one task of the unit after another;
//! - [`slurm::SlurmExecutor`]: the unit's tasks run as one Slurm job elsewhere (`runner task`,
//!   [`job`]) and come back as value and result files in a shared folder.
//!
//! Both call [`attempt::attempt`] for every attempt of a task; a worker hands an executor a
//! [`Unit`] (claimed tasks of one step) outside the scheduler's lock and learns, through it, how
//! each attempt ended.

pub mod attempt;
pub mod job;
pub mod slurm;

use std::time::{Duration, Instant};

use runner_plugin::Value;

use crate::recipe::Step;
use attempt::TaskOutcome;

/// Runs units of claimed tasks, here or elsewhere.
pub trait Executor: Sync {
    /// Its name (`local`, `slurm`), as the store's `runs.executor` names it.
    fn name(&self) -> &'static str;

    /// True when its tasks run in this process: the ledger reads their live bytes, their
    /// commands are preempted to keep the budget, their values stay in memory. Otherwise each
    /// task is held to its reservation by its job's limit, and reads its inputs from the files
    /// the executor keeps (see [`Executor::adopt`]).
    fn runs_in_process(&self) -> bool {
        false
    }

    /// How many tasks one unit of a step holds (see [`UnitSizing`]); the worker claims up to
    /// that many together (at most 64, the ledger admitting them).
    fn tasks_per_unit(&self, step: &UnitSizing) -> usize;

    /// Runs the tasks of `unit` (blocking the calling worker, outside the scheduler's lock),
    /// telling the unit how each attempt ended ([`Unit::attempted`]) and running a task again
    /// while the unit answers [`Next::Retry`] — at the reservation the unit then says. Every
    /// task of the unit ends with [`Next::Done`] or as a task the unit took back itself
    /// ([`Unit::claim_outputs`] refused, [`Unit::attempt_here`] gave `None`). A task that ends
    /// without a result is an attempt that failed with a `TaskError` saying how its job ended
    /// (`OutOfMemory` for a job killed at its memory, with the job's memory as its peak, so
    /// that it is retried larger); work lost with a machine is no attempt, but the executor's
    /// to run again.
    fn run(&self, unit: &mut dyn Unit<'_>);

    /// Makes the output of a task `--resume` took over (`value`, as the run it comes from left
    /// it) readable by the units that read it, as if the task had run here. Nothing to do for
    /// an executor whose tasks run in this process.
    fn adopt(&self, step: &str, index: u64, value: &Value) -> Result<(), crate::values::ValueFileError> {
        let _ = (step, index, value);
        Ok(())
    }

    /// At most `tasks` of the run's tasks can run at once from now on (a lower figure each time
    /// it is said; `u64::MAX` as a run starts): an executor may let go of what it keeps for
    /// more — the local one stops idle services beyond that many. Said from a worker, outside
    /// the scheduler's lock.
    fn reach(&self, tasks: u64) {
        let _ = tasks;
    }

    /// Cancels everything under way (Ctrl-C, an aborted run): what was submitted, and the
    /// commands that run for it.
    fn cancel_all(&self);
}

/// What an executor sizes a step's units by.
#[derive(Debug, Clone, Copy)]
pub struct UnitSizing {
    /// The step's tasks in this run.
    pub tasks: u64,
    /// The run's `--workers` (units in flight at most).
    pub workers: usize,
    /// The step's longest recorded task, when it has history.
    pub longest_task: Option<Duration>,
    /// Its tasks have proven quick (under 20 µs on average) here: locally, claiming them in
    /// batches saves taking the lock per task. Never for a task whose plugin estimated it from
    /// its data, which is admitted on its own estimate.
    pub quick: bool,
}

/// Claimed tasks of one step as an executor sees them, positions `0..tasks()`; implemented by
/// the scheduler's worker, which keeps the retry rule and what follows each outcome.
pub trait Unit<'r> {
    /// The tasks' step as the recipe defines it (its name, `timeout:`, `retries:`...).
    fn step(&self) -> &'r Step;

    /// The step's longest recorded task, when it has history.
    fn longest_task(&self) -> Option<Duration>;

    /// How many tasks the unit holds.
    fn tasks(&self) -> usize;

    /// The linear index in its step of the task at `at`.
    fn index(&self, at: usize) -> u64;

    /// The bytes the task at `at` has reserved now (more after a [`Next::Retry`] that follows
    /// running out of memory).
    fn reserved(&self, at: usize) -> u64;

    /// Claims the output paths of the task at `at` before it is handed elsewhere (an attempt
    /// here claims its own). False when another task of the run claimed one: the unit has
    /// concluded the task failed, and it must not run (it would fail again).
    fn claim_outputs(&mut self, at: usize) -> bool;

    /// One attempt at the task at `at` in this process (an in-process executor's way to run
    /// it), started at `started`. `None` when, before its first attempt, it proves to need more
    /// than it reserved: the unit hands it back to be admitted again, and the executor goes on
    /// with the next task.
    fn attempt_here(&mut self, at: usize, started: Instant) -> Option<TaskOutcome>;

    /// How an attempt at the task at `at` ended. The unit applies the retry rule and answers
    /// whether to run it again or that it is concluded.
    fn attempted(&mut self, at: usize, attempt: Attempt) -> Next;
}

/// How one attempt at a task ended, for [`Unit::attempted`].
#[derive(Debug)]
pub struct Attempt {
    pub outcome: TaskOutcome,
    /// When the attempt started (for a task run elsewhere: when its unit was handed over).
    pub started: Instant,
    pub ran: Ran,
}

/// Where an attempt ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// In this process: its value is the task's output itself.
    Here,
    /// Elsewhere: its value is a [`Value::Path`] to its value file, and `output_bytes` is
    /// what the output held where it ran. Its outcome's `elapsed` is its own run in its job
    /// (not the job's wait in a queue).
    Elsewhere { output_bytes: u64 },
}

/// What an executor does next with a task that was attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run it again, at its [`Unit::reserved`] bytes.
    Retry,
    /// It is concluded; `wall` is the time it is recorded with (the next task of a local unit
    /// starts when it ended).
    Done { wall: Duration },
}
