//! Learning each step's footprint from its history.
//!
//! What is learned is not a number of bytes but how a step's measured peaks relate to a
//! *basis*: the plugin's own estimate for the task, the task's input bytes, or (when neither
//! explains the peaks) a constant. A content-aware plugin estimate — `nbhood` looks at this
//! cycle's wet area — is therefore calibrated, not replaced: when the weather turns, the plugin's
//! estimate moves and the learned ratio carries over.
//!
//! The model of a step, from its recent tasks (newest run first):
//! - each task gives a ratio `peak / basis`, weighted by recency: a half-life of
//!   [`Params::half_life_runs`] runs;
//! - the basis is the one whose ratios vary least (weighted coefficient of variation) — except
//!   for a step whose plugin estimates each task from its inputs at dispatch
//!   (`estimate_follows_data`): its basis is the plugin's estimate whenever that covers the
//!   tasks, because in a spell of steady weather a constant can fit the peaks a little better
//!   and would then miss the front that the plugin sees coming;
//! - the prediction is `basis × q(ratio) × (1 + margin)`, with `q` the weighted
//!   [`Params::quantile`] and the margin [`Params::base_margin`] plus twice the weighted mean
//!   overshoot of recent tasks past their estimates (so a step whose estimates were recently
//!   exceeded by much gets more headroom), at most [`Params::max_margin`];
//! - within a run, a task whose peak exceeds its estimate bumps the step's ratio to what was
//!   observed at once ([`StepModel::bump`]), so the rest of the cycle is not under-estimated the
//!   same way.

/// One finished task of a step, as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Runs ago: 0 for the most recent run of the step.
    pub age: u32,
    pub peak: u64,
    /// What the plugin's own `estimate` said for this task.
    pub plugin_estimate: u64,
    pub input_bytes: u64,
    /// The estimate admission used (to learn from past errors).
    pub estimate: u64,
}

/// The model's parameters (documented in the README).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub half_life_runs: f64,
    pub quantile: f64,
    pub base_margin: f64,
    pub max_margin: f64,
    /// No estimate is smaller than this (allocator and bookkeeping overheads).
    pub floor_bytes: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { half_life_runs: 4.0, quantile: 0.98, base_margin: 0.05, max_margin: 0.5, floor_bytes: 64 << 10 }
    }
}

/// What the learned ratio multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    PluginEstimate,
    InputBytes,
    Constant,
}

impl Basis {
    fn of(self, plugin_estimate: u64, input_bytes: u64) -> Option<f64> {
        let value = match self {
            Basis::PluginEstimate => plugin_estimate,
            Basis::InputBytes => input_bytes,
            Basis::Constant => 1,
        };
        (value > 0).then_some(value as f64)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Basis::PluginEstimate => "plugin estimate",
            Basis::InputBytes => "input bytes",
            Basis::Constant => "constant",
        }
    }
}

/// A step's learned footprint.
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    pub basis: Basis,
    /// High quantile of peak / basis.
    pub ratio: f64,
    /// High quantile of the peaks themselves, for tasks whose basis is 0.
    pub absolute: f64,
    pub margin: f64,
    /// Tasks and runs behind the model.
    pub tasks: usize,
    pub runs: u32,
    params: Params,
}

impl StepModel {
    /// Learns from `history`; `None` when there is none. `content_aware`: the plugin's
    /// estimates were made at dispatch from each task's inputs, so they are the basis.
    pub fn learn(history: &[Observation], params: Params, content_aware: bool) -> Option<StepModel> {
        if history.is_empty() {
            return None;
        }
        let weight = |o: &Observation| 0.5f64.powf(o.age as f64 / params.half_life_runs);
        // A basis must explain (nearly) every task to be trusted.
        let covers = |basis: Basis| {
            let samples = ratios(history, basis, &weight);
            (samples.len() * 10 >= history.len() * 9).then(|| (basis, dispersion(&samples)))
        };
        let basis = match covers(Basis::PluginEstimate) {
            Some(_) if content_aware => Basis::PluginEstimate,
            _ => [Basis::PluginEstimate, Basis::InputBytes, Basis::Constant]
                .into_iter()
                .filter_map(covers)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(Basis::Constant, |(basis, _)| basis),
        };
        let ratio = weighted_quantile(&mut ratios(history, basis, &weight), params.quantile);
        let mut peaks: Vec<(f64, f64)> = history.iter().map(|o| (o.peak as f64, weight(o))).collect();
        let absolute = weighted_quantile(&mut peaks, params.quantile);
        // How far past estimates went recently: tiny overshoots barely move the margin, a
        // front that doubled some footprints widens it.
        let (overshoot, total) = history.iter().fold((0.0, 0.0), |(sum, t), o| {
            let w = weight(o);
            let excess = if o.estimate > 0 { (o.peak as f64 / o.estimate as f64 - 1.0).max(0.0) } else { 0.0 };
            (sum + w * excess, t + w)
        });
        let margin = (params.base_margin + 2.0 * overshoot / total).min(params.max_margin);
        let runs = history.iter().map(|o| o.age).max().unwrap_or(0) + 1;
        Some(StepModel { basis, ratio, absolute, margin, tasks: history.len(), runs, params })
    }

    /// Bytes to reserve for a task whose plugin estimates `plugin_estimate` and whose inputs
    /// hold `input_bytes`.
    pub fn predict(&self, plugin_estimate: u64, input_bytes: u64) -> u64 {
        let raw = match self.basis.of(plugin_estimate, input_bytes) {
            Some(basis) => basis * self.ratio,
            None => self.absolute,
        };
        ((raw * (1.0 + self.margin)).ceil() as u64).max(self.params.floor_bytes)
    }

    /// A task just peaked at `peak` beyond its estimate: raise the ratio (and the margin a
    /// little) so the rest of the run reserves at least that much for the same basis.
    pub fn bump(&mut self, peak: u64, plugin_estimate: u64, input_bytes: u64) {
        match self.basis.of(plugin_estimate, input_bytes) {
            Some(basis) => self.ratio = self.ratio.max(peak as f64 / basis),
            None => self.absolute = self.absolute.max(peak as f64),
        }
        self.margin = (self.margin + self.params.base_margin).min(self.params.max_margin);
    }
}

fn ratios(history: &[Observation], basis: Basis, weight: &dyn Fn(&Observation) -> f64) -> Vec<(f64, f64)> {
    history
        .iter()
        .filter_map(|o| basis.of(o.plugin_estimate, o.input_bytes).map(|b| (o.peak as f64 / b, weight(o))))
        .collect()
}

/// Weighted coefficient of variation: how well a basis explains the peaks.
fn dispersion(samples: &[(f64, f64)]) -> f64 {
    let total: f64 = samples.iter().map(|(_, w)| w).sum();
    let mean = samples.iter().map(|(r, w)| r * w).sum::<f64>() / total;
    if mean <= 0.0 {
        return f64::INFINITY;
    }
    let variance = samples.iter().map(|(r, w)| w * (r - mean).powi(2)).sum::<f64>() / total;
    variance.sqrt() / mean
}

/// The `q` quantile of weighted samples (sorts them).
fn weighted_quantile(samples: &mut [(f64, f64)], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = samples.iter().map(|(_, w)| w).sum();
    let target = q * total;
    let mut seen = 0.0;
    for &(value, w) in samples.iter() {
        seen += w;
        if seen >= target {
            return value;
        }
    }
    samples[samples.len() - 1].0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator so histories are reproducible.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A task of one cycle: what the plugin estimates and what it really peaks at.
    struct Task {
        plugin_estimate: u64,
        input_bytes: u64,
        peak: u64,
    }

    /// Replays `cycles` through the estimator as the runner would (learn from history, predict,
    /// bump on under-estimates, record); returns (under-estimate rate, median slack) over the
    /// cycles after the third.
    fn replay(cycles: &[Vec<Task>]) -> (f64, f64) {
        replay_with(cycles, false)
    }

    /// [`replay`] of a step whose plugin estimates at dispatch when `content_aware`.
    fn replay_with(cycles: &[Vec<Task>], content_aware: bool) -> (f64, f64) {
        let params = Params::default();
        let mut history: Vec<Vec<Observation>> = Vec::new();
        let (mut under, mut counted) = (0usize, 0usize);
        let mut slacks = Vec::new();
        for (c, tasks) in cycles.iter().enumerate() {
            let flat: Vec<Observation> = history
                .iter()
                .rev()
                .enumerate()
                .flat_map(|(age, run)| run.iter().map(move |o| Observation { age: age as u32, ..*o }))
                .collect();
            let mut model = StepModel::learn(&flat, params, content_aware);
            let mut run = Vec::new();
            let (mut sum_estimate, mut sum_peak) = (0u64, 0u64);
            for t in tasks {
                let estimate =
                    model.as_ref().map_or(t.plugin_estimate, |m| m.predict(t.plugin_estimate, t.input_bytes));
                if t.peak > estimate {
                    if let Some(m) = model.as_mut() {
                        m.bump(t.peak, t.plugin_estimate, t.input_bytes);
                    }
                    if c >= 3 {
                        under += 1;
                    }
                }
                if c >= 3 {
                    counted += 1;
                }
                sum_estimate += estimate;
                sum_peak += t.peak;
                run.push(Observation {
                    age: 0,
                    peak: t.peak,
                    plugin_estimate: t.plugin_estimate,
                    input_bytes: t.input_bytes,
                    estimate,
                });
            }
            if c >= 3 {
                slacks.push(sum_estimate as f64 / sum_peak as f64 - 1.0);
            }
            history.push(run);
        }
        slacks.sort_by(f64::total_cmp);
        (under as f64 / counted as f64, slacks[slacks.len() / 2])
    }

    const MIB: f64 = 1048576.0;

    /// 60 tasks a cycle whose peak is the plugin's estimate × a stable factor with ±`noise`.
    fn cycle(rng: &mut Rng, size: f64, factor: f64, noise: f64) -> Vec<Task> {
        (0..60)
            .map(|_| {
                let plugin_estimate = (size * (0.5 + rng.next())) as u64;
                let peak = (plugin_estimate as f64 * factor * (1.0 + noise * (2.0 * rng.next() - 1.0))) as u64;
                Task { plugin_estimate, input_bytes: 12 << 20, peak }
            })
            .collect()
    }

    #[test]
    fn stable_steps_are_tight() {
        let mut rng = Rng(7);
        let cycles: Vec<_> = (0..24).map(|_| cycle(&mut rng, 100.0 * MIB, 1.3, 0.02)).collect();
        let (under, slack) = replay(&cycles);
        assert!(under <= 0.02, "under-estimate rate {under}");
        assert!(slack <= 0.15, "median slack {slack}");
    }

    #[test]
    fn a_content_aware_estimate_carries_a_trend_and_a_regime_switch() {
        let mut rng = Rng(11);
        // The plugin's estimate follows the weather: footprints grow 15% a cycle, then a front
        // arrives and they jump 5×; the ratio to the plugin's estimate stays put.
        let cycles: Vec<_> = (0..24)
            .map(|c| {
                let size = if c < 12 { 40.0 * MIB * 1.15f64.powi(c) } else { 800.0 * MIB };
                cycle(&mut rng, size, 0.8, 0.03)
            })
            .collect();
        let (under, slack) = replay(&cycles);
        assert!(under <= 0.02, "under-estimate rate {under}");
        assert!(slack <= 0.25, "median slack {slack}");
    }

    #[test]
    fn a_content_aware_estimate_is_not_replaced_by_a_constant_in_steady_weather() {
        let mut rng = Rng(23);
        // Dry spell: the plugin's estimate (output + a small wet box) wobbles by ±4% while the
        // peaks hardly move, so a constant fits them better; then a front doubles the wet box.
        let spell = |rng: &mut Rng, wet: bool| -> Vec<Task> {
            (0..60)
                .map(|_| {
                    let (estimate, share) = if wet { (6.5 * MIB, 0.75 + 0.2 * rng.next()) } else { (4.0 * MIB, 0.9) };
                    let plugin_estimate = (estimate * (1.0 + 0.04 * (2.0 * rng.next() - 1.0))) as u64;
                    let peak = (3.6 * MIB * (1.0 + 0.005 * rng.next())) as u64;
                    let peak = if wet { (plugin_estimate as f64 * share) as u64 } else { peak };
                    Task { plugin_estimate, input_bytes: 3 << 20, peak }
                })
                .collect()
        };
        let cycles: Vec<_> = (0..12).map(|c| spell(&mut rng, c >= 5)).collect();
        let (under, slack) = replay_with(&cycles, true);
        assert_eq!(under, 0.0, "under-estimate rate {under}");
        assert!(slack <= 0.25, "median slack {slack}");
        // Chosen by dispersion alone, the constant misses the front's first tasks (the bump
        // catches the rest; in a run, one per busy worker is missed before it can).
        let (under, _) = replay_with(&cycles, false);
        assert!(under > 0.0, "under-estimate rate {under} without the plugin as basis");
    }

    #[test]
    fn a_constant_estimate_with_drifting_peaks_is_caught_by_the_bump() {
        let mut rng = Rng(13);
        // The plugin says the same thing every time while the real peaks drift up 5% a cycle.
        let cycles: Vec<Vec<Task>> = (0..24)
            .map(|c| {
                (0..60)
                    .map(|_| {
                        let peak = (100.0 * MIB * 1.05f64.powi(c) * (1.0 + 0.02 * rng.next())) as u64;
                        Task { plugin_estimate: 50 << 20, input_bytes: 0, peak }
                    })
                    .collect()
            })
            .collect();
        let (under, slack) = replay(&cycles);
        assert!(under <= 0.02, "under-estimate rate {under}");
        assert!(slack <= 0.25, "median slack {slack}");
    }

    #[test]
    fn an_outlier_is_forgotten() {
        let mut rng = Rng(17);
        let mut cycles: Vec<_> = (0..24).map(|_| cycle(&mut rng, 100.0 * MIB, 1.0, 0.02)).collect();
        // One task of cycle 5 peaks at 10× its usual footprint.
        cycles[5][30].peak *= 10;
        let (under, slack) = replay(&cycles);
        assert!(under <= 0.02, "under-estimate rate {under}");
        assert!(slack <= 0.25, "median slack {slack}");
    }

    #[test]
    fn picks_the_basis_that_explains_the_peaks() {
        let history: Vec<Observation> = (0..50)
            .map(|i| Observation {
                age: (i / 10) as u32,
                peak: 2 * (1000 + i * 37) + 5,
                plugin_estimate: 777,
                input_bytes: 1000 + i * 37,
                estimate: 0,
            })
            .collect();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!(model.basis, Basis::InputBytes);
        assert!((model.ratio - 2.0).abs() < 0.01, "{}", model.ratio);
        assert_eq!(model.runs, 5);
        let predicted = model.predict(777, 10_000 << 10);
        assert!((2 * (10_000 << 10)..=2 * (11_000 << 10)).contains(&predicted), "{predicted}");
    }
}
