//! The critical path of a simulated run: the chain of steps, producer to consumer, whose
//! longest tasks add up to the most. No schedule can finish sooner than its length, however
//! many workers and however much memory it has; a wall far above it is waiting for room or
//! for workers, one close to it is bound by the chain itself.

use std::time::Duration;

use crate::graph::Graph;
use crate::recipe::StepId;

/// Steps in the order they run, and their longest tasks' summed time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalPath {
    pub steps: Vec<StepId>,
    pub length: Duration,
}

/// The critical path of `graph` when each step's longest task takes `longest[step]`.
pub fn critical_path(graph: &Graph, longest: &[Duration]) -> CriticalPath {
    // For each step: the longest chain ending with it, and the producer it continues.
    let mut ends = vec![Duration::ZERO; graph.steps.len()];
    let mut before: Vec<Option<StepId>> = vec![None; graph.steps.len()];
    for &step in &graph.topo {
        let producer = graph.steps[step].inputs.iter().map(|&edge| graph.edges[edge].producer).max_by_key(|&p| ends[p]);
        before[step] = producer;
        let start = producer.map_or(Duration::ZERO, |p| ends[p]);
        ends[step] = start + longest[step];
    }
    let Some(last) = (0..graph.steps.len()).max_by_key(|&s| (ends[s], std::cmp::Reverse(s))) else {
        return CriticalPath { steps: Vec::new(), length: Duration::ZERO };
    };
    let mut steps = vec![last];
    while let Some(producer) = before[*steps.last().expect("not empty")] {
        steps.push(producer);
    }
    steps.reverse();
    CriticalPath { steps, length: ends[last] }
}
