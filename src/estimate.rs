//! Learning each step's footprint from its history.
//!
//! What is learned is not a number of bytes but how a step's measured peaks relate to a
//! *basis*: the plugin's own estimate for the task, the task's input bytes, or (when neither
//! explains the peaks) a constant. Each task is predicted from its own basis — the plugin's
//! estimate for *that* task, *its* input bytes — so the tasks of one step may differ in size. A
//! content-aware plugin estimate (`nbhood` looks at this cycle's wet area) is calibrated, not
//! replaced: when the weather turns, the plugin's estimate moves and the learned ratio carries
//! over.
//!
//! The model of a step, from its recent tasks:
//! - **basis**: the one whose `peak / basis` ratios vary least over the recent tasks (coefficient
//!   of variation), ties (within [`TIE`]) going to the plugin's estimate, then to input bytes,
//!   then to a constant; a step whose plugin estimates each task from its inputs at dispatch
//!   (`estimate_follows_data`) keeps the plugin's estimate whenever it covers the tasks, because
//!   in steady weather a constant can fit the peaks a little better and would then miss the front
//!   the plugin sees coming;
//! - **size groups**: tasks are grouped by the size of their basis values (input bytes and the
//!   plugin's estimate, in steps of [`GROUP_STEP`]×), and each group learns its own ratio, so a
//!   step whose small and large tasks relate differently to their basis is right for both;
//! - **recent runs only**: a group's ratio is the [`Params::quantile`] of `peak / basis` over its
//!   newest runs, as few as hold [`MIN_TASKS`] of its tasks (at most [`MAX_WINDOW`] runs): a
//!   spike or a spell stops counting as soon as one clean run of the group has enough tasks;
//! - **margin**: [`Params::base_margin`] plus twice how far recent history-based estimates fell
//!   short (each task's shortfall capped at [`MAX_OVERSHOOT`], recency-weighted with a half-life
//!   of one run), at most [`Params::max_margin`]; tasks estimated without history (a first run)
//!   do not count, so a first cycle's misses cannot pin the margin, and it decays after clean
//!   runs;
//! - the prediction is `basis × ratio × (1 + margin)`, never below [`Params::floor_bytes`];
//! - within a run, a task whose peak exceeds its estimate bumps its group's ratio to what was
//!   observed at once ([`StepModel::bump`]), so the rest of the cycle is not under-estimated the
//!   same way; a step without history gets a model from its first such task
//!   ([`StepModel::from_first_task`]).

use std::fmt;

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
    /// Whether that estimate came from history (only those teach the margin).
    pub from_history: bool,
}

/// Runs of a step the estimator learns from (the newest; what `runner run` and `runner simulate`
/// read from the store).
pub const HISTORY_RUNS: usize = 16;
/// Tasks per run it reads at most (a million-task step is learned from a sample).
pub const HISTORY_TASKS_PER_RUN: u64 = 5_000;

/// The model's parameters (documented in the README).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub quantile: f64,
    pub base_margin: f64,
    pub max_margin: f64,
    /// No estimate is smaller than this (allocator and bookkeeping overheads).
    pub floor_bytes: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { quantile: 0.98, base_margin: 0.05, max_margin: 0.5, floor_bytes: 64 << 10 }
    }
}

/// A group learns from its newest runs that hold at least this many of its tasks...
pub const MIN_TASKS: usize = 8;
/// ...but from no more than this many runs.
pub const MAX_WINDOW: u32 = 4;
/// Coefficients of variation closer than this (relative, or absolutely below 0.5%) are a tie.
pub const TIE: f64 = 0.1;
/// Size groups are this factor wide.
pub const GROUP_STEP: f64 = 1.5;
/// One task's shortfall counts towards the margin up to this much (a surprise is the bump's job).
pub const MAX_OVERSHOOT: f64 = 0.25;
/// A basis must be known (non-zero) for this share of the tasks to be chosen.
const COVERAGE: f64 = 0.9;

/// What the learned ratio multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    PluginEstimate,
    InputBytes,
    Constant,
}

impl Basis {
    /// In order of preference on a tie.
    pub const ALL: [Basis; 3] = [Basis::PluginEstimate, Basis::InputBytes, Basis::Constant];

    /// This basis's value for a task, `None` when it is unknown (0).
    pub fn of(self, plugin_estimate: u64, input_bytes: u64) -> Option<f64> {
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

/// Why the basis was chosen, for `runner plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasisReason {
    /// The plugin estimates each task from its inputs at dispatch.
    ContentAware,
    /// It explains the peaks best (its ratios vary least).
    BestFit,
    /// Others explain them as well; it comes first in the order of preference.
    Tie,
    /// No other basis is known for enough tasks.
    OnlyOne,
    /// Learned from this run's first measured task.
    FirstTask,
}

/// Tasks of similar size, by the scale of their basis values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GroupKey {
    input: i32,
    plugin: i32,
}

impl GroupKey {
    fn of(plugin_estimate: u64, input_bytes: u64) -> GroupKey {
        let scale = |v: u64| if v == 0 { i32::MIN } else { ((v as f64).ln() / GROUP_STEP.ln()).floor() as i32 };
        GroupKey { input: scale(input_bytes), plugin: scale(plugin_estimate) }
    }
}

/// What one size group learned: a task's peak is predicted as `intercept + ratio × basis`.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    key: GroupKey,
    /// High quantile of peak / basis (of peak / fitted line, times the slope, for a line).
    ratio: f64,
    /// The fixed part of every task's peak (0 unless the step's peaks follow a line with an
    /// intercept, as an interpreter's baseline plus a share of the input does).
    intercept: f64,
    /// High quantile of the peaks themselves, for tasks whose basis is 0.
    absolute: f64,
    /// For a line, the largest basis it was fitted over (0 otherwise): beyond it the line is
    /// extrapolated, and its slope is known only as well as the narrow range allowed.
    fitted_up_to: f64,
}

impl Group {
    /// The margin added for a task whose basis is beyond what the line was fitted over:
    /// [`EXTRAPOLATION_MARGIN`] per doubling past it, at most [`MAX_EXTRAPOLATION_MARGIN`].
    fn extrapolation_margin(&self, basis: Option<f64>) -> f64 {
        match basis {
            Some(basis) if self.fitted_up_to > 0.0 && basis > self.fitted_up_to => {
                (EXTRAPOLATION_MARGIN * (basis / self.fitted_up_to).log2()).min(MAX_EXTRAPOLATION_MARGIN)
            }
            _ => 0.0,
        }
    }

    fn raw(&self, basis: Option<f64>) -> f64 {
        match basis {
            Some(basis) => self.intercept + basis * self.ratio,
            None => self.absolute,
        }
    }
}

/// How peaks relate to the basis: in proportion, or along a line with a fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Proportional,
    /// `peak ≈ a + b × basis`, fitted over the recent tasks (whose basis must vary enough).
    Line,
}

/// A line predicting beyond the largest basis it was fitted over gets this much more margin per
/// doubling of the basis past it (a front's first cycle reads 8× the dry cycles' bytes: +30%)...
pub const EXTRAPOLATION_MARGIN: f64 = 0.1;
/// ...at most this much.
pub const MAX_EXTRAPOLATION_MARGIN: f64 = 0.5;

/// A line is fitted only over tasks whose basis spans at least this factor...
const LINE_SPREAD: f64 = 1.3;
/// ...and at least this many of them.
const LINE_TASKS: usize = 4;

/// A step's learned footprint.
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    pub basis: Basis,
    pub shape: Shape,
    pub reason: BasisReason,
    /// Per size group; tasks of a size never seen use `pooled`.
    groups: Vec<Group>,
    /// Over all recent tasks.
    pooled: Group,
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
        let recent = window(history.iter().collect());
        let (basis, shape, reason) = choose_basis(&recent, content_aware);
        let (groups, pooled) = match shape {
            // A line generalises across sizes by itself: one for all the recent tasks.
            Shape::Line => (Vec::new(), learn_line(&recent, basis, params)),
            Shape::Proportional => {
                let mut keys: Vec<GroupKey> =
                    history.iter().map(|o| GroupKey::of(o.plugin_estimate, o.input_bytes)).collect();
                keys.sort_unstable_by_key(|k| (k.input, k.plugin));
                keys.dedup();
                let groups = keys
                    .into_iter()
                    .map(|key| {
                        let members =
                            history.iter().filter(|o| GroupKey::of(o.plugin_estimate, o.input_bytes) == key).collect();
                        learn_group(key, &window(members), basis, params)
                    })
                    .collect();
                (groups, learn_group(GroupKey { input: 0, plugin: 0 }, &recent, basis, params))
            }
        };
        let runs = history.iter().map(|o| o.age).max().unwrap_or(0) + 1;
        Some(StepModel {
            basis,
            shape,
            reason,
            groups,
            pooled,
            margin: margin(history, params),
            tasks: history.len(),
            runs,
            params,
        })
    }

    /// A model from a run's first task that peaked above its estimate (a step without history):
    /// the rest of the run reserves at least as much for the same basis.
    pub fn from_first_task(peak: u64, plugin_estimate: u64, input_bytes: u64, params: Params) -> StepModel {
        let basis =
            Basis::ALL.into_iter().find(|b| b.of(plugin_estimate, input_bytes).is_some()).unwrap_or(Basis::Constant);
        let ratio = basis.of(plugin_estimate, input_bytes).map_or(peak as f64, |b| peak as f64 / b);
        let group = Group {
            key: GroupKey::of(plugin_estimate, input_bytes),
            ratio,
            intercept: 0.0,
            absolute: peak as f64,
            fitted_up_to: 0.0,
        };
        StepModel {
            basis,
            shape: Shape::Proportional,
            reason: BasisReason::FirstTask,
            groups: vec![group.clone()],
            pooled: group,
            margin: params.base_margin,
            tasks: 1,
            runs: 0,
            params,
        }
    }

    /// Bytes to reserve for a task whose plugin estimates `plugin_estimate` and whose inputs
    /// hold `input_bytes`.
    pub fn predict(&self, plugin_estimate: u64, input_bytes: u64) -> u64 {
        let group = self.group(plugin_estimate, input_bytes).unwrap_or(&self.pooled);
        let basis = self.basis.of(plugin_estimate, input_bytes);
        let margin = self.margin + group.extrapolation_margin(basis);
        ((group.raw(basis) * (1.0 + margin)).ceil() as u64).max(self.params.floor_bytes)
    }

    /// What a task is expected to peak at: the learned figure without the margin (what a
    /// simulation has the task hold, while admission reserves [`StepModel::predict`]).
    pub fn predict_peak(&self, plugin_estimate: u64, input_bytes: u64) -> u64 {
        let group = self.group(plugin_estimate, input_bytes).unwrap_or(&self.pooled);
        (group.raw(self.basis.of(plugin_estimate, input_bytes)).ceil() as u64).max(self.params.floor_bytes)
    }

    /// The factor applied to the basis for a typical task (the pooled ratio with the margin).
    pub fn factor(&self) -> f64 {
        self.pooled.ratio * (1.0 + self.margin)
    }

    /// A task just peaked at `peak` beyond its estimate: raise its group's ratio (and the
    /// margin a little) so the rest of the run reserves at least that much for the same basis.
    pub fn bump(&mut self, peak: u64, plugin_estimate: u64, input_bytes: u64) {
        let key = GroupKey::of(plugin_estimate, input_bytes);
        let basis = self.basis.of(plugin_estimate, input_bytes);
        // The whole prediction scales up to the peak seen, its fixed part and its slope alike.
        let raise = |group: &mut Group| match basis {
            Some(_) => {
                let predicted = group.raw(basis);
                if predicted < peak as f64 {
                    let scale = if predicted > 0.0 { peak as f64 / predicted } else { 1.0 };
                    if predicted > 0.0 {
                        group.ratio *= scale;
                        group.intercept *= scale;
                    } else {
                        group.ratio = peak as f64 / basis.unwrap_or(1.0);
                    }
                }
            }
            None => group.absolute = group.absolute.max(peak as f64),
        };
        match self.groups.iter_mut().find(|g| g.key == key) {
            Some(group) => raise(group),
            None => {
                let mut group = Group { key, ..self.pooled.clone() };
                raise(&mut group);
                self.groups.push(group);
            }
        }
        raise(&mut self.pooled);
        self.margin = (self.margin + self.params.base_margin).min(self.params.max_margin);
    }

    fn group(&self, plugin_estimate: u64, input_bytes: u64) -> Option<&Group> {
        let key = GroupKey::of(plugin_estimate, input_bytes);
        self.groups.iter().find(|g| g.key == key)
    }
}

/// In words, for `runner plan`: "× 1.07 of the plugin estimate (best fit), 12 runs, 2 size groups".
impl fmt::Display for StepModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            BasisReason::ContentAware => "the plugin looks at each task's inputs",
            BasisReason::BestFit => "explains the peaks best",
            BasisReason::Tie => "others fit as well; preferred",
            BasisReason::OnlyOne => "the only basis known for the tasks",
            BasisReason::FirstTask => "from this run's first task",
        };
        match (self.basis, self.shape) {
            (Basis::Constant, _) => {
                write!(f, "{:.0} bytes a task ({why})", self.pooled.absolute * (1.0 + self.margin))?
            }
            (basis, Shape::Line) => write!(
                f,
                "{:.1} MiB + × {:.2} of the {} ({why})",
                self.pooled.intercept * (1.0 + self.margin) / (1 << 20) as f64,
                self.factor(),
                basis.as_str()
            )?,
            (basis, Shape::Proportional) => write!(f, "× {:.2} of the {} ({why})", self.factor(), basis.as_str())?,
        }
        write!(f, ", {} tasks of {} runs", self.tasks, self.runs)?;
        if self.groups.len() > 1 {
            write!(f, ", {} size groups", self.groups.len())?;
        }
        Ok(())
    }
}

/// The newest runs of `tasks` that hold at least [`MIN_TASKS`] of them, up to [`MAX_WINDOW`].
fn window(mut tasks: Vec<&Observation>) -> Vec<&Observation> {
    tasks.sort_by_key(|o| o.age);
    let mut ages: Vec<u32> = tasks.iter().map(|o| o.age).collect();
    ages.dedup();
    let mut count = 0;
    let mut last_age = ages.first().copied().unwrap_or(0);
    for (runs, &age) in ages.iter().enumerate() {
        last_age = age;
        count += tasks.iter().filter(|o| o.age == age).count();
        if count >= MIN_TASKS || runs as u32 + 1 >= MAX_WINDOW {
            break;
        }
    }
    tasks.retain(|o| o.age <= last_age);
    tasks
}

/// The basis and shape whose ratios (of peak to basis, or to the fitted line) vary least, with
/// the order of preference deciding ties: the plugin's estimate, then input bytes, then a
/// constant; in proportion before along a line.
fn choose_basis(tasks: &[&Observation], content_aware: bool) -> (Basis, Shape, BasisReason) {
    let fits: Vec<(Basis, Shape, f64)> = Basis::ALL
        .into_iter()
        .flat_map(|basis| [(basis, Shape::Proportional), (basis, Shape::Line)])
        .filter_map(|(basis, shape)| {
            let covered = tasks.iter().filter(|o| basis.of(o.plugin_estimate, o.input_bytes).is_some()).count();
            if (covered as f64) < tasks.len() as f64 * COVERAGE {
                return None;
            }
            let ratios: Vec<f64> = match shape {
                Shape::Proportional => tasks.iter().filter_map(|o| ratio(o, basis)).collect(),
                Shape::Line if basis == Basis::Constant => return None,
                Shape::Line => {
                    let (a, b) = fit_line(tasks, basis)?;
                    tasks
                        .iter()
                        .filter_map(|o| basis.of(o.plugin_estimate, o.input_bytes).map(|x| o.peak as f64 / (a + b * x)))
                        .collect()
                }
            };
            Some((basis, shape, variation(&ratios)))
        })
        .collect();
    if content_aware && fits.iter().any(|(b, _, _)| *b == Basis::PluginEstimate) {
        let shape = best_shape(&fits, Basis::PluginEstimate);
        return (Basis::PluginEstimate, shape, BasisReason::ContentAware);
    }
    let Some(best) = fits.iter().map(|(_, _, v)| *v).min_by(f64::total_cmp) else {
        return (Basis::Constant, Shape::Proportional, BasisReason::OnlyOne);
    };
    let tied = |v: f64| v <= best * (1.0 + TIE) || v - best < 0.005;
    let (basis, shape, _) = fits.iter().copied().find(|(_, _, v)| tied(*v)).expect("the best one is tied with itself");
    let bases = |f: &dyn Fn(f64) -> bool| {
        let mut seen: Vec<Basis> = fits.iter().filter(|(_, _, v)| f(*v)).map(|(b, _, _)| *b).collect();
        seen.dedup();
        seen.len()
    };
    let reason = match bases(&tied) {
        _ if bases(&|_| true) == 1 => BasisReason::OnlyOne,
        1 => BasisReason::BestFit,
        _ => BasisReason::Tie,
    };
    (basis, shape, reason)
}

/// For `basis`, the shape that explains the peaks best (in proportion on a tie).
fn best_shape(fits: &[(Basis, Shape, f64)], basis: Basis) -> Shape {
    let of = |shape| fits.iter().find(|(b, s, _)| *b == basis && *s == shape).map(|(_, _, v)| *v);
    match (of(Shape::Proportional), of(Shape::Line)) {
        (Some(p), Some(l)) if l < p / (1.0 + TIE) && p - l >= 0.005 => Shape::Line,
        (None, Some(_)) => Shape::Line,
        _ => Shape::Proportional,
    }
}

/// The line `peak ≈ a + b × basis` through the tasks (least squares, the newest run weighing
/// most), when their basis values spread enough to tell a slope; `None` otherwise, or when the
/// line would have no fixed part or no slope (proportion, or a constant, says it better).
fn fit_line(tasks: &[&Observation], basis: Basis) -> Option<(f64, f64)> {
    let points: Vec<(f64, f64, f64)> = tasks
        .iter()
        .filter_map(|o| {
            basis.of(o.plugin_estimate, o.input_bytes).map(|x| (x, o.peak as f64, 0.5f64.powi(o.age as i32)))
        })
        .collect();
    let (low, high) = points.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    if points.len() < LINE_TASKS || high < low * LINE_SPREAD {
        return None;
    }
    let total: f64 = points.iter().map(|p| p.2).sum();
    let mean_x = points.iter().map(|p| p.0 * p.2).sum::<f64>() / total;
    let mean_y = points.iter().map(|p| p.1 * p.2).sum::<f64>() / total;
    let covariance: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x).powi(2)).sum();
    let slope = covariance / variance;
    let intercept = mean_y - slope * mean_x;
    (slope > 0.0 && intercept > 0.0 && variance > 0.0).then_some((intercept, slope))
}

/// The line through the recent tasks, raised by the high quantile of each task's peak over it.
fn learn_line(tasks: &[&Observation], basis: Basis, params: Params) -> Group {
    let key = GroupKey { input: 0, plugin: 0 };
    let Some((intercept, slope)) = fit_line(tasks, basis) else {
        return learn_group(key, tasks, basis, params);
    };
    let weight = |o: &Observation| 0.5f64.powi(o.age as i32);
    let mut over: Vec<(f64, f64)> = tasks
        .iter()
        .filter_map(|o| {
            basis.of(o.plugin_estimate, o.input_bytes).map(|x| (o.peak as f64 / (intercept + slope * x), weight(o)))
        })
        .collect();
    let quantile = weighted_quantile(&mut over, params.quantile).max(0.0);
    let mut peaks: Vec<(f64, f64)> = tasks.iter().map(|o| (o.peak as f64, weight(o))).collect();
    let fitted_up_to = tasks.iter().filter_map(|o| basis.of(o.plugin_estimate, o.input_bytes)).fold(0.0, f64::max);
    Group {
        key,
        ratio: slope * quantile,
        intercept: intercept * quantile,
        absolute: weighted_quantile(&mut peaks, params.quantile),
        fitted_up_to,
    }
}

fn ratio(o: &Observation, basis: Basis) -> Option<f64> {
    basis.of(o.plugin_estimate, o.input_bytes).map(|b| o.peak as f64 / b)
}

/// What one group learned from its recent `tasks` (their newest run weighing most).
fn learn_group(key: GroupKey, tasks: &[&Observation], basis: Basis, params: Params) -> Group {
    let weight = |o: &Observation| 0.5f64.powi(o.age as i32);
    let mut ratios: Vec<(f64, f64)> = tasks.iter().filter_map(|o| ratio(o, basis).map(|r| (r, weight(o)))).collect();
    let mut peaks: Vec<(f64, f64)> = tasks.iter().map(|o| (o.peak as f64, weight(o))).collect();
    Group {
        key,
        ratio: weighted_quantile(&mut ratios, params.quantile),
        intercept: 0.0,
        absolute: weighted_quantile(&mut peaks, params.quantile),
        fitted_up_to: 0.0,
    }
}

/// The margin: base, plus twice the recent (half-life: one run) mean shortfall of estimates
/// that came from history, each capped; at most the maximum.
fn margin(history: &[Observation], params: Params) -> f64 {
    let (shortfall, total) =
        history.iter().filter(|o| o.from_history && o.estimate > 0).fold((0.0, 0.0), |(sum, t), o| {
            let w = 0.5f64.powi(o.age as i32);
            let excess = (o.peak as f64 / o.estimate as f64 - 1.0).clamp(0.0, MAX_OVERSHOOT);
            (sum + w * excess, t + w)
        });
    let noise = if total > 0.0 { shortfall / total } else { 0.0 };
    (params.base_margin + 2.0 * noise).min(params.max_margin)
}

/// Coefficient of variation: how well a basis explains the peaks (0 = perfectly).
fn variation(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::INFINITY;
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return f64::INFINITY;
    }
    let variance = samples.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
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
        let per_cycle = replay_cycles(cycles, content_aware);
        let counted = &per_cycle[3.min(per_cycle.len())..];
        let under: usize = counted.iter().map(|c| c.under).sum();
        let tasks: usize = counted.iter().map(|c| c.tasks).sum();
        let mut slacks: Vec<f64> = counted.iter().map(|c| c.slack).collect();
        slacks.sort_by(f64::total_cmp);
        (under as f64 / tasks as f64, slacks[slacks.len() / 2])
    }

    /// What one replayed cycle gave.
    #[derive(Debug)]
    struct CycleResult {
        tasks: usize,
        under: usize,
        /// Σ estimate / Σ peak − 1.
        slack: f64,
        /// The model's margin at the start of the cycle.
        margin: Option<f64>,
    }

    /// Replays `cycles` through the estimator as the runner does (learn from history, predict
    /// with each task's own basis, bump on under-estimates, record), cycle by cycle.
    fn replay_cycles(cycles: &[Vec<Task>], content_aware: bool) -> Vec<CycleResult> {
        let params = Params::default();
        let mut history: Vec<Vec<Observation>> = Vec::new();
        let mut results = Vec::new();
        for tasks in cycles {
            let flat: Vec<Observation> = history
                .iter()
                .rev()
                .enumerate()
                .flat_map(|(age, run)| run.iter().map(move |o| Observation { age: age as u32, ..*o }))
                .collect();
            let mut model = StepModel::learn(&flat, params, content_aware);
            let from_history = model.is_some();
            let margin = model.as_ref().map(|m| m.margin);
            let mut run = Vec::new();
            let (mut under, mut sum_estimate, mut sum_peak) = (0, 0u64, 0u64);
            for t in tasks {
                let estimate =
                    model.as_ref().map_or(t.plugin_estimate, |m| m.predict(t.plugin_estimate, t.input_bytes));
                if t.peak > estimate {
                    under += 1;
                    match model.as_mut() {
                        Some(m) => m.bump(t.peak, t.plugin_estimate, t.input_bytes),
                        None => {
                            model = Some(StepModel::from_first_task(t.peak, t.plugin_estimate, t.input_bytes, params))
                        }
                    }
                }
                sum_estimate += estimate;
                sum_peak += t.peak;
                run.push(Observation {
                    age: 0,
                    peak: t.peak,
                    plugin_estimate: t.plugin_estimate,
                    input_bytes: t.input_bytes,
                    estimate,
                    from_history,
                });
            }
            results.push(CycleResult {
                tasks: tasks.len(),
                under,
                slack: sum_estimate as f64 / sum_peak as f64 - 1.0,
                margin,
            });
            history.push(run);
        }
        results
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
                from_history: false,
            })
            .collect();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!(model.basis, Basis::InputBytes);
        assert_eq!(model.reason, BasisReason::BestFit);
        let ratio = model.factor() / (1.0 + model.margin);
        assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
        assert_eq!(model.runs, 5);
        let predicted = model.predict(777, 10_000 << 10);
        assert!((2 * (10_000 << 10)..=2 * (11_000 << 10)).contains(&predicted), "{predicted}");
    }

    /// Tasks of one step in two sizes whose peaks relate differently to their input bytes
    /// (a fixed overhead weighs more on small tasks), interleaved in every cycle.
    #[test]
    fn two_size_groups_in_one_step_are_each_right() {
        let mut rng = Rng(29);
        let cycles: Vec<Vec<Task>> = (0..16)
            .map(|_| {
                (0..96)
                    .map(|i| {
                        let (input, ratio) = if i % 2 == 0 { (1u64 << 20, 2.67) } else { (4u64 << 20, 1.05) };
                        let peak = (input as f64 * ratio * (1.0 + 0.01 * rng.next())) as u64;
                        Task { plugin_estimate: input, input_bytes: input, peak }
                    })
                    .collect()
            })
            .collect();
        let (under, slack) = replay(&cycles);
        assert!(under <= 0.005, "under-estimate rate {under}");
        assert!(slack <= 0.10, "median slack {slack}");
    }

    /// When the plugin's estimate, input bytes and a constant all fit equally, the plugin's
    /// estimate is the basis, so a later change of the plugin's estimate (more thresholds) is
    /// followed at once instead of missed.
    #[test]
    fn a_tie_prefers_the_plugins_estimate() {
        let mut rng = Rng(37);
        // The plugin's estimate is the same for every task, the peaks wobble by ±0.5% around it,
        // and input bytes happen to wobble nearly with them: every basis explains the peaks to
        // within half a percent, and a strict comparison would pick input bytes by a hair.
        let mut steady = |plugin: u64| -> Vec<Task> {
            (0..40)
                .map(|_| {
                    let noise = 0.005 * (2.0 * rng.next() - 1.0);
                    Task {
                        plugin_estimate: plugin,
                        input_bytes: ((4 << 20) as f64 * (1.0 + 0.9 * noise)) as u64,
                        peak: (plugin as f64 * (1.0 + noise)) as u64,
                    }
                })
                .collect()
        };
        let mut cycles: Vec<Vec<Task>> = (0..4).map(|_| steady(2 << 20)).collect();
        // Thresholds go from 2 to 11: the plugin says 5.5× more, and so do the peaks.
        cycles.push(steady(11 << 20));
        let history: Vec<Observation> = cycles[..4]
            .iter()
            .rev()
            .enumerate()
            .flat_map(|(age, run)| {
                run.iter().map(move |t| Observation {
                    age: age as u32,
                    peak: t.peak,
                    plugin_estimate: t.plugin_estimate,
                    input_bytes: t.input_bytes,
                    estimate: 3 << 20,
                    from_history: true,
                })
            })
            .collect();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!((model.basis, model.reason), (Basis::PluginEstimate, BasisReason::Tie), "{model}");
        assert!(model.to_string().contains("of the plugin estimate"), "{model}");
        let results = replay_cycles(&cycles, false);
        assert_eq!(results[4].under, 0, "{results:?}");
    }

    /// A one-cycle spike (and a short spell) stops inflating estimates after one clean cycle.
    #[test]
    fn a_spike_is_forgotten_after_one_clean_cycle() {
        let mut rng = Rng(31);
        let cycle = |rng: &mut Rng, mib: f64| -> Vec<Task> {
            (0..60)
                .map(|_| Task {
                    plugin_estimate: 1 << 20,
                    input_bytes: 0,
                    peak: (mib * MIB * (1.0 + 0.02 * rng.next())) as u64,
                })
                .collect()
        };
        let sizes = [8.0, 8.0, 8.0, 8.0, 32.0, 8.0, 8.0, 8.0, 32.0, 32.0, 8.0, 8.0, 8.0];
        let cycles: Vec<Vec<Task>> = sizes.iter().map(|&mib| cycle(&mut rng, mib)).collect();
        let results = replay_cycles(&cycles, false);
        // The cycle right after a spike cannot know it was one; the one after that can.
        for after_clean in [6, 7, 11, 12] {
            let r = &results[after_clean];
            assert!(r.slack <= 0.10, "cycle {after_clean}: slack {:.3} ({results:?})", r.slack);
            assert!(r.margin.unwrap() <= 0.15, "cycle {after_clean}: margin {:?}", r.margin);
        }
    }

    /// A first cycle that misses everywhere (the plugin's guess was far too small) does not pin
    /// the margin: it is learned from history-based estimates only.
    #[test]
    fn first_cycle_misses_do_not_pin_the_margin() {
        let cycles: Vec<Vec<Task>> = (0..6)
            .map(|_| (0..50).map(|_| Task { plugin_estimate: 1 << 20, input_bytes: 0, peak: 10 << 20 }).collect())
            .collect();
        let results = replay_cycles(&cycles, false);
        assert!(results[0].under > 0);
        for r in &results[1..] {
            assert_eq!(r.under, 0, "{results:?}");
            assert!(r.margin.unwrap() <= Params::default().base_margin + 1e-9, "{results:?}");
            assert!(r.slack <= 0.06, "{results:?}");
        }
    }

    /// Peaks along a line with a fixed part (an interpreter's baseline plus a share of the input
    /// file): fitted as a line, a front that grows the inputs 5× is followed without a miss, and
    /// small tasks are not over-reserved by a ratio that their baseline inflates.
    #[test]
    fn peaks_along_a_line_are_fitted_as_one() {
        let mut rng = Rng(41);
        let baseline = 35.0 * MIB;
        let cycle = |rng: &mut Rng, mib: f64| -> Vec<Task> {
            (0..12)
                .map(|_| {
                    let input = (mib * MIB * (0.8 + 0.4 * rng.next())) as u64;
                    let peak = (baseline + 0.9 * input as f64 * (1.0 + 0.01 * rng.next())) as u64;
                    Task { plugin_estimate: 64 << 20, input_bytes: input, peak }
                })
                .collect()
        };
        let sizes = [10.0, 12.0, 8.0, 15.0, 60.0, 90.0, 70.0, 20.0, 10.0, 100.0, 12.0];
        let cycles: Vec<Vec<Task>> = sizes.iter().map(|&mib| cycle(&mut rng, mib)).collect();
        let history: Vec<Observation> = cycles[..4]
            .iter()
            .rev()
            .enumerate()
            .flat_map(|(age, run)| {
                run.iter().map(move |t| Observation {
                    age: age as u32,
                    peak: t.peak,
                    plugin_estimate: t.plugin_estimate,
                    input_bytes: t.input_bytes,
                    estimate: t.peak,
                    from_history: true,
                })
            })
            .collect();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!((model.basis, model.shape), (Basis::InputBytes, Shape::Line), "{model}");
        assert!(model.to_string().contains("MiB + × "), "{model}");
        let results = replay_cycles(&cycles, false);
        let under: usize = results[1..].iter().map(|r| r.under).sum();
        let tasks: usize = results[1..].iter().map(|r| r.tasks).sum();
        assert!(under as f64 / tasks as f64 <= 0.02, "{under} of {tasks} under: {results:?}");
        let mut slacks: Vec<f64> = results[1..].iter().map(|r| r.slack).collect();
        slacks.sort_by(f64::total_cmp);
        assert!(slacks[slacks.len() / 2] <= 0.15, "{results:?}");
    }

    /// A line fitted over a narrow range of inputs (a dry spell) has an uncertain slope: a task
    /// whose input is 8× the largest it was fitted over gets 30% more margin; within the range,
    /// none.
    #[test]
    fn a_line_extrapolated_far_past_its_range_gets_more_margin() {
        let history: Vec<Observation> = (0..8)
            .map(|i| {
                let input = (3.0 * MIB * (1.0 + 0.06 * i as f64)) as u64;
                Observation {
                    age: (i / 2) as u32,
                    peak: (33.0 * MIB + 1.2 * input as f64) as u64,
                    plugin_estimate: 0,
                    input_bytes: input,
                    estimate: 0,
                    from_history: false,
                }
            })
            .collect();
        let model = StepModel::learn(&history, Params::default(), false).unwrap();
        assert_eq!((model.basis, model.shape), (Basis::InputBytes, Shape::Line), "{model}");
        let largest = history.iter().map(|o| o.input_bytes).max().unwrap();
        let line = |input: u64| model.pooled.raw(Some(input as f64));
        let inside = model.predict(0, largest) as f64 / line(largest);
        assert!((inside - (1.0 + model.margin)).abs() < 1e-6, "{inside}");
        let far = model.predict(0, 8 * largest) as f64 / line(8 * largest);
        assert!((far - (1.0 + model.margin + 0.3)).abs() < 1e-6, "{far}");
        let farther = model.predict(0, 1000 * largest) as f64 / line(1000 * largest);
        assert!((farther - (1.0 + model.margin + MAX_EXTRAPOLATION_MARGIN)).abs() < 1e-6, "{farther}");
    }
}
