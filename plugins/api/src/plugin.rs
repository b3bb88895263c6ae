//! The trait every plugin implements.

use crate::args::{ArgSpec, Args};
use crate::context::TaskContext;
use crate::error::{ArgError, TaskError};
use crate::inputs::{InputMeta, Inputs, InputsForEstimate};
use crate::layout::StepLayout;
use crate::value::{Value, ValueMeta};

/// A kind of step. One instance serves every task of every step that names it, from several
/// threads at once, so it holds no per-task state.
pub trait Plugin: Send + Sync + 'static {
    /// The name recipes use in `plugin:`.
    fn name(&self) -> &'static str;

    /// One line for `runner plugins`.
    fn about(&self) -> &'static str;

    /// The arguments it takes. The engine rejects any other argument, and any missing required
    /// one, before anything runs.
    fn args(&self) -> &'static [ArgSpec];

    /// What a top-level section of the recipe named after this plugin may hold, each key with
    /// the arg it sets for every step of the plugin that does not set it itself (the `python`
    /// plugin's `python: {interpreter: venv/bin/python, pythonpath: [lib]}`). None by default:
    /// a recipe then has no section for the plugin.
    fn section_keys(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }

    /// Checks argument values when the recipe is compiled. Arguments that hold templates over
    /// dims are checked with each dim's first value filled in.
    fn check(&self, args: &Args) -> Result<(), ArgError> {
        let _ = args;
        Ok(())
    }

    /// Checks the step's index layout when the recipe is compiled: the dims it runs over, what
    /// each input gathers, and which plugins produce the inputs. A plugin whose tasks share
    /// something besides their values (a store they all write) refuses layouts under which two
    /// tasks would collide. `args` are as for [`Plugin::check`].
    fn check_layout(&self, args: &Args, layout: &StepLayout) -> Result<(), ArgError> {
        let _ = (args, layout);
        Ok(())
    }

    /// Describes the output from the arguments and the inputs' metadata, for `runner plan` and
    /// the consumers' estimates; also the place to reject inputs of the wrong kind or shape.
    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let _ = (args, inputs);
        Ok(ValueMeta::Unknown)
    }

    /// Peak bytes one task will allocate itself, its output included (its inputs belong to the
    /// tasks that made them). `inputs` carries metadata when planning and the values themselves
    /// at dispatch, so a plugin whose footprint follows the data can look at it.
    ///
    /// The default assumes the output plus one working copy the size of the largest input.
    fn estimate(&self, args: &Args, inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let _ = args;
        let largest_input = match inputs {
            InputsForEstimate::Plan(metas) => metas.iter().filter_map(|m| m.item.bytes()).max(),
            InputsForEstimate::Dispatch(inputs) => {
                inputs.iter().flat_map(|i| i.values()).map(Value::buffer_bytes).max()
            }
        };
        output.bytes().unwrap_or(0) + largest_input.unwrap_or(0)
    }

    /// True when `estimate` is worked out from what a task will really allocate (its output, its
    /// working buffers), not a guess like the default. A step without history or a `memory:`
    /// hint whose plugin's estimate is not exact starts slowly: one task runs until it has been
    /// measured, then as many as that measurement admits, so a first run cannot overrun the
    /// budget on a wrong guess.
    fn estimate_is_exact(&self, args: &Args) -> bool {
        let _ = args;
        false
    }

    /// True when `estimate` at dispatch can say more than at plan time because it looks at the
    /// input values (as `nbhood` does with the wet area). The engine then asks it again for
    /// every task, outside its locks, before admitting the task; otherwise the plan-time
    /// estimate serves every task of the step at no per-task cost.
    fn estimate_follows_data(&self) -> bool {
        false
    }

    /// Runs one task.
    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError>;
}
