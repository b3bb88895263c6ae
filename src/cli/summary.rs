//! The `--summary` JSON of a run (the SPEC's field names; `failures` complete, ordered by step and
//! index value), and the lines printed at the end (failures grouped by identical error).

use std::collections::HashMap;
use std::path::Path;

use runner_plugin::size::format_size;
use serde::Serialize;

use super::failures;
use crate::recipe::Recipe;
use crate::scheduler::RunReport;
use crate::store::{Executor, RunStatus, StepFigures};

/// The budget of a run that has none on this machine (`--executor slurm` without `--budget`):
/// each job is bounded by its own `--mem` on its node instead.
pub const NO_LOCAL_BUDGET: u64 = u64::MAX / 4;

/// A step as the summary JSON names its figures (the SPEC's names, not `runner history`'s): a
/// view of [`StepFigures`], made only to be serialized.
#[derive(Serialize)]
struct StepSummary<'a> {
    step: &'a str,
    plugin: &'a str,
    tasks: u64,
    tasks_ok: u64,
    tasks_failed: u64,
    tasks_skipped: u64,
    /// Taken over by `--resume` from the run it resumes.
    tasks_reused: u64,
    estimate_bytes_p50: u64,
    peak_bytes_p50: u64,
    peak_bytes_max: u64,
    output_bytes: u64,
    underestimates: u64,
    oversized: u64,
    /// Sum of the step's task wall times (task-seconds, not elapsed time).
    wall_s: f64,
}

impl<'a> From<&'a StepFigures> for StepSummary<'a> {
    fn from(s: &'a StepFigures) -> StepSummary<'a> {
        StepSummary {
            step: &s.step,
            plugin: &s.plugin,
            tasks: s.tasks,
            tasks_ok: s.ok,
            tasks_failed: s.failed,
            tasks_skipped: s.skipped,
            tasks_reused: s.reused,
            estimate_bytes_p50: s.estimate_p50,
            peak_bytes_p50: s.peak_p50,
            peak_bytes_max: s.peak_max,
            output_bytes: s.output_bytes,
            underestimates: s.underestimates,
            oversized: s.oversized,
            wall_s: s.wall.as_secs_f64(),
        }
    }
}

/// "1 task", "26 tasks": the count of a closing line.
pub(super) fn tasks(count: u64) -> String {
    if count == 1 { "1 task".to_string() } else { format!("{count} tasks") }
}

/// "1 task over its estimate", "3 tasks over their estimate".
pub(super) fn over_estimate(count: u64) -> String {
    let whose = if count == 1 { "its" } else { "their" };
    format!("{} over {whose} estimate", tasks(count))
}

fn summary_steps<S: serde::Serializer>(steps: &[StepFigures], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(steps.iter().map(StepSummary::from))
}

/// One failed task; the list is ordered by step (recipe order) and then by index value.
#[derive(Debug, Serialize)]
pub struct FailureSummary {
    pub step: String,
    pub key: String,
    pub error: String,
}

impl failures::Failure for FailureSummary {
    fn step(&self) -> &str {
        &self.step
    }
    fn key(&self) -> &str {
        &self.key
    }
    fn error(&self) -> &str {
        &self.error
    }
}

#[derive(Debug, Serialize)]
pub struct RunSummary {
    pub recipe: String,
    pub cycle: String,
    /// `ok` or `failed`.
    pub status: RunStatus,
    pub tasks_total: u64,
    pub tasks_ok: u64,
    pub tasks_failed: u64,
    pub tasks_skipped: u64,
    /// Taken over by `--resume` from the run it resumes (neither run nor counted as ok).
    pub tasks_reused: u64,
    pub wall_s: f64,
    /// Where the tasks ran (`local`, `slurm`).
    pub executor: Executor,
    pub workers: usize,
    /// [`NO_LOCAL_BUDGET`] when nothing bounded the memory of the tasks in flight together.
    pub budget_bytes: u64,
    pub peak_rss_bytes: u64,
    /// The peak of the whole process tree: the runner and its commands at the same moment
    /// (at least `peak_rss_bytes`).
    pub peak_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Of `peak_reserved_bytes`, what service processes (warm interpreters) held at their
    /// baseline between tasks, counted for the run rather than for any task.
    pub peak_reserved_standing_bytes: u64,
    pub spilled_bytes: u64,
    pub spill_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
    /// An engine failure that ended the run early, and the tasks it left unrun.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_error: Option<String>,
    pub tasks_not_run: u64,
    pub underestimates: u64,
    pub oversized: u64,
    /// Σ estimate and Σ peak over the tasks that ran (slack = Σ estimate / Σ peak − 1).
    pub estimate_bytes_sum: u64,
    pub peak_bytes_sum: u64,
    #[serde(serialize_with = "summary_steps")]
    pub steps: Vec<StepFigures>,
    pub failures: Vec<FailureSummary>,
    /// Tasks whose input was missing under `on_missing: skip` or `ignore` (gaps, not failures).
    pub missing: Vec<FailureSummary>,
}

impl RunSummary {
    pub fn new(recipe: &Recipe, report: &RunReport, peak_rss_bytes: u64) -> RunSummary {
        let steps: Vec<StepFigures> =
            recipe.steps.iter().zip(&report.steps).map(|(step, stats)| StepFigures::from_stats(step, stats)).collect();
        let failed = report.total(|s| s.failed);
        let mut failures: Vec<FailureSummary> = report
            .failures
            .iter()
            .map(|f| FailureSummary { step: f.step.clone(), key: f.key.clone(), error: f.error.clone() })
            .collect();
        let positions: HashMap<&str, usize> =
            recipe.steps.iter().enumerate().map(|(i, step)| (step.name.as_str(), i)).collect();
        failures::sort(&mut failures, |step| positions.get(step).copied());
        let mut missing: Vec<FailureSummary> = report
            .missing
            .iter()
            .map(|f| FailureSummary { step: f.step.clone(), key: f.key.clone(), error: f.error.clone() })
            .collect();
        failures::sort(&mut missing, |step| positions.get(step).copied());
        RunSummary {
            recipe: recipe.name.clone(),
            cycle: recipe.cycle.clone(),
            // Skips alone are no failure: a task skipped because an input failed comes with that
            // failure; one skipped for a missing input is a gap `on_missing` allowed.
            status: if failed == 0 && report.internal_error.is_none() { RunStatus::Ok } else { RunStatus::Failed },
            tasks_total: report.total(|s| s.tasks()),
            tasks_ok: report.total(|s| s.ok),
            tasks_failed: failed,
            tasks_skipped: report.total(|s| s.skipped),
            tasks_reused: report.total(|s| s.reused),
            wall_s: report.wall.as_secs_f64(),
            executor: Executor::Local,
            workers: report.workers,
            budget_bytes: report.budget,
            peak_rss_bytes,
            peak_bytes: peak_rss_bytes.max(crate::command::tree_peak()),
            peak_reserved_bytes: report.peak_reserved,
            peak_reserved_standing_bytes: report.standing_at_peak.bytes,
            spilled_bytes: report.spilled_bytes,
            spill_count: report.spill_count,
            spill_error: report.spill_error.clone(),
            internal_error: report.internal_error.clone(),
            tasks_not_run: report.not_run,
            underestimates: report.total(|s| s.underestimates),
            oversized: report.total(|s| s.oversized),
            estimate_bytes_sum: report.total(|s| s.estimate_sum),
            peak_bytes_sum: report.total(|s| s.peak_sum),
            steps,
            failures,
            missing,
        }
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let text = serde_json::to_string_pretty(self)? + "\n";
        // Through the atomic writer (which makes its folder): a reader never sees half a summary.
        crate::values::write_atomically(path, text.as_bytes()).context("writing the summary")
    }

    /// What was reserved at most, against what: the budget, or for jobs their own `--mem`.
    fn reserved_line(&self) -> String {
        let reserved = format_size(self.peak_reserved_bytes);
        match (self.executor, self.budget_bytes >= NO_LOCAL_BUDGET) {
            (Executor::Slurm, true) => {
                format!("peak reserved {reserved} by the jobs in flight · no local budget (jobs have their own --mem)")
            }
            (Executor::Slurm, false) => {
                format!("peak reserved {reserved} by the jobs in flight, of {} budget", format_size(self.budget_bytes))
            }
            (_, _) => {
                let standing = match self.peak_reserved_standing_bytes {
                    0 => String::new(),
                    bytes => format!(" ({} of it warm interpreters between tasks)", format_size(bytes)),
                };
                format!("peak reserved {reserved}{standing} of {} budget", format_size(self.budget_bytes))
            }
        }
    }

    /// The whole tree's peak, when commands made it more than the runner's own.
    fn commands_peak(&self) -> String {
        if self.peak_bytes > self.peak_rss_bytes {
            format!(" (with its commands {})", format_size(self.peak_bytes))
        } else {
            String::new()
        }
    }

    /// The closing lines for people: outcome, figures, and each failure.
    pub fn print(&self) {
        let outcome = if self.status == RunStatus::Ok { "ok" } else { "FAILED" };
        let reused = if self.tasks_reused > 0 { format!("{} reused, ", self.tasks_reused) } else { String::new() };
        let mut estimates = String::new();
        if self.underestimates > 0 {
            estimates.push_str(&format!(" · {}", over_estimate(self.underestimates)));
        }
        if self.oversized > 0 {
            estimates.push_str(&format!(
                " · {} oversized (ran alone: estimate and inputs above the budget)",
                self.oversized
            ));
        }
        say!(
            "{} {}: {} — {} ({} ok, {reused}{} failed, {} skipped) in {:.2} s · peak RSS {}{} · {}{estimates}",
            self.recipe,
            self.cycle,
            outcome,
            tasks(self.tasks_total),
            self.tasks_ok,
            self.tasks_failed,
            self.tasks_skipped,
            self.wall_s,
            format_size(self.peak_rss_bytes),
            self.commands_peak(),
            self.reserved_line(),
        );
        if let Some(error) = &self.internal_error {
            say!("  {error} ({} tasks not run)", self.tasks_not_run);
        }
        if self.spilled_bytes > 0 {
            say!("  spilled {} in {} buffers", format_size(self.spilled_bytes), self.spill_count);
        }
        if let Some(error) = &self.spill_error {
            say!("  spilling stopped: {error}");
        }
        self.print_failures();
    }

    /// The failed tasks, grouped by identical error (40 alike take one line), then the missing
    /// inputs.
    pub fn print_failures(&self) {
        const SHOWN: usize = 20;
        let groups = failures::group(&self.failures);
        for group in groups.iter().take(SHOWN) {
            say!("  {}", group.line());
        }
        let hidden: usize = groups.iter().skip(SHOWN).map(|g| g.keys.len()).sum();
        if hidden > 0 {
            say!(
                "  ... and {hidden} more failed tasks in {} more groups (the --summary JSON lists every failure)",
                groups.len() - SHOWN
            );
        }
        let gaps = failures::group(&self.missing);
        for group in gaps.iter().take(SHOWN) {
            say!("  {}", group.line_as("missing"));
        }
        let hidden: usize = gaps.iter().skip(SHOWN).map(|g| g.keys.len()).sum();
        if hidden > 0 {
            say!("  ... and {hidden} more missing inputs (the --summary JSON lists every one)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_of_tasks_agree_with_their_noun() {
        assert_eq!(tasks(1), "1 task");
        assert_eq!(tasks(0), "0 tasks");
        assert_eq!(over_estimate(1), "1 task over its estimate");
        assert_eq!(over_estimate(3), "3 tasks over their estimate");
    }
}
