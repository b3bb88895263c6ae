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

mod create;
mod finalize;
mod meta;
pub mod store;
mod write;

use std::path::PathBuf;
use std::sync::Arc;

use runner_plugin::serde_json::{Map, Value as Json, json};
use runner_plugin::{ArgError, Args, Array, DType, Inputs, TaskError, Value};

use crate::netcdf::attrs;
use crate::support::shown;
use meta::{ArraySpec, Format, ZType};
use store::AtomicStore;

pub use create::ZarrCreate;
pub use finalize::ZarrFinalize;
pub use write::WriteZarr;

/// The key that marks `zarr_create`'s output, so the other plugins find it among their inputs.
const STORE_KEY: &str = "zarr_store";

/// The key that marks `write_zarr`'s report.
const WRITTEN_KEY: &str = "zarr_written";

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

    /// Opens the data array of `store`, whose metadata must still give it the fields' shape
    /// beside `concat_dim`, as `zarr_create` made it (a store changed since is an error).
    fn open_array(&self, store: &Arc<AtomicStore>) -> Result<zarrs::array::Array<AtomicStore>, String> {
        let array = meta::open_array(store, &self.array)?;
        let len = array.shape().get(self.axis).copied().unwrap_or(0);
        if array.shape() != self.shape(len).as_slice() {
            return Err(format!(
                "array `{}` is {:?} in its metadata, but the store holds {:?} fields along `{}`",
                self.array,
                array.shape(),
                self.field_shape,
                self.concat_dim
            ));
        }
        Ok(array)
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

fn optional_name(args: &Args, name: &str) -> Result<Option<String>, ArgError> {
    match args.get(name) {
        None => Ok(None),
        Some(Json::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        other => Err(ArgError::new(name, format!("`{name}` must be a name, got {}", shown(other)))),
    }
}

/// The coordinate entry of `dim` in an array's `coords` attribute.
fn coord_of<'a>(array: &'a Array, dim: &str) -> Option<&'a Map<String, Json>> {
    array.attrs().get(attrs::COORDS)?.get(dim)?.as_object()
}

/// Marks the name of an old store moved aside by [`clear_store`].
const REPLACED: &str = "replaced";

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

#[cfg(test)]
mod tests;
