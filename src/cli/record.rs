//! The CLI's side of the feedback loop: which store to use (`--db`, `RUNNER_DB`,
//! `--no-record`), learning estimates from it before a run, and marking a recorded run
//! interrupted on Ctrl-C and SIGTERM (the recording itself is `store::sink`'s).
//!
//! What is learned from: the finished runs of a step (ok or failed) and the killed ones — a
//! killed run's rows were measured like any other, only the tasks running when it died are
//! missing — but not interrupted runs (Ctrl-C, SIGTERM): a run stopped on purpose is often a
//! run that went wrong (a wrong budget, a wrong input), and its cycle is incomplete.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::interrupt::{self, InterruptGuard};
use crate::estimate::{HISTORY_RUNS, HISTORY_TASKS_PER_RUN, Observation, Params};
use crate::memory::RanStanding;
use crate::plan::{Compiled, EstimateSource, ServicesBefore};
use crate::recipe::Recipe;
use crate::store::writer::INTERRUPT_WAIT;
use crate::store::{RunOutcome, RunRecorder, RunStatus, Store, StoreError, TaskStatus};

/// Opens (or creates) the store at `path` for recording.
pub fn open_for_recording(path: &Path) -> anyhow::Result<Store> {
    Ok(Store::open(path)?)
}

/// Opens the store at `path` for reading only: `None` when there is none. Nothing is written
/// to it (`plan`, `history`, `report`, `simulate`, `run --no-record`). A store of an older
/// schema is read from a copy migrated to this runner's, in this process's scratch folder
/// (removed at the end of the command): a command that only reads never changes the store, and
/// never predicts or plans as if it had no history.
pub fn open_for_reading(path: &Path) -> Result<Option<Store>, StoreError> {
    match Store::open_read_only(path) {
        Err(StoreError::TooOld { path, found, known }) => {
            let dir = super::scratch::run_dir();
            std::fs::create_dir_all(&dir).map_err(|error| StoreError::Io {
                path: dir.clone(),
                what: "making a folder for a migrated copy of the store",
                error,
            })?;
            tracing::warn!(
                "feedback store {} has schema version {found}, older than this runner's ({known}): reading a copy \
                 migrated to it (the store itself is migrated by the next `runner run` that records into it)",
                path.display()
            );
            Store::open_migrated_copy(&path, &dir.join("store.db")).map(Some)
        }
        other => other,
    }
}

/// The default store path: `RUNNER_DB` or `runner.db` in the working directory.
pub fn default_db() -> PathBuf {
    std::env::var_os("RUNNER_DB").map_or_else(|| PathBuf::from(crate::store::DEFAULT_DB), PathBuf::from)
}

/// What the estimator learns `step` of `recipe` from: its last [`HISTORY_RUNS`] runs' tasks
/// (a sample of [`HISTORY_TASKS_PER_RUN`] of each), their ages counted back from the newest run.
/// Interrupted runs are left out (see the module documentation: a run stopped on purpose is not learned from).
pub fn step_observations(store: &Store, recipe: &str, step: &str) -> Result<Vec<Observation>, StoreError> {
    Ok(step_history(store, recipe, step)?.0)
}

/// [`step_observations`], and the longest wall time of those tasks (`None` without any).
fn step_history(store: &Store, recipe: &str, step: &str) -> Result<(Vec<Observation>, Option<Duration>), StoreError> {
    // (run index, observation with age still unknown).
    let mut rows: Vec<(usize, Observation)> = Vec::new();
    let mut longest_ms = 0;
    let runs = store.task_history(recipe, step, HISTORY_RUNS, Some(HISTORY_TASKS_PER_RUN), |_, task| {
        // Reused tasks were measured by the run they come from, which is learned from already.
        if !matches!(task.status, TaskStatus::Skipped | TaskStatus::Reused) {
            longest_ms = longest_ms.max(task.wall_ms);
            let observation = Observation {
                age: 0,
                peak: task.peak_bytes,
                plugin_estimate: task.plugin_estimate_bytes.unwrap_or(0),
                input_bytes: task.input_bytes,
                estimate: task.estimate_bytes,
                from_history: task.estimate_source == Some(EstimateSource::History),
            };
            rows.push((task.run_index, observation));
        }
    })?;
    let newest = runs.len().saturating_sub(1);
    let observations = rows.into_iter().map(|(index, o)| Observation { age: (newest - index) as u32, ..o }).collect();
    Ok((observations, (!runs.is_empty()).then(|| Duration::from_millis(longest_ms))))
}

/// Makes each step's history the source of its estimates, where there is history.
/// Also notes each step's longest recorded task (what a Slurm job's `--time` is learned from).
pub fn learn(store: &Store, compiled: &mut Compiled) {
    let Compiled { recipe, plan, .. } = compiled;
    let recipe = &*recipe;
    let histories: Vec<(Vec<Observation>, Option<Duration>)> = recipe
        .steps
        .iter()
        .map(|step| {
            step_history(store, &recipe.name, &step.name).unwrap_or_else(|e| {
                tracing::warn!("cannot read the history of step `{}`: {e}", step.name);
                (Vec::new(), None)
            })
        })
        .collect();
    let history = |name: &str| -> Vec<Observation> {
        recipe.steps.iter().position(|s| s.name == name).map(|at| histories[at].0.clone()).unwrap_or_default()
    };
    plan.learn(recipe, &history, Params::default());
    plan.services_before = services_before(store, recipe).unwrap_or_else(|e| {
        tracing::warn!("cannot read what the recipe's service processes held before: {e}");
        None
    });
    for (step, (_, longest)) in plan.steps.iter_mut().zip(&histories) {
        step.longest_task = *longest;
    }
}

/// Completes the run row `recorder` writes as `interrupted` (with every row finished by then)
/// if Ctrl-C or SIGTERM ends the process while the guard lives; `None` for a recorder with
/// nothing to mark. Drop the guard before the run row is completed: a signal from then on has
/// nothing to mark.
pub fn mark_interrupted_on_signal(recorder: &RunRecorder) -> Option<InterruptGuard> {
    let started = Instant::now();
    recorder.interrupt_handle().map(|handle| {
        interrupt::on_interrupt(move || {
            let outcome = RunOutcome {
                wall: started.elapsed(),
                peak_rss_bytes: crate::measure::process_memory().map_or(0, |m| m.peak_rss_bytes),
                ..RunOutcome::new(RunStatus::Interrupted)
            };
            if !handle.interrupt(outcome, INTERRUPT_WAIT) {
                say!("run {} could not be marked interrupted in the store in time", handle.run_id());
            }
        })
    })
}

/// What the recipe's newest run with service processes held of them, and which of this
/// recipe's steps ran without them.
fn services_before(store: &Store, recipe: &Recipe) -> Result<Option<ServicesBefore>, StoreError> {
    let Some(run) = store.newest_with_standing(&recipe.name)? else { return Ok(None) };
    let names = store.steps_without_services(run.run_id)?;
    let ran_without = names.iter().filter_map(|name| recipe.step_id(name)).collect();
    let held = RanStanding { standing: run.standing(), workers: run.workers.max(1) as usize };
    Ok(Some(ServicesBefore { held, ran_without }))
}
