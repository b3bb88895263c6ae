//! `zarr_create`, `write_zarr` and `zarr_finalize`: many tasks build one Zarr store, as
//! pangeo-forge's `prepare_target` → `store_chunk` → `finalize_target` do.
//!
//! - `zarr_create` (one task) takes the first input field (an array with the metadata
//!   `read_netcdf` gives it, see [`crate::netcdf`]) and makes the store: the root group with the
//!   file's global attributes, the data array (the field's dims, with `concat_dim` growing one
//!   position per input; chunks of `chunk` positions along it, whole along the other dims; the
//!   field's dtype and attributes) and a coordinate array for each other dim. It returns a JSON
//!   description of the store that the other two read.
//! - `write_zarr` (one task per block of a group dim, e.g. `chunk: {group: day, size: 5}`)
//!   writes its gathered fields as one chunk. A field goes to the position its own coordinate
//!   value along `concat_dim` gives (`(t - t0) / coord_step`, `t0` the first field's), so a
//!   field dropped from the gather (`on_missing: ignore`) leaves a gap of fill values, not a
//!   shift; fields without such a coordinate fill the block in order. Tasks write disjoint
//!   chunks, so they run concurrently; `check_layout` refuses, when the recipe is compiled, a
//!   step whose tasks would write one chunk twice (losing data).
//! - `zarr_finalize` (one task, after every `write_zarr`) sets the length along `concat_dim` to
//!   the last position written, writes that dim's coordinate array (the fields' values, CF
//!   `days since ...` as the files have them; gaps filled in from `t0` and `coord_step`),
//!   consolidates the metadata (v3: inline in the root `zarr.json`; v2: `.zmetadata`) and syncs
//!   the file system, so the finished store survives a crash.
//!
//! Every key is written to a temporary file and renamed into place ([`store::AtomicStore`]): a
//! run killed at any point leaves no torn chunk, and running it again gives the same bytes. A
//! store an earlier build left is moved aside by `zarr_create` and deleted by `zarr_finalize`.

mod meta;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runner_plugin::ndarray::{ArrayD, Axis, IxDyn, Slice};
use runner_plugin::serde_json::{Map, Value as Json, json};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, DimRead, InputMeta, Inputs, InputsForEstimate, Plugin, StepLayout,
    TaskContext, TaskError, Value, ValueMeta,
};

use crate::netcdf::attrs;
use crate::support::shown;
use meta::{ArraySpec, Format, ZType};
use store::AtomicStore;

/// Creates a Zarr store's arrays from the first input field.
pub struct ZarrCreate;
/// Writes one chunk (a block of gathered fields) of a store `zarr_create` made.
pub struct WriteZarr;
/// Sets the final length, writes the concat coordinate and consolidates the metadata.
pub struct ZarrFinalize;

/// The key that marks `zarr_create`'s output, so the other plugins find it among their inputs.
const STORE_KEY: &str = "zarr_store";
/// The key that marks `write_zarr`'s report.
const WRITTEN_KEY: &str = "zarr_written";

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

const WRITE_ARGS: &[ArgSpec] = &[ArgSpec::optional(
    "block",
    "the step's only dim",
    "the group dim of the step's `over` whose value is the chunk number",
)];

/// What `zarr_create` made, as `write_zarr` and `zarr_finalize` need it.
#[derive(Debug, Clone, PartialEq)]
struct StoreSpec {
    store: PathBuf,
    array: String,
    format: Format,
    concat_dim: String,
    /// Position of `concat_dim` among the store array's dims.
    axis: usize,
    /// The fields lack `concat_dim`: it is a new leading axis.
    new_axis: bool,
    chunk: u64,
    /// The shape of every field.
    field_shape: Vec<usize>,
    dtype: DType,
    /// Every array of the store besides the data (coordinates), the concat one included.
    coord_names: Vec<String>,
    concat_coord: Option<ConcatCoord>,
    coord_step: f64,
    level: u32,
}

/// The coordinate along `concat_dim`, as the first field has it.
#[derive(Debug, Clone, PartialEq)]
struct ConcatCoord {
    t0: f64,
    dtype: String,
    attrs: Map<String, Json>,
}

impl StoreSpec {
    fn to_json(&self) -> Json {
        json!({
            STORE_KEY: self.store,
            "array": self.array,
            "zarr_format": self.format.number(),
            "concat_dim": self.concat_dim,
            "axis": self.axis,
            "new_axis": self.new_axis,
            "chunk": self.chunk,
            "field_shape": self.field_shape,
            "dtype": self.dtype.name(),
            "coord_names": self.coord_names,
            "concat_coord": self.concat_coord.as_ref().map(|c| json!({"t0": attrs::float(c.t0), "dtype": c.dtype, "attrs": c.attrs})),
            "coord_step": self.coord_step,
            "level": self.level,
        })
    }

    fn from_json(doc: &Json) -> Result<StoreSpec, String> {
        let bad = |what: &str| format!("the zarr_create description lacks {what}: {doc}");
        let str_of = |k: &str| doc.get(k).and_then(Json::as_str).map(str::to_string).ok_or_else(|| bad(k));
        let u64_of = |k: &str| doc.get(k).and_then(Json::as_u64).ok_or_else(|| bad(k));
        let dtype = match str_of("dtype")?.as_str() {
            "f32" => DType::F32,
            "f64" => DType::F64,
            "i32" => DType::I32,
            "u8" => DType::U8,
            _ => return Err(bad("a known dtype")),
        };
        let concat_coord = match doc.get("concat_coord") {
            Some(Json::Object(c)) => Some(ConcatCoord {
                t0: c.get("t0").and_then(attrs::as_float).ok_or_else(|| bad("concat_coord.t0"))?,
                dtype: c.get("dtype").and_then(Json::as_str).unwrap_or("f64").to_string(),
                attrs: c.get("attrs").and_then(Json::as_object).cloned().unwrap_or_default(),
            }),
            _ => None,
        };
        Ok(StoreSpec {
            store: PathBuf::from(str_of(STORE_KEY)?),
            array: str_of("array")?,
            format: Format::from_number(u64_of("zarr_format")?).ok_or_else(|| bad("zarr_format 2 or 3"))?,
            concat_dim: str_of("concat_dim")?,
            axis: u64_of("axis")? as usize,
            new_axis: doc.get("new_axis").and_then(Json::as_bool).ok_or_else(|| bad("new_axis"))?,
            chunk: u64_of("chunk")?,
            field_shape: doc
                .get("field_shape")
                .and_then(Json::as_array)
                .map(|a| a.iter().filter_map(Json::as_u64).map(|n| n as usize).collect())
                .ok_or_else(|| bad("field_shape"))?,
            dtype,
            coord_names: doc
                .get("coord_names")
                .and_then(Json::as_array)
                .map(|a| a.iter().filter_map(Json::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
            concat_coord,
            coord_step: doc.get("coord_step").and_then(attrs::as_float).unwrap_or(1.0),
            level: u64_of("level")? as u32,
        })
    }

    /// The data array's shape with `len` positions along `concat_dim`.
    fn shape(&self, len: u64) -> Vec<u64> {
        let mut shape: Vec<u64> = self.field_shape.iter().map(|&n| n as u64).collect();
        if self.new_axis {
            shape.insert(0, len);
        } else {
            shape[self.axis] = len;
        }
        shape
    }

    fn open(&self) -> Result<Arc<AtomicStore>, String> {
        AtomicStore::open(&self.store)
    }
}

/// Finds the input value that `zarr_create` returned.
fn find_spec(plugin: &str, inputs: &Inputs) -> Result<StoreSpec, TaskError> {
    let doc = inputs
        .iter()
        .flat_map(|i| i.values())
        .find_map(|v| match v {
            Value::Json(doc) if doc.get(STORE_KEY).is_some() => Some(doc),
            _ => None,
        })
        .ok_or_else(|| {
            TaskError::msg(format!("`{plugin}` needs the output of a `zarr_create` step among its inputs"))
        })?;
    StoreSpec::from_json(doc).map_err(TaskError::msg)
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

fn optional_name(args: &Args, name: &str) -> Result<Option<String>, ArgError> {
    match args.get(name) {
        None => Ok(None),
        Some(Json::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        other => Err(ArgError::new(name, format!("`{name}` must be a name, got {}", shown(other)))),
    }
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

/// The coordinate entry of `dim` in an array's `coords` attribute.
fn coord_of<'a>(array: &'a Array, dim: &str) -> Option<&'a Map<String, Json>> {
    array.attrs().get(attrs::COORDS)?.get(dim)?.as_object()
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
fn clear_store(path: &Path) -> Result<Option<PathBuf>, String> {
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

/// Marks the name of an old store moved aside by [`clear_store`].
const REPLACED: &str = "replaced";

/// Deletes old stores that `zarr_create` moved aside for `store` (this build's, and any a
/// killed build left).
fn remove_replaced(store: &Path) -> Result<(), String> {
    let Some(dir) = store.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p }) else {
        return Ok(());
    };
    let name = store.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!(".{name}.{REPLACED}-");
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path())
                .map_err(|e| format!("cannot remove the old store {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

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

fn write_1d(
    store: &Arc<AtomicStore>,
    format: Format,
    name: &str,
    dtype: &str,
    values: &[f64],
    attrs: Map<String, Json>,
    level: u32,
) -> Result<(), String> {
    let ztype = ZType::of_name(dtype).ok_or_else(|| format!("coordinate `{name}` has an unknown dtype `{dtype}`"))?;
    let len = values.len() as u64;
    let spec = ArraySpec {
        name,
        ztype,
        shape: vec![len],
        chunks: vec![len.max(1)],
        dims: vec![name.to_string()],
        attrs,
        level,
    };
    let array = meta::array(store, &spec, format)?;
    meta::store_array_metadata(&array)?;
    if len == 0 {
        return Ok(());
    }
    let fail = |e: zarrs::array::ArrayError| format!("coordinate `{name}`: {e}");
    macro_rules! put {
        ($t:ty) => {
            array.store_chunk(&[0], values.iter().map(|&v| v as $t).collect::<Vec<$t>>()).map_err(fail)
        };
    }
    match ztype {
        ZType::I8 => put!(i8),
        ZType::U8 => put!(u8),
        ZType::I16 => put!(i16),
        ZType::U16 => put!(u16),
        ZType::I32 => put!(i32),
        ZType::U32 => put!(u32),
        ZType::I64 => put!(i64),
        ZType::U64 => put!(u64),
        ZType::F32 => put!(f32),
        ZType::F64 => put!(f64),
    }
}

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
        let mut array = meta::open_array(&store, &spec.array).map_err(fail)?;
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
fn positions(spec: &StoreSpec, block: u64, fields: &[&Array]) -> Result<Vec<usize>, String> {
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

impl Plugin for ZarrFinalize {
    fn name(&self) -> &'static str {
        "zarr_finalize"
    }

    fn about(&self) -> &'static str {
        "finishes a store after its write_zarr tasks: the length along the concat dim, that dim's coordinate, consolidated metadata, a file-system sync; returns the store's path"
    }

    fn args(&self) -> &'static [ArgSpec] {
        &[]
    }

    fn output(&self, _args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        Ok(ValueMeta::Path)
    }

    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        16 << 20
    }

    fn run(&self, ctx: &TaskContext, _args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let spec = find_spec("zarr_finalize", inputs)?;
        let fail = |e: String| TaskError::msg(format!("finalizing the Zarr store {}: {e}", spec.store.display()));
        let mut written: std::collections::BTreeMap<u64, Option<f64>> = std::collections::BTreeMap::new();
        for report in inputs.iter().flat_map(|i| i.values()).filter_map(|v| match v {
            Value::Json(doc) if doc.get(WRITTEN_KEY).is_some() => Some(doc),
            _ => None,
        }) {
            let positions = report.get("positions").and_then(Json::as_array).cloned().unwrap_or_default();
            let coords = report.get("coords").and_then(Json::as_array).cloned().unwrap_or_default();
            for (i, p) in positions.iter().enumerate() {
                let p = p.as_u64().ok_or_else(|| fail(format!("a write_zarr report has position {p}")))?;
                written.insert(p, coords.get(i).and_then(|c| if c.is_null() { None } else { attrs::as_float(c) }));
            }
        }
        let len = written.keys().next_back().map_or(0, |&p| p + 1);
        let gaps: Vec<u64> = (0..len).filter(|p| !written.contains_key(p)).collect();
        if !gaps.is_empty() {
            ctx.log(&format!(
                "{} of {len} positions of `{}` were not written (fill values): {gaps:?}",
                gaps.len(),
                spec.concat_dim
            ));
        }
        let store = spec.open().map_err(fail)?;
        let (t0, dtype, attrs) = match &spec.concat_coord {
            Some(c) => (Some(c.t0), c.dtype.as_str(), c.attrs.clone()),
            None => (None, "i64", Map::new()),
        };
        let values: Vec<f64> = (0..len)
            .map(|p| match written.get(&p) {
                Some(Some(t)) => *t,
                _ => t0.map_or(p as f64, |t0| t0 + p as f64 * spec.coord_step),
            })
            .collect();
        write_1d(&store, spec.format, &spec.concat_dim, dtype, &values, attrs, spec.level).map_err(fail)?;
        let mut array = meta::open_array(&store, &spec.array).map_err(fail)?;
        array.set_shape(spec.shape(len)).map_err(|e| fail(e.to_string()))?;
        meta::store_array_metadata(&array).map_err(fail)?;
        let mut names: Vec<&str> = spec.coord_names.iter().map(String::as_str).collect();
        names.push(&spec.array);
        sync(&spec.store).map_err(fail)?;
        meta::consolidate(&store, spec.format, &names).map_err(fail)?;
        sync(&spec.store).map_err(fail)?;
        remove_replaced(&spec.store).map_err(fail)?;
        Ok(Value::Path(spec.store.clone()))
    }
}

/// Flushes the file system holding `dir` to disk (`syncfs`): one call for every chunk the run
/// wrote, instead of a sync per file while writing.
fn sync(dir: &Path) -> Result<(), String> {
    let handle = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: `syncfs` only reads the descriptor, which `handle` keeps open for the call.
        if unsafe { libc::syncfs(handle.as_raw_fd()) } != 0 {
            return Err(format!("syncing {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    handle.sync_all().map_err(|e| format!("syncing {}: {e}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
