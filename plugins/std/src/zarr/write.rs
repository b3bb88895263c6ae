//! `write_zarr`: one chunk per task from its gathered fields, each at the position its own
//! `concat_dim` coordinate gives; `check_layout` refuses steps whose tasks would share a chunk.

use runner_plugin::ndarray::{ArrayD, Axis, IxDyn, Slice};
use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, DimRead, InputMeta, Inputs, InputsForEstimate, Plugin, StepLayout,
    TaskContext, TaskError, Value, ValueMeta,
};

use super::{StoreSpec, WRITTEN_KEY, coord_of, find_spec, optional_name};
use crate::netcdf::attrs;
use crate::support::shown;

/// Writes one chunk (a block of gathered fields) of a store `zarr_create` made.
pub struct WriteZarr;

const WRITE_ARGS: &[ArgSpec] = &[ArgSpec::optional(
    "block",
    "the step's only dim",
    "the group dim of the step's `over` whose value is the chunk number",
)];

impl WriteZarr {
    /// The dim of the step whose value is the chunk number.
    fn block_dim(args: &Args, dims: &[&str]) -> Result<String, String> {
        match optional_name(args, "block").map_err(|e| e.message)? {
            Some(dim) if dims.contains(&dim.as_str()) => Ok(dim),
            Some(dim) => {
                Err(format!("`block` names `{dim}`, which the step does not run over (it runs over {})", list(dims)))
            }
            None => match dims {
                [only] => Ok(only.to_string()),
                _ => Err(format!(
                    "the step runs over {}: name the one whose value is the chunk number with `block`",
                    list(dims)
                )),
            },
        }
    }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "no dims".into()
    } else {
        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    }
}

impl Plugin for WriteZarr {
    fn name(&self) -> &'static str {
        "write_zarr"
    }

    fn about(&self) -> &'static str {
        "writes a block of gathered fields as one chunk of the store a zarr_create step made, each field at the position its coordinate gives; refuses layouts where two tasks would write one chunk"
    }

    fn args(&self) -> &'static [ArgSpec] {
        WRITE_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        optional_name(args, "block").map(|_| ())
    }

    /// Refuses a step whose tasks would share a chunk: each task must gather exactly one block
    /// of the dim the fields come over, and that block must be one chunk of the store.
    fn check_layout(&self, args: &Args, layout: &StepLayout) -> Result<(), ArgError> {
        let general = |message: String| ArgError::general(message);
        let create = layout.inputs.iter().find(|i| i.producer_plugin == "zarr_create").ok_or_else(|| {
            general(
                "`write_zarr` needs an input from a `zarr_create` step (the store it writes, made before it runs)"
                    .into(),
            )
        })?;
        let data: Vec<_> = layout.inputs.iter().filter(|i| i.producer_plugin != "zarr_create").collect();
        let [data] = data.as_slice() else {
            return Err(general(format!(
                "`write_zarr` takes one input of fields besides the `zarr_create` one, got {}",
                data.len()
            )));
        };
        let chunk = create.producer_args.u64("chunk").map_err(|e| {
            general(format!("step `{}` (zarr_create) has no usable `chunk`: {}", create.producer, e.message))
        })?;
        let dims: Vec<&str> = layout.dims.iter().map(|d| d.name.as_str()).collect();
        let block = Self::block_dim(args, &dims)
            .map_err(|m| ArgError { arg: args.contains("block").then(|| "block".into()), message: m })?;
        let others: Vec<&str> = dims.iter().copied().filter(|d| *d != block).collect();
        if !others.is_empty() {
            return Err(general(format!(
                "tasks of step `{}` that differ only in {} would write the same chunks of the store; run over `{block}` alone",
                layout.step,
                list(&others)
            )));
        }
        let block_dim = layout.dims.iter().find(|d| d.name == block).expect("the block dim is one of the step's");
        let fields_over = |name: &str| data.producer_dims.iter().find(|d| d.name == name);
        match &block_dim.group {
            Some(group) => {
                let read = fields_over(&group.dim).map(|d| &d.read);
                if !matches!(read, Some(DimRead::Block { .. })) {
                    return Err(general(format!(
                        "input `{}` must come from a step over `{}` (the dim `{block}` groups), so each task gathers one block of it",
                        data.name, group.dim
                    )));
                }
                if group.size != chunk {
                    return Err(general(format!(
                        "each task of step `{}` writes a block of {} `{}` values, but step `{}` makes chunks of {chunk}: {}; expected `chunk: {}` in step `{}` (or `size: {chunk}` in dim `{block}`)",
                        layout.step,
                        group.size,
                        group.dim,
                        create.producer,
                        if group.size < chunk {
                            "several tasks would write each chunk"
                        } else {
                            "a task would write parts of two chunks, which its neighbours write too"
                        },
                        group.size,
                        create.producer,
                    )));
                }
            }
            None => {
                if chunk != 1 {
                    return Err(general(format!(
                        "step `{}` runs one task per `{block}` value, but step `{}` makes chunks of {chunk} values: {chunk} tasks would write each chunk; run over a group dim such as `{{group: {block}, size: {chunk}}}`",
                        layout.step, create.producer
                    )));
                }
            }
        }
        for dim in &data.producer_dims {
            if dim.read == DimRead::All {
                return Err(general(format!(
                    "input `{}` gathers all of `{}` into each task: each chunk position would get {} fields; pin it with `select` or run over it",
                    data.name, dim.name, dim.len
                )));
            }
        }
        Ok(())
    }

    fn output(&self, _args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        Ok(ValueMeta::Json)
    }

    /// The assembled chunk and its encoded bytes.
    fn estimate(&self, _args: &Args, inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        inputs.buffer_bytes().unwrap_or(64 << 20) * 2 + (1 << 20)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let spec = find_spec("write_zarr", inputs)?;
        let dims: Vec<&str> = ctx.indices().iter().map(|(d, _)| *d).collect();
        let block_dim = Self::block_dim(args, &dims).map_err(TaskError::msg)?;
        let block = ctx
            .index(&block_dim)
            .and_then(|v| v.as_int())
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| TaskError::msg(format!("the value of `{block_dim}` is not a chunk number")))?;
        let fields: Vec<&Array> = inputs
            .iter()
            .flat_map(|i| i.values())
            .filter_map(|v| match v {
                Value::Array(a) => Some(a),
                _ => None,
            })
            .collect();
        let fail = |e: String| {
            TaskError::msg(format!("writing chunk {block} of `{}` in {}: {e}", spec.array, spec.store.display()))
        };
        let slots = positions(&spec, block, &fields).map_err(fail)?;
        let store = spec.open().map_err(fail)?;
        let mut array = spec.open_array(&store).map_err(fail)?;
        // Chunks beyond the recorded length are written before `zarr_finalize` sets it.
        let needed = (block + 1) * spec.chunk;
        if array.shape()[spec.axis] < needed {
            array.set_shape(spec.shape(needed)).map_err(|e| fail(e.to_string()))?;
        }
        let mut chunk_indices = vec![0u64; array.shape().len()];
        chunk_indices[spec.axis] = block;
        let chunk_shape: Vec<usize> = spec.shape(spec.chunk).iter().map(|&n| (n as usize).max(1)).collect();
        ctx.will_allocate((chunk_shape.iter().product::<usize>() * spec.dtype.size() * 2) as u64);
        macro_rules! store_as {
            ($t:ty, $fill:expr) => {{
                let chunk = assemble::<$t>(&spec, &fields, &slots, &chunk_shape, $fill).map_err(fail)?;
                array.store_chunk(&chunk_indices, chunk).map_err(|e| fail(e.to_string()))?;
            }};
        }
        match spec.dtype {
            DType::F32 => store_as!(f32, f32::NAN),
            DType::F64 => store_as!(f64, f64::NAN),
            DType::I8 => store_as!(i8, 0),
            DType::I16 => store_as!(i16, 0),
            DType::I32 => store_as!(i32, 0),
            DType::I64 => store_as!(i64, 0),
            DType::U8 => store_as!(u8, 0),
            DType::U16 => store_as!(u16, 0),
            DType::U32 => store_as!(u32, 0),
            DType::U64 => store_as!(u64, 0),
            DType::Bool => return Err(fail("a store of bool arrays is not supported; expected numbers".into())),
        }
        let base = block * spec.chunk;
        let coords: Vec<Json> =
            fields.iter().map(|f| concat_value(&spec, f).map_or(Json::Null, attrs::float)).collect();
        Ok(Value::Json(json!({
            WRITTEN_KEY: spec.array,
            "block": block,
            "positions": slots.iter().map(|&s| base + s as u64).collect::<Vec<_>>(),
            "coords": coords,
        })))
    }
}

/// A field's value of the concat coordinate, when it has one.
fn concat_value(spec: &StoreSpec, field: &Array) -> Option<f64> {
    let coord = coord_of(field, &spec.concat_dim)?;
    coord.get("values")?.as_array()?.first().and_then(attrs::as_float)
}

/// Where in the chunk of `block` each field goes: at its coordinate's position when the fields
/// have one, else in order. Fields that do not match the store, or fall outside the block, or
/// on one slot twice, are errors.
pub(super) fn positions(spec: &StoreSpec, block: u64, fields: &[&Array]) -> Result<Vec<usize>, String> {
    let base = block * spec.chunk;
    if fields.len() as u64 > spec.chunk {
        return Err(format!("{} fields for a chunk of {} positions", fields.len(), spec.chunk));
    }
    let units = spec.concat_coord.as_ref().and_then(|c| c.attrs.get("units"));
    let mut slots = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate() {
        if field.shape() != spec.field_shape.as_slice() || field.dtype() != spec.dtype {
            return Err(format!(
                "field {i} is {}{:?}, but the store holds {}{:?} fields (from the first input)",
                field.dtype(),
                field.shape(),
                spec.dtype,
                spec.field_shape
            ));
        }
        let slot = match (&spec.concat_coord, concat_value(spec, field)) {
            (Some(coord), Some(t)) => {
                let field_units = coord_of(field, &spec.concat_dim).and_then(|c| c.get("attrs")?.get("units"));
                if field_units != units {
                    return Err(format!(
                        "field {i} has `{}` in units {}, the store in {}",
                        spec.concat_dim,
                        shown(field_units),
                        shown(units)
                    ));
                }
                let position = ((t - coord.t0) / spec.coord_step).round();
                if !(position >= base as f64 && position < (base + spec.chunk) as f64) {
                    return Err(format!(
                        "field {i} has {}={t}, position {position} from the first field's {} in steps of {}, outside this chunk's positions {base}..{}; are the inputs in order and `coord_step` right?",
                        spec.concat_dim,
                        coord.t0,
                        spec.coord_step,
                        base + spec.chunk
                    ));
                }
                (position as u64 - base) as usize
            }
            _ => i,
        };
        if slots.contains(&slot) {
            return Err(format!("two fields go to position {} of `{}`", base + slot as u64, spec.concat_dim));
        }
        slots.push(slot);
    }
    Ok(slots)
}

/// The chunk of `shape` with each field at its slot along the concat axis, the rest `fill`.
fn assemble<T: runner_plugin::Element>(
    spec: &StoreSpec,
    fields: &[&Array],
    slots: &[usize],
    shape: &[usize],
    fill: T,
) -> Result<ArrayD<T>, String> {
    let mut chunk = ArrayD::from_elem(IxDyn(shape), fill);
    for (field, &slot) in fields.iter().zip(slots) {
        let view = field.view::<T>()?;
        let view = if spec.new_axis { view.insert_axis(Axis(0)) } else { view };
        chunk.slice_axis_mut(Axis(spec.axis), Slice::from(slot..slot + 1)).assign(&view);
    }
    Ok(chunk)
}
