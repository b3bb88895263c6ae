//! What one recorded run measured of a step's tasks that only a real run measures — each
//! task's estimate at dispatch, output, file, time and peak ([`Recorded`]), and their medians —
//! and two such runs blended into the figures between them ([`blend`]).

use std::collections::HashMap;

use crate::estimate::HISTORY_TASKS_PER_RUN;
use crate::store::{HistoryRun, Store, StoreError, TaskStatus};

/// What one task of the alike run was estimated at and produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub plugin_estimate: u64,
    pub output_bytes: u64,
    /// The size of the file its path output named (0 for an output in memory).
    pub file_bytes: u64,
    /// The µs a prediction gives it: the mean of the recorded tasks like it
    /// ([`super::like_tasks`]), else how long it took, without its wait for a service
    /// ([`super::service_wait`]). Like its output, what its weather made it.
    pub wall_us: u64,
    /// What its inputs held (with its output and file, the bytes its time is scaled from when
    /// this cycle's metadata makes the task another size).
    pub input_bytes: u64,
    /// Its measured peak (0: not measured), which followed that cycle's args and data as its
    /// time did, where the step's model may not see either.
    pub peak_bytes: u64,
}

impl Recorded {
    /// What its data made of it, as tasks are compared ([`super::like_tasks::figure`]).
    pub fn figure(&self) -> u64 {
        super::like_tasks::figure(self.plugin_estimate, self.output_bytes, self.file_bytes)
    }
}

/// What one run measured of a step's tasks that only a real run measures.
pub struct Alike {
    pub by_index: HashMap<u64, Recorded>,
    /// Of its tasks: median output bytes, median plugin estimate and median file size.
    pub output_bytes: Option<u64>,
    pub plugin_estimate: Option<u64>,
    pub file_bytes: Option<u64>,
    pub cycle: String,
    /// Its vars (JSON text; `None` for a run recorded before runs kept them).
    pub vars: Option<String>,
}

/// The figures of `run`'s tasks of `step` that only a real run measures.
pub fn read(store: &Store, run: &HistoryRun, step: &str) -> Result<Alike, StoreError> {
    let mut by_index = HashMap::new();
    let mut outputs = Vec::new();
    let mut estimates = Vec::new();
    let mut files = Vec::new();
    store.step_tasks(run.run_id, step, HISTORY_TASKS_PER_RUN, |task| {
        if matches!(task.status, TaskStatus::Skipped | TaskStatus::Reused) {
            return;
        }
        let plugin_estimate = task.plugin_estimate_bytes.unwrap_or(0);
        if let Some(index) = task.task_index {
            let recorded = Recorded {
                plugin_estimate,
                output_bytes: task.output_bytes,
                file_bytes: task.file_bytes,
                wall_us: task.own_us(),
                input_bytes: task.input_bytes,
                peak_bytes: task.peak_bytes,
            };
            by_index.insert(index, recorded);
        }
        outputs.push(task.output_bytes);
        files.push(task.file_bytes);
        if plugin_estimate > 0 {
            estimates.push(plugin_estimate);
        }
    })?;
    Ok(Alike {
        by_index,
        output_bytes: median(&mut outputs),
        plugin_estimate: median(&mut estimates),
        file_bytes: median(&mut files),
        cycle: run.cycle.clone(),
        vars: run.vars.clone(),
    })
}

/// The alike runs' figures, weighted ([`super::alike::alike`]: one run, or two to interpolate
/// between), and the cycles they are of (`None`: no run). A task only the first run recorded
/// keeps its figures.
pub fn blend(taken: Vec<(Alike, f64)>) -> Option<(Alike, String)> {
    let mut taken = taken.into_iter();
    let (mut first, weight) = taken.next()?;
    let mut cycles = first.cycle.clone();
    if let Some((second, other)) = taken.next() {
        let mix = |a: u64, b: u64| (a as f64 * weight + b as f64 * other).round() as u64;
        let mix_median = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(mix(a, b)),
            (a, b) => a.or(b),
        };
        for (index, recorded) in &mut first.by_index {
            if let Some(across) = second.by_index.get(index) {
                *recorded = Recorded {
                    plugin_estimate: mix(recorded.plugin_estimate, across.plugin_estimate),
                    output_bytes: mix(recorded.output_bytes, across.output_bytes),
                    file_bytes: mix(recorded.file_bytes, across.file_bytes),
                    wall_us: mix(recorded.wall_us, across.wall_us),
                    input_bytes: mix(recorded.input_bytes, across.input_bytes),
                    peak_bytes: mix(recorded.peak_bytes, across.peak_bytes),
                };
            }
        }
        first.output_bytes = mix_median(first.output_bytes, second.output_bytes);
        first.plugin_estimate = mix_median(first.plugin_estimate, second.plugin_estimate);
        first.file_bytes = mix_median(first.file_bytes, second.file_bytes);
        cycles = format!("{cycles} and {} (interpolated)", second.cycle);
    }
    Some((first, cycles))
}

/// The lower median, `None` for none.
fn median(values: &mut [u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alike(cycle: &str, output_bytes: u64, wall_us: u64) -> Alike {
        let recorded =
            Recorded { plugin_estimate: 0, output_bytes, file_bytes: 0, wall_us, input_bytes: 0, peak_bytes: wall_us };
        Alike {
            by_index: HashMap::from([(0, recorded)]),
            output_bytes: Some(output_bytes),
            plugin_estimate: None,
            file_bytes: None,
            cycle: cycle.into(),
            vars: None,
        }
    }

    fn blended(weights: (f64, f64)) -> Recorded {
        let (blended, cycles) =
            blend(vec![(alike("a", 1000, 400), weights.0), (alike("b", 2000, 800), weights.1)]).unwrap();
        assert_eq!(cycles, "a and b (interpolated)");
        blended.by_index[&0]
    }

    #[test]
    fn a_tasks_time_and_peak_are_interpolated_like_its_output() {
        let between = blended((0.75, 0.25));
        assert_eq!((between.output_bytes, between.wall_us, between.peak_bytes), (1250, 500, 500));
    }
}
