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

pub use cli::main_with;
pub use plan::Compiled;
pub use runner_plugin as plugin;
