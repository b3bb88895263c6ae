//! A task's named inputs: one value each, or an ordered list where the recipe gathers a dim.

use std::sync::Arc;

use crate::error::TaskError;
use crate::value::{Value, ValueMeta};

/// One named input of a running task.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    name: &'a str,
    gathered: bool,
    values: &'a [Arc<Value>],
}

impl<'a> Input<'a> {
    #[doc(hidden)]
    pub fn new(name: &'a str, gathered: bool, values: &'a [Arc<Value>]) -> Input<'a> {
        Input { name, gathered, values }
    }

    pub fn name(&self) -> &'a str {
        self.name
    }

    /// True when the recipe gathers a dimension into this input (it is an ordered list).
    pub fn is_gathered(&self) -> bool {
        self.gathered
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The single value of a matched or broadcast input.
    pub fn one(&self) -> Result<&'a Value, TaskError> {
        match (self.gathered, self.values) {
            (false, [value]) => Ok(value),
            _ => Err(TaskError::msg(format!(
                "input `{}` is a gathered list of {} values, not a single value",
                self.name,
                self.values.len()
            ))),
        }
    }

    /// The values in dimension order (a single value for an input that is not gathered).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &'a Value> + 'a {
        self.values.iter().map(|v| &**v)
    }

    /// Buffer bytes of all the values.
    pub fn buffer_bytes(&self) -> u64 {
        self.values.iter().map(|v| v.buffer_bytes()).sum()
    }
}

/// All inputs of a running task, in the order the recipe lists them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    inputs: &'a [Input<'a>],
}

impl<'a> Inputs<'a> {
    #[doc(hidden)]
    pub fn new(inputs: &'a [Input<'a>]) -> Inputs<'a> {
        Inputs { inputs }
    }

    /// The input named `name`, or an error listing the names there are.
    pub fn get(&self, name: &str) -> Result<&Input<'a>, TaskError> {
        self.inputs.iter().find(|i| i.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.inputs.iter().map(|i| i.name).collect();
            TaskError::msg(format!("no input named `{name}` (inputs: {})", names.join(", ")))
        })
    }

    /// The single value of input `name`.
    pub fn one(&self, name: &str) -> Result<&'a Value, TaskError> {
        self.get(name)?.one()
    }

    /// Input `name` in dimension order.
    pub fn list(&self, name: &str) -> Result<impl ExactSizeIterator<Item = &'a Value> + 'a, TaskError> {
        Ok(self.get(name)?.values())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Input<'a>> {
        self.inputs.iter()
    }

    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Buffer bytes over all inputs.
    pub fn buffer_bytes(&self) -> u64 {
        self.inputs.iter().map(Input::buffer_bytes).sum()
    }
}

/// What is known of one input before anything runs.
#[derive(Debug, Clone, PartialEq)]
pub struct InputMeta {
    pub name: String,
    /// `Some(n)` when the input is a gathered list of `n` values, `None` for a single value.
    pub gathered: Option<usize>,
    /// Shape of each value.
    pub item: ValueMeta,
}

impl InputMeta {
    /// Bytes of the whole input, when the item size is known.
    pub fn bytes(&self) -> Option<u64> {
        self.item.bytes().map(|b| b * self.gathered.unwrap_or(1) as u64)
    }
}

/// What `estimate` sees: metadata when planning, the values themselves at dispatch.
#[derive(Debug, Clone, Copy)]
pub enum InputsForEstimate<'a> {
    Plan(&'a [InputMeta]),
    Dispatch(Inputs<'a>),
}

impl InputsForEstimate<'_> {
    /// Buffer bytes over all inputs, if known.
    pub fn buffer_bytes(&self) -> Option<u64> {
        match self {
            InputsForEstimate::Plan(metas) => metas.iter().map(InputMeta::bytes).sum(),
            InputsForEstimate::Dispatch(inputs) => Some(inputs.buffer_bytes()),
        }
    }

    /// Metadata of one item of input `name` (the first, for a gathered list) and the count.
    pub fn meta(&self, name: &str) -> Option<(ValueMeta, usize)> {
        match self {
            InputsForEstimate::Plan(metas) => {
                metas.iter().find(|m| m.name == name).map(|m| (m.item.clone(), m.gathered.unwrap_or(1)))
            }
            InputsForEstimate::Dispatch(inputs) => {
                let input = inputs.get(name).ok()?;
                let first = input.values().next()?;
                Some((first.meta(), input.len()))
            }
        }
    }
}
