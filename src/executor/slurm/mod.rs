//! `--executor slurm`: units of tasks become elements of Slurm job arrays, one array per step
//! and size of job at a time, sized by the learned estimate (`--mem`), run by `runner task` on
//! the cluster, and measured inside the job exactly as a local task is.
//!
//! Workers hand units to the [`Executor`](crate::executor::Executor) (`unit`) and wait. One service thread
//! ([`SlurmExecutor::serve`]) gathers the units waiting to be submitted into job arrays (units
//! of one step that ask for the same memory and time become the elements of one array: one
//! `sbatch` call, `--no-requeue`), then watches what is in flight ([`settle`]): a unit is done
//! when every task of it has a result file in the run folder, or when its job element has ended
//! (Slurm's state says how: `OUT_OF_MEMORY` makes the tasks without a result out-of-memory
//! failures, which the scheduler retries with a larger `--mem`; `NODE_FAIL` has what had not
//! succeeded submitted again).

mod settle;
mod unit;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use runner_plugin::{FailureKind, TaskError};

use super::Executor;
use super::job::{RunFolder, TaskResult, failure_kind};
use crate::slurm::submit::shell_quote;
use crate::slurm::{ArraySpec, Job, JobId, JobSpec, JobState, Slurm, TASK_INDEX_VAR, TaskMapping};

/// How `runner task` is started in a job: this binary, the recipe and what fills it in.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub exe: PathBuf,
    /// Absolute, so that a job finds it whatever its directory.
    pub recipe: PathBuf,
    pub cycle: String,
    pub set: Vec<(String, String)>,
    /// `--python`: the interpreter of python steps, as the run was given it.
    pub python: Option<PathBuf>,
    /// The directory the jobs run in (the runner's own: paths in recipes are relative to it).
    pub workdir: PathBuf,
}

/// What every job is submitted with, from the command line.
#[derive(Debug, Clone, Default)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Further `sbatch` options passed through.
    pub extra_args: Vec<String>,
    pub cpus_per_task: u32,
    /// The recipe's name, for job names (`recipe/step`).
    pub recipe: String,
}

/// What a job's process needs besides its task's own peak: the runner's code and start-up, the
/// recipe compiled, and the pages of its mapped inputs it is reading. `--mem` is the task's
/// reservation plus this.
pub const JOB_BASELINE: u64 = 96 << 20;

/// What a job needs besides its tasks' timeouts (`--time`): starting `runner task`, compiling
/// the recipe, mapping the inputs and writing the results. A task that outruns its own timeout
/// fails as timed out inside the job, with its result; Slurm's limit is the backstop.
pub const JOB_TIME_MARGIN: Duration = Duration::from_secs(60);

/// The work a job is given at least, once its step's task times are known (see
/// [`SlurmExecutor::tasks_per_job`]): ten times what a job costs to start.
pub const JOB_WORK: Duration = Duration::from_secs(10);

/// How often the run folder is looked at for the result files of the units in flight: what
/// ends a unit, so the latency of every task. One file is looked at per unit (its last task's).
const RESULTS_EVERY: Duration = Duration::from_millis(200);
/// How often `squeue` is asked about the jobs in flight, to find the ones that ended without
/// their results (out of memory, killed, crashed). A controller serves every user of the
/// cluster: it is asked far less often than the files are looked at.
const QUEUE_EVERY: Duration = Duration::from_secs(2);
/// Units that arrive within this of each other are submitted in one array (one `sbatch`).
const GATHER: Duration = Duration::from_millis(50);
/// A job element that has ended may have written its last result files just before: they are
/// waited for this long (shared filesystems show files late) before its tasks count as lost.
const RESULT_GRACE: Duration = Duration::from_secs(10);
/// How long `squeue` may keep failing (a controller restarting, a network cut) before the
/// units in flight fail with its error and their jobs are cancelled.
const QUEUE_PATIENCE: Duration = Duration::from_secs(300);
/// How long [`SlurmExecutor::cancel_all`] waits for an `sbatch` under way, so that the job it
/// submits is cancelled too.
const SUBMISSION_WAIT: Duration = Duration::from_secs(30);

/// The header of a run folder's `jobs.tsv`, which lists every job submitted: its id, its step,
/// its array elements (units), and `--mem` and `--time` as `sbatch` got them.
pub const JOBS_HEADER: &str = "job\tstep\telements\tmem\ttime";

/// A unit waiting to be submitted.
struct Pending {
    unit: u64,
    step: String,
    indices: Vec<u64>,
    mem_bytes: u64,
    time_limit: Option<Duration>,
    since: Instant,
}

/// A submitted array and the unit each element runs.
struct InFlight {
    job: Job,
    step: String,
    units: Vec<u64>,
    /// Which of `units` are settled (their worker may have taken the result already).
    done: Vec<bool>,
    mem_bytes: u64,
    time_limit: Option<Duration>,
    /// When each element was first seen ended without all its results (or with a failed one),
    /// how it ended, and the node(s) it had.
    ended: HashMap<u32, (Instant, JobState, Option<String>)>,
}

/// A unit that is over: each task's result, or how the job ended without one.
struct Settled {
    results: Vec<Result<TaskResult, TaskError>>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    in_flight: Vec<InFlight>,
    /// Units submitted, by id: their step and task indices, to read their results.
    units: HashMap<u64, (String, Vec<u64>)>,
    settled: HashMap<u64, Settled>,
    /// Since when, and why, `squeue` has been failing.
    queue_failing: Option<(Instant, String)>,
    /// An `sbatch` is under way (outside the lock).
    submitting: bool,
    /// [`SlurmExecutor::cancel_all`] was called: nothing more is submitted.
    cancelled: bool,
}

impl Queue {
    /// Settles `unit`, each of its tasks failing with `error`.
    fn fail_unit(&mut self, unit: u64, tasks: usize, error: &TaskError) {
        self.settled.insert(unit, Settled { results: (0..tasks).map(|_| Err(error.clone())).collect() });
    }
}

/// The Slurm executor of one run.
pub struct SlurmExecutor {
    slurm: Slurm,
    folder: RunFolder,
    invocation: Invocation,
    options: SlurmOptions,
    queue: Mutex<Queue>,
    changed: Condvar,
    next_unit: AtomicU64,
    stopping: AtomicBool,
    /// Set when the service thread died: units fail at once instead of waiting for it.
    dead: Mutex<Option<String>>,
}

impl SlurmExecutor {
    /// Once the run is over: removes what only its tasks needed from the run folder — the
    /// values passed between them, their results, units and scratch folders — and keeps what
    /// people read afterwards, the jobs' logs and `jobs.tsv`.
    pub fn remove_intermediates(&self) {
        for part in ["values", "results", "units", "scratch"] {
            let path = self.folder.root.join(part);
            match std::fs::remove_dir_all(&path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!("cannot remove {}: {error}", path.display());
                }
                _ => {}
            }
        }
    }

    /// An executor submitting to `slurm`, with the run's values and results under `run_dir`
    /// (in the shared dir, seen by every node).
    pub fn new(slurm: Slurm, run_dir: PathBuf, invocation: Invocation, options: SlurmOptions) -> std::io::Result<Self> {
        let folder = RunFolder { root: run_dir };
        for dir in ["values", "results", "units", "logs"] {
            std::fs::create_dir_all(folder.root.join(dir))?;
        }
        std::fs::write(folder.jobs(), format!("{JOBS_HEADER}\n"))?;
        Ok(SlurmExecutor {
            slurm,
            folder,
            invocation,
            options,
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            next_unit: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            dead: Mutex::new(None),
        })
    }

    /// Names the store's run whose tasks this executor runs ([`RunFolder::note_run`]).
    pub fn note_run(&self, run_id: i64) -> std::io::Result<()> {
        self.folder.note_run(run_id)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The service loop: submits waiting units as job arrays and settles the ones in flight,
    /// until [`SlurmExecutor::stop`] is called and nothing is left in flight.
    pub fn serve(&self) {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve_until_stopped())) {
            // Nobody would settle the units in flight: fail them, so their workers go on.
            let why = format!(
                "internal error: the Slurm executor's service thread panicked: {}",
                crate::panics::message(&*panic)
            );
            *self.dead.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            let error = TaskError::msg(why);
            let mut queue = self.lock();
            let waiting: Vec<(u64, usize)> = queue
                .units
                .iter()
                .map(|(&unit, (_, indices))| (unit, indices.len()))
                .chain(queue.pending.iter().map(|p| (p.unit, p.indices.len())))
                .collect();
            for (unit, tasks) in waiting {
                queue.fail_unit(unit, tasks, &error);
            }
            queue.pending.clear();
            drop(queue);
            self.changed.notify_all();
            self.cancel_all();
        }
    }

    fn serve_until_stopped(&self) {
        let mut last_results = Instant::now();
        let mut last_queue = Instant::now();
        loop {
            let mut queue = self.lock();
            if self.stopping.load(Ordering::Relaxed) && queue.pending.is_empty() && queue.in_flight.is_empty() {
                return;
            }
            let oldest = queue.pending.first().map(|p| p.since.elapsed());
            if oldest.is_some_and(|waited| waited >= GATHER) {
                let pending = std::mem::take(&mut queue.pending);
                drop(queue);
                self.submit(pending);
                continue;
            }
            if !queue.in_flight.is_empty() && last_results.elapsed() >= RESULTS_EVERY {
                let ask_queue = last_queue.elapsed() >= QUEUE_EVERY;
                drop(queue);
                self.poll(ask_queue);
                last_results = Instant::now();
                if ask_queue {
                    last_queue = last_results;
                }
                continue;
            }
            let wait = match oldest {
                Some(waited) => GATHER.saturating_sub(waited),
                None => RESULTS_EVERY.saturating_sub(last_results.elapsed()),
            };
            let _ =
                self.changed.wait_timeout(queue, wait.max(Duration::from_millis(1))).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Asks [`SlurmExecutor::serve`] to return once everything in flight is over.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    /// Submits `pending` units as arrays: one per (step, memory, time), each at most the
    /// cluster's `MaxArraySize` elements.
    fn submit(&self, pending: Vec<Pending>) {
        let mut groups: Vec<Vec<Pending>> = Vec::new();
        for unit in pending {
            match groups.iter_mut().find(|g| {
                g[0].step == unit.step && g[0].mem_bytes == unit.mem_bytes && g[0].time_limit == unit.time_limit
            }) {
                Some(group) => group.push(unit),
                None => groups.push(vec![unit]),
            }
        }
        let max_elements = match self.slurm.config() {
            Ok(config) => config.max_array_size.max(1) as usize,
            Err(error) => {
                let error = TaskError::msg(format!("submitting to Slurm failed: {error}"));
                let mut queue = self.lock();
                for unit in groups.iter().flatten() {
                    queue.fail_unit(unit.unit, unit.indices.len(), &error);
                }
                drop(queue);
                self.changed.notify_all();
                return;
            }
        };
        for mut group in groups {
            while !group.is_empty() {
                let rest = group.split_off(group.len().min(max_elements));
                self.submit_group(group);
                group = rest;
            }
        }
    }

    /// Submits one array of the units of `group` (one step, memory and time).
    fn submit_group(&self, group: Vec<Pending>) {
        let units: Vec<u64> = group.iter().map(|u| u.unit).collect();
        let (step, mem_bytes, time_limit) = (group[0].step.clone(), group[0].mem_bytes, group[0].time_limit);
        let mut queue = self.lock();
        if queue.cancelled {
            let error = TaskError::of_kind(FailureKind::Cancelled, "cancelled before it was submitted to Slurm");
            for unit in &group {
                queue.fail_unit(unit.unit, unit.indices.len(), &error);
            }
            drop(queue);
            self.changed.notify_all();
            return;
        }
        queue.submitting = true;
        drop(queue);
        let submitted = self.submit_array(&step, &units, mem_bytes, time_limit);
        let mut queue = self.lock();
        queue.submitting = false;
        for unit in &group {
            // A unit submitted again after its node was lost keeps every task it had: its
            // worker waits for all of their results.
            queue.units.entry(unit.unit).or_insert_with(|| (unit.step.clone(), unit.indices.clone()));
        }
        match submitted {
            Ok(job) => {
                let done = vec![false; units.len()];
                let ended = HashMap::new();
                queue.in_flight.push(InFlight { job, step, units, done, mem_bytes, time_limit, ended })
            }
            Err(error) => {
                let error = TaskError::msg(format!("submitting to Slurm failed: {error}"));
                for unit in &group {
                    queue.fail_unit(unit.unit, unit.indices.len(), &error);
                }
            }
        }
        drop(queue);
        self.changed.notify_all();
    }

    fn submit_array(
        &self,
        step: &str,
        units: &[u64],
        mem_bytes: u64,
        time_limit: Option<Duration>,
    ) -> Result<Job, crate::slurm::SlurmError> {
        let first = units[0];
        let index_file = self.folder.root.join("units").join(format!("array-{first}"));
        crate::slurm::write_index_file(&index_file, units)?;
        let job = JobSpec {
            name: format!("{}/{step}", self.options.recipe),
            command: self.command(step),
            mem_bytes: job_mem(mem_bytes),
            cpus_per_task: self.options.cpus_per_task.max(1),
            time_limit: time_limit.map(|limit| limit.saturating_add(JOB_TIME_MARGIN)),
            log_dir: self.folder.logs(),
            workdir: Some(self.invocation.workdir.clone()),
            partition: self.options.partition.clone(),
            account: self.options.account.clone(),
            // Slurm must not run an element again by itself (after its node failed): the tasks
            // it lost are submitted again from here, where their results are waited for.
            extra_args: [vec!["--no-requeue".to_string()], self.options.extra_args.clone()].concat(),
        };
        let array =
            ArraySpec { job, tasks: units.len() as u32, throttle: None, mapping: TaskMapping::IndexFile(index_file) };
        let submitted = self.slurm.submit_array(&array)?;
        self.note_submitted(step, &array, submitted);
        Ok(submitted)
    }

    /// Adds a submitted job to the run folder's `jobs.tsv` (for people, and for the tests that
    /// check what each job asked for).
    fn note_submitted(&self, step: &str, array: &ArraySpec, job: Job) {
        let spec = &array.job;
        let mem = crate::slurm::submit::mem_option(spec.mem_bytes);
        let time = spec.time_limit.map_or("-".to_string(), crate::slurm::submit::time_option);
        let line = format!("{}\t{step}\t{}\t{mem}\t{time}\n", job.id, array.tasks);
        tracing::debug!(job = %job.id, step, elements = array.tasks, mem, time, "submitted a job array");
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .open(self.folder.jobs())
            .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()));
        if let Err(error) = appended {
            tracing::warn!("cannot note job {} in {}: {error}", job.id, self.folder.jobs().display());
        }
    }

    /// The batch script's command: `runner task` for the element's unit.
    fn command(&self, step: &str) -> String {
        let i = &self.invocation;
        let mut words: Vec<String> = vec![
            i.exe.display().to_string(),
            "task".into(),
            i.recipe.display().to_string(),
            "--cycle".into(),
            i.cycle.clone(),
            "--run-dir".into(),
            self.folder.root.display().to_string(),
            "--step".into(),
            step.to_string(),
        ];
        for (key, value) in &i.set {
            words.push("--set".into());
            words.push(format!("{key}={value}"));
        }
        if let Some(python) = &i.python {
            words.push("--python".into());
            words.push(python.display().to_string());
        }
        let mut line: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
        line.push("--unit".into());
        line.push(format!("\"${TASK_INDEX_VAR}\""));
        format!("exec {}", line.join(" "))
    }
}

/// `--mem` of a job whose tasks reserve `reserved`.
pub fn job_mem(reserved: u64) -> u64 {
    reserved.saturating_add(JOB_BASELINE)
}

/// How many of a step's `tasks` one job runs, with `workers` jobs in flight and the step's
/// longest recorded task (the rule `runner simulate --executor slurm` packs by too).
pub fn tasks_per_job(tasks: u64, workers: usize, longest_task: Option<Duration>) -> usize {
    // A step's tasks are spread over about as many jobs as may be in flight (`--workers`);
    // a job costs about a second (submission, start, `runner task` compiling the recipe), so
    // once history says how long the step's tasks take, each job gets at least
    // `JOB_WORK` of them; at most 64 tasks a job.
    let spread = tasks.div_ceil(workers.max(1) as u64);
    let filling =
        longest_task.map_or(1, |longest| (JOB_WORK.as_secs_f64() / longest.as_secs_f64().max(1e-3)).ceil() as u64);
    spread.max(filling).min(tasks).clamp(1, 64) as usize
}
