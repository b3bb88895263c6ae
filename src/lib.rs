//! The `runner` engine.

pub mod measure;
