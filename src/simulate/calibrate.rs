//! How much longer a real run takes than its simulation: what a run costs beyond its tasks —
//! starting its workers, claiming and recording each task, freeing buffers, ending — which the
//! virtual clock does not see, and how fast the machine runs now (25 runs of one cycle of
//! `precip.yaml` averaged 29 ms, then 50 ms a quarter of an hour later, then 37 ms, on the
//! 2-core VM these were measured on). Recorded runs are simulated again with
//! their own figures and the prediction's task times (the mean of the tasks like each,
//! [`super::like_tasks`]), on the workers and budget they had, and the prediction's wall is
//! moved by how much longer than that they took: the alike runs (whose figures the prediction
//! takes, [`super::history`]) as one, and the [`RECENT_RUNS`](super::history::RECENT_RUNS)
//! newest others each as one, so that neither one run's draw of the machine's noise nor a pace
//! the machine has left behind sets the wall alone. With the alike runs alone, or with the alike run's own task times,
//! the walls of `weather.yaml` and `mixed.yaml` came out worse.

use std::time::Duration;

use crate::plan::Compiled;

use super::Recompile;
use super::engine;
use super::history::{History, RanAs};
use super::predict::Predictor;
use super::{SimOptions, SpillRates};

/// How many times longer than their simulation the recorded runs took (the alike runs
/// weighted as their figures are, and counted as one beside each recent run; the recent runs
/// alone when an alike run was the recipe's first; the recipe's first run, simulated as it ran,
/// when it is the only run), or `None` without any of them. `then` is
/// the recipe compiled with the alike run's vars (its plan learned from `history`); `recompile`
/// compiles it with a recent run's.
pub fn pace(
    then: &Compiled,
    history: &History,
    options: &SimOptions,
    guess_speed: u64,
    recompile: &Recompile<'_>,
) -> Option<f64> {
    // Their spills went as fast as the recorded spills did, whatever this prediction assumes.
    let speeds = history.spill_speed;
    let options = SimOptions {
        spill: SpillRates {
            written: speeds.written.map_or(options.spill.written, |speed| speed.bytes_per_second()),
            read_back: speeds.read_back.map_or(options.spill.read_back, |speed| speed.bytes_per_second()),
            read_back_as_recorded: true,
        },
        ..options.clone()
    };
    // Without alike plans, the predictor gives each task the estimate and output the alike
    // runs recorded for it, and the time of the tasks like it, unmoved.
    // The alike runs' own figures, not grown to this cycle's (`super::growth`).
    let predictor = Predictor::new(then, &history.as_recorded(), vec![None; then.recipe.steps.len()], guess_speed);
    let alike = &history.alike_runs;
    let mut paces = Vec::with_capacity(1 + history.recent.len());
    if !alike.is_empty() {
        paces.push(alike.iter().map(|run| run.weight * slower_by(&run.ran, then, &predictor, &options)).sum());
    }
    for recent in &history.recent {
        let Some(mut compiled) = recompile(&recent.cycle, &recent.vars) else { continue };
        if compiled.plan.steps.len() != then.plan.steps.len() {
            continue;
        }
        recent.history.learn_footprints(&mut compiled);
        let predictor =
            Predictor::new(&compiled, &recent.history, vec![None; compiled.recipe.steps.len()], guess_speed);
        paces.push(slower_by(recent.ran(), &compiled, &predictor, &options));
    }
    if let Some(first) = history.first_run.as_ref().filter(|_| paces.is_empty())
        && let Some(compiled) = recompile(&first.cycle, &first.vars)
        && compiled.plan.steps.len() == then.plan.steps.len()
    {
        // As it ran: its plan learned nothing, so its steps' first tasks run alone (probation).
        let predictor = Predictor::new(&compiled, &first.history, vec![None; compiled.recipe.steps.len()], guess_speed);
        paces.push(slower_by(first.ran(), &compiled, &predictor, &options));
    }
    (!paces.is_empty()).then(|| paces.iter().sum::<f64>() / paces.len() as f64)
}

/// How many times longer than its simulation (of `compiled`, its tasks as `predictor` has
/// them, on its workers and budget) the run took.
fn slower_by(ran: &RanAs, compiled: &Compiled, predictor: &Predictor, options: &SimOptions) -> f64 {
    // Each of its workers had a CPU (a prediction shares CPUs only after such runs), whatever
    // this prediction's CPUs.
    // Its services found as they were as it started.
    let options = SimOptions {
        workers: ran.workers,
        budget: ran.budget,
        cpus: None,
        interpreters: ran.interpreters,
        ..options.clone()
    };
    let simulated = engine::simulate(compiled, predictor, &options, None, false).report.wall;
    ran.wall.as_secs_f64() / simulated.as_secs_f64().max(1e-9)
}

/// `wall` at `pace`, but never shorter than `critical_path` (no schedule finishes sooner).
pub fn paced(wall: Duration, pace: f64, critical_path: Duration) -> Duration {
    Duration::from_secs_f64((wall.as_secs_f64() * pace).max(critical_path.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_is_moved_by_the_pace_but_never_below_the_critical_path() {
        let ms = Duration::from_millis;
        assert_eq!(paced(ms(100), 1.5, ms(10)), ms(150));
        assert_eq!(paced(ms(100), 0.8, ms(10)), ms(80));
        assert_eq!(paced(ms(100), 0.2, ms(50)), ms(50));
    }
}
