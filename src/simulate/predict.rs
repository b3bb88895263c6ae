//! What one simulated task does: how long it runs, what it peaks at, how big its output is, and
//! (for a plugin that estimates from its inputs at dispatch) what its plugin would estimate —
//! each from the step's history, or a stated default where there is none: a task of a step
//! without recorded times runs for its memory estimate at [`Predictor::new`]'s `guess_speed`
//! (bytes a second: a task that touches its memory once at that speed), and counts as a guess.

use std::time::Duration;

use crate::Compiled;

use super::durations::DurationModel;
use super::history::History;

/// A step's predictions.
#[derive(Debug, Clone)]
struct StepPrediction {
    /// `None`: no history, every task takes the default time and counts as a guess.
    duration: Option<DurationModel>,
    output_bytes: u64,
    /// What the plugin is taken to estimate for a task at dispatch.
    dispatch_estimate: u64,
}

/// One task as the simulator has it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPrediction {
    pub duration: Duration,
    pub peak: u64,
    pub output_bytes: u64,
    /// Its time is the default, not learned.
    pub guessed: bool,
}

/// Per-step predictions for a compiled recipe.
#[derive(Debug, Clone)]
pub struct Predictor {
    steps: Vec<StepPrediction>,
    guess_speed: u64,
}

impl Predictor {
    /// Predictions for `compiled` (whose plan has learned from `history` already); a task of a
    /// step without recorded times runs for its estimate at `guess_speed` bytes a second.
    pub fn new(compiled: &Compiled, history: &History, guess_speed: u64) -> Predictor {
        let durations = history.durations();
        let steps = compiled
            .plan
            .steps
            .iter()
            .zip(&history.steps)
            .zip(durations)
            .map(|((plan, records), duration)| StepPrediction {
                duration,
                // A shape the plan knows is exact; otherwise the newest run's size.
                output_bytes: plan.output.bytes().or(records.newest_output_bytes).unwrap_or(0),
                dispatch_estimate: records.newest_plugin_estimate.unwrap_or(plan.plugin_estimate),
            })
            .collect();
        Predictor { steps, guess_speed: guess_speed.max(1) }
    }

    /// What a plugin that estimates at dispatch from its inputs (which a simulation does not
    /// have) is taken to say for a task of `step`: its median in the newest recorded run —
    /// yesterday's weather — else its estimate on the plan's metadata.
    pub fn dispatch_estimate(&self, step: usize) -> u64 {
        self.steps[step].dispatch_estimate
    }

    /// The task of `step` whose plugin estimates `plugin_estimate`, reading `input_bytes`:
    /// `peak` is what its step's footprint model expects without its margin (`None`: no
    /// model, the task holds what it reserved, `reserved`).
    pub fn task(
        &self,
        step: usize,
        plugin_estimate: u64,
        input_bytes: u64,
        peak: Option<u64>,
        reserved: u64,
    ) -> TaskPrediction {
        let prediction = &self.steps[step];
        let (duration, guessed) = match &prediction.duration {
            Some(model) => (model.predict(plugin_estimate, input_bytes), false),
            None => (Duration::from_secs_f64(reserved as f64 / self.guess_speed as f64), true),
        };
        TaskPrediction { duration, peak: peak.unwrap_or(reserved), output_bytes: prediction.output_bytes, guessed }
    }

    /// The duration model of `step`, if it has one.
    pub fn duration_model(&self, step: usize) -> Option<&DurationModel> {
        self.steps[step].duration.as_ref()
    }
}
