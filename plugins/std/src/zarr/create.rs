//! `zarr_create`: the store made from the first input field: root group, the data array (chunked
//! along `concat_dim`), a coordinate array per other dim; an earlier build's store moved aside.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runner_plugin::serde_json::{Map, Value as Json};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use super::meta::{self, ArraySpec, Format, ZType};
use super::store::AtomicStore;
use super::{ConcatCoord, REPLACED, StoreSpec, coord_of, optional_name, write_1d};
use crate::netcdf::attrs;

/// Creates a Zarr store's arrays from the first input field.
pub struct ZarrCreate;

const CREATE_ARGS: &[ArgSpec] = &[
    ArgSpec::required(
        "store",
        "the store's directory (an existing Zarr store there is moved aside, and deleted once the new one is finished)",
    )
    .output_path(),
    ArgSpec::optional("array", "the input's `variable` attribute", "the data array's name in the store"),
    ArgSpec::optional(
        "concat_dim",
        "the input's first dim",
        "the dim the fields are stacked along, one position per field (a new leading dim if the field lacks it)",
    ),
    ArgSpec::required("chunk", "positions per chunk along `concat_dim`: the block size of write_zarr's group dim"),
    ArgSpec::optional("zarr_format", "3", "3 (consolidated metadata in the root zarr.json) or 2 (.zmetadata)"),
    ArgSpec::optional("level", "1", "gzip (v3) / zlib (v2) level of the chunks, 1 to 9; 0 stores them raw"),
    ArgSpec::optional("coord_step", "1", "step of the `concat_dim` coordinate between positions, in its units"),
];

const DATA_DTYPES: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::U8];

impl Plugin for ZarrCreate {
    fn name(&self) -> &'static str {
        "zarr_create"
    }

    fn about(&self) -> &'static str {
        "creates a Zarr store (v3 or v2) for fields stacked along a dim, from the first field's shape, dtype, dims, coordinates and attributes; returns a description for write_zarr and zarr_finalize"
    }

    fn args(&self) -> &'static [ArgSpec] {
        CREATE_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        if args.str("store")?.is_empty() {
            return Err(ArgError::new("store", "`store` must name a directory, got an empty string"));
        }
        optional_name(args, "array")?;
        optional_name(args, "concat_dim")?;
        chunk_arg(args)?;
        format_arg(args)?;
        level_arg(args)?;
        let step = args.f64_or("coord_step", 1.0)?;
        if step == 0.0 {
            return Err(ArgError::new("coord_step", "`coord_step` must not be 0"));
        }
        Ok(())
    }

    fn output(&self, _args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let input = crate::support::one_input_meta("zarr_create", inputs)?;
        crate::support::array_shape_of("zarr_create", input, DATA_DTYPES)?;
        Ok(ValueMeta::Json)
    }

    /// Coordinate arrays and metadata only: a few KiB per coordinate value.
    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        8 << 20
    }

    fn run(&self, _ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let arg = |e: ArgError| TaskError::msg(e.message);
        let (name, value) = crate::support::one_input_value("zarr_create", inputs)?;
        let template = crate::support::expect_array("zarr_create", name, value, DATA_DTYPES)?;
        let store_path = PathBuf::from(args.str("store").map_err(arg)?);
        let fail = |e: String| TaskError::msg(format!("creating the Zarr store {}: {e}", store_path.display()));
        let array_name = optional_name(args, "array")
            .map_err(arg)?
            .or_else(|| template.attrs().get(attrs::VARIABLE).and_then(Json::as_str).map(str::to_string))
            .unwrap_or_else(|| "data".into());
        let field_dims = dims_of(template);
        let concat_dim = optional_name(args, "concat_dim")
            .map_err(arg)?
            .or_else(|| field_dims.first().cloned())
            .ok_or_else(|| fail("the input is a 0-d array: name the dim to stack along with `concat_dim`".into()))?;
        let (axis, new_axis) = match field_dims.iter().position(|d| *d == concat_dim) {
            Some(p) if template.shape()[p] == 1 => (p, false),
            Some(p) => {
                return Err(fail(format!(
                    "each field must hold one position along `{concat_dim}`, but the first has {} (shape {:?})",
                    template.shape()[p],
                    template.shape()
                )));
            }
            None => (0, true),
        };
        let mut store_dims = field_dims.clone();
        if new_axis {
            store_dims.insert(0, concat_dim.clone());
        }
        let concat_coord = coord_of(template, &concat_dim).and_then(|c| {
            let t0 = c.get("values")?.as_array()?.first().and_then(attrs::as_float)?;
            Some(ConcatCoord {
                t0,
                dtype: c.get("dtype").and_then(Json::as_str).unwrap_or("f64").to_string(),
                attrs: c.get("attrs").and_then(Json::as_object).cloned().unwrap_or_default(),
            })
        });
        let spec = StoreSpec {
            store: store_path.clone(),
            array: array_name.clone(),
            format: format_arg(args).map_err(arg)?,
            concat_dim: concat_dim.clone(),
            axis,
            new_axis,
            chunk: chunk_arg(args).map_err(arg)?,
            field_shape: template.shape().to_vec(),
            dtype: template.dtype(),
            coord_names: Vec::new(),
            concat_coord,
            coord_step: args.f64_or("coord_step", 1.0).map_err(arg)?,
            level: level_arg(args).map_err(arg)?,
        };
        if store_dims.contains(&array_name) {
            return Err(fail(format!("the data array `{array_name}` would have the name of one of its dims")));
        }
        clear_store(&store_path).map_err(fail)?;
        let store = spec.open().map_err(fail)?;
        let global = template.attrs().get(attrs::GLOBAL_ATTRS).and_then(Json::as_object).cloned().unwrap_or_default();
        meta::store_root(&store, spec.format, &global).map_err(fail)?;
        let mut chunks = spec.shape(spec.chunk);
        for (i, c) in chunks.iter_mut().enumerate() {
            if i != spec.axis {
                *c = (*c).max(1);
            }
        }
        let data = ArraySpec {
            name: &array_name,
            ztype: ZType::of_dtype(spec.dtype),
            shape: spec.shape(0),
            chunks,
            dims: store_dims.clone(),
            attrs: variable_attrs(template),
            level: spec.level,
        };
        let data = meta::array(&store, &data, spec.format).map_err(fail)?;
        meta::store_array_metadata(&data).map_err(fail)?;
        let mut spec = spec;
        for dim in store_dims.iter().filter(|d| **d != concat_dim) {
            if let Some(coord) = coord_of(template, dim) {
                write_coordinate(&store, spec.format, dim, coord, spec.level).map_err(fail)?;
                spec.coord_names.push(dim.clone());
            }
        }
        spec.coord_names.push(concat_dim);
        Ok(Value::Json(spec.to_json()))
    }
}

fn chunk_arg(args: &Args) -> Result<u64, ArgError> {
    match args.u64("chunk") {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err(ArgError::new("chunk", "`chunk` must be a positive whole number, got 0")),
        Err(e) => Err(e),
    }
}

fn format_arg(args: &Args) -> Result<Format, ArgError> {
    let n = args.u64_or("zarr_format", 3)?;
    Format::from_number(n).ok_or_else(|| ArgError::new("zarr_format", format!("`zarr_format` must be 2 or 3, got {n}")))
}

fn level_arg(args: &Args) -> Result<u32, ArgError> {
    let level = args.u64_or("level", 1)?;
    if level > 9 {
        return Err(ArgError::new("level", format!("`level` must be from 0 (none) to 9, got {level}")));
    }
    Ok(level as u32)
}

/// The names of an array's dims: its `dims` attribute, else `dim_0`, `dim_1`...
fn dims_of(array: &Array) -> Vec<String> {
    match array.attrs().get(attrs::DIMS) {
        Some(Json::Array(names)) if names.len() == array.shape().len() => {
            names.iter().map(|n| n.as_str().unwrap_or_default().to_string()).collect()
        }
        _ => (0..array.shape().len()).map(|i| format!("dim_{i}")).collect(),
    }
}

/// The attributes a field's variable has: its `attrs`, and any attribute outside the netCDF
/// layout (as `write_netcdf` writes them).
fn variable_attrs(array: &Array) -> Map<String, Json> {
    let mut out = array.attrs().get(attrs::ATTRS).and_then(Json::as_object).cloned().unwrap_or_default();
    for (k, v) in array.attrs() {
        if !attrs::RESERVED.contains(&k.as_str()) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Moves what a previous build left at `path` aside (a rename: instant, however many chunks it
/// holds, so the build's first writes are not held up behind a deletion), refusing anything
/// that is not a Zarr store. Returns where it went; `zarr_finalize` deletes it.
pub(super) fn clear_store(path: &Path) -> Result<Option<PathBuf>, String> {
    let Ok(mut entries) = std::fs::read_dir(path) else {
        return match path.exists() {
            true => Err(format!("{} exists and is not a directory", path.display())),
            false => Ok(None),
        };
    };
    if entries.next().is_none() {
        return Ok(None);
    }
    if !(path.join("zarr.json").exists() || path.join(".zgroup").exists()) {
        return Err(format!("{} is a directory that holds no Zarr store; refusing to replace it", path.display()));
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let aside = path.with_file_name(format!(".{name}.{REPLACED}-{}-{nanos}", std::process::id()));
    std::fs::rename(path, &aside).map_err(|e| format!("cannot move the old store {} aside: {e}", path.display()))?;
    Ok(Some(aside))
}

/// Writes a 1-d coordinate array from a `coords` entry (one chunk).
fn write_coordinate(
    store: &Arc<AtomicStore>,
    format: Format,
    name: &str,
    coord: &Map<String, Json>,
    level: u32,
) -> Result<(), String> {
    let values: Vec<f64> = coord
        .get("values")
        .and_then(Json::as_array)
        .map(|v| v.iter().map(|x| attrs::as_float(x).unwrap_or(f64::NAN)).collect())
        .unwrap_or_default();
    let dtype = coord.get("dtype").and_then(Json::as_str).unwrap_or("f64");
    let attrs = coord.get("attrs").and_then(Json::as_object).cloned().unwrap_or_default();
    write_1d(store, format, name, dtype, &values, attrs, level)
}
