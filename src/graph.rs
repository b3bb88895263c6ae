//! The compiled DAG: steps as petgraph nodes, inputs as edges, and the index arithmetic that
//! expands tasks lazily.
//!
//! A task is `(step, linear index)`: its dim coordinates in the step's `over` order, row-major
//! (last dim fastest). Nothing per task is stored here; who feeds whom is computed from an
//! edge's [`ProducerRule`]s when a task completes or is dispatched, so the graph's size depends
//! on the number of steps, not on fan-out.

use std::ops::ControlFlow;

use petgraph::algo::{kosaraju_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::recipe::limits::MAX_DIMS;
use crate::recipe::{Diagnostic, DimId, Recipe, StepId};

/// Coordinates of one task, in its step's `over` order.
pub type Coords = [u64; MAX_DIMS];

/// Position of an edge in [`Graph::edges`].
pub type EdgeId = usize;

/// How one producer dim is chosen for a given consumer task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerRule {
    /// Same value as the consumer's dim at `consumer_pos` (matched one-to-one).
    Match { consumer_pos: usize },
    /// Pinned by `select`.
    Pin { index: u64 },
    /// The block of a group dim the consumer runs over at `consumer_pos` (group-gather).
    Block { consumer_pos: usize, size: u64 },
    /// Every value (gathered).
    All,
}

/// One input of a consumer step: which producer, and how their index spaces meet.
#[derive(Debug, Clone)]
pub struct Edge {
    pub producer: StepId,
    pub consumer: StepId,
    /// Position of the input in the consumer's `inputs`.
    pub input: usize,
    /// One rule per producer dim.
    pub rules: Vec<ProducerRule>,
    /// True when a consumer task reads a list (some producer dim is gathered).
    pub gathered: bool,
}

/// A step's index space and its edges.
#[derive(Debug, Clone)]
pub struct StepShape {
    pub dims: Vec<DimId>,
    pub sizes: Vec<u64>,
    pub tasks: u64,
    pub inputs: Vec<EdgeId>,
    pub outputs: Vec<EdgeId>,
    /// Longest path from a source step; deeper steps free memory, so they go first.
    pub depth: u32,
    /// Positions of `dims` in the order a source step's tasks are started, outermost first:
    /// dims that a nearer step downstream gathers vary faster, so each gather completes (and
    /// frees its inputs) as early as possible instead of after every other value of the outer
    /// dims (see `order_starts`).
    pub start_order: Vec<usize>,
}

impl StepShape {
    /// Coordinates of task `index`.
    #[inline]
    pub fn coords(&self, mut index: u64) -> Coords {
        let mut coords = [0; MAX_DIMS];
        for pos in (0..self.sizes.len()).rev() {
            coords[pos] = index % self.sizes[pos];
            index /= self.sizes[pos];
        }
        coords
    }

    /// Index of the `n`-th task to start, following `start_order`.
    #[inline]
    pub fn nth_to_start(&self, mut n: u64) -> u64 {
        let mut coords = [0; MAX_DIMS];
        for &pos in self.start_order.iter().rev() {
            coords[pos] = n % self.sizes[pos];
            n /= self.sizes[pos];
        }
        self.index(&coords)
    }

    /// Linear index of `coords`.
    #[inline]
    pub fn index(&self, coords: &Coords) -> u64 {
        self.sizes.iter().zip(coords).fold(0, |acc, (size, c)| acc * size + c)
    }
}

/// The compiled DAG.
#[derive(Debug, Clone)]
pub struct Graph {
    pub steps: Vec<StepShape>,
    pub edges: Vec<Edge>,
    /// Steps in an order where producers come before consumers.
    pub topo: Vec<StepId>,
}

/// Half-open ranges per dim, iterated row-major without allocating.
struct Odometer {
    lo: Coords,
    hi: Coords,
    cur: Coords,
    len: usize,
    done: bool,
}

impl Odometer {
    fn new(lo: Coords, hi: Coords, len: usize) -> Odometer {
        let done = (0..len).any(|d| lo[d] >= hi[d]);
        Odometer { lo, hi, cur: lo, len, done }
    }

    fn count(&self) -> u64 {
        if self.done { 0 } else { (0..self.len).map(|d| self.hi[d] - self.lo[d]).product() }
    }

    fn next(&mut self) -> Option<Coords> {
        if self.done {
            return None;
        }
        let out = self.cur;
        self.done = true;
        for d in (0..self.len).rev() {
            self.cur[d] += 1;
            if self.cur[d] < self.hi[d] {
                self.done = false;
                break;
            }
            self.cur[d] = self.lo[d];
        }
        Some(out)
    }
}

impl Graph {
    /// Builds the DAG of `recipe`, checking that every input's dims can be matched and that the
    /// steps form no cycle.
    pub fn build(recipe: &Recipe) -> Result<Graph, Vec<Diagnostic>> {
        let mut diagnostics = Vec::new();
        let mut steps: Vec<StepShape> = recipe
            .steps
            .iter()
            .map(|s| {
                let sizes: Vec<u64> = s.over.iter().map(|&d| recipe.dims[d].len()).collect();
                let tasks = sizes.iter().product();
                let start_order = (0..sizes.len()).collect();
                StepShape {
                    dims: s.over.clone(),
                    sizes,
                    tasks,
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    depth: 0,
                    start_order,
                }
            })
            .collect();
        let mut edges = Vec::new();
        for (consumer, step) in recipe.steps.iter().enumerate() {
            for (input, spec) in step.inputs.iter().enumerate() {
                match edge_rules(recipe, consumer, input) {
                    Ok(rules) => {
                        let gathered =
                            rules.iter().any(|r| matches!(r, ProducerRule::All | ProducerRule::Block { .. }));
                        let id = edges.len();
                        edges.push(Edge { producer: spec.producer, consumer, input, rules, gathered });
                        steps[consumer].inputs.push(id);
                        steps[spec.producer].outputs.push(id);
                    }
                    Err(d) => diagnostics.push(d),
                }
            }
        }
        let mut dag: DiGraph<StepId, EdgeId> = DiGraph::new();
        let nodes: Vec<NodeIndex> = (0..steps.len()).map(|s| dag.add_node(s)).collect();
        for (id, e) in edges.iter().enumerate() {
            dag.add_edge(nodes[e.producer], nodes[e.consumer], id);
        }
        let topo = match toposort(&dag, None) {
            Ok(order) => order.into_iter().map(|n| dag[n]).collect(),
            Err(_) => {
                diagnostics.extend(cycle_diagnostics(recipe, &dag));
                Vec::new()
            }
        };
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        for &s in &topo {
            let depth = steps[s].inputs.iter().map(|&e| steps[edges[e].producer].depth + 1).max().unwrap_or(0);
            steps[s].depth = depth;
        }
        order_starts(&mut steps, &edges, &topo);
        Ok(Graph { steps, edges, topo })
    }

    /// Total tasks over all steps.
    pub fn total_tasks(&self) -> u64 {
        self.steps.iter().map(|s| s.tasks).sum()
    }

    /// Ranges of producer coordinates read by consumer task `consumer_index` through `edge`.
    fn producer_ranges(&self, edge: &Edge, consumer_index: u64) -> Odometer {
        let consumer = &self.steps[edge.consumer];
        let producer = &self.steps[edge.producer];
        let c = consumer.coords(consumer_index);
        let (mut lo, mut hi) = ([0; MAX_DIMS], [0; MAX_DIMS]);
        for (pos, rule) in edge.rules.iter().enumerate() {
            let (l, h) = match *rule {
                ProducerRule::Match { consumer_pos } => (c[consumer_pos], c[consumer_pos] + 1),
                ProducerRule::Pin { index } => (index, index + 1),
                ProducerRule::Block { consumer_pos, size } => {
                    let start = c[consumer_pos] * size;
                    (start, (start + size).min(producer.sizes[pos]))
                }
                ProducerRule::All => (0, producer.sizes[pos]),
            };
            lo[pos] = l;
            hi[pos] = h;
        }
        Odometer::new(lo, hi, producer.sizes.len())
    }

    /// Calls `f` with each producer task index that consumer task `consumer_index` reads
    /// through `edge`, in gather order.
    #[inline]
    pub fn for_each_producer(&self, edge: EdgeId, consumer_index: u64, mut f: impl FnMut(u64)) {
        let edge = &self.edges[edge];
        let producer = &self.steps[edge.producer];
        let mut odometer = self.producer_ranges(edge, consumer_index);
        while let Some(coords) = odometer.next() {
            f(producer.index(&coords));
        }
    }

    /// How many producer tasks consumer task `consumer_index` reads through `edge`.
    #[inline]
    pub fn producer_count(&self, edge: EdgeId, consumer_index: u64) -> u64 {
        self.producer_ranges(&self.edges[edge], consumer_index).count()
    }

    /// Ranges of consumer coordinates that read producer task `producer_index` through `edge`.
    fn consumer_ranges(&self, edge: &Edge, producer_index: u64) -> Odometer {
        let consumer = &self.steps[edge.consumer];
        let p = self.steps[edge.producer].coords(producer_index);
        let (mut lo, mut hi) = ([0; MAX_DIMS], [0; MAX_DIMS]);
        hi[..consumer.sizes.len()].copy_from_slice(&consumer.sizes);
        for (pos, rule) in edge.rules.iter().enumerate() {
            match *rule {
                ProducerRule::Match { consumer_pos } => (lo[consumer_pos], hi[consumer_pos]) = (p[pos], p[pos] + 1),
                ProducerRule::Block { consumer_pos, size } => {
                    let block = p[pos] / size;
                    (lo[consumer_pos], hi[consumer_pos]) = (block, block + 1);
                }
                ProducerRule::Pin { index } if index != p[pos] => return Odometer::new(lo, lo, 1),
                ProducerRule::Pin { .. } | ProducerRule::All => {}
            }
        }
        Odometer::new(lo, hi, consumer.sizes.len())
    }

    /// Calls `f` with each consumer task index that reads producer task `producer_index`
    /// through `edge`.
    #[inline]
    pub fn for_each_consumer(&self, edge: EdgeId, producer_index: u64, mut f: impl FnMut(u64)) {
        let _ = self.try_for_each_consumer(edge, producer_index, |index| {
            f(index);
            ControlFlow::Continue(())
        });
    }

    /// Calls `f` with each consumer task index that reads producer task `producer_index`
    /// through `edge`, until it breaks.
    #[inline]
    pub fn try_for_each_consumer(
        &self,
        edge: EdgeId,
        producer_index: u64,
        mut f: impl FnMut(u64) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let edge = &self.edges[edge];
        let consumer = &self.steps[edge.consumer];
        let mut odometer = self.consumer_ranges(edge, producer_index);
        while let Some(coords) = odometer.next() {
            f(consumer.index(&coords))?;
        }
        ControlFlow::Continue(())
    }

    /// How many consumer tasks read producer task `producer_index` through `edge`.
    #[inline]
    pub fn consumer_count(&self, edge: EdgeId, producer_index: u64) -> u64 {
        self.consumer_ranges(&self.edges[edge], producer_index).count()
    }

    /// Writes the key of task `index` of `step` (`member=3,lead=12`; empty without dims) into
    /// `key`, and its `(dim, value)` pairs into `pairs`, reusing both buffers.
    pub fn describe_task<'r>(
        &self,
        recipe: &'r Recipe,
        step: StepId,
        index: u64,
        key: &mut String,
        pairs: &mut Vec<(&'r str, runner_plugin::DimValue)>,
    ) {
        use std::fmt::Write as _;
        let shape = &self.steps[step];
        let coords = shape.coords(index);
        key.clear();
        pairs.clear();
        for (pos, &dim) in shape.dims.iter().enumerate() {
            let dim = &recipe.dims[dim];
            let value = dim.value(coords[pos]);
            if pos > 0 {
                key.push(',');
            }
            // Formatted by hand for the common kinds: this runs for every task.
            key.push_str(&dim.name);
            key.push('=');
            match &value {
                runner_plugin::DimValue::Int(i) => key.push_str(itoa::Buffer::new().format(*i)),
                runner_plugin::DimValue::Str(s) => key.push_str(s),
                other => {
                    let _ = write!(key, "{other}");
                }
            }
            pairs.push((dim.name.as_str(), value));
        }
    }

    /// Number of producer values of the largest gather through `edge` (for planning).
    pub fn largest_gather(&self, edge: EdgeId) -> u64 {
        self.producer_count(edge, 0)
    }
}

/// Sets each step's `start_order` so that the gathers nearest to it complete first: a dim that
/// some path downstream gathers after `k` steps varies faster than one gathered only after more
/// steps, and dims never gathered are outermost. (Dask's ordering reaches the same effect by
/// finishing the dependents that free memory; here it is index arithmetic per step, with no
/// object per task.) A terminal gather of small values (a `finalize` over every written path)
/// therefore cannot turn the order around: what matters is the nearest gather of each dim.
fn order_starts(steps: &mut [StepShape], edges: &[Edge], topo: &[StepId]) {
    // gather_distance[s][pos]: steps downstream of `s` at which its dim at `pos` is first
    // gathered (or pinned) on some path; u32::MAX when never.
    let mut gather_distance: Vec<Vec<u32>> = steps.iter().map(|s| vec![u32::MAX; s.dims.len()]).collect();
    for &s in topo.iter().rev() {
        for pos in 0..steps[s].dims.len() {
            let dim = steps[s].dims[pos];
            let nearest = steps[s]
                .outputs
                .iter()
                .map(|&e| {
                    let consumer = edges[e].consumer;
                    match edges[e].rules[pos] {
                        ProducerRule::Match { consumer_pos } => {
                            debug_assert_eq!(steps[consumer].dims[consumer_pos], dim);
                            gather_distance[consumer][consumer_pos].saturating_add(1)
                        }
                        ProducerRule::All | ProducerRule::Block { .. } | ProducerRule::Pin { .. } => 1,
                    }
                })
                .min()
                .unwrap_or(u32::MAX);
            gather_distance[s][pos] = nearest;
        }
    }
    for (step, distances) in steps.iter_mut().zip(&gather_distance) {
        let mut order: Vec<usize> = (0..step.dims.len()).collect();
        // Outermost first: the dims gathered farthest away (or never); stable otherwise.
        order.sort_by_key(|&pos| std::cmp::Reverse(distances[pos]));
        step.start_order = order;
    }
}

/// Derives how input `input` of step `consumer` reads its producer, or says why it cannot.
fn edge_rules(recipe: &Recipe, consumer: StepId, input: usize) -> Result<Vec<ProducerRule>, Diagnostic> {
    let step = &recipe.steps[consumer];
    let spec = &step.inputs[input];
    let producer = &recipe.steps[spec.producer];
    let dim_name = |d: DimId| recipe.dims[d].name.as_str();
    let names = |dims: &[DimId]| -> String {
        if dims.is_empty() {
            "nothing".into()
        } else {
            dims.iter().map(|&d| dim_name(d)).collect::<Vec<_>>().join(", ")
        }
    };
    for &(dim, _, loc) in &spec.select {
        if !producer.over.contains(&dim) {
            return Err(Diagnostic::new(
                loc,
                format!(
                    "`select` of input `{}` pins dim `{}`, but step `{}` does not run over it",
                    spec.name,
                    dim_name(dim),
                    producer.name
                ),
            )
            .expected(format!("a dim of step `{}`: {}", producer.name, names(&producer.over))));
        }
        if step.over.contains(&dim) {
            return Err(Diagnostic::new(
                loc,
                format!(
                    "`select` of input `{}` pins dim `{}`, which step `{}` runs over and so matches one-to-one",
                    spec.name,
                    dim_name(dim),
                    step.name
                ),
            )
            .expected("`select` only on producer dims the consumer does not run over"));
        }
    }
    let mut rules = Vec::with_capacity(producer.over.len());
    for &dim in &producer.over {
        if let Some(&(_, index, _)) = spec.select.iter().find(|(d, _, _)| *d == dim) {
            rules.push(ProducerRule::Pin { index });
            continue;
        }
        if let Some(consumer_pos) = step.over.iter().position(|&d| d == dim) {
            rules.push(ProducerRule::Match { consumer_pos });
            continue;
        }
        let groups: Vec<usize> = step
            .over
            .iter()
            .enumerate()
            .filter(|&(_, &d)| recipe.dims[d].group_of().map(|(of, _)| of) == Some(dim))
            .map(|(pos, _)| pos)
            .collect();
        match groups.as_slice() {
            [] => {}
            [consumer_pos] => {
                let (_, size) = recipe.dims[step.over[*consumer_pos]].group_of().unwrap_or((dim, 1));
                rules.push(ProducerRule::Block { consumer_pos: *consumer_pos, size });
                continue;
            }
            _ => {
                return Err(Diagnostic::new(
                    spec.loc,
                    format!(
                        "input `{}` of step `{}`: several group dims of `{}` would each gather it",
                        spec.name,
                        step.name,
                        dim_name(dim)
                    ),
                )
                .expected(format!("at most one group of `{}` in `over`", dim_name(dim))));
            }
        }
        if let Some((base, _)) = recipe.dims[dim].group_of()
            && step.over.contains(&base)
        {
            return Err(Diagnostic::new(spec.loc, format!(
                "input `{}` of step `{}` cannot be matched: its producer `{}` runs over `{}` (blocks of `{}`), and step `{}` runs over `{}` itself",
                spec.name, step.name, producer.name, dim_name(dim), dim_name(base), step.name, dim_name(base)
            ))
            .expected(format!("step `{}` to run over `{}` too, or not over `{}`", step.name, dim_name(dim), dim_name(base))));
        }
        rules.push(ProducerRule::All);
    }
    Ok(rules)
}

/// One diagnostic per cycle, naming the steps around it.
fn cycle_diagnostics(recipe: &Recipe, dag: &DiGraph<StepId, EdgeId>) -> Vec<Diagnostic> {
    kosaraju_scc(dag)
        .into_iter()
        .filter(|component| component.len() > 1 || dag.contains_edge(component[0], component[0]))
        .map(|component| {
            let mut ids: Vec<StepId> = component.iter().map(|&n| dag[n]).collect();
            ids.sort_unstable();
            let names: Vec<&str> = ids.iter().map(|&s| recipe.steps[s].name.as_str()).collect();
            let first = &recipe.steps[ids[0]];
            let loc = first.inputs.iter().find(|i| ids.contains(&i.producer)).map_or(first.loc, |i| i.loc);
            let message = match names.as_slice() {
                [one] => format!("step `{one}` reads its own output"),
                _ => format!(
                    "steps {} depend on each other in a cycle",
                    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                ),
            };
            Diagnostic::new(loc, message).expected("a DAG: no step may (directly or indirectly) read its own output")
        })
        .collect()
}
