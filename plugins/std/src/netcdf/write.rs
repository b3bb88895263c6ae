//! Writing one [`Array`] as a variable of a netCDF-4 file, with the dims, coordinate variables,
//! attributes and packing its array attributes describe (layout in [`super::attrs`]).

use std::path::Path;

use netcdf_writer::{
    DimensionId, NcAttrValue, NcFileBuilder, NcFillValueType, NcWriteFormat, NcWriteOptions, NcWriteType, VariableId,
};
use runner_plugin::serde_json::{Map, Value as Json};
use runner_plugin::{Array, DType};

use super::attrs;

/// How to store the variable.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOptions {
    /// The variable's name in the file.
    pub variable: String,
    /// Deflate level 0–9 (0: no compression).
    pub deflate: u8,
    pub shuffle: bool,
    /// Chunk shape; `None`: one chunk per field of the last two dims.
    pub chunks: Option<Vec<u64>>,
    /// Store floats packed as the `encoding` attribute says (ints with `scale_factor`, ...).
    pub pack: bool,
}

/// The file's bytes for `arrays`, each a variable named as in `names` (dims of one name must
/// have one size; coordinates and global attributes are taken from the first array that has them).
pub fn encode(arrays: &[&Array], names: &[String], options: &WriteOptions) -> Result<Vec<u8>, String> {
    let mut file = NcFileBuilder::new();
    let nc = |e: netcdf_writer::Error| e.to_string();
    let mut dims: Vec<(String, usize, DimensionId)> = Vec::new();
    let mut coords_written: Vec<String> = Vec::new();
    let mut globals_written = false;
    for (array, name) in arrays.iter().zip(names) {
        let fail = |e: String| format!("variable `{name}`: {e}");
        let meta = Meta::of(array).map_err(fail)?;
        let mut dim_ids = Vec::with_capacity(array.shape().len());
        for (dim, &size) in meta.dims.iter().zip(array.shape()) {
            match dims.iter().find(|(n, _, _)| n == dim) {
                Some((_, known, id)) if *known == size => dim_ids.push(*id),
                Some((_, known, _)) => {
                    return Err(fail(format!("dim `{dim}` has {size} values, but {known} in an earlier variable")));
                }
                None => {
                    let id = file.add_dimension(dim.clone(), size as u64).map_err(nc)?;
                    dims.push((dim.clone(), size, id));
                    dim_ids.push(id);
                }
            }
        }
        for (coord_name, coord) in &meta.coords {
            if coords_written.contains(coord_name) || names.contains(coord_name) {
                continue;
            }
            add_coordinate(&mut file, &meta.dims, &dim_ids, coord_name, coord)
                .map_err(|e| fail(format!("coordinate `{coord_name}`: {e}")))?;
            coords_written.push((*coord_name).clone());
        }
        let packing = Packing::of(array.dtype(), meta.encoding, options.pack).map_err(fail)?;
        let var = add_data(&mut file, name, &dim_ids, array, &packing).map_err(fail)?;
        for (attr, value) in meta.var_attrs {
            if matches!(attr.as_str(), "_FillValue" | "scale_factor" | "add_offset") {
                continue;
            }
            let value = attrs::from_json(attr, value, type_of(meta.var_attr_types, attr)).map_err(fail)?;
            file.add_variable_attribute(var, attr.clone(), value).map_err(nc)?;
        }
        for (attr, value) in meta.extra_attrs {
            let value = attrs::from_json(attr, value, None).map_err(fail)?;
            file.add_variable_attribute(var, attr.clone(), value).map_err(nc)?;
        }
        if let Some(globals) = meta.globals.filter(|_| !globals_written) {
            for (attr, value) in globals {
                let value = attrs::from_json(attr, value, type_of(meta.global_types, attr)).map_err(fail)?;
                file.add_attribute(attr.clone(), value).map_err(nc)?;
            }
            globals_written = true;
        }
        if !array.shape().is_empty() {
            let chunks = match &options.chunks {
                Some(chunks) => chunks.clone(),
                None => default_chunks(array.shape()),
            };
            file.set_variable_chunking(var, chunks).map_err(nc)?;
            if options.deflate > 0 {
                file.set_variable_deflate(var, Some(options.deflate), options.shuffle).map_err(nc)?;
            } else if options.shuffle {
                file.set_variable_shuffle(var, true).map_err(nc)?;
            }
        }
    }
    let (_, bytes) = file.to_vec(NcWriteOptions { format: NcWriteFormat::Nc4 }).map_err(nc)?;
    Ok(bytes)
}

/// One chunk per field: 1 along the leading dims, whole along the last two.
pub fn default_chunks(shape: &[usize]) -> Vec<u64> {
    let fields_from = shape.len().saturating_sub(2);
    shape.iter().enumerate().map(|(i, &n)| if i < fields_from { 1 } else { (n as u64).max(1) }).collect()
}

fn type_of<'a>(types: Option<&'a Map<String, Json>>, name: &str) -> Option<&'a str> {
    types.and_then(|t| t.get(name)).and_then(Json::as_str)
}

/// The metadata an array's attributes give, with defaults for an array that has none.
struct Meta<'a> {
    dims: Vec<String>,
    coords: Vec<(&'a String, &'a Map<String, Json>)>,
    var_attrs: Vec<(&'a String, &'a Json)>,
    var_attr_types: Option<&'a Map<String, Json>>,
    extra_attrs: Vec<(&'a String, &'a Json)>,
    encoding: Option<&'a Map<String, Json>>,
    globals: Option<&'a Map<String, Json>>,
    global_types: Option<&'a Map<String, Json>>,
}

impl<'a> Meta<'a> {
    fn of(array: &'a Array) -> Result<Meta<'a>, String> {
        let a = array.attrs();
        let object = |key: &str| a.get(key).and_then(Json::as_object);
        let rank = array.shape().len();
        let dims = match a.get(attrs::DIMS) {
            Some(Json::Array(names)) if names.len() == rank => names
                .iter()
                .map(|n| n.as_str().map(str::to_string).ok_or_else(|| format!("`dims` holds {n}, not a name")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(format!(
                    "the array's `dims` attribute is {other}, which does not name its {rank} dims (shape {:?})",
                    array.shape()
                ));
            }
            None => (0..rank).map(|i| format!("dim_{i}")).collect(),
        };
        let coords = object(attrs::COORDS)
            .map(|c| c.iter().filter_map(|(name, entry)| entry.as_object().map(|e| (name, e))).collect())
            .unwrap_or_default();
        let var_attrs = object(attrs::ATTRS).map(|m| m.iter().collect()).unwrap_or_default();
        let extra_attrs = a.iter().filter(|(k, _)| !attrs::RESERVED.contains(&k.as_str())).collect();
        Ok(Meta {
            dims,
            coords,
            var_attrs,
            var_attr_types: object(attrs::ATTR_TYPES),
            extra_attrs,
            encoding: object(attrs::ENCODING),
            globals: object(attrs::GLOBAL_ATTRS),
            global_types: object(attrs::GLOBAL_ATTR_TYPES),
        })
    }
}

fn add_coordinate(
    file: &mut NcFileBuilder,
    dims: &[String],
    dim_ids: &[DimensionId],
    name: &str,
    coord: &Map<String, Json>,
) -> Result<(), String> {
    let coord_dims: Vec<&str> = match coord.get("dims") {
        Some(Json::Array(names)) => names.iter().filter_map(Json::as_str).collect(),
        _ => vec![name],
    };
    // A coordinate over dims the variable does not have cannot be written beside it.
    let Some(ids) = coord_dims
        .iter()
        .map(|d| dims.iter().position(|n| n == d).map(|p| dim_ids[p]))
        .collect::<Option<Vec<DimensionId>>>()
    else {
        return Ok(());
    };
    let values: &[Json] = coord.get("values").and_then(Json::as_array).map_or(&[], Vec::as_slice);
    let floats: Vec<f64> = values
        .iter()
        .map(|v| attrs::as_float(v).ok_or(format!("value {v} is not a number")))
        .collect::<Result<_, _>>()?;
    let nc = |e: netcdf_writer::Error| e.to_string();
    let dtype = coord.get("dtype").and_then(Json::as_str).unwrap_or("f64");
    fn put<T: NcWriteType>(
        file: &mut NcFileBuilder,
        name: &str,
        ids: &[DimensionId],
        values: Vec<T>,
    ) -> Result<VariableId, String> {
        let var = file.add_variable::<T>(name, ids).map_err(|e| e.to_string())?;
        file.write_variable(var, &values).map_err(|e| e.to_string())?;
        Ok(var)
    }
    let var = match dtype {
        "f32" => put(file, name, &ids, floats.iter().map(|&v| v as f32).collect())?,
        "f64" => put(file, name, &ids, floats)?,
        "i8" => put(file, name, &ids, floats.iter().map(|&v| v as i8).collect())?,
        "u8" => put(file, name, &ids, floats.iter().map(|&v| v as u8).collect())?,
        "i16" => put(file, name, &ids, floats.iter().map(|&v| v as i16).collect())?,
        "u16" => put(file, name, &ids, floats.iter().map(|&v| v as u16).collect())?,
        "i32" => put(file, name, &ids, floats.iter().map(|&v| v as i32).collect())?,
        "u32" => put(file, name, &ids, floats.iter().map(|&v| v as u32).collect())?,
        "i64" => put(file, name, &ids, floats.iter().map(|&v| v as i64).collect())?,
        "u64" => put(file, name, &ids, floats.iter().map(|&v| v as u64).collect())?,
        other => return Err(format!("unknown dtype `{other}`")),
    };
    let types = coord.get("attr_types").and_then(Json::as_object);
    if let Some(Json::Object(coord_attrs)) = coord.get("attrs") {
        for (attr, value) in coord_attrs {
            let value = attrs::from_json(attr, value, type_of(types, attr))?;
            file.add_variable_attribute(var, attr.clone(), value).map_err(nc)?;
        }
    }
    Ok(())
}

/// How the data variable is stored.
#[derive(Debug, Clone, PartialEq)]
enum Packing {
    /// As the array holds it; floats get `_FillValue` (NaN unless the encoding names one).
    Plain { fill: Option<f64>, narrow_to: Option<String> },
    /// Floats as ints of `dtype`: `round((x - add_offset) / scale_factor)`, NaN as `fill`.
    Packed { dtype: String, scale: Option<f64>, offset: Option<f64>, fill: Option<f64>, packing_type: String },
}

impl Packing {
    fn of(dtype: DType, encoding: Option<&Map<String, Json>>, pack: bool) -> Result<Packing, String> {
        let number = |key: &str| encoding.and_then(|e| e.get(key)).and_then(attrs::as_float);
        let stored = encoding.and_then(|e| e.get("dtype")).and_then(Json::as_str).map(str::to_string);
        let fill = number("_FillValue").or_else(|| number("missing_value"));
        let is_int_type = |t: &str| t.starts_with('i') || t.starts_with('u');
        let float_data = matches!(dtype, DType::F32 | DType::F64);
        match stored {
            Some(t) if pack && float_data && is_int_type(&t) => Ok(Packing::Packed {
                dtype: t,
                scale: number("scale_factor"),
                offset: number("add_offset"),
                fill,
                packing_type: encoding
                    .and_then(|e| e.get("packing_type"))
                    .and_then(Json::as_str)
                    .unwrap_or(if dtype == DType::F32 { "f32" } else { "f64" })
                    .to_string(),
            }),
            Some(t) if pack && dtype == DType::I32 && matches!(t.as_str(), "i8" | "i16" | "u16") => {
                Ok(Packing::Plain { fill, narrow_to: Some(t) })
            }
            _ => Ok(Packing::Plain { fill: if pack { fill } else { None }, narrow_to: None }),
        }
    }
}

fn add_data(
    file: &mut NcFileBuilder,
    name: &str,
    dim_ids: &[DimensionId],
    array: &Array,
    packing: &Packing,
) -> Result<VariableId, String> {
    match packing {
        Packing::Plain { fill, narrow_to } => match (array.dtype(), narrow_to.as_deref()) {
            (DType::F32, _) => {
                let values = array.view::<f32>()?;
                let fill = fill.map_or(f32::NAN, |f| f as f32);
                let data: Vec<f32> = values.iter().map(|&v| if v.is_nan() { fill } else { v }).collect();
                plain(file, name, dim_ids, &data, Some(fill))
            }
            (DType::F64, _) => {
                let values = array.view::<f64>()?;
                let fill = fill.unwrap_or(f64::NAN);
                let data: Vec<f64> = values.iter().map(|&v| if v.is_nan() { fill } else { v }).collect();
                plain(file, name, dim_ids, &data, Some(fill))
            }
            (DType::I32, Some("i8")) => narrowed::<i8>(file, name, dim_ids, array, *fill),
            (DType::I32, Some("i16")) => narrowed::<i16>(file, name, dim_ids, array, *fill),
            (DType::I32, Some("u16")) => narrowed::<u16>(file, name, dim_ids, array, *fill),
            (DType::I32, _) => {
                let data: Vec<i32> = array.view::<i32>()?.iter().copied().collect();
                plain(file, name, dim_ids, &data, fill.map(|f| f as i32))
            }
            (DType::U8, _) => {
                let data: Vec<u8> = array.view::<u8>()?.iter().copied().collect();
                plain(file, name, dim_ids, &data, fill.map(|f| f as u8))
            }
            (other, _) => Err(format!("cannot write an array of {other}; expected f32, f64, i32 or u8")),
        },
        Packing::Packed { dtype, scale, offset, fill, packing_type } => {
            let values: Vec<f64> = match array.dtype() {
                DType::F32 => array.view::<f32>()?.iter().map(|&v| f64::from(v)).collect(),
                _ => array.view::<f64>()?.iter().copied().collect(),
            };
            let in_f32 = array.dtype() == DType::F32;
            let var = match dtype.as_str() {
                "i8" => packed::<i8>(file, name, dim_ids, &values, *scale, *offset, *fill, in_f32)?,
                "u8" => packed::<u8>(file, name, dim_ids, &values, *scale, *offset, *fill, in_f32)?,
                "i16" => packed::<i16>(file, name, dim_ids, &values, *scale, *offset, *fill, in_f32)?,
                "u16" => packed::<u16>(file, name, dim_ids, &values, *scale, *offset, *fill, in_f32)?,
                "i32" => packed::<i32>(file, name, dim_ids, &values, *scale, *offset, *fill, in_f32)?,
                other => return Err(format!("cannot pack into `{other}`: expected i8, u8, i16, u16 or i32")),
            };
            for (attr, value) in [("scale_factor", scale), ("add_offset", offset)] {
                if let Some(v) = value {
                    let value = if packing_type == "f32" {
                        NcAttrValue::Floats(vec![*v as f32])
                    } else {
                        NcAttrValue::Doubles(vec![*v])
                    };
                    file.add_variable_attribute(var, attr, value).map_err(|e| e.to_string())?;
                }
            }
            Ok(var)
        }
    }
}

fn plain<T: NcFillValueType>(
    file: &mut NcFileBuilder,
    name: &str,
    dim_ids: &[DimensionId],
    data: &[T],
    fill: Option<T>,
) -> Result<VariableId, String> {
    let var = file.add_variable::<T>(name, dim_ids).map_err(|e| e.to_string())?;
    if let Some(fill) = fill {
        file.set_variable_fill_value(var, fill).map_err(|e| e.to_string())?;
    }
    file.write_variable(var, data).map_err(|e| e.to_string())?;
    Ok(var)
}

/// A narrow integer type that `i32` values (and an `f64` fill) convert into when they fit.
trait Narrow: NcFillValueType + TryFrom<i64> {
    const NAME: &'static str;
    const MIN: f64;
    const MAX: f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! narrow {
    ($($t:ty => $name:literal),*) => {$(
        impl Narrow for $t {
            const NAME: &'static str = $name;
            const MIN: f64 = <$t>::MIN as f64;
            const MAX: f64 = <$t>::MAX as f64;
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
narrow!(i8 => "i8", u8 => "u8", i16 => "i16", u16 => "u16", i32 => "i32");

fn narrowed<T: Narrow>(
    file: &mut NcFileBuilder,
    name: &str,
    dim_ids: &[DimensionId],
    array: &Array,
    fill: Option<f64>,
) -> Result<VariableId, String> {
    let data: Vec<T> = array
        .view::<i32>()?
        .iter()
        .map(|&v| T::try_from(i64::from(v)).map_err(|_| format!("value {v} does not fit in {}", T::NAME)))
        .collect::<Result<_, _>>()?;
    plain(file, name, dim_ids, &data, fill.map(T::from_f64))
}

/// Packs floats as xarray does: `(x - add_offset) / scale_factor`, rounded half to even, in
/// the array's float type; NaN becomes the fill value.
#[allow(clippy::too_many_arguments)]
fn packed<T: Narrow>(
    file: &mut NcFileBuilder,
    name: &str,
    dim_ids: &[DimensionId],
    values: &[f64],
    scale: Option<f64>,
    offset: Option<f64>,
    fill: Option<f64>,
    in_f32: bool,
) -> Result<VariableId, String> {
    let pack = |v: f64| -> f64 {
        if in_f32 {
            let mut x = v as f32;
            if let Some(o) = offset {
                x -= o as f32;
            }
            if let Some(s) = scale {
                x /= s as f32;
            }
            f64::from(x.round_ties_even())
        } else {
            let mut x = v;
            if let Some(o) = offset {
                x -= o;
            }
            if let Some(s) = scale {
                x /= s;
            }
            x.round_ties_even()
        }
    };
    let data: Vec<T> = values
        .iter()
        .map(|&v| {
            if v.is_nan() {
                return fill.map(T::from_f64).ok_or_else(|| {
                    format!("a NaN value cannot be packed into {} without a `_FillValue` in the encoding", T::NAME)
                });
            }
            let p = pack(v);
            if p < T::MIN || p > T::MAX {
                return Err(format!("value {v} packs to {p}, outside the range of {}", T::NAME));
            }
            Ok(T::from_f64(p))
        })
        .collect::<Result<_, _>>()?;
    plain(file, name, dim_ids, &data, fill.map(T::from_f64))
}

/// Writes `bytes` to `path` under a temporary name in the same directory, then renames it, so a
/// reader (or a crash) never sees half a file. Creates parent directories.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    runner_plugin::files::write_atomically(path, |file| std::io::Write::write_all(file, bytes))
}
