//! A unit of the scheduler's as one Slurm job: the tasks' output paths claimed, the job
//! element submitted (sized by the largest reservation, timed by the tasks' `timeout:` or
//! history), waited for, its result files read back as outcomes, and each task the scheduler
//! retries submitted again on its own (larger after running out of memory).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use runner_plugin::{FailureKind, TaskError, Value};

use super::{JobId, Pending, SUBMISSION_WAIT, SlurmExecutor, TaskResult, failure_kind, job_mem, tasks_per_job};
use crate::executor::attempt::TaskOutcome;
use crate::executor::{Attempt, Executor, Next, Ran, Unit, UnitSizing};
use crate::measure::PeakSource;
use crate::memory::spill::ReadBack;

/// Tasks of one step that run together in one job (one after another), with what the job may
/// use.
#[derive(Debug, Clone)]
struct JobUnit<'a> {
    step_name: &'a str,
    indices: &'a [u64],
    /// Memory the job is given (`--mem`): the largest reservation of its tasks.
    mem_bytes: u64,
    /// The job's time limit: its tasks' timeouts, one after another.
    time_limit: Option<Duration>,
}

/// How one task of a job unit ended: its attempt's outcome as the job measured it (its value a
/// [`Value::Path`] to its value file), and the bytes its output held there.
#[derive(Debug)]
struct JobOutcome {
    outcome: TaskOutcome,
    output_bytes: u64,
}

/// A job's learned time per task is its step's longest recorded task times this (tasks on a
/// cluster's nodes may run slower than they did here or last cycle).
const LEARNED_TIME_FACTOR: u32 = 3;

/// How long a job of `tasks` tasks of a step may run: each task its `timeout:`, or without one
/// [`LEARNED_TIME_FACTOR`] × the step's longest recorded task; `None` (the partition's default)
/// for a step with neither.
fn job_time(timeout: Option<Duration>, longest_task: Option<Duration>, tasks: usize) -> Option<Duration> {
    let per_task = timeout.or_else(|| longest_task.map(|longest| longest * LEARNED_TIME_FACTOR))?;
    Some(per_task.saturating_mul(tasks.max(1) as u32))
}

impl Executor for SlurmExecutor {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn tasks_per_unit(&self, step: &UnitSizing) -> usize {
        tasks_per_job(step.tasks, step.workers, step.longest_task)
    }

    /// The unit's tasks as one job (a task whose outputs another task claimed is not
    /// submitted), then each task the unit retries as a job of its own, at its new reservation.
    fn run(&self, unit: &mut dyn Unit<'_>) {
        let started = Instant::now();
        let step = unit.step();
        let submitted: Vec<usize> = (0..unit.tasks()).filter(|&at| unit.claim_outputs(at)).collect();
        if submitted.is_empty() {
            return;
        }
        let indices: Vec<u64> = submitted.iter().map(|&at| unit.index(at)).collect();
        let job = JobUnit {
            step_name: &step.name,
            indices: &indices,
            mem_bytes: submitted.iter().map(|&at| unit.reserved(at)).max().unwrap_or(0),
            time_limit: job_time(step.timeout, unit.longest_task(), indices.len()),
        };
        let outcomes = self.run_job(&job);
        for (&at, first) in submitted.iter().zip(outcomes) {
            let mut ended = first;
            while unit.attempted(at, attempt(ended, started)) == Next::Retry {
                let one = [unit.index(at)];
                let time_limit = job_time(step.timeout, unit.longest_task(), 1);
                let retry = JobUnit { indices: &one, mem_bytes: unit.reserved(at), time_limit, ..job.clone() };
                ended = self
                    .run_job(&retry)
                    .pop()
                    .unwrap_or_else(|| remote_failure(TaskError::msg("its job ended without an outcome")));
            }
        }
    }

    /// A value file in the run folder, as a job of this run would have written it.
    fn adopt(&self, step: &str, index: u64, value: &Value) -> Result<(), crate::values::ValueFileError> {
        crate::values::write(&self.folder.values(step), index, value).map(drop)
    }

    /// Stops submitting, waits (bounded) for an `sbatch` under way, then cancels every job in
    /// flight with one `scancel`. Called on Ctrl-C just before the process exits: a job
    /// submitted after it would run with nobody waiting for it.
    fn cancel_all(&self) {
        let mut queue = self.lock();
        queue.cancelled = true;
        let deadline = Instant::now() + SUBMISSION_WAIT;
        while queue.submitting && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            queue = self.changed.wait_timeout(queue, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        let jobs: Vec<JobId> = queue.in_flight.iter().map(|f| f.job.id).collect();
        drop(queue);
        if let Err(error) = self.slurm.cancel(&jobs) {
            eprintln!("cancelling the run's Slurm jobs failed: {error}");
        }
    }
}

impl SlurmExecutor {
    /// Submits `unit` and waits for its end: an outcome per task, in `unit`'s order.
    fn run_job(&self, unit: &JobUnit<'_>) -> Vec<JobOutcome> {
        let id = self.next_unit.fetch_add(1, Ordering::Relaxed);
        let failed_all = |error: TaskError| -> Vec<JobOutcome> {
            unit.indices.iter().map(|_| remote_failure(error.clone())).collect()
        };
        if let Some(why) = self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return failed_all(TaskError::msg(why));
        }
        let mut text = String::new();
        for index in unit.indices {
            text.push_str(&index.to_string());
            text.push('\n');
        }
        // A task run again (a retry) must not find its last attempt's result.
        for &index in unit.indices {
            let _ = std::fs::remove_file(self.folder.result(unit.step_name, index));
        }
        if let Err(error) = crate::values::write_atomically(&self.folder.unit(id), text.as_bytes()) {
            return failed_all(TaskError::msg(format!("cannot write the unit file: {error}")));
        }
        let mut queue = self.lock();
        if queue.cancelled {
            return failed_all(TaskError::of_kind(FailureKind::Cancelled, "the run's Slurm jobs were cancelled"));
        }
        queue.pending.push(Pending {
            unit: id,
            step: unit.step_name.to_string(),
            indices: unit.indices.to_vec(),
            mem_bytes: unit.mem_bytes,
            time_limit: unit.time_limit,
            since: Instant::now(),
        });
        self.changed.notify_all();
        let settled = loop {
            if let Some(settled) = queue.settled.remove(&id) {
                break settled;
            }
            queue = self.changed.wait(queue).unwrap_or_else(|p| p.into_inner());
        };
        queue.units.remove(&id);
        drop(queue);
        unit.indices
            .iter()
            .zip(settled.results)
            .map(|(_, result)| match result {
                // A job killed at its limit peaked there: what the retry must be larger than.
                Err(error) if error.kind() == FailureKind::OutOfMemory => {
                    let mut outcome = remote_failure(error);
                    outcome.outcome.peak = job_mem(unit.mem_bytes);
                    outcome
                }
                Err(error) => remote_failure(error),
                Ok(result) => self.outcome(result),
            })
            .collect()
    }

    /// A task's outcome from its result file.
    fn outcome(&self, result: TaskResult) -> JobOutcome {
        let peak_source = PeakSource::parse(&result.peak_source).unwrap_or_default();
        let outcome = match (result.ok, result.value) {
            (true, Some(value)) => Ok(Value::Path(self.folder.root.join(value))),
            (true, None) => Err(TaskError::msg("the job reported success but no value file")),
            (false, _) => Err(TaskError::of_kind(
                failure_kind(result.failure.as_deref().unwrap_or("error")),
                result.error.unwrap_or_else(|| "failed in its job".to_string()),
            )),
        };
        let outcome = TaskOutcome {
            result: outcome,
            peak: result.peak_bytes,
            peak_source,
            log_path: result.log_path,
            elapsed: Duration::from_millis(result.wall_ms),
            waited: Duration::from_millis(result.waited_ms),
            // A job reads its inputs from the run folder's files: nothing of it was spilled.
            read_back: ReadBack::default(),
        };
        JobOutcome { outcome, output_bytes: result.output_bytes }
    }
}

fn remote_failure(error: TaskError) -> JobOutcome {
    let outcome = TaskOutcome {
        result: Err(error),
        peak: 0,
        peak_source: PeakSource::Allocator,
        log_path: None,
        elapsed: Duration::ZERO,
        waited: Duration::ZERO,
        read_back: ReadBack::default(),
    };
    JobOutcome { outcome, output_bytes: 0 }
}

/// An attempt of a job unit's task as the scheduler's unit takes it.
fn attempt(ended: JobOutcome, started: Instant) -> Attempt {
    Attempt { outcome: ended.outcome, started, ran: Ran::Elsewhere { output_bytes: ended.output_bytes } }
}
