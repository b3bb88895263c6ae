//! Where tasks run. The scheduler's policy — counters, ready queues, order, ledger, estimates —
//! is the same whatever the executor; what differs is who runs a claimed task:
//! - the local worker pool (the default): the worker thread itself, in this process;
//! - a [`RemoteExecutor`] ([`slurm`]): the worker hands a *unit* (one or more tasks of one step)
//!   to it and waits; the tasks run elsewhere (`runner task`, [`job`]) and come back as value
//!   and result files in a shared folder.

pub mod attempt;
pub mod job;
pub mod slurm;

use std::time::Duration;

use runner_plugin::Value;

use crate::recipe::StepId;
use attempt::TaskOutcome;

/// Tasks of one step that run together in one job (one after another), with what the job may
/// use.
#[derive(Debug, Clone)]
pub struct Unit<'a> {
    pub step: StepId,
    pub step_name: &'a str,
    pub indices: &'a [u64],
    /// Memory the job is given (`--mem`): the largest reservation of its tasks.
    pub mem_bytes: u64,
    /// The job's time limit: its tasks' timeouts, one after another.
    pub time_limit: Option<Duration>,
}

/// How one task of a unit ended: its attempt's outcome as the job measured it (its value a
/// [`Value::Path`](runner_plugin::Value::Path) to its value file), and the bytes its output
/// held there.
#[derive(Debug)]
pub struct RemoteOutcome {
    pub index: u64,
    pub outcome: TaskOutcome,
    pub output_bytes: u64,
}

/// Runs units of tasks somewhere other than the local worker pool.
pub trait RemoteExecutor: Sync {
    /// Its name in the store's `runs.executor` (`slurm`).
    fn name(&self) -> &'static str;

    /// Runs `unit` to its end (blocking the calling worker), an outcome per task in `unit`'s
    /// order. A job that ends without a task's result gives that task a failure saying how the
    /// job ended (out of memory, cancelled, timed out...).
    fn run_unit(&self, unit: &Unit<'_>) -> Vec<RemoteOutcome>;

    /// Makes the output of a task `--resume` took over (`value`, as the run it comes from left
    /// it) readable by the units that read it, as if the task had run here: remote tasks read
    /// their inputs where the executor keeps its values.
    fn adopt(&self, step: &str, index: u64, value: &Value) -> Result<(), crate::values::ValueFileError>;

    /// Cancels everything submitted and not finished (Ctrl-C, an aborted run).
    fn cancel_all(&self);

    /// How many tasks of a step with `tasks` tasks one job should run, so that a step of many
    /// quick tasks does not become as many jobs; `longest_task` is the step's longest recorded
    /// task, when it has history.
    fn tasks_per_job(&self, tasks: u64, workers: usize, longest_task: Option<Duration>) -> usize;
}
