//! The `runner` engine: a YAML recipe becomes a DAG of steps whose tasks run on a
//! memory-admission worker pool.
//!
//! The path of a task: [`recipe`] (YAML → validated steps) → [`graph`] (steps → DAG with lazy
//! index arithmetic) → [`plan`] (output shapes, estimates) → [`scheduler`] (dispatch under the
//! [`budget`], measurement by [`measure`]) → [`store`] → [`report`]. [`cli`] is the command line on top;
//! [`registry`] holds the plugins a binary offers. See ARCHITECTURE.md for the map.

pub mod budget;
pub mod cli;
pub mod command;
pub mod estimate;
pub mod executor;
pub mod graph;
pub mod layout;
pub mod measure;
pub mod memory;
mod panics;
pub mod plan;
pub mod process_identity;
pub mod recipe;
pub mod registry;
pub mod report;
pub mod resume;
pub mod scheduler;
pub mod simulate;
pub mod slurm;
pub mod store;
pub mod values;

use std::path::Path;

pub use cli::main_with;
pub use runner_plugin as plugin;

use graph::Graph;
use plan::Plan;
use recipe::{CompileOptions, Recipe, RecipeError};
use registry::Registry;

/// A recipe compiled to its graph and plan, ready to run.
#[derive(Debug)]
pub struct Compiled {
    pub recipe: Recipe,
    pub graph: Graph,
    pub plan: Plan,
}

impl Compiled {
    /// Reads, validates and plans the recipe at `path`.
    pub fn from_file(path: &Path, options: &CompileOptions, registry: &Registry) -> Result<Compiled, RecipeError> {
        Self::finish(recipe::load(path, options, registry).map_err(Self::check_the_sound_part)?)
    }

    /// Validates and plans recipe `text`, reporting errors as if it were read from `path`.
    pub fn from_text(
        path: &Path,
        text: &str,
        options: &CompileOptions,
        registry: &Registry,
    ) -> Result<Compiled, RecipeError> {
        Self::finish(recipe::parse(path, text.to_string(), options, registry).map_err(Self::check_the_sound_part)?)
    }

    /// A rejected recipe's sound part (the steps that compiled cleanly, with their producers)
    /// still goes through the graph and plan checks, so that one report holds every problem of
    /// the file, not the front end's first and the others after they are fixed.
    fn check_the_sound_part(mut error: RecipeError) -> RecipeError {
        let later = match error.sound_part() {
            Some(part) => match Graph::build(part) {
                Err(diagnostics) => diagnostics,
                Ok(graph) => Plan::build(part, &graph).err().unwrap_or_default(),
            },
            None => Vec::new(),
        };
        error.extend(later);
        error
    }

    fn finish(recipe: Recipe) -> Result<Compiled, RecipeError> {
        let graph = Graph::build(&recipe).map_err(|d| RecipeError::new(recipe.source.clone(), d))?;
        let plan = Plan::build(&recipe, &graph).map_err(|d| RecipeError::new(recipe.source.clone(), d))?;
        Ok(Compiled { recipe, graph, plan })
    }
}
