//! What a run costs beyond its tasks — starting its workers, claiming and recording each task,
//! freeing buffers, ending — which the virtual clock does not see. The alike runs (whose
//! figures the prediction takes, [`super::history`]) are simulated again with their recorded
//! figures and the prediction's task times (the mean of the tasks like each,
//! [`super::like_tasks`]), on the workers and budget they had; what the simulator missed of
//! their recorded wall is carried over to the prediction. So a prediction is the alike run's
//! recorded wall moved by what the simulation says this cycle changes; with the alike run's
//! own task times here instead, the walls of `weather.yaml` and `mixed.yaml` came out worse.

use std::time::Duration;

use crate::plan::Compiled;

use super::engine::{self, SimOptions};
use super::history::History;
use super::predict::Predictor;

/// Seconds the real alike runs took beyond their simulation (weighted as their figures are;
/// negative when the simulation was the longer), or `None` without recorded alike runs.
/// `then` is the recipe compiled with the alike run's vars (its plan learned from `history`).
pub fn overhead(then: &Compiled, history: &History, options: &SimOptions, guess_speed: u64) -> Option<f64> {
    if history.alike_runs.is_empty() {
        return None;
    }
    // Without alike plans, the predictor gives each task the estimate and output the alike
    // runs recorded for it, and the time of the tasks like it, unmoved.
    let predictor = Predictor::new(then, history, vec![None; then.recipe.steps.len()], guess_speed);
    // Times are interpolated between two runs but never extended past them (the nearest run's
    // are kept), and so is what the simulation misses of them.
    let extended = history.alike_runs.iter().any(|run| run.weight < 0.0);
    let runs = if extended { &history.alike_runs[..1] } else { &history.alike_runs[..] };
    let mut missed = 0.0;
    // Their spills went as fast as the recorded spills did, whatever this prediction assumes.
    let spill_bandwidth = history.spill_speed.map_or(options.spill_bandwidth, |speed| speed.bytes_per_second());
    for run in runs {
        let options = SimOptions { workers: run.workers, budget: run.budget, spill_bandwidth, ..options.clone() };
        let simulated = engine::simulate(then, &predictor, &options, None, false);
        let weight = if extended { 1.0 } else { run.weight };
        missed += weight * (run.wall.as_secs_f64() - simulated.report.wall.as_secs_f64());
    }
    Some(missed)
}

/// `wall` with `overhead` seconds added, but never shorter than `critical_path` (no schedule
/// finishes sooner).
pub fn with_overhead(wall: Duration, overhead: f64, critical_path: Duration) -> Duration {
    Duration::from_secs_f64((wall.as_secs_f64() + overhead).max(critical_path.as_secs_f64()))
}
