//! An out-of-tree plugin: `scale` multiplies an f32 array by `factor`. It needs only the
//! `runner` crate (which re-exports the plugin API as `runner::plugin`); see `main.rs` for the
//! one-line binary that offers it next to the standard plugins.

use runner::plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, Plugin, TaskContext, TaskError, Value, ValueMeta,
};

/// Multiplies an f32 array by a constant.
pub struct Scale;

impl Plugin for Scale {
    fn name(&self) -> &'static str {
        "scale"
    }

    fn about(&self) -> &'static str {
        "multiplies an f32 array by `factor` (an out-of-tree example)"
    }

    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[ArgSpec::required("factor", "the multiplier, a finite number")];
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        args.f64("factor").map(|_| ())
    }

    fn output(&self, _args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        match inputs {
            [InputMeta { gathered: None, item: item @ ValueMeta::Array { dtype: DType::F32, .. }, .. }] => {
                Ok(item.clone())
            }
            [InputMeta { gathered: None, item: ValueMeta::Unknown, .. }] => Ok(ValueMeta::Unknown),
            _ => Err(ArgError::general("`scale` takes exactly one input: a single f32 array")),
        }
    }

    fn run(&self, _ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let factor = args.f64("factor").map_err(|e| TaskError::msg(e.message))? as f32;
        let input = inputs.iter().next().ok_or_else(|| TaskError::msg("`scale` needs one input"))?;
        let array = input.one()?.as_array().map_err(TaskError::msg)?;
        let scaled = array.view::<f32>().map_err(TaskError::msg)?.mapv(|v| v * factor);
        Ok(Value::Array(Array::from_ndarray(scaled)))
    }
}
