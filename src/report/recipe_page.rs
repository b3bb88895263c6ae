//! The recipe page's model: a recipe's runs in cycle order, and per step its estimate against
//! its actual peaks in each run (the learning made visible: slack and under-estimates cycle by
//! cycle) with a sample of its tasks' peaks against what estimates are learned from — the
//! plugin's own estimate and the input bytes.

use crate::store::{HistoryRun, RunFilter, RunRow, StepFigures, Store, TaskStatus};

use super::{Limits, ReportError};

/// A recipe's runs as its report shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct RecipePage {
    pub recipe: String,
    /// Oldest first.
    pub runs: Vec<RunRow>,
    /// In the order the runs first recorded them.
    pub steps: Vec<RecipeStep>,
}

/// One step across the runs of a [`RecipePage`].
#[derive(Debug, Clone, PartialEq)]
pub struct RecipeStep {
    pub step: String,
    pub plugin: String,
    /// Its figures in each run of [`RecipePage::runs`] (`None`: that run has no rows of it).
    pub per_run: Vec<Option<StepFigures>>,
    /// Some of the tasks that ran, the first recorded of each run.
    pub scatter: Vec<ScatterPoint>,
}

/// A task of a step's scatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScatterPoint {
    /// Its run's position in [`RecipePage::runs`].
    pub run: u32,
    pub input_bytes: u64,
    /// What the plugin estimated for it (`None`: not recorded).
    pub plugin_estimate_bytes: Option<u64>,
    /// What it was admitted with.
    pub estimate_bytes: u64,
    pub peak_bytes: u64,
}

impl RecipePage {
    /// The ids of the last `last` runs of `recipe`, oldest first: running, finished and killed
    /// ones, not those stopped by Ctrl-C or SIGTERM (as `runner history` shows them).
    pub fn last_runs(store: &Store, recipe: &str, last: usize) -> Result<Vec<i64>, ReportError> {
        let filter = RunFilter { running: true, interrupted: false };
        Ok(store.history_runs(Some(recipe), None, last, filter)?.into_iter().map(|r| r.run_id).collect())
    }

    /// Reads the runs `run_ids` of `recipe` (in the order given) from `store`.
    pub fn load(store: &Store, recipe: &str, run_ids: &[i64], limits: &Limits) -> Result<RecipePage, ReportError> {
        let mut runs = Vec::with_capacity(run_ids.len());
        for &run_id in run_ids {
            runs.push(
                store
                    .run(run_id)?
                    .ok_or_else(|| ReportError::NoSuchRun { path: store.path().to_path_buf(), run_id })?,
            );
        }
        let mut steps: Vec<RecipeStep> = Vec::new();
        for (index, run) in runs.iter().enumerate() {
            for entry in store.run_step_history(&HistoryRun::from(run), None)? {
                let entry = entry.figures;
                let at = match steps.iter().position(|s| s.step == entry.step) {
                    Some(at) => at,
                    None => {
                        steps.push(RecipeStep {
                            step: entry.step.clone(),
                            plugin: entry.plugin.clone(),
                            per_run: vec![None; runs.len()],
                            scatter: Vec::new(),
                        });
                        steps.len() - 1
                    }
                };
                steps[at].per_run[index] = Some(entry);
            }
        }
        let per_run_points = (limits.scatter_points / runs.len().max(1)).max(10) as u64;
        for step in &mut steps {
            for (index, run) in runs.iter().enumerate() {
                if step.per_run[index].is_none() {
                    continue;
                }
                store.step_tasks(run.run_id, &step.step, per_run_points, |task| {
                    if task.status != TaskStatus::Skipped {
                        step.scatter.push(ScatterPoint {
                            run: index as u32,
                            input_bytes: task.input_bytes,
                            plugin_estimate_bytes: task.plugin_estimate_bytes,
                            estimate_bytes: task.estimate_bytes,
                            peak_bytes: task.peak_bytes,
                        });
                    }
                })?;
            }
        }
        Ok(RecipePage { recipe: recipe.to_string(), runs, steps })
    }
}
