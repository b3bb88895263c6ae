//! `noop`: a step that does nothing and returns nothing; useful to join branches of a DAG or to
//! measure the engine's own overhead per task.

use runner_plugin::{
    ArgError, ArgSpec, Args, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value, ValueMeta,
};

pub struct Noop;

impl Plugin for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn about(&self) -> &'static str {
        "does nothing and returns nothing"
    }

    fn args(&self) -> &'static [ArgSpec] {
        &[]
    }

    fn output(&self, _args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        Ok(ValueMeta::None)
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        0
    }

    fn run(&self, _ctx: &TaskContext, _args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        Ok(Value::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{array, plan, run, single};
    use runner_plugin::serde_json::json;

    #[test]
    fn returns_nothing_and_estimates_nothing_whatever_the_inputs() {
        let value = run(&Noop, json!({}), &[single("x", array(&[2], vec![1.0f32, 2.0]))]).unwrap();
        assert!(matches!(value, Value::None));
        assert_eq!(plan(&Noop, json!({}), &[]).unwrap(), (ValueMeta::None, 0));
    }
}
