//! `mean`: the element-wise mean of a gathered list of equal-shape arrays (f32 or f64), in the
//! list's dtype and shape. Several inputs are allowed; their values are averaged together, in
//! the order the recipe lists them. The first value's attributes are kept (e.g. `thresholds`).
//! Inputs are read chunk by chunk and released as each chunk is done ([`Array::done_reading`]),
//! so a mean over spilled members larger than the budget holds only the chunks in flight.

use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, Element, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext,
    TaskError, Value, ValueMeta,
};

use crate::support::{array_shape_of, expect_array, written_array};

const DTYPES: &[DType] = &[DType::F32, DType::F64];

/// Elements per parallel chunk: big enough to amortise scheduling, small enough to spread work.
const CHUNK: usize = 1 << 16;
/// Elements summed together: a block's partial sums stay in registers while every input is added
/// to them, so each input is read once and the output written once, whatever the input count.
const BLOCK: usize = 32;

pub struct Mean;

impl Plugin for Mean {
    fn name(&self) -> &'static str {
        "mean"
    }

    fn about(&self) -> &'static str {
        "element-wise mean of a gathered list of equal-shape f32 or f64 arrays"
    }

    fn args(&self) -> &'static [ArgSpec] {
        &[]
    }

    fn output(&self, _args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        if inputs.is_empty() {
            return Err(ArgError::general("`mean` needs an input: a gathered list of arrays"));
        }
        let mut known: Option<(&str, DType, Vec<usize>)> = None;
        for input in inputs {
            if input.gathered == Some(0) {
                return Err(ArgError::general(format!("input `{}` of `mean` gathers no values", input.name)));
            }
            let Some((dtype, shape)) = array_shape_of(self.name(), input, DTYPES)? else {
                continue;
            };
            match &known {
                None => known = Some((&input.name, dtype, shape)),
                Some((first, first_dtype, first_shape)) => {
                    if (*first_dtype, first_shape) != (dtype, &shape) {
                        return Err(ArgError::general(format!(
                            "`mean` needs arrays of one dtype and shape, but input `{first}` holds \
                             {} and input `{}` holds {}",
                            ValueMeta::Array { dtype: *first_dtype, shape: first_shape.clone() },
                            input.name,
                            ValueMeta::Array { dtype, shape },
                        )));
                    }
                }
            }
        }
        // Every item must be known for the output to be: an unknown one might differ.
        Ok(match known {
            Some((_, dtype, shape)) if inputs.iter().all(|i| i.item != ValueMeta::Unknown) => {
                ValueMeta::Array { dtype, shape }
            }
            _ => ValueMeta::Unknown,
        })
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The mean is accumulated in the output itself, so the output is the only allocation.
    fn estimate(&self, _args: &Args, inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        if let Some(bytes) = output.bytes() {
            return bytes;
        }
        match inputs {
            InputsForEstimate::Dispatch(inputs) => {
                inputs.iter().flat_map(|i| i.values()).map(Value::buffer_bytes).max().unwrap_or(0)
            }
            InputsForEstimate::Plan(metas) => metas.iter().filter_map(|m| m.item.bytes()).max().unwrap_or(0),
        }
    }

    fn run(&self, ctx: &TaskContext, _args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let mut arrays = Vec::new();
        for input in inputs.iter() {
            for (position, value) in input.values().enumerate() {
                let label = if input.is_gathered() {
                    format!("{}[{position}]", input.name())
                } else {
                    input.name().to_string()
                };
                arrays.push((label.clone(), expect_array(self.name(), &label, value, DTYPES)?));
            }
        }
        let Some((first_label, first)) = arrays.first() else {
            return Err(TaskError::msg("`mean` got no values to average"));
        };
        for (label, array) in &arrays[1..] {
            if (array.dtype(), array.shape()) != (first.dtype(), first.shape()) {
                return Err(TaskError::msg(format!(
                    "`mean` needs arrays of one dtype and shape, but `{first_label}` is {} and `{label}` is {}",
                    describe(first),
                    describe(array)
                )));
            }
        }
        let arrays: Vec<&Array> = arrays.iter().map(|(_, a)| *a).collect();
        let mut mean = match first.dtype() {
            DType::F64 => mean_of::<f64>(ctx, &arrays)?,
            _ => mean_of::<f32>(ctx, &arrays)?,
        };
        *mean.attrs_mut() = first.attrs().clone();
        Ok(Value::Array(mean))
    }
}

/// Float element types `mean` averages.
trait Float: Element + std::ops::AddAssign + std::ops::Div<Output = Self> {
    fn from_count(n: usize) -> Self;
}

impl Float for f32 {
    fn from_count(n: usize) -> f32 {
        n as f32
    }
}

impl Float for f64 {
    fn from_count(n: usize) -> f64 {
        n as f64
    }
}

/// Sums the arrays in list order, starting from 0, then divides by their count: block by block
/// within chunks processed in parallel, each block's sums written to the output once. Each
/// element sees the same additions in the same order as in an input-by-input accumulation, so
/// the bytes do not depend on the blocking.
fn mean_of<T: Float>(ctx: &TaskContext, arrays: &[&Array]) -> Result<Array, TaskError> {
    let views = arrays.iter().map(|a| a.view::<T>()).collect::<Result<Vec<_>, _>>().map_err(TaskError::msg)?;
    let slices: Vec<&[T]> = views
        .iter()
        .map(|v| v.as_slice().ok_or_else(|| TaskError::msg("input array is not in C order")))
        .collect::<Result<_, _>>()?;
    let count = T::from_count(slices.len());
    let out = written_array(ctx, arrays[0].shape(), CHUNK, |chunk, out| {
        let start = chunk * CHUNK;
        let end = start + out.remaining();
        let full_blocks_end = end - (end - start) % BLOCK;
        for block_start in (start..full_blocks_end).step_by(BLOCK) {
            // A whole block has a size known at compile time, so its sums live in registers.
            let mut means = [T::default(); BLOCK];
            for slice in &slices {
                let values: &[T; BLOCK] = slice[block_start..][..BLOCK].try_into().expect("a block of every input");
                for (sum, &value) in means.iter_mut().zip(values) {
                    *sum += value;
                }
            }
            for mean in &mut means {
                *mean = *mean / count;
            }
            out.write_slice(&means);
        }
        let mut tail = [T::default(); BLOCK];
        let tail = &mut tail[..end - full_blocks_end];
        for slice in &slices {
            for (sum, &value) in tail.iter_mut().zip(&slice[full_blocks_end..end]) {
                *sum += value;
            }
        }
        for mean in tail.iter_mut() {
            *mean = *mean / count;
        }
        out.write_slice(tail);
        // Inputs the engine spilled to files are let go as the chunks are done with them, so
        // a mean over more members than fit in memory streams through them.
        for array in arrays {
            array.done_reading(start..end);
        }
    });
    Ok(Array::from_ndarray(out))
}

/// An array's dtype and shape, shown in messages as `f32[2, 3]`.
fn describe(array: &Array) -> ValueMeta {
    ValueMeta::Array { dtype: array.dtype(), shape: array.shape().to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestInput, TestRng, array, gathered, meta, ndarray_of, plan, run, single};
    use runner_plugin::serde_json::json;

    fn members<T: Element>(n: usize, len: usize, make: impl Fn(f32) -> T) -> (Vec<Vec<T>>, TestInput) {
        let mut rng = TestRng::new(7);
        let data: Vec<Vec<T>> = (0..n).map(|_| (0..len).map(|_| make(rng.unit() * 10.0)).collect()).collect();
        let values = data.iter().map(|d| array(&[len / 5, 5], d.clone())).collect();
        (data, gathered("members", values))
    }

    #[test]
    fn f32_mean_matches_a_naive_loop() {
        // Longer than one parallel chunk, so several chunks are summed.
        let len = 5 * 30_000;
        let (data, input) = members(12, len, |v| v);
        let out = ndarray_of::<f32>(&run(&Mean, json!({}), &[input]).unwrap());
        assert_eq!(out.shape(), &[len / 5, 5]);
        for (i, &got) in out.iter().enumerate() {
            let expected = data.iter().map(|m| f64::from(m[i])).sum::<f64>() / data.len() as f64;
            assert!((f64::from(got) - expected).abs() < 1e-5, "element {i}: {got} vs {expected}");
        }
    }

    /// The bytes of f32 and f64 means, pinned: faster kernels must not change them (the hashes
    /// were taken from the straightforward kernel, summing in list order and then dividing).
    #[test]
    fn mean_bytes_are_pinned() {
        let len = 5 * 40_001;
        let (_, input) = members(12, len, |v| v - 3.0);
        let out = run(&Mean, json!({}), &[input]).unwrap();
        assert_eq!(crate::fnv1a64(out.as_array().unwrap().bytes()), 9475576212920788091, "f32");
        let (_, input) = members(7, 5 * 3001, |v| f64::from(v) / 3.0);
        let out = run(&Mean, json!({}), &[input]).unwrap();
        assert_eq!(crate::fnv1a64(out.as_array().unwrap().bytes()), 11850720463319817315, "f64");
    }

    #[test]
    fn f64_mean_matches_a_naive_loop_and_keeps_f64() {
        let (data, input) = members(3, 20, f64::from);
        let out = ndarray_of::<f64>(&run(&Mean, json!({}), &[input]).unwrap());
        for (i, &got) in out.iter().enumerate() {
            let expected = (data[0][i] + data[1][i] + data[2][i]) / 3.0;
            assert!((got - expected).abs() < 1e-12);
        }
    }

    #[test]
    fn a_single_value_is_its_own_mean_and_attrs_are_kept() {
        let field = Array::from_vec(vec![3], vec![1.0f32, 2.0, 4.5]).unwrap().with_attr("thresholds", json!([1.0]));
        let out = run(&Mean, json!({}), &[single("x", Value::Array(field))]).unwrap();
        assert_eq!(ndarray_of::<f32>(&out).as_slice().unwrap(), &[1.0, 2.0, 4.5]);
        assert_eq!(out.as_array().unwrap().attrs()["thresholds"], json!([1.0]));
    }

    #[test]
    fn unequal_shapes_fail_at_run_time_naming_both() {
        let input = gathered("members", vec![array(&[2, 2], vec![0.0f32; 4]), array(&[4], vec![0.0f32; 4])]);
        let err = run(&Mean, json!({}), &[input]).unwrap_err();
        assert!(err.message().contains("members[0]") && err.message().contains("f32[4]"), "{err}");
        let mixed = gathered("members", vec![array(&[1], vec![0.0f32]), array(&[1], vec![0.0f64])]);
        assert!(run(&Mean, json!({}), &[mixed]).is_err());
        let ints = gathered("members", vec![array(&[1], vec![1i32])]);
        assert!(run(&Mean, json!({}), &[ints]).unwrap_err().message().contains("f32 or f64"));
    }

    #[test]
    fn plan_checks_what_metadata_allows() {
        let list = |name: &str, shape: Vec<usize>| InputMeta {
            name: name.into(),
            gathered: Some(12),
            item: ValueMeta::Array { dtype: DType::F32, shape },
        };
        let (out, estimate) = plan(&Mean, json!({}), &[list("a", vec![970, 1042])]).unwrap();
        assert_eq!(out, ValueMeta::Array { dtype: DType::F32, shape: vec![970, 1042] });
        assert_eq!(estimate, 970 * 1042 * 4);
        let err = plan(&Mean, json!({}), &[list("a", vec![2, 3]), list("b", vec![3, 2])]).unwrap_err();
        assert!(err.message.contains("`a`") && err.message.contains("`b`"), "{err}");
        assert!(plan(&Mean, json!({}), &[meta("a", ValueMeta::Json)]).is_err());
        assert!(plan(&Mean, json!({}), &[]).is_err());
        assert_eq!(plan(&Mean, json!({}), &[meta("a", ValueMeta::Unknown)]).unwrap().0, ValueMeta::Unknown);
    }

    /// A pickled Python object (bytes to the engine) is refused naming what it is, not as `u8`s.
    #[test]
    fn a_pickled_python_object_is_refused_naming_it() {
        let object = crate::python_object::PythonObject::sample("dict");
        let err = run(&Mean, json!({}), &[single("fields", object)]).unwrap_err();
        assert_eq!(
            err.message(),
            "`mean`: input `fields` is a Python object (a pickled dict), not an array: return a plain \
             numpy.ndarray of a numeric or bool dtype for a Rust plugin to read"
        );
    }
}
