//! Where the recorded weather falls. A prediction gives each task the figures its data made of
//! the alike run's task of the same index (its output's and file's size, a data-following
//! estimate). But where one cycle's rain falls says little of where the next one's will: when
//! each member's and lead time's field is new every cycle, the wettest task of one run is any
//! task of the next, and a run's peak reserved depends on which of its big tasks happen to run
//! together. So where the recipe's recent runs show that their tasks' figures do not keep to
//! their tasks, the prediction is made [`DEALINGS`] times, the alike run's figures dealt out
//! again over the coordinates of the dims that set no task's size; the dealing with the median
//! peak reserved is the prediction, and the range of all is reported.
//!
//! A task's time goes with its figures: it is the mean time of the recorded tasks of their size
//! ([`super::like_tasks`]), not the time one task took where it happened to run in its run
//! (the first tasks of a process run cold; dealing those times into the middle of the run
//! raised the predicted peaks of `weather.yaml` and `mixed.yaml` above the real ones).

use std::time::Duration;

use crate::graph::Graph;
use crate::plan::Compiled;
use crate::scheduler::RunReport;

use super::history::History;
use super::variants::Variants;

/// Simulations of a dealt prediction (odd, for a median; the first keeps the recorded labels).
pub const DEALINGS: u64 = 9;

/// Above this many tasks a prediction keeps the recorded labels: one simulation, not nine.
pub const MAX_DEALT_TASKS: u64 = 100_000;

/// How alike (a rank correlation, -1 to 1) consecutive runs' per-task figures must be, on
/// average, to be taken to keep to their tasks.
const KEEPS_TO_TASKS: f64 = 0.5;

/// Which recorded task each task takes its figures from.
#[derive(Debug, Clone, Default)]
pub struct Dealing {
    /// Per step: the sizes of its dims and, for each, the recipe dim whose dealt coordinates
    /// it takes (`None`: its own, for a dim not dealt or of another size in this step, such as a
    /// blocked one), innermost last. Empty: every task takes its own.
    steps: Vec<(Vec<u64>, Vec<Option<usize>>)>,
    /// Per recipe dim: its coordinates dealt out (empty: not dealt).
    coordinates: Vec<Vec<u64>>,
}

impl Dealing {
    /// Every task its own recorded figures.
    pub fn as_recorded() -> Dealing {
        Dealing::default()
    }

    /// Dealing `number` (0: as recorded) of the coordinates of recipe dims `dims` of `graph`,
    /// the same for every `number`.
    pub fn new(graph: &Graph, dims: &[usize], number: u64) -> Dealing {
        if number == 0 {
            return Dealing::as_recorded();
        }
        let mut rng = fastrand::Rng::with_seed(number);
        let dim_count = graph.steps.iter().flat_map(|shape| shape.dims.iter().map(|&dim| dim + 1)).max().unwrap_or(0);
        let mut coordinates = vec![Vec::new(); dim_count];
        for &dim in dims {
            let mut dealt: Vec<u64> = (0..size_of(graph, dim)).collect();
            rng.shuffle(&mut dealt);
            coordinates[dim] = dealt;
        }
        let steps = graph
            .steps
            .iter()
            .map(|shape| {
                let dealt = shape.dims.iter().zip(&shape.sizes);
                let dealt = dealt.map(|(&dim, &size)| (coordinates[dim].len() as u64 == size).then_some(dim));
                (shape.sizes.clone(), dealt.collect())
            })
            .collect();
        Dealing { steps, coordinates }
    }

    /// The recorded task of `step` whose figures task `index` takes.
    #[inline]
    pub fn task(&self, step: usize, index: u64) -> u64 {
        let Some((sizes, dims)) = self.steps.get(step) else { return index };
        let (mut rest, mut dealt, mut scale) = (index, 0, 1);
        for (size, dim) in sizes.iter().zip(dims).rev() {
            let coordinate = rest % size;
            rest /= size;
            dealt += dim.map_or(coordinate, |dim| self.coordinates[dim][coordinate as usize]) * scale;
            scale *= size;
        }
        dealt
    }
}

/// What the dealings of a prediction gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Dealt {
    /// The dims whose coordinates were dealt out.
    pub dims: Vec<String>,
    pub dealings: u64,
    /// The lowest and highest of the dealings' peak reserved, and of their walls.
    pub peak_reserved: (u64, u64),
    pub wall: (Duration, Duration),
}

/// The recipe dims whose coordinates a prediction of `compiled` deals out, or `None` to keep
/// the recorded labels. Dealt are the dims with more than one value along which no plugin
/// says anything else of a task ([`Variants::vary_along`]: `member`, not `grid: [240, 480]`),
/// when the recipe's recent runs show that their tasks' data-made figures do not keep to their
/// tasks, and the recipe has at most [`MAX_DEALT_TASKS`] tasks. A recipe whose runs do not tell
/// keeps the recorded labels.
pub fn dims_to_deal(compiled: &Compiled, variants: &Variants, history: &History) -> Option<Vec<usize>> {
    let graph = &compiled.graph;
    if graph.steps.iter().map(|shape| shape.tasks).sum::<u64>() > MAX_DEALT_TASKS {
        return None;
    }
    let dims: Vec<usize> = (0..compiled.recipe.dims.len())
        .filter(|&dim| size_of(graph, dim) > 1 && !variants.vary_along(compiled, dim))
        .collect();
    if dims.is_empty() {
        return None;
    }
    (keeps_to_tasks(history, variants)? < KEEPS_TO_TASKS).then_some(dims)
}

/// Simulates the [`DEALINGS`] dealings of `dims` with `simulate` (which deals each into the
/// prediction it runs), and gives the range of all and the dealing whose peak reserved is the
/// median.
pub fn median(compiled: &Compiled, dims: &[usize], mut simulate: impl FnMut(Dealing) -> RunReport) -> (Dealt, Dealing) {
    let graph = &compiled.graph;
    let mut dealings: Vec<(u64, Duration, u64)> = (0..DEALINGS)
        .map(|number| {
            let report = simulate(Dealing::new(graph, dims, number));
            (report.peak_reserved, report.wall, number)
        })
        .collect();
    dealings.sort_unstable();
    let walls = dealings.iter().map(|dealing| dealing.1);
    let wall = (walls.clone().min().unwrap_or_default(), walls.max().unwrap_or_default());
    let (low, high) = (dealings[0].0, dealings[dealings.len() - 1].0);
    let dealt = Dealt {
        dims: dims.iter().map(|&dim| compiled.recipe.dims[dim].name.clone()).collect(),
        dealings: DEALINGS,
        peak_reserved: (low, high),
        wall,
    };
    (dealt, Dealing::new(graph, dims, dealings[dealings.len() / 2].2))
}

/// How many values recipe dim `dim` has where a step runs over it (1 where none does).
fn size_of(graph: &Graph, dim: usize) -> u64 {
    graph
        .steps
        .iter()
        .find_map(|shape| shape.dims.iter().position(|&d| d == dim).map(|pos| shape.sizes[pos]))
        .unwrap_or(1)
}

/// How alike consecutive recent runs' data-made figures are, task by task: the mean over pairs
/// of runs of the correlation of each task's rank among the tasks of its step and kind (so
/// that a dim setting the size does not make every pair alike). `None` when no two runs
/// recorded three tasks of a kind whose figures differ.
fn keeps_to_tasks(history: &History, variants: &Variants) -> Option<f64> {
    let runs = history.steps.iter().map(|records| records.data_figures.len()).max()?;
    // Counted back from the newest run (a step added later has fewer): each run with the one
    // before it.
    let correlations: Vec<f64> =
        (1..runs).filter_map(|back| correlation(&ranked_pairs(history, variants, back))).collect();
    (!correlations.is_empty()).then(|| correlations.iter().sum::<f64>() / correlations.len() as f64)
}

/// Each task's rank among its step's tasks of its kind in the run `back` runs before the newest
/// and in the one before that, for the tasks both recorded.
fn ranked_pairs(history: &History, variants: &Variants, back: usize) -> Vec<(f64, f64)> {
    let mut ranked = Vec::new();
    for (step, records) in history.steps.iter().enumerate() {
        let figures = &records.data_figures;
        let (Some(then), Some(now)) = (
            figures.len().checked_sub(back + 1).map(|at| &figures[at]),
            figures.len().checked_sub(back).map(|at| &figures[at]),
        ) else {
            continue;
        };
        let mut by_kind: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
        for (&index, &figure) in now {
            if let Some(&before) = then.get(&index) {
                by_kind.entry(variants.kind(step, index)).or_default().push((before, figure));
            }
        }
        for pairs in by_kind.values() {
            if let (Some(before), Some(after)) = (ranks(pairs.iter().map(|p| p.0)), ranks(pairs.iter().map(|p| p.1))) {
                ranked.extend(before.into_iter().zip(after));
            }
        }
    }
    ranked
}

/// Each value's rank among `values` (ties at their mean rank), from -1 (the least) to 1;
/// `None` for fewer than three values or all equal.
fn ranks(values: impl Iterator<Item = u64>) -> Option<Vec<f64>> {
    let values: Vec<u64> = values.collect();
    let n = values.len();
    if n < 3 || values.iter().all(|&v| v == values[0]) {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&at| values[at]);
    let mut ranks = vec![0.0; n];
    let mut start = 0;
    while start < n {
        let mut end = start;
        while end + 1 < n && values[order[end + 1]] == values[order[start]] {
            end += 1;
        }
        let mean = (start + end) as f64 / 2.0;
        for &at in &order[start..=end] {
            ranks[at] = 2.0 * mean / (n - 1) as f64 - 1.0;
        }
        start = end + 1;
    }
    Some(ranks)
}

/// Pearson's correlation of the pairs; `None` for fewer than three or either side constant.
fn correlation(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let n = pairs.len() as f64;
    let (mean_x, mean_y) = pairs.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (mut xy, mut xx, mut yy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        xy += (x - mean_x) * (y - mean_y);
        xx += (x - mean_x) * (x - mean_x);
        yy += (y - mean_y) * (y - mean_y);
    }
    (xx > 0.0 && yy > 0.0).then(|| xy / (xx * yy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::CompileOptions;
    use crate::registry::Registry;

    fn compiled(text: &str) -> Compiled {
        let registry = Registry::new(runner_std_plugins::all());
        let options = CompileOptions { cycle: "c".into(), ..CompileOptions::default() };
        Compiled::from_text(std::path::Path::new("r.yaml"), text, &options, &registry).unwrap()
    }

    #[test]
    fn a_dealing_permutes_each_dim_s_coordinates_the_same_way_in_every_step() {
        let c = compiled(
            "recipe: r\ndims:\n  member: 3\n  lead: [1, 3, 6, 12]\nsteps:\n  each:\n    plugin: noop\n    over: [member, lead]\n  all:\n    plugin: noop\n    over: [lead]\n    inputs: {x: each}\n",
        );
        let (member, lead) = (0, 1);
        assert_eq!(
            (0..12).map(|i| Dealing::new(&c.graph, &[member, lead], 0).task(0, i)).collect::<Vec<_>>(),
            (0..12).collect::<Vec<_>>()
        );
        let dealing = Dealing::new(&c.graph, &[member, lead], 3);
        let mut each: Vec<u64> = (0..12).map(|i| dealing.task(0, i)).collect();
        // The gather over `lead` takes the lead the tasks it reads were dealt.
        for l in 0..4 {
            let dealt_lead = dealing.task(0, l) % 4;
            assert_eq!(dealing.task(1, l), dealt_lead);
        }
        each.sort_unstable();
        assert_eq!(each, (0..12).collect::<Vec<_>>(), "every recorded task is dealt once");
        // Only `lead` dealt: each task keeps its member.
        let leads_only = Dealing::new(&c.graph, &[lead], 5);
        assert!((0..12).all(|i| leads_only.task(0, i) / 4 == i / 4));
    }

    #[test]
    fn ties_share_their_mean_rank_and_equal_values_rank_nothing() {
        assert_eq!(ranks([5, 1, 5, 9].into_iter()), Some(vec![0.0, -1.0, 0.0, 1.0]));
        assert_eq!(ranks([3, 3, 3].into_iter()), None);
        assert_eq!(ranks([1, 2].into_iter()), None);
    }

    #[test]
    fn a_pattern_that_repeats_correlates_and_a_reversed_one_anticorrelates() {
        let same: Vec<(f64, f64)> = (0..5).map(|i| (i as f64, i as f64 * 2.0)).collect();
        assert!((correlation(&same).unwrap() - 1.0).abs() < 1e-12);
        let reversed: Vec<(f64, f64)> = (0..5).map(|i| (i as f64, -(i as f64))).collect();
        assert!((correlation(&reversed).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(correlation(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }
}
