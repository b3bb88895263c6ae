//! The run page's model: everything the page shows of one run, read from the store in one pass
//! over its task rows (the timeline and the per-step table come from the same rows), plus its
//! memory samples, events and failed tasks.

use std::collections::HashMap;
use std::time::Duration;

use crate::store::{FailedTask, RunEvent, RunRow, Sample, StepFigures, Store, TaskStatus, TimelineTask};

use super::timeline::{Timeline, TimelineBar, TimelineBuilder};
use super::{Limits, ReportError};

/// One run as its report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    pub run: RunRow,
    /// In the order the run first recorded them.
    pub steps: Vec<StepRow>,
    pub timeline: Timeline,
    /// Tasks that ran but have no recorded worker or start (rows from before schema 3).
    pub unplaced: u64,
    pub memory: Memory,
    /// In time order, at most [`Limits::events`].
    pub events: Vec<RunEvent>,
    pub events_total: usize,
    /// Steps in recording order, tasks by index; at most [`Limits::failures`].
    pub failures: Vec<FailedTask>,
    pub failures_total: usize,
}

/// A step of a run: the figures `runner history` gives it, and what the run page adds (retries,
/// when it ran).
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// Its sources in the order first seen; reused tasks counted as `ok`.
    pub figures: StepFigures,
    /// Tasks that needed more than one attempt.
    pub retried: u64,
    /// When its first task started and its last one ended, in ms since the run started.
    pub first_start_ms: Option<u64>,
    pub last_end_ms: Option<u64>,
}

/// The run's memory over time as drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// The samples drawn, in time order.
    pub samples: Vec<Sample>,
    /// `Some(ms)` when there were more samples than [`Limits::memory_points`]: each point drawn
    /// is then the maximum of every figure over a bucket of that many ms (a peak is never
    /// smoothed away), at the time of the bucket's first sample.
    pub bucket_ms: Option<u64>,
    /// Samples recorded.
    pub recorded: usize,
}

/// A step's figures while its rows are read.
#[derive(Debug)]
struct StepTally {
    row: StepRow,
    estimates: Vec<u64>,
    peaks: Vec<u64>,
    estimate_sum: u128,
    peak_sum: u128,
}

impl StepRow {
    /// The row of a step with no task yet.
    pub fn empty(step: &str, plugin: &str) -> StepRow {
        StepRow { figures: StepFigures::empty(step, plugin), retried: 0, first_start_ms: None, last_end_ms: None }
    }
}

impl StepTally {
    fn new(step: &str, plugin: &str) -> StepTally {
        StepTally {
            row: StepRow::empty(step, plugin),
            estimates: Vec::new(),
            peaks: Vec::new(),
            estimate_sum: 0,
            peak_sum: 0,
        }
    }

    fn add(&mut self, task: &TimelineTask<'_>) {
        let row = &mut self.row;
        let figures = &mut row.figures;
        figures.tasks += 1;
        figures.wall += Duration::from_millis(task.wall_ms);
        match task.status {
            TaskStatus::Ok => figures.ok += 1,
            TaskStatus::Failed => figures.failed += 1,
            TaskStatus::Skipped => {
                figures.skipped += 1;
                return;
            }
            // Taken over from the run it resumes: counted, not measured here.
            TaskStatus::Reused => {
                figures.ok += 1;
                return;
            }
        }
        if let Some(source) = task.estimate_source
            && !figures.sources.contains(&source)
        {
            figures.sources.push(source);
        }
        if let Some(source) = task.peak_source
            && !figures.peak_sources.contains(&source)
        {
            figures.peak_sources.push(source);
        }
        row.retried += u64::from(task.attempts > 1);
        if let Some(start) = task.start_ms {
            row.first_start_ms = Some(row.first_start_ms.map_or(start, |s| s.min(start)));
            let end = start.saturating_add(task.wall_ms);
            row.last_end_ms = Some(row.last_end_ms.map_or(end, |e| e.max(end)));
        }
        let figures = &mut row.figures;
        figures.estimate_max = figures.estimate_max.max(task.estimate_bytes);
        figures.peak_max = figures.peak_max.max(task.peak_bytes);
        figures.underestimates += u64::from(task.peak_bytes > task.estimate_bytes);
        self.estimates.push(task.estimate_bytes);
        self.peaks.push(task.peak_bytes);
        self.estimate_sum += u128::from(task.estimate_bytes);
        self.peak_sum += u128::from(task.peak_bytes);
    }

    fn finish(mut self) -> StepRow {
        let figures = &mut self.row.figures;
        figures.estimate_p50 = lower_median(&mut self.estimates);
        figures.peak_p50 = lower_median(&mut self.peaks);
        figures.slack = (self.peak_sum > 0).then(|| self.estimate_sum as f64 / self.peak_sum as f64 - 1.0);
        self.row
    }
}

/// The ⌈n/2⌉-th smallest value (0 for none).
fn lower_median(values: &mut [u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let at = (values.len() - 1) / 2;
    *values.select_nth_unstable(at).1
}

impl RunPage {
    /// Reads run `run_id` from `store`.
    pub fn load(store: &Store, run_id: i64, limits: &Limits) -> Result<RunPage, ReportError> {
        let run =
            store.run(run_id)?.ok_or_else(|| ReportError::NoSuchRun { path: store.path().to_path_buf(), run_id })?;
        let started = std::time::Instant::now();
        let keys = store.step_keys(run_id)?;
        let mut steps: Vec<StepTally> = Vec::new();
        let mut step_ids: HashMap<String, u32> = HashMap::new();
        let mut timeline = TimelineBuilder::new(limits.timeline_bars, limits.band_bins);
        let mut unplaced = 0;
        let mut last_id = 0;
        store.timeline(run_id, |task| {
            // Rows come a block of one step at a time: look the step up by name only when it changes.
            let id = match steps.get(last_id as usize) {
                Some(tally) if tally.row.figures.step == task.step => last_id,
                _ => match step_ids.get(task.step) {
                    Some(&id) => id,
                    None => {
                        let id = steps.len() as u32;
                        step_ids.insert(task.step.to_string(), id);
                        steps.push(StepTally::new(task.step, task.plugin));
                        id
                    }
                },
            };
            last_id = id;
            steps[id as usize].add(&task);
            if task.status == TaskStatus::Skipped {
                return;
            }
            let (Some(worker), Some(start_ms)) = (task.worker, task.start_ms) else {
                unplaced += 1;
                return;
            };
            let key = if timeline.wants_bars() {
                match (task.key, task.task_index, keys.get(task.step)) {
                    (Some(key), _, _) => key.to_string(),
                    (None, Some(index), Some(spelling)) => spelling.key(index),
                    _ => String::new(),
                }
            } else {
                String::new()
            };
            timeline.add(TimelineBar {
                step: id,
                worker,
                start_ms,
                wall_ms: task.wall_ms,
                estimate_bytes: task.estimate_bytes,
                peak_bytes: task.peak_bytes,
                attempts: task.attempts,
                failed: task.status == TaskStatus::Failed,
                key,
            });
        })?;
        let read_ms = started.elapsed().as_millis();
        let memory = memory(store.samples(run_id)?, limits.memory_points);
        let timeline = timeline.finish(steps.len(), end_floor(&run, &memory));
        let steps: Vec<StepRow> = steps.into_iter().map(StepTally::finish).collect();
        let mut events = store.events(run_id)?;
        let events_total = events.len();
        events.truncate(limits.events);
        // Listing failures reads every row again: only when some task failed.
        let mut failures =
            if steps.iter().any(|s| s.figures.failed > 0) { store.failed_tasks(run_id)? } else { Vec::new() };
        let failures_total = failures.len();
        failures.truncate(limits.failures);
        tracing::debug!(
            run_id,
            tasks = timeline.tasks(),
            read_ms = read_ms as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "read the run page's model"
        );
        Ok(RunPage { run, steps, timeline, unplaced, memory, events, events_total, failures, failures_total })
    }

    /// Where the time axis ends: the run's end, its last task's or its last sample's, whichever
    /// is latest (the timeline and the memory chart share the axis).
    pub fn end_ms(&self) -> u64 {
        let tasks = match &self.timeline {
            Timeline::Bars(bars) => bars.iter().map(|b| b.start_ms.saturating_add(b.wall_ms)).max().unwrap_or(0),
            Timeline::Bands(bands) => bands.end_ms,
        };
        tasks.max(end_floor(&self.run, &self.memory))
    }

    /// Workers the timeline has lanes for: the run's, or more if a row names a higher one.
    pub fn lanes(&self) -> u32 {
        let highest = match &self.timeline {
            Timeline::Bars(bars) => bars.iter().map(|b| b.worker + 1).max().unwrap_or(0),
            Timeline::Bands(_) => 0,
        };
        self.run.workers.max(highest).max(1)
    }
}

/// The run's end as its row and samples tell it.
fn end_floor(run: &RunRow, memory: &Memory) -> u64 {
    let last_sample = memory.samples.last().map_or(0, |s| s.t_ms);
    run.wall_ms.or(run.recorded_ms).unwrap_or(0).max(last_sample)
}

/// `samples` as drawn: all of them, or per bucket the maximum of each figure when there are more
/// than `limit`.
fn memory(samples: Vec<Sample>, limit: usize) -> Memory {
    let recorded = samples.len();
    let limit = limit.max(2);
    if recorded <= limit {
        return Memory { samples, bucket_ms: None, recorded };
    }
    let last = samples.last().map_or(0, |s| s.t_ms);
    let bucket_ms = (last / limit as u64 + 1).max(1);
    let mut merged: Vec<Sample> = Vec::with_capacity(limit);
    let mut bucket = u64::MAX;
    for s in samples {
        if s.t_ms / bucket_ms != bucket {
            bucket = s.t_ms / bucket_ms;
            merged.push(s);
            continue;
        }
        let m = merged.last_mut().expect("a bucket was started");
        m.reserved_bytes = m.reserved_bytes.max(s.reserved_bytes);
        m.live_bytes = m.live_bytes.max(s.live_bytes);
        m.rss_bytes = m.rss_bytes.max(s.rss_bytes);
        m.resident_bytes = m.resident_bytes.max(s.resident_bytes);
        m.spilled_bytes = m.spilled_bytes.max(s.spilled_bytes);
        m.running_tasks = m.running_tasks.max(s.running_tasks);
        m.external_bytes = m.external_bytes.max(s.external_bytes);
    }
    Memory { samples: merged, bucket_ms: Some(bucket_ms), recorded }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: u64, reserved: u64) -> Sample {
        Sample { t_ms, reserved_bytes: reserved, running_tasks: t_ms % 3, ..Sample::default() }
    }

    #[test]
    fn lower_median_is_the_middle_or_the_lower_of_the_two_middles() {
        assert_eq!(lower_median(&mut []), 0);
        assert_eq!(lower_median(&mut [7]), 7);
        assert_eq!(lower_median(&mut [9, 1, 5]), 5);
        assert_eq!(lower_median(&mut [9, 1, 5, 3]), 3);
    }

    #[test]
    fn many_samples_are_merged_keeping_every_peak() {
        let samples: Vec<Sample> = (0..1000).map(|t| sample(t, if t == 777 { 1 << 30 } else { t })).collect();
        let memory = memory(samples.clone(), 100);
        assert_eq!((memory.recorded, memory.bucket_ms), (1000, Some(10)));
        assert_eq!(memory.samples.len(), 100);
        assert_eq!(memory.samples[77].t_ms, 770);
        assert_eq!(memory.samples[77].reserved_bytes, 1 << 30, "the peak survives");
        assert_eq!(memory.samples[10].reserved_bytes, 109);
        assert_eq!(memory.samples[10].running_tasks, 2);
        let few = super::memory(samples[..50].to_vec(), 100);
        assert_eq!((few.samples.len(), few.bucket_ms), (50, None));
    }
}
