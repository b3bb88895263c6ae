//! The plan's figures per kind of task, for steps whose tasks differ in size. The plan describes
//! one sample task of each step (every dim at its first value); a step whose args are filled in
//! from its dims (`ny: "{grid}"`), or that reads such a step, has tasks of other sizes, which a
//! real worker asks its plugin about again when it takes them. A simulation has no inputs to
//! show a plugin, so it asks with their metadata instead: once per combination of the values of
//! the dims that may set a task's size (at most [`MAX_VARIANTS`] a step), in topological order,
//! each combination's inputs described by what its producers' own combinations output.

use runner_plugin::{InputMeta, InputsForEstimate, ValueMeta};

use crate::graph::{Coords, ProducerRule, StepShape};
use crate::plan::Compiled;
use crate::recipe::limits::MAX_DIMS;

use super::like_tasks::about_the_same;

/// More combinations than this in one step and its tasks keep the plan's figures (as do its
/// consumers'): a dim of 10⁶ file names sets no size worth 10⁶ plugin calls.
const MAX_VARIANTS: u64 = 4096;

/// What the plugin says of one kind of task.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub output: ValueMeta,
    pub plugin_estimate: u64,
    /// Whether the plugin was told its inputs' sizes: a python call's value is known only once
    /// it is made, and a plugin whose estimate counts its inputs' bytes says more at dispatch.
    pub inputs_known: bool,
}

impl Variant {
    /// Whether the two kinds of task are about the same size: their outputs' bytes and their
    /// plugin's estimates [`about_the_same`] (an estimate that counts the bytes of a task's
    /// seed or file name does not make it another size).
    fn same_size(&self, other: &Variant) -> bool {
        let outputs = match (self.output.bytes(), other.output.bytes()) {
            (Some(a), Some(b)) => about_the_same(a, b),
            (a, b) => a == b,
        };
        outputs && about_the_same(self.plugin_estimate, other.plugin_estimate)
    }
}

/// One step's kinds of task.
#[derive(Debug, Clone)]
struct StepVariants {
    /// Positions in the step's dims of the dims that may set a task's size, outermost first.
    positions: Vec<usize>,
    /// Per such dim that may set the size, outermost first: the divisor and size that take its
    /// coordinate out of a task index.
    radices: Vec<(u64, u64)>,
    /// By combination of those dims' coordinates (mixed radix, as task indices are).
    variants: Vec<Variant>,
    /// By combination: the first combination whose tasks are about the same size.
    kinds: Vec<u64>,
}

impl StepVariants {
    fn of(&self, index: u64) -> &Variant {
        &self.variants[self.at(index) as usize]
    }

    /// The combination task `index` is of.
    fn at(&self, index: u64) -> u64 {
        self.radices.iter().fold(0, |at, &(divisor, size)| at * size + (index / divisor) % size)
    }

    /// Whether the kinds of task differ along the `j`th of the dims that may set the size.
    fn vary_at(&self, j: usize) -> bool {
        let stride: u64 = self.radices[j + 1..].iter().map(|&(_, size)| size).product();
        let size = self.radices[j].1;
        (0..self.kinds.len() as u64).any(|at| {
            let first = at - (at / stride % size) * stride;
            self.kinds[at as usize] != self.kinds[first as usize]
        })
    }
}

/// Every step's kinds of task (`None` where the plan's one sample task speaks for all).
#[derive(Debug, Clone, Default)]
pub struct Variants {
    steps: Vec<Option<StepVariants>>,
}

impl Variants {
    /// Asks each step's plugin about each kind of its tasks, producers first.
    pub fn new(compiled: &Compiled) -> Variants {
        let mut steps = vec![None; compiled.recipe.steps.len()];
        for &id in &compiled.graph.topo {
            steps[id] = step_variants(compiled, &steps, id);
        }
        Variants { steps }
    }

    /// What the plugin says of task `index` of `step`, when the plan's sample task may not
    /// speak for it.
    pub fn of(&self, step: usize, index: u64) -> Option<&Variant> {
        self.steps.get(step)?.as_ref().map(|variants| variants.of(index))
    }

    /// Which kind of task of `step` task `index` is: tasks of the same kind are about the same
    /// size (0 for every task of a step whose plan's sample task speaks for all).
    pub fn kind(&self, step: usize, index: u64) -> u64 {
        self.steps.get(step).and_then(Option::as_ref).map_or(0, |variants| variants.kinds[variants.at(index) as usize])
    }

    /// Whether a plugin says something else of two tasks of a step that differ only in their
    /// coordinate along recipe dim `dim` (`grid: [240, 480]`), as opposed to a dim whose
    /// values only name a task's files.
    pub fn vary_along(&self, compiled: &Compiled, dim: usize) -> bool {
        self.steps.iter().enumerate().any(|(step, variants)| {
            let Some(variants) = variants else { return false };
            let dims = &compiled.graph.steps[step].dims;
            variants.positions.iter().enumerate().any(|(j, &pos)| dims[pos] == dim && variants.vary_at(j))
        })
    }
}

/// Positions (in `id`'s dims) of the dims that may set the size of its tasks: those its
/// per-task args are filled from, and those matched to a producer's such dims (a gathered one
/// is read as its first item, as the plan reads it).
fn size_positions(compiled: &Compiled, steps: &[Option<StepVariants>], id: usize) -> Vec<usize> {
    let (recipe, graph) = (&compiled.recipe, &compiled.graph);
    let shape = &graph.steps[id];
    let names = recipe.steps[id].args.per_task_names();
    let mut found: Vec<usize> =
        (0..shape.dims.len()).filter(|&pos| names.contains(&recipe.dims[shape.dims[pos]].name.as_str())).collect();
    for &edge in &shape.inputs {
        let edge = &graph.edges[edge];
        let Some(producer) = &steps[edge.producer] else { continue };
        for &at in &producer.positions {
            if let ProducerRule::Match { consumer_pos } | ProducerRule::Block { consumer_pos, .. } = edge.rules[at] {
                found.push(consumer_pos);
            }
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}

fn step_variants(compiled: &Compiled, steps: &[Option<StepVariants>], id: usize) -> Option<StepVariants> {
    let shape = &compiled.graph.steps[id];
    let found = size_positions(compiled, steps, id);
    if found.is_empty() {
        return None;
    }
    let count =
        found.iter().try_fold(1u64, |n, &pos| n.checked_mul(shape.sizes[pos]).filter(|&n| n <= MAX_VARIANTS))?;
    let divisors = divisors(shape);
    let radices = found.iter().map(|&pos| (divisors[pos], shape.sizes[pos])).collect();
    let variants: Vec<Variant> =
        (0..count).map(|at| variant(compiled, steps, id, &coords_of(shape, &found, at))).collect();
    let kinds = kinds(&variants);
    Some(StepVariants { positions: found, radices, variants, kinds })
}

/// By combination: the first combination about the same size as it (its kind).
fn kinds(variants: &[Variant]) -> Vec<u64> {
    let mut firsts: Vec<u64> = Vec::new();
    let mut kinds = Vec::with_capacity(variants.len());
    for (at, variant) in variants.iter().enumerate() {
        let first = firsts.iter().copied().find(|&first| variants[first as usize].same_size(variant));
        kinds.push(first.unwrap_or_else(|| {
            firsts.push(at as u64);
            at as u64
        }));
    }
    kinds
}

/// What the plugin of step `id` says of the task at `coords`.
fn variant(compiled: &Compiled, steps: &[Option<StepVariants>], id: usize, coords: &Coords) -> Variant {
    let (recipe, graph) = (&compiled.recipe, &compiled.graph);
    let (shape, step, plan) = (&graph.steps[id], &recipe.steps[id], &compiled.plan.steps[id]);
    let index = shape.index(coords);
    let lookup = |name: &str| {
        let pos = shape.dims.iter().position(|&dim| recipe.dims[dim].name == name)?;
        Some(recipe.dims[shape.dims[pos]].value(coords[pos]))
    };
    let args = step.args.for_task(&lookup);
    let inputs: Vec<InputMeta> = shape
        .inputs
        .iter()
        .zip(&plan.inputs)
        .map(|(&edge, planned)| {
            let mut first = None;
            graph.for_each_producer(edge, index, |producer| {
                first.get_or_insert(producer);
            });
            let producer = graph.edges[edge].producer;
            let item = match (first, &steps[producer]) {
                (Some(task), Some(variants)) => variants.of(task).output.clone(),
                _ => planned.item.clone(),
            };
            let gathered = graph.edges[edge].gathered.then(|| graph.producer_count(edge, index) as usize);
            InputMeta { name: planned.name.clone(), gathered, item }
        })
        .collect();
    let output = match crate::panics::catch(|| step.plugin.output(&args, &inputs)) {
        Ok(Ok(meta)) if meta != ValueMeta::Unknown => meta,
        _ => plan.output.clone(),
    };
    let plugin_estimate =
        crate::panics::catch(|| step.plugin.estimate(&args, InputsForEstimate::Plan(&inputs), &output))
            .unwrap_or(plan.plugin_estimate);
    Variant { output, plugin_estimate, inputs_known: sizes_known(&inputs) }
}

/// Whether every input's bytes are known from its metadata (a python call's value is not: it is
/// sized only once made, and a plugin counting its inputs' bytes says more at dispatch).
pub fn sizes_known(inputs: &[InputMeta]) -> bool {
    inputs.iter().all(|input| input.bytes().is_some())
}

/// Per position of `shape`'s dims: the product of the sizes after it.
fn divisors(shape: &StepShape) -> [u64; MAX_DIMS] {
    let mut divisors = [1; MAX_DIMS];
    for pos in (0..shape.sizes.len().saturating_sub(1)).rev() {
        divisors[pos] = divisors[pos + 1] * shape.sizes[pos + 1];
    }
    divisors
}

/// The coordinates of combination `at` of the dims at `found`, the other dims at their first
/// value.
fn coords_of(shape: &StepShape, found: &[usize], mut at: u64) -> Coords {
    let mut coords = [0; MAX_DIMS];
    for &pos in found.iter().rev() {
        coords[pos] = at % shape.sizes[pos];
        at /= shape.sizes[pos];
    }
    coords
}
