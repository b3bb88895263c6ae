//! The plugin API of `runner`.
//!
//! A plugin is a type implementing [`Plugin`]: it names itself, checks its arguments when a recipe
//! is compiled, describes its output's shape for `runner plan`, estimates one task's peak bytes,
//! and runs a task. Everything a plugin may touch lives in this crate; the engine's internals do
//! not, so plugins written against it keep working as the engine changes.
//!
//! ```
//! use runner_plugin::{Args, ArgSpec, Inputs, Plugin, TaskContext, TaskError, Value};
//!
//! /// Returns the task's `lead` index value as JSON.
//! struct Echo;
//!
//! impl Plugin for Echo {
//!     fn name(&self) -> &'static str { "echo" }
//!     fn about(&self) -> &'static str { "returns the task's lead index as JSON" }
//!     fn args(&self) -> &'static [ArgSpec] { &[] }
//!     fn run(&self, ctx: &TaskContext, _args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
//!         let lead = ctx.index("lead").map(|v| v.to_string()).unwrap_or_default();
//!         Ok(Value::Json(lead.into()))
//!     }
//! }
//! ```

mod args;
pub mod command;
mod context;
mod error;
pub mod file_refs;
pub mod files;
mod inputs;
pub mod layout;
pub mod npy;
mod plugin;
pub mod service;
pub mod size;
pub mod task_tag;
mod value;

pub use args::{ArgKind, ArgSpec, Args};
pub use command::{CommandExit, CommandOutcome, CommandPeakSource, CommandSpec};
pub use context::{Host, TaskContext};
pub use error::{ArgError, FailureKind, TaskError};
pub use inputs::{Input, InputMeta, Inputs, InputsForEstimate};
pub use layout::{DimRead, GroupOf, InputLayout, LayoutDim, ProducerDim, StepLayout};
pub use plugin::Plugin;
pub use service::{ServiceIo, ServiceSpec};
pub use value::{Array, Attrs, DType, DimValue, Element, ExternalBytes, SharedBufferMut, Storage, Value, ValueMeta};

/// Re-exported so plugins use the same `ndarray` as the engine's views.
pub use ndarray;
/// Re-exported so plugins build JSON arguments and attributes with the engine's own types.
pub use serde_json;
