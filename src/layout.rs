//! The index layout of a step as plugins see it ([`runner_plugin::StepLayout`]), built from the
//! recipe's dims and the graph's edge rules, so a plugin can refuse a layout at compile time
//! (`Plugin::check_layout`).

use runner_plugin::{DimRead, GroupOf, InputLayout, LayoutDim, ProducerDim, StepLayout};

use crate::graph::{Graph, ProducerRule};
use crate::recipe::{DimId, Recipe, StepId, sample_args};

/// The layout of step `id`: its dims, and for each input how the producer's dims are read.
pub fn step_layout(recipe: &Recipe, graph: &Graph, id: StepId) -> StepLayout {
    let step = &recipe.steps[id];
    let dims = step.over.iter().map(|&d| layout_dim(recipe, d)).collect();
    let inputs = graph.steps[id]
        .inputs
        .iter()
        .map(|&e| {
            let edge = &graph.edges[e];
            let producer = &recipe.steps[edge.producer];
            let producer_dims = producer
                .over
                .iter()
                .zip(&edge.rules)
                .map(|(&d, rule)| ProducerDim {
                    name: recipe.dims[d].name.clone(),
                    len: recipe.dims[d].len(),
                    read: match *rule {
                        ProducerRule::Match { .. } => DimRead::Matched,
                        ProducerRule::Pin { index } => DimRead::Pinned { position: index },
                        ProducerRule::Block { consumer_pos, size } => {
                            DimRead::Block { group: recipe.dims[step.over[consumer_pos]].name.clone(), size }
                        }
                        ProducerRule::All => DimRead::All,
                    },
                })
                .collect();
            InputLayout {
                name: step.inputs[edge.input].name.clone(),
                producer: producer.name.clone(),
                producer_plugin: producer.plugin.name().to_string(),
                producer_args: sample_args(recipe, edge.producer),
                producer_dims,
            }
        })
        .collect();
    StepLayout { step: step.name.clone(), dims, inputs }
}

fn layout_dim(recipe: &Recipe, id: DimId) -> LayoutDim {
    let dim = &recipe.dims[id];
    let group = dim.group_of().map(|(of, size)| GroupOf {
        dim: recipe.dims[of].name.clone(),
        dim_len: recipe.dims[of].len(),
        size,
    });
    LayoutDim { name: dim.name.clone(), len: dim.len(), group }
}
