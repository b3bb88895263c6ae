//! What a run hands back: each finished task to a [`TaskSink`] as a [`TaskReport`] (by the
//! worker, outside the lock), and at the end a [`RunReport`] of the whole run.

use std::time::Duration;

use super::Outcome;
use super::stats::StepStats;
use crate::measure::PeakSource;
use crate::memory::spill::ReadBack;
use crate::plan::EstimateSource;
use crate::recipe::StepId;

/// One finished (or skipped) task, as the store records it.
#[derive(Debug, Clone, Copy)]
pub struct TaskReport<'a> {
    /// The worker that reports it, `0..workers`: a sink may buffer per worker.
    pub worker: usize,
    /// The step's index in the recipe, and its name.
    pub step_id: StepId,
    pub step: &'a str,
    /// The task's linear index in its step (row-major over its `over` dims), and its key.
    pub index: u64,
    pub key: &'a str,
    pub plugin: &'static str,
    pub outcome: Outcome,
    /// What it was admitted with and measured at, as the store keeps them.
    pub figures: TaskFigures,
    /// The file holding what the task printed (external commands), if there is one.
    pub log_path: Option<&'a std::path::Path>,
    /// Content hashes for `--resume` (what it was asked, what it read, what it made), when
    /// the run records them, and the file its output is: a path output, or its kept value.
    pub hashes: Option<TaskHashes>,
    pub output_path: Option<&'a std::path::Path>,
    pub error: Option<&'a str>,
}

/// What one task was admitted with and measured at: the worker reports it in its
/// [`TaskReport`] and the store keeps it as it is in its row (one type from worker to row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFigures {
    /// Attempts made (0 for a task that never ran).
    pub attempts: u32,
    pub input_bytes: u64,
    /// The estimate the task was admitted with, and where it came from.
    pub estimate_bytes: u64,
    pub estimate_source: EstimateSource,
    /// What the plugin itself estimated for this task (the estimator calibrates it).
    pub plugin_estimate_bytes: u64,
    /// Heap and commands together: the peak admission counted, recorded and learned.
    pub peak_bytes: u64,
    /// How `peak_bytes` was measured.
    pub peak_source: PeakSource,
    pub output_bytes: u64,
    /// The size of the file a path output names (0 for an output in memory): what its
    /// consumers read, which a prediction needs as a real run's input bytes.
    pub file_bytes: u64,
    pub wall: Duration,
    /// Of `wall`, what it waited for its services (warm interpreters) to be started or warmed
    /// up for it: a prediction learns the task's own time without it and adds it where the
    /// run it predicts starts interpreters.
    pub waited: Duration,
    /// Of `wall`, reading its spilled inputs back from their files before it ran: a prediction
    /// learns the task's own time without it, and how fast spills are read back from it.
    pub read_back: ReadBack,
    /// When the task started, since the run started (zero for a task that never ran).
    pub started: Duration,
}

impl TaskFigures {
    /// Its wall time in whole ms (truncated), as the store keeps it.
    pub fn wall_ms(&self) -> u64 {
        self.wall.as_millis() as u64
    }

    /// When it started, in whole ms since the run started (its end is `start_ms + wall_ms`).
    pub fn start_ms(&self) -> u64 {
        self.started.as_millis() as u64
    }
}

impl Default for TaskFigures {
    /// A task that never ran: every figure zero, its estimate the plugin's.
    fn default() -> TaskFigures {
        TaskFigures {
            attempts: 0,
            input_bytes: 0,
            estimate_bytes: 0,
            estimate_source: EstimateSource::Plugin,
            plugin_estimate_bytes: 0,
            peak_bytes: 0,
            peak_source: PeakSource::Allocator,
            output_bytes: 0,
            file_bytes: 0,
            wall: Duration::ZERO,
            waited: Duration::ZERO,
            read_back: ReadBack::default(),
            started: Duration::ZERO,
        }
    }
}

/// A task's content hashes (see [`crate::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskHashes {
    pub args: u64,
    pub inputs: u64,
    pub output: u64,
}

/// Where finished tasks are reported, by workers, outside the scheduler's lock.
pub trait TaskSink: Sync {
    fn record(&self, task: &TaskReport<'_>);

    /// Worker `worker` has reported a batch of tasks: anything the sink buffered for it should
    /// go on its way now. Called after each batch a worker runs, and when it stops.
    fn flush(&self, worker: usize) {
        let _ = worker;
    }
}

/// A task that failed, for the report.
#[derive(Debug, Clone)]
pub struct Failure {
    pub step: String,
    pub key: String,
    pub error: String,
    /// Where the task is: its step's position in the recipe and its index (failures are listed
    /// in this order, so `i=2` comes before `i=10`).
    pub step_id: StepId,
    pub index: u64,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub steps: Vec<StepStats>,
    pub failures: Vec<Failure>,
    pub wall: Duration,
    pub peak_reserved: u64,
    /// Of `peak_reserved`, the bytes service processes held at their baseline (warm
    /// interpreters between tasks; `memory::Meter::standing`).
    pub standing_at_peak: crate::memory::Standing,
    pub spilled_bytes: u64,
    pub spill_count: u64,
    /// Why spilling stopped during the run (it went on without), if it did.
    pub spill_error: Option<String>,
    pub workers: usize,
    pub budget: u64,
    /// An engine failure that ended the run early (a worker's panic outside any plugin, or a
    /// run left with tasks that could never start), and how many tasks it left unrun.
    pub internal_error: Option<String>,
    pub not_run: u64,
    /// Each spill written (when, how long, how many bytes), in the order they started.
    pub spills: Vec<SpillRecord>,
    /// Tasks that found an input missing under `on_missing: skip` or `ignore`: the gaps.
    pub missing: Vec<Failure>,
}

/// One buffer written to a spill file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillRecord {
    /// When writing started, since the run started.
    pub started: Duration,
    pub wall: Duration,
    pub bytes: u64,
}

impl RunReport {
    pub fn total(&self, f: impl Fn(&StepStats) -> u64) -> u64 {
        self.steps.iter().map(f).sum()
    }
}
