//! `runner run`: compile, learn estimates from the store, run under the budget with a progress
//! bar, record every task, summarise, exit 0/1/2/3. [`execute`] is shared with `runner replay`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};

use super::output_guard::{OutputGuard, OutputKind, check_writable};
use super::output_lock::OutputLocks;
use super::record;
use super::summary::RunSummary;
use super::{EXIT_RUNTIME, EXIT_TASKS_FAILED, EXIT_USAGE, ResourceArgs, RunArgs, compile, progress, sampler};
use crate::executor::Executor;
use crate::executor::job::RunFolder;
use crate::executor::slurm::{Invocation, SlurmExecutor, SlurmOptions};
use crate::measure;
use crate::plan::Compiled;
use crate::registry::Registry;
use crate::resume::Reuse;
use crate::scheduler::{self, Progress, RunExtras, RunOptions, StepProgress, TaskSink};
use crate::slurm::Slurm;
use crate::store::sink::{self, StoreSink};
use crate::store::{RunOutcome, RunStatus, Store};

pub fn run(registry: &Registry, args: RunArgs) -> anyhow::Result<u8> {
    let Some(mut compiled) = compile(registry, &args.recipe) else { return Ok(EXIT_USAGE) };
    let db = args.db.clone().unwrap_or_else(record::default_db);
    // Also protects the store and the recipe from every task's outputs while the run lasts.
    let mut guard = OutputGuard::default();
    guard.protect_store(&db).protect_recipe(&args.recipe.recipe, &compiled);
    if let Some(path) = &args.summary {
        guard.output(path, "--summary", OutputKind::Json);
    }
    guard.check()?;
    guard.check_tasks(&compiled)?;
    // Found out before the first task runs, not after the last.
    if let Some(path) = &args.summary {
        check_writable(path).with_context(|| format!("the summary cannot be written to {}", path.display()))?;
    }
    let slurm = args.executor.executor == super::ExecutorKind::Slurm;
    refuse_slurm_options_without_slurm(&args.executor, slurm)?;
    let mut options = if slurm { remote_options(&args.resources)? } else { run_options(&args.resources)? };
    let store = if args.no_record { record::open_for_reading(&db)? } else { Some(record::open_for_recording(&db)?) };
    let remote = if slurm { Some(slurm_executor(&compiled, &args)?) } else { None };
    let reuse = match (&store, args.resume) {
        (Some(store), true) => plan_resume(store, &compiled, &shared_dir(args.executor.shared_dir.as_deref())?)?,
        (Some(store), false) => {
            refuse_a_second_run(store, &compiled)?;
            None
        }
        _ => None,
    };
    let _locks = OutputLocks::acquire(&compiled)?;
    if remote.is_some() {
        // Jobs run on the cluster's nodes: this machine's memory limits them in nothing.
        options.memory_limit = None;
    }
    let Executed { summary, store_error } =
        execute(&mut compiled, &options, store.as_ref(), !args.no_record, remote.as_ref(), reuse.as_ref())?;
    summary.print();
    let mut code = if summary.status == RunStatus::Ok { 0 } else { EXIT_TASKS_FAILED };
    if let Some(path) = &args.summary
        && let Err(error) = summary.write(path)
    {
        say!("error: {error:#}");
        code = EXIT_RUNTIME;
    }
    if let Some(error) = store_error {
        say!("error: {error:#}");
        code = EXIT_RUNTIME;
    }
    Ok(code)
}

/// `--resume`: what the last run of this recipe and cycle leaves to take over, or `None` (with
/// a word why) when there is nothing to resume. `shared` is the shared dir a Slurm run of it
/// kept its run folder in, whose job processes' half-written files are removed too.
pub fn plan_resume(store: &Store, compiled: &Compiled, shared: &Path) -> anyhow::Result<Option<Reuse>> {
    let recipe = &compiled.recipe;
    let Some(previous) = store.last_run_of(&recipe.name, &recipe.cycle)? else {
        say!("--resume: no earlier run of {} for cycle {}: running everything", recipe.name, recipe.cycle);
        return Ok(None);
    };
    if previous.status == RunStatus::Running {
        return Err(super::UsageError(format!(
            "--resume: run {} of {} for cycle {} is still running (pid {}); wait for it or stop it first",
            previous.run_id, recipe.name, recipe.cycle, previous.pid
        ))
        .into());
    }
    let mut tasks = Vec::new();
    store.recorded_tasks(previous.run_id, |task| tasks.push(task))?;
    if previous.status != RunStatus::Ok {
        let jobs = slurm_job_pids(shared, &recipe.name, previous.pid, previous.run_id);
        let removed: usize =
            [previous.pid].iter().chain(&jobs).map(|&pid| crate::resume::remove_temp_files_of(pid, &tasks)).sum();
        if removed > 0 {
            let files = if removed == 1 { "file" } else { "files" };
            say!("--resume: removed {removed} half-written temporary {files} run {} left", previous.run_id);
        }
    }
    let finished = tasks.iter().filter(|t| t.finished).count();
    let reuse = Reuse::plan(compiled, previous.run_id, tasks);
    say!(
        "--resume: run {} ({}) of cycle {} recorded {finished} finished tasks: {} of {} tasks taken over",
        previous.run_id,
        previous.status,
        recipe.cycle,
        reuse.count(),
        compiled.graph.total_tasks()
    );
    Ok(Some(reuse))
}

/// A plain run of a recipe and cycle while another is still running them is refused: both would
/// write the same outputs and record the same tasks.
pub fn refuse_a_second_run(store: &Store, compiled: &Compiled) -> anyhow::Result<()> {
    let recipe = &compiled.recipe;
    match store.last_run_of(&recipe.name, &recipe.cycle)? {
        Some(live) if live.status == RunStatus::Running => Err(super::UsageError(format!(
            "run {} of {} for cycle {} is still running (pid {}); expected one run of a recipe and cycle at a \
             time: wait for it or stop it first",
            live.run_id, recipe.name, recipe.cycle, live.pid
        ))
        .into()),
        _ => Ok(()),
    }
}

/// Options that only a Slurm run uses are refused without `--executor slurm`, rather than left
/// unused without a word.
fn refuse_slurm_options_without_slurm(options: &super::ExecutorArgs, slurm: bool) -> anyhow::Result<()> {
    let given = [
        ("--shared-dir", options.shared_dir.is_some()),
        ("--partition", options.partition.is_some()),
        ("--account", options.account.is_some()),
        ("--slurm-arg", !options.slurm_args.is_empty()),
        ("--cpus-per-task", options.cpus_per_task.is_some()),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) if !slurm => {
            Err(super::UsageError(format!("{flag} is for runs on Slurm; expected it with --executor slurm")).into())
        }
        _ => Ok(()),
    }
}

/// A `--spill-dir` that cannot take files fails the run before anything runs (exit 3): found
/// at the first spill, it would leave the run going on over its budget.
fn check_spill_dir(resources: &ResourceArgs) -> anyhow::Result<()> {
    let Some(dir) = &resources.spill_dir else { return Ok(()) };
    let unusable = |e: std::io::Error| anyhow!("the spill folder {} cannot be used: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(unusable)?;
    runner_plugin::files::probe_folder(dir).map_err(unusable)
}

/// Jobs in flight at once with `--executor slurm` unless `--workers` says.
const SLURM_JOBS_IN_FLIGHT: usize = 64;

/// Options for a run whose tasks are jobs: `--workers` bounds the jobs in flight, and unless
/// `--budget` says otherwise no budget of this machine's binds them (each job has its `--mem`).
fn remote_options(resources: &ResourceArgs) -> anyhow::Result<RunOptions> {
    check_spill_dir(resources)?;
    let workers = resources.workers.map_or(SLURM_JOBS_IN_FLIGHT, usize::from);
    let budget = resources.budget.unwrap_or(super::summary::NO_LOCAL_BUDGET);
    let work_dir = work_dir();
    super::interrupt::remove_on_interrupt(work_dir.clone());
    Ok(RunOptions { spill_dir: resources.spill_dir.clone(), ..RunOptions::new(workers, budget, work_dir) })
}

/// The shared dir a Slurm run keeps its run folders in (`--shared-dir`, else `runner-shared`),
/// made absolute.
pub fn shared_dir(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let shared = flag.unwrap_or(Path::new("runner-shared"));
    Ok(if shared.is_absolute() { shared.to_path_buf() } else { cwd.join(shared) })
}

/// The pids the job processes of Slurm run `run_id` of `recipe` by runner `pid` noted in its
/// run folder in `shared` (none for a local run). The folder is named by recipe and pid and
/// names its run inside: an older folder of the same recipe and pid is another run's.
fn slurm_job_pids(shared: &Path, recipe: &str, pid: u32, run_id: i64) -> Vec<u32> {
    let prefix = format!("{}-{pid}-", sanitize_name(recipe));
    let Ok(entries) = std::fs::read_dir(shared) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.starts_with(&prefix)))
        .map(|entry| RunFolder { root: entry.path() })
        .filter(|folder| folder.noted_run() == Some(run_id))
        .flat_map(|folder| folder.job_pids())
        .collect()
}

/// The Slurm executor of this run: its folder in the shared dir, how jobs start `runner task`.
fn slurm_executor(compiled: &Compiled, args: &RunArgs) -> anyhow::Result<Arc<SlurmExecutor>> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let shared = shared_dir(args.executor.shared_dir.as_deref())?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3f");
    let run_dir = shared.join(format!("{}-{}-{stamp}", sanitize_name(&compiled.recipe.name), std::process::id()));
    let recipe = &args.recipe.recipe;
    let invocation = Invocation {
        exe: std::env::current_exe().context("finding this runner's executable for the jobs")?,
        recipe: if recipe.is_absolute() { recipe.clone() } else { cwd.join(recipe) },
        cycle: compiled.recipe.cycle.clone(),
        set: args.recipe.set.clone(),
        python: args.recipe.python.interpreter.clone(),
        workdir: cwd,
    };
    let options = SlurmOptions {
        partition: args.executor.partition.clone(),
        account: args.executor.account.clone(),
        extra_args: args.executor.slurm_args.clone(),
        cpus_per_task: args.executor.cpus_per_task.unwrap_or(1),
        recipe: compiled.recipe.name.clone(),
    };
    // Asked once before anything runs: without a cluster to talk to, every job would fail alike.
    let slurm = Slurm::new();
    slurm.config().map_err(|e| anyhow!("--executor slurm: cannot reach the cluster: {e}"))?;
    let executor = SlurmExecutor::new(slurm, run_dir.clone(), invocation, options)
        .with_context(|| format!("creating the run's folder {} in the shared dir", run_dir.display()))?;
    Ok(Arc::new(executor))
}

/// A recipe name as a folder name.
fn sanitize_name(name: &str) -> String {
    name.chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// Budget and workers from the command line, with their defaults.
pub fn run_options(resources: &ResourceArgs) -> anyhow::Result<RunOptions> {
    check_spill_dir(resources)?;
    let budget = crate::budget::choose(resources.budget)
        .map_err(|e| anyhow!("cannot choose a default budget ({e}); pass --budget"))?;
    for warning in &budget.warnings {
        say!("warning: {warning}");
    }
    let budget = budget.bytes;
    let cpus = crate::scheduler::cpus_here();
    let workers = resources.workers.map(usize::from).unwrap_or(cpus);
    if workers > cpus {
        tracing::warn!(
            "--workers {workers} is more than the {cpus} CPUs this process may use: the extra workers \
             only cost memory (each holds a running task's reservation), they cannot run faster"
        );
    }
    let work_dir = work_dir();
    super::interrupt::remove_on_interrupt(work_dir.clone());
    let memory_limit = if resources.allow_oversized { None } else { crate::budget::memory_limit() };
    if let Some(bytes) = resources.log_limit {
        crate::command::set_log_limit(bytes);
    }
    crate::command::kill_what_killed_runners_left();
    Ok(RunOptions {
        spill_dir: resources.spill_dir.clone(),
        memory_limit,
        enforce_memory: resources.enforce_memory,
        ..RunOptions::new(workers, budget, work_dir)
    })
}

/// What a run gave: its summary, and the error that kept the store from recording its end (the
/// run itself went on; its summary is still printed and written).
pub struct Executed {
    pub summary: RunSummary,
    pub store_error: Option<anyhow::Error>,
}

/// Runs a compiled recipe: estimates from `store`'s history, every task recorded into it when
/// `record`, a progress bar on a terminal; the tasks run as Slurm jobs when `slurm` is given,
/// and those `reuse` names are taken over from the run it resumes. The peak RSS is this run's
/// alone.
pub fn execute(
    compiled: &mut Compiled,
    options: &RunOptions,
    store: Option<&Store>,
    record: bool,
    slurm: Option<&Arc<SlurmExecutor>>,
    reuse: Option<&Reuse>,
) -> anyhow::Result<Executed> {
    if let Some(store) = store {
        record::learn(store, compiled);
    }
    if let Some(limit) = options.memory_limit {
        refuse_oversized(compiled, limit)?;
    }
    let sink = match (store, record) {
        (Some(store), true) => {
            let mut start = sink::run_start(compiled, options);
            if slurm.is_some() {
                start.executor = crate::store::Executor::Slurm;
            }
            start.resumed_from = reuse.map(|r| r.from_run);
            start.warm_services = crate::command::service::begin_run() as u64;
            let recorder = store.start_run(&start)?;
            if let Some(slurm) = slurm {
                slurm.note_run(recorder.run_id()).context("noting the run in its Slurm run folder")?;
            }
            Some(StoreSink::new(recorder, &start, compiled, options.workers.max(1)))
        }
        _ => None,
    };
    // Declared after the sink, so that it is dropped first.
    let interrupt = sink.as_ref().and_then(|s| record::mark_interrupted_on_signal(s.recorder()));
    // Each run of a replay reports its own peak, not the process's.
    let _ = measure::reset_peak_rss();
    crate::command::reset_tree_peak();
    // Sized for the recipe's steps, so that the bar's ETA can use each step's task times.
    let steps = compiled.graph.steps.iter().map(|s| StepProgress { tasks: s.tasks, ..StepProgress::default() });
    let progress = Progress { steps: steps.collect(), ..Progress::default() };
    let report = std::thread::scope(|scope| {
        let bar = progress::spawn(scope, &progress);
        let sampler = sink.as_ref().and_then(|s| sampler::spawn(scope, &progress, s.recorder()).ok());
        let sink = sink.as_ref().map(|s| s as &dyn TaskSink);
        let server = slurm.map(|executor| scope.spawn(move || executor.serve()));
        // Ctrl-C and SIGTERM cancel the run's jobs before the process exits.
        let _cancel = slurm.map(|executor| {
            let executor = Arc::clone(executor);
            super::interrupt::on_interrupt(move || executor.cancel_all())
        });
        let executor = slurm.map(|e| &**e as &dyn Executor);
        let report = scheduler::run_with(
            &compiled.recipe,
            &compiled.graph,
            &compiled.plan,
            options,
            &progress,
            sink,
            RunExtras { executor, reuse },
        );
        if let Some(executor) = slurm {
            executor.stop();
            executor.remove_intermediates();
        }
        // The bar and the sampler sleep parked between figures; `done` is set by now.
        for thread in [&bar, &sampler].into_iter().flatten() {
            thread.thread().unpark();
        }
        for thread in [bar, sampler, server].into_iter().flatten() {
            let _ = thread.join();
        }
        report
    });
    let peak_rss = measure::process_memory().map_or(0, |m| m.peak_rss_bytes);
    let mut summary = RunSummary::new(&compiled.recipe, &report, peak_rss);
    if slurm.is_some() {
        summary.executor = crate::store::Executor::Slurm;
    }
    let mut store_error = None;
    // A signal from now on has nothing to mark: the run row is being completed.
    drop(interrupt);
    if let Some(sink) = sink {
        let status = summary.status;
        match sink.finish(RunOutcome {
            status,
            wall: report.wall,
            peak_rss_bytes: peak_rss,
            peak_reserved_bytes: report.peak_reserved,
            standing_bytes: report.standing_at_peak.bytes,
            standing_shared_bytes: report.standing_at_peak.shared,
            standing_services: report.standing_at_peak.services,
            most_services: crate::command::service::most_alive() as u64,
            spilled_bytes: report.spilled_bytes,
            spill_count: report.spill_count,
            spill_wall: report.spills.iter().map(|spill| spill.wall).sum(),
            spill_error: report.spill_error.clone(),
            oversized: summary.oversized,
        }) {
            Ok(written) => tracing::debug!(
                rows = written.rows,
                batches = written.batches,
                write_ms = written.write_time.as_millis() as u64,
                writer_cpu_ms = written.cpu_time.as_millis() as u64,
                "recorded the run's tasks"
            ),
            Err(error) => store_error = Some(anyhow::Error::new(error).context("recording the end of the run")),
        }
    }
    Ok(Executed { summary, store_error })
}

/// Refuses, before anything runs, a recipe with a step whose tasks are estimated above `limit`,
/// the most memory this process could ever have: such a task would take the machine down with
/// it. (A task whose estimate only turns out that large at dispatch fails then, alone.)
pub fn refuse_oversized(compiled: &Compiled, limit: u64) -> anyhow::Result<()> {
    use runner_plugin::size::format_size;
    let problems: Vec<String> = compiled
        .recipe
        .steps
        .iter()
        .zip(&compiled.plan.steps)
        .filter(|(_, plan)| plan.estimate > limit)
        .map(|(step, plan)| {
            format!(
                "step `{}` needs {} a task ({} estimate), more than the {} this machine can give the process \
                 (its RAM, capped by its cgroup's limit)",
                step.name,
                format_size(plan.estimate),
                plan.source,
                format_size(limit)
            )
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(super::UsageError(format!(
        "{}; expected tasks that fit this machine, or --allow-oversized to try anyway",
        problems.join("; ")
    ))
    .into())
}

/// A directory for this run's scratch files inside this process's private folder, removed when
/// the run ends.
fn work_dir() -> PathBuf {
    super::scratch::run_dir()
}
