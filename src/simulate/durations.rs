//! How long a step's tasks take, learned from its history as its footprint is (see
//! [`crate::estimate`]): per task, from a *basis* — the plugin's estimate for the task, its
//! input bytes, or a constant — times a learned rate.
//!
//! The basis is the one whose `wall / basis` ratios vary least over the newest runs (as few as
//! hold [`MIN_TASKS`] tasks, at most [`MAX_WINDOW`]), ties going to the plugin's estimate, then
//! input bytes, then a constant. The rate is `Σ wall / Σ basis` over those tasks, so that a step's
//! predicted total time is its recorded total time for the same tasks; the model's *error* is
//! `Σ |predicted − wall| / Σ wall` over them, what one task's prediction is typically off by.
//!
//! A prediction uses the model for the tasks the recorded run most like the predicted cycle did
//! not record ([`super::history`]): the others take the time they took there.

use std::fmt;
use std::time::Duration;

use crate::estimate::{Basis, MAX_WINDOW, MIN_TASKS, TIE};

/// One recorded task, as the duration model learns from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Runs ago: 0 for the newest run of the step.
    pub age: u32,
    pub wall: Duration,
    pub plugin_estimate: u64,
    pub input_bytes: u64,
}

/// A step's learned task time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DurationModel {
    pub basis: Basis,
    /// Seconds per unit of the basis.
    rate: f64,
    /// Seconds for a task whose basis is unknown: the mean over the window.
    mean: f64,
    /// Σ |predicted − wall| / Σ wall over the tasks learned from (0 when they all took 0).
    pub error: f64,
    pub tasks: usize,
    pub runs: u32,
}

/// A basis must be known for this share of the tasks to be chosen (as for footprints).
const COVERAGE: f64 = 0.9;

impl DurationModel {
    /// Learns from `history`; `None` without any.
    pub fn learn(history: &[Timing]) -> Option<DurationModel> {
        let recent = window(history);
        if recent.is_empty() {
            return None;
        }
        let mean = recent.iter().map(|t| t.wall.as_secs_f64()).sum::<f64>() / recent.len() as f64;
        let fits: Vec<(Basis, f64, f64)> = Basis::ALL
            .into_iter()
            .filter_map(|basis| {
                let known: Vec<(f64, f64)> = recent
                    .iter()
                    .filter_map(|t| basis.of(t.plugin_estimate, t.input_bytes).map(|b| (b, t.wall.as_secs_f64())))
                    .collect();
                if (known.len() as f64) < recent.len() as f64 * COVERAGE {
                    return None;
                }
                let (basis_sum, wall_sum) = known.iter().fold((0.0, 0.0), |(b, w), (x, y)| (b + x, w + y));
                let rate = if basis_sum > 0.0 { wall_sum / basis_sum } else { 0.0 };
                let ratios: Vec<f64> = known.iter().map(|(b, w)| w / b).collect();
                Some((basis, rate, variation(&ratios)))
            })
            .collect();
        let best = fits.iter().map(|(_, _, v)| *v).min_by(f64::total_cmp).unwrap_or(0.0);
        let tied = |v: f64| v <= best * (1.0 + TIE) || v - best < 0.005;
        // Basis::ALL is in the order of preference, and so are `fits`.
        let &(basis, rate, _) = fits.iter().find(|(_, _, v)| tied(*v)).unwrap_or(&(Basis::Constant, mean, 0.0));
        let mut model = DurationModel {
            basis,
            rate,
            mean,
            error: 0.0,
            tasks: history.len(),
            runs: history.iter().map(|t| t.age).max().unwrap_or(0) + 1,
        };
        let wall_sum: f64 = recent.iter().map(|t| t.wall.as_secs_f64()).sum();
        let miss_sum: f64 = recent
            .iter()
            .map(|t| (model.predict(t.plugin_estimate, t.input_bytes).as_secs_f64() - t.wall.as_secs_f64()).abs())
            .sum();
        model.error = if wall_sum > 0.0 { miss_sum / wall_sum } else { 0.0 };
        Some(model)
    }

    /// How long a task whose plugin estimates `plugin_estimate` and whose inputs hold
    /// `input_bytes` takes.
    pub fn predict(&self, plugin_estimate: u64, input_bytes: u64) -> Duration {
        let seconds = match self.basis.of(plugin_estimate, input_bytes) {
            Some(basis) => basis * self.rate,
            None => self.mean,
        };
        Duration::from_secs_f64(seconds.max(0.0))
    }

    /// A typical task's time (the window's mean), for people.
    pub fn typical(&self) -> Duration {
        Duration::from_secs_f64(self.mean)
    }
}

/// "× 2.1 ms per MiB of input bytes, ±12%, 4 runs": what `runner history --durations` shows.
impl DurationModel {
    /// The model as `runner history --durations --format json` shows it: the basis, seconds per
    /// unit of it (per byte, or per task for a constant), the typical task's seconds, the error
    /// and what it was learned from.
    pub fn to_json(self) -> serde_json::Value {
        let basis = match self.basis {
            Basis::Constant => "constant",
            Basis::InputBytes => "input_bytes",
            Basis::PluginEstimate => "plugin_estimate",
        };
        serde_json::json!({
            "basis": basis,
            "seconds_per_unit": self.rate,
            "typical_s": self.mean,
            "error": self.error,
            "tasks": self.tasks,
            "runs": self.runs,
        })
    }
}

impl fmt::Display for DurationModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = (self.error * 100.0).round();
        let runs = if self.runs == 1 { "run" } else { "runs" };
        match self.basis {
            Basis::Constant => write!(f, "{} a task", format_seconds(self.rate))?,
            Basis::InputBytes => write!(f, "{} per MiB of input", format_seconds(self.rate * (1 << 20) as f64))?,
            Basis::PluginEstimate => {
                write!(f, "{} per MiB of plugin estimate", format_seconds(self.rate * (1 << 20) as f64))?
            }
        }
        write!(
            f,
            " (typically {}), ±{error}%, from {} tasks of {} {runs}",
            format_seconds(self.mean),
            self.tasks,
            self.runs
        )
    }
}

/// Seconds in the unit that reads best: `850 µs`, `12.3 ms`, `4.20 s`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.0} µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

/// The newest runs of `history` holding at least [`MIN_TASKS`] tasks, at most [`MAX_WINDOW`].
fn window(history: &[Timing]) -> Vec<Timing> {
    let mut ages: Vec<u32> = history.iter().map(|t| t.age).collect();
    ages.sort_unstable();
    ages.dedup();
    let mut count = 0;
    let mut last_age = ages.first().copied().unwrap_or(0);
    for (runs, &age) in ages.iter().enumerate() {
        last_age = age;
        count += history.iter().filter(|t| t.age == age).count();
        if count >= MIN_TASKS || runs as u32 + 1 >= MAX_WINDOW {
            break;
        }
    }
    history.iter().copied().filter(|t| t.age <= last_age).collect()
}

/// Coefficient of variation (0 for fewer than two values or a zero mean).
fn variation(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if mean <= 0.0 {
        return 0.0;
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
    var.sqrt() / mean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(age: u32, ms: u64, plugin_estimate: u64, input_bytes: u64) -> Timing {
        Timing { age, wall: Duration::from_millis(ms), plugin_estimate, input_bytes }
    }

    #[test]
    fn time_in_proportion_to_input_bytes_is_learned_on_that_basis() {
        let history: Vec<Timing> = (1..=10).map(|i| timing(0, 10 * i, 1000, i << 20)).collect();
        let model = DurationModel::learn(&history).expect("history");
        assert_eq!(model.basis, Basis::InputBytes);
        assert_eq!(model.predict(1000, 20 << 20), Duration::from_millis(200));
        assert!(model.error < 1e-9, "{}", model.error);
    }

    #[test]
    fn steady_times_are_a_constant_and_the_error_says_how_they_spread() {
        let history: Vec<Timing> = (0..10).map(|i| timing(0, if i % 2 == 0 { 90 } else { 110 }, 0, 0)).collect();
        let model = DurationModel::learn(&history).expect("history");
        assert_eq!(model.basis, Basis::Constant);
        assert_eq!(model.predict(0, 0), Duration::from_millis(100));
        assert!((model.error - 0.1).abs() < 1e-9, "{}", model.error);
    }

    #[test]
    fn only_the_newest_runs_count() {
        let mut history: Vec<Timing> = (0..10).map(|_| timing(1, 500, 0, 0)).collect();
        history.extend((0..10).map(|_| timing(0, 50, 0, 0)));
        let model = DurationModel::learn(&history).expect("history");
        assert_eq!(model.predict(0, 0), Duration::from_millis(50));
        assert_eq!(model.runs, 2);
        assert!(DurationModel::learn(&[]).is_none());
    }
}
