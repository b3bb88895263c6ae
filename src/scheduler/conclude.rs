//! What follows a task's outcome, once, wherever it ran: `on_missing` (skipped, dropped or
//! failed), the resume hashes and kept value, the record handed to the [`TaskSink`], the step's
//! statistics and progress, the failure for the run's report; and the records of tasks that did
//! not run here (skipped, or taken over by `--resume`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use runner_plugin::{FailureKind, Value};

use super::worker::{Finished, UnpublishedRuns, Worker};
use super::{Failure, Outcome, Picked, TaskFigures, TaskHashes, TaskRef, TaskReport};
use crate::executor::attempt::TaskOutcome;
use crate::memory::Admission;
use crate::recipe::OnMissing;

impl<'s, 'r> Worker<'s, 'r> {
    /// Applies what follows an outcome, once, wherever the task ran: `on_missing`, the resume
    /// hashes and kept value, the record, the step's statistics, the failure for the report.
    /// `remote_output_bytes` is what a task run elsewhere said its output held (its value here
    /// is a value file, which holds no buffer).
    pub(super) fn conclude(
        &mut self,
        at: usize,
        outcome: TaskOutcome,
        attempts: u32,
        wall: Duration,
        started: Instant,
        remote_output_bytes: Option<u64>,
    ) -> Finished {
        let task = self.claimed[at].picked.task;
        let TaskRef { step, index } = task;
        let on_missing = self.shared.recipe.steps[step].on_missing;
        let (result, output, error) = match outcome.result {
            Ok(output) => (Outcome::Ok, output, None),
            Err(error) => {
                let result = match (error.kind(), on_missing) {
                    (FailureKind::MissingInput, OnMissing::Skip) => Outcome::Skipped,
                    (FailureKind::MissingInput, OnMissing::Ignore) => Outcome::Dropped,
                    _ => Outcome::Failed,
                };
                (result, Value::None, Some(error.to_string()))
            }
        };
        let output_bytes = remote_output_bytes.unwrap_or_else(|| output.buffer_bytes());
        // Consumers learn from the size of a path output's file (for a task run elsewhere, its
        // value file: the output's data), as from a buffer.
        let file_bytes = match &output {
            Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            _ => 0,
        };
        let (hashes, output_path) = match result {
            Outcome::Ok => {
                let producers_hash = self.claimed[at].producers_hash;
                match (remote_output_bytes, &output) {
                    // Hashed as the task returned it: the value its value file holds.
                    (Some(_), Value::Path(file)) => match file.parent().map(|dir| crate::values::map(dir, index)) {
                        Some(Ok(returned)) => self.hash_and_keep(task, producers_hash, &returned),
                        _ => (None, None),
                    },
                    _ => self.hash_and_keep(task, producers_hash, &output),
                }
            }
            _ => (None, None),
        };
        // Reported first: should the sink fail, the task is counted once, as the failure it becomes.
        let picked = &self.claimed[at].picked;
        let figures = TaskFigures {
            attempts,
            input_bytes: picked.input_bytes,
            estimate_bytes: picked.estimate,
            estimate_source: picked.source,
            plugin_estimate_bytes: picked.plugin_estimate,
            peak_bytes: outcome.peak,
            peak_source: outcome.peak_source,
            output_bytes,
            file_bytes,
            wall,
            waited: outcome.waited,
            read_back: outcome.read_back,
            started: started.saturating_duration_since(self.shared.started),
        };
        let measured = Measured { figures, log_path: outcome.log_path, hashes, output_path };
        self.report(picked, result, &measured, error.as_deref());
        self.count(at, figures.peak_bytes, wall);
        match result {
            Outcome::Ok => {
                self.stats[step].ok += 1;
                self.stats[step].output_bytes += output_bytes;
            }
            Outcome::Failed => self.stats[step].failed += 1,
            Outcome::Skipped | Outcome::Dropped | Outcome::Reused => self.stats[step].skipped += 1,
        }
        match (error, result) {
            (Some(error), Outcome::Failed) => self.fail(task, error),
            (Some(error), _) => self.missing.push(self.failure(task, error)),
            (None, _) => {}
        }
        let hash = hashes.map_or(0, |h| h.output);
        Finished { outcome: result, output, file_bytes, hash, peak: figures.peak_bytes, wall }
    }

    /// For `--resume`, when the run is recorded: the hashes of what the task (described in
    /// `self.key`/`self.index`) was asked, read and made, and the file its output is — a path
    /// output itself, or, for a `cache: true` step, its value written to `runner-cache/`.
    pub(super) fn hash_and_keep(
        &self,
        task: TaskRef,
        producers: u64,
        output: &Value,
    ) -> (Option<TaskHashes>, Option<PathBuf>) {
        let Some(fingerprints) = &self.shared.fingerprints else { return (None, None) };
        let recipe = self.shared.recipe;
        let step = &recipe.steps[task.step];
        let inputs = fingerprints.inputs_hash(recipe, task.step, producers, &self.index);
        let path = match output {
            Value::Path(path) => Some(path.clone()),
            Value::None => None,
            _ if step.cache => {
                let dir = crate::values::cache_dir(&recipe.name, &recipe.cycle, &step.name);
                match crate::values::write(&dir, task.index, output) {
                    Ok(path) => Some(path),
                    Err(error) => {
                        tracing::warn!("cannot keep the value of {}[{}] for --resume: {error}", step.name, self.key);
                        None
                    }
                }
            }
            _ => None,
        };
        let kept = path.is_some();
        let hashes = TaskHashes {
            args: fingerprints.step(task.step),
            inputs,
            output: fingerprints.output_hash(task.step, output, kept),
        };
        (Some(hashes), path)
    }

    /// Adds claimed task `at`, which ran, to its step's statistics.
    pub(super) fn count(&mut self, at: usize, peak: u64, wall: Duration) {
        let (step, estimate, admission) = {
            let picked = &self.claimed[at].picked;
            (picked.task.step, picked.estimate, picked.admission)
        };
        if self.unpublished.step != step {
            self.publish_runs();
            self.unpublished.step = step;
        }
        self.unpublished.ran += 1;
        self.unpublished.wall += wall;
        let stats = &mut self.stats[step];
        stats.wall += wall;
        stats.estimate.record(estimate);
        stats.peak.record(peak);
        stats.estimate_sum += estimate;
        stats.peak_sum += peak;
        if admission == (Admission::Alone { oversized: true }) {
            stats.oversized += 1;
        }
        if peak > estimate {
            stats.underestimates += 1;
        }
    }

    /// Adds the tasks run since the last call to their step's progress (for the ETA).
    pub(super) fn publish_runs(&mut self) {
        let step = self.unpublished.step;
        let runs = std::mem::replace(&mut self.unpublished, UnpublishedRuns { step, ..Default::default() });
        if runs.ran > 0
            && let Some(progress) = self.shared.progress.steps.get(step)
        {
            progress.ran(runs.ran, runs.wall);
        }
    }

    /// Hands a task that ran to the sink.
    fn report(&self, picked: &Picked, outcome: Outcome, measured: &Measured, error: Option<&str>) {
        let Some(sink) = self.shared.sink else { return };
        let step = &self.shared.recipe.steps[picked.task.step];
        sink.record(&TaskReport {
            worker: self.id,
            step_id: picked.task.step,
            step: &step.name,
            index: picked.task.index,
            key: &self.key,
            plugin: step.plugin.name(),
            outcome,
            figures: measured.figures,
            log_path: measured.log_path.as_deref(),
            hashes: measured.hashes,
            output_path: measured.output_path.as_deref(),
            error,
        });
    }

    /// Hands the sink a task that did not run here (skipped, or taken over by `--resume`): its
    /// step's planned estimate, nothing measured.
    pub(super) fn report_not_run(
        &mut self,
        task: TaskRef,
        outcome: Outcome,
        hashes: Option<TaskHashes>,
        output_path: Option<&std::path::Path>,
        error: Option<&str>,
    ) {
        let Some(sink) = self.shared.sink else { return };
        self.describe_task(task.step, task.index);
        let step = &self.shared.recipe.steps[task.step];
        let plan = &self.shared.plan.steps[task.step];
        sink.record(&TaskReport {
            worker: self.id,
            step_id: task.step,
            step: &step.name,
            index: task.index,
            key: &self.key,
            plugin: step.plugin.name(),
            outcome,
            figures: TaskFigures {
                estimate_bytes: plan.estimate,
                estimate_source: plan.source,
                plugin_estimate_bytes: plan.plugin_estimate,
                ..TaskFigures::default()
            },
            log_path: None,
            hashes,
            output_path,
            error,
        });
    }

    /// Counts and records the tasks `--resume` took over, with what the run they come from
    /// recorded of them (so that a later resume can take them over again).
    pub(super) fn report_reused(&mut self) {
        let Some(reuse) = self.shared.reuse else { return };
        let mut reused = std::mem::take(&mut self.reused);
        for task in reused.drain(..) {
            self.stats[task.step].reused += 1;
            if let Some(recorded) = reuse.get(task.step, task.index) {
                let hashes =
                    TaskHashes { args: recorded.args_hash, inputs: recorded.inputs_hash, output: recorded.output_hash };
                self.report_not_run(task, Outcome::Reused, Some(hashes), recorded.output_path.as_deref(), None);
            }
        }
        self.reused = reused;
    }

    /// Counts and records the tasks skipped because an input failed.
    pub(super) fn report_skipped(&mut self) {
        let mut skipped = std::mem::take(&mut self.skipped);
        for (task, reason) in skipped.drain(..) {
            self.stats[task.step].skipped += 1;
            self.report_not_run(task, Outcome::Skipped, None, None, Some(reason.as_str()));
        }
        self.skipped = skipped;
    }

    /// Notes a failed task for the run's report (its key is in `self.key`).
    pub(super) fn fail(&mut self, task: TaskRef, error: String) {
        self.shared.progress.failed.fetch_add(1, Ordering::Relaxed);
        let failure = self.failure(task, error);
        self.failures.push(failure);
    }

    /// `task` (whose key is in `self.key`) and what went wrong, for the run's report.
    pub(super) fn failure(&self, task: TaskRef, error: String) -> Failure {
        let step = self.shared.recipe.steps[task.step].name.clone();
        Failure { step, key: self.key.clone(), error, step_id: task.step, index: task.index }
    }
}

/// How a task that ran was measured, for its report.
struct Measured {
    figures: TaskFigures,
    log_path: Option<PathBuf>,
    hashes: Option<TaskHashes>,
    output_path: Option<PathBuf>,
}
