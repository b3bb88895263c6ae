//! `read_netcdf` and `write_netcdf`: one variable of a netCDF file, with its dims, coordinate
//! variables and attributes carried as array attributes, so that a round trip keeps the CF
//! metadata and the Zarr plugins can describe the store from it.
//!
//! Files are read and written by the pure-Rust `netcdf-reader` / `netcdf-writer` crates
//! (netCDF-3 and netCDF-4 with deflate and shuffle; no C library, so no process-wide lock
//! around every call as libnetcdf needs: many workers read files at once).
//!
//! # Array attributes
//! ```text
//! variable:     "sst"
//! dims:         ["time", "zlev", "lat", "lon"]          one name per axis, outermost first
//! attrs:        {"long_name": "Daily sea surface temperature", "units": "Celsius",
//!                "valid_min": -300, "valid_max": 4500}  the variable's attributes, less packing
//! attr_types:   {"valid_min": "i16", "valid_max": "i16"} netCDF types JSON does not imply
//! encoding:     {"dtype": "i16", "scale_factor": 0.01, "add_offset": 0.0, "_FillValue": -999,
//!                "packing_type": "f32"}                 how the file stores the values
//! coords:       {"lat": {"dims": ["lat"], "dtype": "f32", "values": [-89.875, ...],
//!                        "attrs": {"units": "degrees_north"}, "attr_types": {}}, ...}
//! global_attrs: {"Conventions": "CF-1.6", ...}          the file's attributes
//! global_attr_types: {...}
//! ```
//! Attribute values: see [`attrs`]. `encoding` keeps the packing attributes only when the
//! values were decoded with them.
//!
//! # Decoding (as xarray's `mask_and_scale`)
//! Values equal to `_FillValue` or `missing_value` become NaN, then `scale_factor` and
//! `add_offset` apply, in the float type xarray chooses (f32 for `short` data packed with
//! `float` attributes, as in NOAA OISST). Ints with nothing to decode stay whole: `i8`, `i16`,
//! `u16`, `i32` as i32, `u8` as u8; `u32` and 64-bit ints become f64.
//!
//! # Encoding
//! `write_netcdf` writes netCDF-4 (HDF5), chunked (by default one chunk per field of the last
//! two dims) and deflated. With `pack` (the default), floats whose `encoding` names an int
//! `dtype` are stored packed again: `round_half_even((x - add_offset) / scale_factor)`, NaN as
//! `_FillValue`; unpacked floats store NaN as such, with `_FillValue` NaN unless the encoding
//! gives one. Coordinates are written in their `dtype` with their attributes. Any array
//! attribute outside the layout above (say `thresholds` from `threshold`) becomes an attribute
//! of the variable.

pub mod attrs;
mod kept;
pub mod read;
pub mod write;

use std::path::PathBuf;

use runner_plugin::serde_json::Value as Json;
use runner_plugin::{
    ArgError, ArgSpec, Args, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{expect_array, shown};

/// Reads one variable of a netCDF-3 or netCDF-4 file.
pub struct ReadNetcdf;

/// Writes one array as a variable of a netCDF-4 file.
pub struct WriteNetcdf;

const READ_ARGS: &[ArgSpec] = &[
    ArgSpec::required("path", "the netCDF file, relative to the directory runner started in").input_path(),
    ArgSpec::required("variable", "the variable to read, e.g. `sst`"),
    ArgSpec::optional(
        "mask_and_scale",
        "true",
        "decode as xarray does: _FillValue and missing_value as NaN, then scale_factor and add_offset",
    ),
];

const WRITE_ARGS: &[ArgSpec] = &[
    ArgSpec::required("path", "the netCDF-4 file to write (parent dirs are created; written atomically)").output_path(),
    ArgSpec::optional("variable", "the input's `variable` attribute", "the variable's name in the file"),
    ArgSpec::optional("deflate", "4", "deflate level, 0 (none) to 9"),
    ArgSpec::optional("shuffle", "true", "the HDF5 shuffle filter before deflate"),
    ArgSpec::optional("chunks", "1 per leading dim, whole last two dims", "chunk shape, one size per dim"),
    ArgSpec::optional("pack", "true", "store floats packed as the input's `encoding` says (ints with scale_factor)"),
];

/// Arguments may be booleans or strings holding one (templates expand to strings).
fn bool_arg(args: &Args, name: &str, default: bool) -> Result<bool, ArgError> {
    match args.get(name) {
        None => Ok(default),
        Some(Json::Bool(b)) => Ok(*b),
        Some(Json::String(s)) if s == "true" => Ok(true),
        Some(Json::String(s)) if s == "false" => Ok(false),
        other => Err(ArgError::new(name, format!("`{name}` must be true or false, got {}", shown(other)))),
    }
}

fn path_arg(args: &Args) -> Result<PathBuf, ArgError> {
    let path = args.str("path")?;
    if path.is_empty() {
        return Err(ArgError::new("path", "`path` must name a file, got an empty string"));
    }
    Ok(PathBuf::from(path))
}

fn name_arg(args: &Args, name: &str) -> Result<Option<String>, ArgError> {
    match args.get(name) {
        None => Ok(None),
        Some(_) => {
            let value = args.str(name)?;
            if value.is_empty() {
                return Err(ArgError::new(name, format!("`{name}` must be a name, got an empty string")));
            }
            Ok(Some(value))
        }
    }
}

impl Plugin for ReadNetcdf {
    fn name(&self) -> &'static str {
        "read_netcdf"
    }

    fn about(&self) -> &'static str {
        "reads one variable of a netCDF-3/4 file, decoded (fill values as NaN, scale_factor/add_offset applied), with its dims, coordinate variables and attributes as array attributes"
    }

    fn args(&self) -> &'static [ArgSpec] {
        READ_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args)?;
        name_arg(args, "variable")?.ok_or_else(|| ArgError::new("variable", "missing required argument `variable`"))?;
        bool_arg(args, "mask_and_scale", true).map(|_| ())
    }

    /// The task's file, when it is already there, tells the shape and dtype (at planning, the
    /// first task's). The file stays open on this thread for the task's run ([`kept`]).
    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let (path, variable, decode) =
            (path_arg(args)?, args.str("variable")?, bool_arg(args, "mask_and_scale", true)?);
        let Ok((file, stamp)) = read::open_stamped(&path) else { return Ok(ValueMeta::Unknown) };
        let meta = match read::find(&file, &path, &variable).map(|var| (read::decode_of(var, decode), var)) {
            Ok((Ok(d), var)) => ValueMeta::Array { dtype: d.dtype, shape: read::shape_of(var) },
            _ => ValueMeta::Unknown,
        };
        kept::keep(&path, stamp, file);
        Ok(meta)
    }

    /// The decoded array, the stored values it is decoded from (at most 8 bytes each) and the
    /// reader's chunk cache.
    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        match output {
            ValueMeta::Array { dtype, shape } => {
                // Saturating: a header may declare any shape (the read refuses what cannot fit).
                let len = shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
                len.saturating_mul((dtype.size() as u64 + 8).min(16)).saturating_add(2 << 20)
            }
            _ => 64 << 20,
        }
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let arg = |e: ArgError| TaskError::msg(e.message);
        let path = path_arg(args).map_err(arg)?;
        let variable = args.str("variable").map_err(arg)?;
        let decode = bool_arg(args, "mask_and_scale", true).map_err(arg)?;
        match read::read(ctx, &path, &variable, decode) {
            Ok(array) => Ok(Value::Array(array)),
            Err(read::ReadError::Missing(message)) => Err(TaskError::missing(message)),
            Err(read::ReadError::Failed(message)) => Err(TaskError::msg(message)),
        }
    }
}

impl WriteNetcdf {
    fn options(args: &Args, array_variable: Option<&str>) -> Result<write::WriteOptions, ArgError> {
        let variable = match (name_arg(args, "variable")?, array_variable) {
            (Some(v), _) => v,
            (None, Some(v)) => v.to_string(),
            (None, None) => "data".to_string(),
        };
        let deflate = args.u64_or("deflate", 4)?;
        if deflate > 9 {
            return Err(ArgError::new("deflate", format!("`deflate` must be a level from 0 to 9, got {deflate}")));
        }
        let chunks = match args.get("chunks") {
            None => None,
            Some(Json::Array(items)) => Some(
                items.iter().map(|v| v.as_u64().filter(|&n| n > 0)).collect::<Option<Vec<u64>>>().ok_or_else(|| {
                    ArgError::new(
                        "chunks",
                        format!("`chunks` must be a list of positive sizes, got {}", shown(args.get("chunks"))),
                    )
                })?,
            ),
            other => {
                return Err(ArgError::new(
                    "chunks",
                    format!("`chunks` must be a list of positive sizes, got {}", shown(other)),
                ));
            }
        };
        Ok(write::WriteOptions {
            variable,
            deflate: deflate as u8,
            shuffle: bool_arg(args, "shuffle", true)?,
            chunks,
            pack: bool_arg(args, "pack", true)?,
        })
    }
}

impl Plugin for WriteNetcdf {
    fn name(&self) -> &'static str {
        "write_netcdf"
    }

    fn about(&self) -> &'static str {
        "writes one array (or each of a gathered list, named by its `variable` attribute) as a variable of a netCDF-4 file (chunked, deflated), with the dims, coordinates, attributes and packing its array attributes describe; returns the path"
    }

    fn args(&self) -> &'static [ArgSpec] {
        WRITE_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args)?;
        Self::options(args, None).map(|_| ())
    }

    fn output(&self, _args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let [input] = inputs else {
            return Err(ArgError::general(format!("`write_netcdf` takes exactly one input, got {}", inputs.len())));
        };
        crate::support::array_shape_of("write_netcdf", input, ALL_DTYPES)?;
        Ok(ValueMeta::Path)
    }

    /// The writer holds the values twice (as given, then encoded) and the compressed file.
    fn estimate(&self, _args: &Args, inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        inputs.buffer_bytes().unwrap_or(64 << 20) * 3 + (1 << 20)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let [input] = inputs.iter().collect::<Vec<_>>()[..] else {
            return Err(TaskError::msg(format!("`write_netcdf` takes exactly one input, got {}", inputs.len())));
        };
        let arrays: Vec<_> = input
            .values()
            .map(|v| expect_array("write_netcdf", input.name(), v, ALL_DTYPES))
            .collect::<Result<_, _>>()?;
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let stored_name =
            |a: &runner_plugin::Array| a.attrs().get(attrs::VARIABLE).and_then(Json::as_str).map(str::to_string);
        let options = Self::options(args, arrays.first().and_then(|a| stored_name(a)).as_deref())
            .map_err(|e| TaskError::msg(e.message))?;
        // One array is named by `variable`; each of a gathered list by its own `variable` attribute.
        let names: Vec<String> = if input.is_gathered() {
            arrays
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    stored_name(a).ok_or_else(|| {
                        TaskError::msg(format!(
                            "array {i} of input `{}` has no `variable` attribute to name it by",
                            input.name()
                        ))
                    })
                })
                .collect::<Result<_, _>>()?
        } else {
            vec![options.variable.clone()]
        };
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(TaskError::msg(format!(
                    "two arrays of input `{}` are both variable `{name}`",
                    input.name()
                )));
            }
        }
        for array in &arrays {
            if let Some(chunks) = &options.chunks
                && chunks.len() != array.shape().len()
            {
                return Err(TaskError::msg(format!(
                    "`chunks` {chunks:?} gives {} sizes for an array of {} dims (shape {:?})",
                    chunks.len(),
                    array.shape().len(),
                    array.shape()
                )));
            }
        }
        ctx.will_allocate(arrays.iter().map(|a| a.nbytes()).sum::<u64>() * 2);
        let bytes = write::encode(&arrays, &names, &options)
            .map_err(|e| TaskError::msg(format!("writing {}: {e}", path.display())))?;
        write::write_atomically(&path, &bytes).map_err(TaskError::msg)?;
        Ok(Value::Path(path))
    }
}

const ALL_DTYPES: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::U8];

#[cfg(test)]
mod tests;
