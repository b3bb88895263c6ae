//! Helpers shared by several plugins: the FNV-1a hash, argument checks with messages that name
//! the argument, checks of the inputs' kind and shape at plan time and at run time, new arrays
//! written once in parallel, and AVX2 detection for kernels compiled twice.

use std::mem::MaybeUninit;
use std::path::Path;

use runner_plugin::ndarray::{ArrayD, IxDyn};
use runner_plugin::serde_json::Value as Json;
use runner_plugin::{
    ArgError, Array, DType, Element, Input, InputMeta, Inputs, TaskContext, TaskError, Value, ValueMeta,
};

use crate::python_object::PythonObject;

/// FNV-1a, 64 bits: a tiny, well-known, stable hash for turning task keys and seeds into numbers.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

/// A new array of `shape` whose every element is written once by `fill(chunk_index, writer)`,
/// chunk by chunk of `chunk_len` elements, in parallel; announced to the memory ledger before it
/// is allocated, like [`TaskContext::zeros`].
///
/// For outputs that a kernel computes in full this saves a pass over memory: zeroing the array
/// first (which the allocator does by `memset`, or for large blocks by handing pages back to the
/// kernel, which then faults them in again) only to overwrite every element.
///
/// Panics if `fill` leaves part of a chunk unwritten.
pub(crate) fn written_array<T, F>(ctx: &TaskContext, shape: &[usize], chunk_len: usize, fill: F) -> ArrayD<T>
where
    T: Element,
    F: Fn(usize, &mut ChunkWriter<'_, T>) + Sync + Send,
{
    let len: usize = shape.iter().product();
    ctx.will_allocate((len * size_of::<T>()) as u64);
    let mut data = Vec::<T>::with_capacity(len);
    ctx.par_chunks_mut(&mut data.spare_capacity_mut()[..len], chunk_len, |index, slots| {
        let mut writer = ChunkWriter { slots, written: 0 };
        fill(index, &mut writer);
        assert_eq!(writer.remaining(), 0, "chunk {index} of a new array was left partly unwritten");
    });
    // SAFETY: the chunks cover the first `len` elements, and each chunk's writer wrote all of
    // its elements, front to back (asserted above; had any chunk panicked, `par_chunks_mut`
    // would have passed the panic on before this line).
    unsafe { data.set_len(len) };
    ArrayD::from_shape_vec(IxDyn(shape), data).expect("the length is the shape's product")
}

/// Writes the elements of one chunk of a [`written_array`], front to back.
pub(crate) struct ChunkWriter<'a, T> {
    slots: &'a mut [MaybeUninit<T>],
    written: usize,
}

impl<T: Copy> ChunkWriter<'_, T> {
    /// Elements of the chunk still to write.
    pub(crate) fn remaining(&self) -> usize {
        self.slots.len() - self.written
    }

    /// Writes `values` next. Panics if they do not fit in the chunk.
    #[inline(always)]
    pub(crate) fn write_slice(&mut self, values: &[T]) {
        self.slots[self.written..][..values.len()].write_copy_of_slice(values);
        self.written += values.len();
    }

    /// Writes the items of `values` next, as many as fit in the chunk.
    #[inline(always)]
    pub(crate) fn write_iter(&mut self, values: impl Iterator<Item = T>) {
        let mut written = 0;
        for (slot, value) in self.slots[self.written..].iter_mut().zip(values) {
            slot.write(value);
            written += 1;
        }
        self.written += written;
    }
}

/// Whether the CPU has AVX2, for kernels that keep a second copy of their loops compiled for it.
///
/// The baseline x86-64 target has only 4-lane SSE vectors; the same loops in 8-lane AVX2 do twice
/// the work per instruction. The results are the same bit for bit: AVX2 brings no fused
/// multiply-add (and Rust never fuses on its own), and the element-wise arithmetic, comparisons
/// and conversions of auto-vectorised loops are exactly rounded at every width. A kernel keeps
/// its loops in an `#[inline(always)]` function and calls it from a `#[target_feature(enable =
/// "avx2")]` wrapper, directly: a closure in between would not be inlined, and its loops would
/// stay compiled for the baseline.
#[inline]
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// How an argument value reads in an error message: `-1`, `"abc"`, or `nothing`.
pub(crate) fn shown(value: Option<&Json>) -> String {
    value.map(Json::to_string).unwrap_or_else(|| "nothing".into())
}

/// A whole number ≥ 1, e.g. a radius or a grid size.
pub(crate) fn positive_whole(args: &runner_plugin::Args, name: &str) -> Result<u64, ArgError> {
    if !args.contains(name) {
        // Keeps the API's "missing required argument" wording.
        return args.u64(name);
    }
    match args.u64(name) {
        Ok(n) if n > 0 => Ok(n),
        _ => {
            Err(ArgError::new(name, format!("`{name}` must be a positive whole number, got {}", shown(args.get(name)))))
        }
    }
}

/// The single, non-gathered input of a plugin that transforms one value, from plan metadata.
pub(crate) fn one_input_meta<'m>(plugin: &str, inputs: &'m [InputMeta]) -> Result<&'m InputMeta, ArgError> {
    match inputs {
        [only] => match only.gathered {
            None => Ok(only),
            Some(n) => Err(ArgError::general(format!(
                "`{plugin}` takes a single array, but input `{}` is a gathered list of {n} values",
                only.name
            ))),
        },
        _ => Err(ArgError::general(format!(
            "`{plugin}` takes exactly one input, got {}{}",
            inputs.len(),
            listed(inputs.iter().map(|i| i.name.as_str()))
        ))),
    }
}

/// The shape of an input that must be an array of `dtype`, or `None` when the producer cannot
/// say in advance (the check is then left to run time).
pub(crate) fn array_shape_of(
    plugin: &str,
    input: &InputMeta,
    dtypes: &[DType],
) -> Result<Option<(DType, Vec<usize>)>, ArgError> {
    match &input.item {
        ValueMeta::Unknown => Ok(None),
        ValueMeta::Array { dtype, shape } if dtypes.contains(dtype) => Ok(Some((*dtype, shape.clone()))),
        other => Err(ArgError::general(format!(
            "`{plugin}` needs {}, but input `{}` is {other}",
            array_kinds(dtypes),
            input.name
        ))),
    }
}

/// The single, non-gathered input value of a running task.
pub(crate) fn one_input_value<'a>(plugin: &str, inputs: &Inputs<'a>) -> Result<(&'a str, &'a Value), TaskError> {
    let all: Vec<&Input<'a>> = inputs.iter().collect();
    match all.as_slice() {
        [only] => Ok((only.name(), only.one()?)),
        _ => Err(TaskError::msg(format!(
            "`{plugin}` takes exactly one input, got {}{}",
            all.len(),
            listed(all.iter().map(|i| i.name()))
        ))),
    }
}

/// The value as an array of one of `dtypes`, or an error naming the input and what it is — a
/// pickled Python object (which the engine holds as bytes) included.
pub(crate) fn expect_array<'a>(
    plugin: &str,
    name: &str,
    value: &'a Value,
    dtypes: &[DType],
) -> Result<&'a Array, TaskError> {
    match value {
        Value::Array(array) if let Some(object) = PythonObject::of(array) => {
            Err(TaskError::msg(format!("`{plugin}`: {}", object.not_an_array(name))))
        }
        Value::Array(array) if dtypes.contains(&array.dtype()) => Ok(array),
        other => Err(TaskError::msg(format!(
            "`{plugin}` needs {}, but input `{name}` is {}",
            array_kinds(dtypes),
            other.meta()
        ))),
    }
}

fn array_kinds(dtypes: &[DType]) -> String {
    let names: Vec<&str> = dtypes.iter().map(|d| d.name()).collect();
    format!("an array of {}", names.join(" or "))
}

fn listed<'n>(names: impl Iterator<Item = &'n str>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) }
}

/// The candidate `name` is most likely a misspelling of, for "did you mean" hints.
pub(crate) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|&(distance, c)| distance > 0 && distance <= (name.chars().count().max(c.chars().count()) / 3).max(1))
        .min()
        .map(|(_, c)| c)
}

/// Makes ready for a task to write the file `output`: its folder created, a stale file there
/// removed (so that "the output exists" afterwards means this task wrote it); a directory
/// there is refused, since it would satisfy no file output.
pub(crate) fn prepare_output(output: &Path) -> Result<(), TaskError> {
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| TaskError::msg(format!("cannot create the folder of output {}: {e}", output.display())))?;
    }
    if output.is_dir() {
        return Err(TaskError::msg(format!(
            "output {} is a directory; `output` names the file the task writes (remove the directory, or name \
             another file)",
            output.display()
        )));
    }
    runner_plugin::files::refuse_protected(output)
        .map_err(|e| TaskError::msg(format!("cannot write {}: {e}", output.display())))?;
    if std::fs::symlink_metadata(output).is_ok() {
        std::fs::remove_file(output)
            .map_err(|e| TaskError::msg(format!("cannot remove the stale output {}: {e}", output.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_array_holds_what_every_chunk_wrote() {
        let array = crate::testing::with_context(|ctx| {
            written_array(ctx, &[3, 7], 4, |chunk, out| {
                // Two ways of writing, in either order, each start where the last stopped.
                let start = chunk * 4;
                out.write_slice(&[start as i32]);
                out.write_iter((start as i32 + 1..).take(out.remaining()));
            })
        });
        assert_eq!(array.shape(), &[3, 7]);
        assert_eq!(array.iter().copied().collect::<Vec<i32>>(), (0..21).collect::<Vec<i32>>());
        let empty = crate::testing::with_context(|ctx| written_array::<f32, _>(ctx, &[0, 5], 4, |_, _| unreachable!()));
        assert_eq!(empty.shape(), &[0, 5]);
    }

    #[test]
    #[should_panic(expected = "left partly unwritten")]
    fn written_array_refuses_a_chunk_left_short() {
        crate::testing::with_context(|ctx| {
            written_array(ctx, &[10], 4, |_, out| out.write_iter(std::iter::repeat_n(1.0f32, 3)));
        });
    }

    #[test]
    fn fnv1a64_matches_published_test_vectors() {
        // From the FNV reference test suite (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
