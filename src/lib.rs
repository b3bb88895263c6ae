//! The `runner` engine.

pub mod measure;
pub mod graph;
pub mod recipe;
pub mod registry;
