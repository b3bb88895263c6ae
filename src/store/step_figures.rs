//! One step of one run, aggregated: the one type that `runner history` lists per run (from the
//! store's rows), a run page's and a recipe page's tables show, and a run's summary gives (from
//! the scheduler's [`StepStats`], converted here and nowhere else). It is serialized as
//! `runner history --format json` shows it; the summary JSON names its figures its own way
//! (`cli::summary`).

use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::measure::PeakSource;
use crate::plan::EstimateSource;
use crate::recipe::Step;
use crate::scheduler::stats::StepStats;

/// A step's figures in one run. Estimates and peaks are over the tasks that ran (ok or failed),
/// not the skipped or reused ones.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct StepFigures {
    pub step: String,
    pub plugin: String,
    /// The estimate sources of its tasks, each once, in the order their reader gives (`history`
    /// sorts them by name, a run page keeps the order first seen); shown comma-separated, `-`
    /// for none. A run's summary does not know them (empty there).
    #[serde(rename = "estimate_sources", serialize_with = "sources_text")]
    pub sources: Vec<EstimateSource>,
    /// How its tasks' peaks were measured, each once, sorted (`allocator`, `cgroup`,
    /// `service+cgroup`, ...); `-` for none. A run's summary does not know them (empty there).
    #[serde(serialize_with = "peak_sources_text")]
    pub peak_sources: Vec<PeakSource>,
    /// Tasks recorded, of any status.
    pub tasks: u64,
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Taken over by `--resume` from the run it resumes (counted in `tasks`; a run page counts
    /// them as `ok`, as they were when they ran).
    #[serde(skip)]
    pub reused: u64,
    /// Lower medians: the ⌈n/2⌉-th smallest of the n tasks that ran (a summary's are its
    /// histograms' medians).
    pub estimate_p50: u64,
    pub estimate_max: u64,
    pub peak_p50: u64,
    pub peak_max: u64,
    /// Bytes of its outputs (known to a run's summary only).
    #[serde(skip)]
    pub output_bytes: u64,
    /// Tasks whose peak exceeded their estimate.
    pub underestimates: u64,
    /// Tasks whose estimate alone exceeded the budget (known to a run's summary only).
    #[serde(skip)]
    pub oversized: u64,
    /// Σ estimate / Σ peak − 1; `None` when nothing ran or every peak was 0.
    pub slack: Option<f64>,
    /// Sum of its tasks' wall times (task time, not elapsed time).
    #[serde(rename = "wall_ms_total", serialize_with = "millis")]
    pub wall: Duration,
}

impl StepFigures {
    /// The figures of a step with no task yet.
    pub fn empty(step: &str, plugin: &str) -> StepFigures {
        StepFigures { step: step.to_string(), plugin: plugin.to_string(), ..StepFigures::default() }
    }

    /// The figures of `step` from the scheduler's statistics of it: the one conversion of them.
    pub fn from_stats(step: &Step, stats: &StepStats) -> StepFigures {
        StepFigures {
            step: step.name.clone(),
            plugin: step.plugin.name().to_string(),
            sources: Vec::new(),
            peak_sources: Vec::new(),
            tasks: stats.tasks(),
            ok: stats.ok,
            failed: stats.failed,
            skipped: stats.skipped,
            reused: stats.reused,
            estimate_p50: stats.estimate.quantile(0.5),
            estimate_max: stats.estimate.max(),
            peak_p50: stats.peak.quantile(0.5),
            peak_max: stats.peak.max(),
            output_bytes: stats.output_bytes,
            underestimates: stats.underestimates,
            oversized: stats.oversized,
            slack: (stats.peak_sum > 0).then(|| stats.estimate_sum as f64 / stats.peak_sum as f64 - 1.0),
            wall: stats.wall,
        }
    }

    /// [`StepFigures::sources`] as shown: comma-separated, `-` for none.
    pub fn sources_text(&self) -> String {
        joined(self.sources.iter().map(|s| s.as_str()))
    }

    /// [`StepFigures::peak_sources`] comma-separated, `-` for none.
    pub fn peak_sources_text(&self) -> String {
        joined(self.peak_sources.iter().map(|s| s.as_str()))
    }

    /// [`StepFigures::wall`] in whole ms, as the store keeps task times.
    pub fn wall_ms_total(&self) -> u64 {
        self.wall.as_millis() as u64
    }
}

/// Names comma-separated, `-` for none.
fn joined<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    if names.len() == 0 {
        return "-".to_string();
    }
    names.collect::<Vec<_>>().join(",")
}

fn sources_text<S: Serializer>(sources: &[EstimateSource], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&joined(sources.iter().map(|s| s.as_str())))
}

fn peak_sources_text<S: Serializer>(sources: &[PeakSource], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&joined(sources.iter().map(|s| s.as_str())))
}

fn millis<S: Serializer>(wall: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(wall.as_millis() as u64)
}
