//! A run set up and torn down: the spill folder, the meter, the state and what workers share
//! ([`super::shared::Shared`]), the kept outputs `--resume` hands a remote executor, the worker threads, and
//! their results merged into the [`RunReport`].

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::output_claims;
use super::shared::{Shared, WorkerResult};
use super::stats::StepStats;
use super::worker::{MAX_BATCH, Worker};
use super::{Local, Progress, RunExtras, RunMeter, RunOptions, RunReport, SpillRecord, State, StepTraits, TaskSink};
use crate::executor::Executor;
use crate::executor::attempt;
use crate::graph::Graph;
use crate::measure;
use crate::memory::Standing;
use crate::memory::spill::SpillDir;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::resume::{Fingerprints, Reuse};

/// Runs every task of `recipe` and reports what happened.
pub fn run(
    recipe: &Recipe,
    graph: &Graph,
    plan: &Plan,
    options: &RunOptions,
    progress: &Progress,
    sink: Option<&dyn TaskSink>,
) -> RunReport {
    run_with(recipe, graph, plan, options, progress, sink, RunExtras::default())
}

/// [`run`], with [`RunExtras`].
pub fn run_with(
    recipe: &Recipe,
    graph: &Graph,
    plan: &Plan,
    options: &RunOptions,
    progress: &Progress,
    sink: Option<&dyn TaskSink>,
    extras: RunExtras<'_>,
) -> RunReport {
    let RunExtras { executor, reuse } = extras;
    let local = executor.is_none();
    let executor = executor.unwrap_or(&Local);
    let workers = options.workers.clamp(1, measure::SLOTS);
    // Nested parallel work (TaskContext::join and friends) runs on rayon's global pool; size it
    // like the worker pool. It can only be set once per process, which is fine for the CLI.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(workers).build_global();
    crate::panics::install_hook();
    let started = Instant::now();
    let traits = StepTraits::of(recipe, plan);
    // Folders of killed runs go first; this run's is created on its first spill and removed
    // when `spill` drops at the end of this function, also on error.
    if let Err(error) = SpillDir::remove_stale(&options.spill_parent()) {
        tracing::warn!("cannot clean up old spill folders: {error}");
    }
    let spill = SpillDir::new(options.spill_dir.as_deref());
    if spill.is_on_tmpfs() {
        tracing::warn!(
            "the spill dir {} is on tmpfs, where spilled buffers still take memory; pass --spill-dir on a disk",
            spill.parent().display()
        );
    }
    if let Some(reuse) = reuse
        && !executor.runs_in_process()
    {
        hand_over_reused(recipe, graph, reuse, executor);
    }
    // A run before this one in the process (a test's) may have let services go near its end.
    executor.reach(u64::MAX);
    // A cluster's services run in its jobs, not beside this process's ledger; a resumed run
    // whose tasks left all ran without them starts none.
    let expected = match &plan.services_before {
        Some(before) if local && !reuse.is_some_and(|reuse| before.none_started_by(&tasks_left(graph, reuse))) => {
            before.held.on_workers(workers)
        }
        _ => Standing::default(),
    };
    let meter = RunMeter::new(workers * MAX_BATCH, expected);
    let mut state = State::new(graph, plan, traits, options.budget, &meter, reuse);
    state.take_over_reused();
    let shared = Shared {
        recipe,
        graph,
        plan,
        options,
        state: Mutex::new(state),
        wake: Condvar::new(),
        progress,
        sink,
        meter: &meter,
        spill: &spill,
        started,
        executor,
        local,
        reuse,
        fingerprints: sink.map(|_| Fingerprints::new(recipe)),
        output_claims: output_claims::OutputClaims::new(recipe),
        scratch_root: options.work_dir.join("scratch"),
        log_root: options.log_dir.join(attempt::file_name(&recipe.name)).join(attempt::file_name(&recipe.cycle)),
    };
    progress.total.store(graph.total_tasks(), Ordering::Relaxed);
    progress.budget.store(options.budget, Ordering::Relaxed);
    // Local commands and services that break the budget are preempted (remote ones have the
    // limits of their jobs).
    crate::measure::preempt::set_budget(if executor.runs_in_process() { options.budget } else { 0 });
    let results: Vec<WorkerResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("runner-worker-{i}"))
                    .spawn_scoped(scope, move || Worker::new(shared, i).run())
                    .expect("spawning a worker thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    progress.done.store(true, Ordering::Relaxed);
    let mut state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    drop(std::mem::take(&mut state.garbage));
    let mut steps = vec![StepStats::default(); recipe.steps.len()];
    let mut failures = Vec::new();
    let mut internal_error = state.stuck.clone();
    let mut spills = Vec::new();
    let mut missing = Vec::new();
    for result in results {
        for (total, part) in steps.iter_mut().zip(&result.steps) {
            total.merge(part);
        }
        failures.extend(result.failures);
        missing.extend(result.missing);
        spills.extend(result.spills);
        internal_error = internal_error.or(result.internal_error);
    }
    spills.sort_by_key(|s: &SpillRecord| s.started);
    failures.sort_by_key(|f| (f.step_id, f.index));
    missing.sort_by_key(|f| (f.step_id, f.index));
    let _ = std::fs::remove_dir_all(&options.work_dir);
    RunReport {
        steps,
        failures,
        wall: started.elapsed(),
        peak_reserved: state.ledger.peak_used(),
        standing_at_peak: state.ledger.standing_at_peak(),
        spilled_bytes: state.spilled,
        spill_count: state.spill_count,
        spill_error: state.spill_error.clone(),
        workers,
        budget: options.budget,
        internal_error,
        not_run: state.unfinished(),
        spills,
        missing,
    }
}

/// Gives `remote` the outputs of the tasks `--resume` takes over that a task that runs again
/// reads (each once), so that its jobs find them as they find the outputs of this run's tasks.
fn hand_over_reused(recipe: &Recipe, graph: &Graph, reuse: &Reuse, remote: &dyn Executor) {
    let mut handed: Vec<std::collections::HashSet<u64>> = vec![Default::default(); recipe.steps.len()];
    for &step in &graph.topo {
        for index in (0..graph.steps[step].tasks).filter(|&index| reuse.get(step, index).is_none()) {
            for &edge in &graph.steps[step].inputs {
                let producer = graph.edges[edge].producer;
                graph.for_each_producer(edge, index, |p| {
                    let Some(task) = reuse.get(producer, p) else { return };
                    if !handed[producer].insert(p) {
                        return;
                    }
                    let name = &recipe.steps[producer].name;
                    if let Err(error) = remote.adopt(name, p, &task.value()) {
                        tracing::warn!(
                            "cannot hand the kept output of {name} task {p} to the {} jobs: {error}",
                            remote.name()
                        );
                    }
                });
            }
        }
    }
}

/// Each step's tasks that `reuse` does not take over.
fn tasks_left(graph: &Graph, reuse: &Reuse) -> Vec<u64> {
    graph
        .steps
        .iter()
        .enumerate()
        .map(|(step, shape)| shape.tasks.saturating_sub(reuse.of_step(step).count() as u64))
        .collect()
}
