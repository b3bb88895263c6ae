//! What the state's unit tests share: a recipe compiled from its steps, and a meter that
//! measures nothing (the ledger then counts reservations and resident buffers alone).

use std::path::Path;

use crate::memory::{Meter, TaskSlot};
use crate::plan::Compiled;
use crate::recipe::CompileOptions;
use crate::registry::Registry;

pub(super) struct NoMemory;

impl Meter for NoMemory {
    fn task_live(&self, _slot: TaskSlot) -> u64 {
        0
    }
    fn process_live(&self) -> u64 {
        0
    }
}

/// A recipe of `steps` (YAML lines, indented under `steps:`) over `lead: 4`, compiled with the
/// standard plugins.
pub(super) fn compiled(steps: &str) -> Compiled {
    compiled_over("{lead: 4}", steps)
}

/// [`compiled`] over `dims` (a YAML map).
pub(super) fn compiled_over(dims: &str, steps: &str) -> Compiled {
    let text = format!("recipe: r\ndims: {dims}\nsteps:\n{steps}");
    let registry = Registry::new(runner_std_plugins::all());
    let options = CompileOptions { cycle: "c".into(), ..CompileOptions::default() };
    Compiled::from_text(Path::new("r.yaml"), &text, &options, &registry).unwrap()
}
