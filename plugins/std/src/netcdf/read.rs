//! Reading one variable of a netCDF file into an [`Array`] with its metadata (layout in
//! [`super::attrs`]), decoded the way xarray decodes it: `_Unsigned = "true"` on a signed
//! integer variable reads its bytes as unsigned (and `"false"` on an unsigned one as signed),
//! `_FillValue` and `missing_value` masked as NaN, `scale_factor` and `add_offset` applied, in
//! the float type xarray chooses. As in xarray, `valid_range`, `valid_min` and `valid_max` mask
//! nothing: they stay attributes of the array.

use std::path::Path;

use netcdf_reader::{NcFile, NcFormat, NcOpenOptions, NcReadable, NcType, NcVariable};
use runner_plugin::serde_json::{Map, Value as Json};
use runner_plugin::size::format_size;
use runner_plugin::{Array, Attrs, DType, TaskContext};

use super::{attrs, kept};

/// Why a read failed: the file is not there (the step's `on_missing` applies), or anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    Missing(String),
    Failed(String),
}

/// Attributes that describe how values are packed in the file; they move to `encoding`.
const PACKING: &[&str] = &["scale_factor", "add_offset", "_FillValue", "missing_value"];

/// The attribute that says a variable's integers are stored with the other signedness.
const UNSIGNED: &str = "_Unsigned";

/// Decoded chunks are read once, so the reader's cache of them would only hold a copy.
const CHUNK_CACHE_BYTES: usize = 1 << 20;

/// Opens `path` (the file [`kept`] on this thread, if it is still the one there), telling a
/// missing file from an unreadable one.
pub fn open(path: &Path) -> Result<NcFile, ReadError> {
    open_stamped(path).map(|(file, _)| file)
}

/// [`open`], and what tells this version of the file from another ([`kept::keep`]).
pub(super) fn open_stamped(path: &Path) -> Result<(NcFile, kept::Stamp), ReadError> {
    let stamp = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Missing(format!("no file {}", path.display())));
        }
        Err(e) => return Err(ReadError::Failed(format!("reading {}: {e}", path.display()))),
        Ok(meta) if meta.is_dir() => {
            return Err(ReadError::Failed(format!("reading {}: it is a directory, not a netCDF file", path.display())));
        }
        Ok(meta) => kept::Stamp::of(&meta),
    };
    if let Some(file) = kept::take(path, &stamp) {
        return Ok((file, stamp));
    }
    let options = NcOpenOptions { chunk_cache_bytes: CHUNK_CACHE_BYTES, ..NcOpenOptions::default() };
    #[cfg(test)]
    OPENED.with(|opened| opened.set(opened.get() + 1));
    NcFile::open_with_options(path, options)
        .map(|file| (file, stamp))
        .map_err(|e| ReadError::Failed(format!("reading {}: not a readable netCDF file: {e}", path.display())))
}

#[cfg(test)]
thread_local! {
    /// How many files this thread has opened anew (not taken as [`kept`]).
    pub static OPENED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The variable `name` of `file`, or an error listing the variables there are.
pub fn find<'f>(file: &'f NcFile, path: &Path, name: &str) -> Result<&'f NcVariable, ReadError> {
    let fail = |e: netcdf_reader::Error| ReadError::Failed(format!("reading {}: {e}", path.display()));
    let variables = file.variables().map_err(fail)?;
    if let Some(var) = variables.iter().find(|v| v.name() == name) {
        return Ok(var);
    }
    let mut data: Vec<&str> = variables.iter().filter(|v| !v.is_coordinate_variable()).map(|v| v.name()).collect();
    if data.is_empty() {
        data = variables.iter().map(|v| v.name()).collect();
    }
    data.sort_unstable();
    let all = variables.iter().map(|v| v.name());
    let hint = crate::support::closest(name, all).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
    let has = if data.is_empty() { "no variables".to_string() } else { format!("the file has: {}", data.join(", ")) };
    Err(ReadError::Failed(format!("no variable `{name}` in {}; {has}{hint}", path.display())))
}

/// How a variable's stored values become the array's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Decode {
    /// The array's dtype.
    pub dtype: DType,
    pub scale: Option<f64>,
    pub offset: Option<f64>,
    /// Stored values that mean "no data" (→ NaN), as values of [`Decode::view`] when given.
    pub fills: Vec<f64>,
    /// The integer type the stored bytes are read as (`_Unsigned`), when not their own.
    pub view: Option<NcType>,
}

/// The integer type of the same size with the other signedness, as `_Unsigned` asks:
/// `"true"` on a signed type, `"false"` on an unsigned one (exactly these words, as xarray
/// reads them); `None` otherwise.
fn unsigned_view(stored: &NcType, attribute: Option<&str>) -> Option<NcType> {
    match (attribute?, stored) {
        ("true", NcType::Byte) => Some(NcType::UByte),
        ("true", NcType::Short) => Some(NcType::UShort),
        ("true", NcType::Int) => Some(NcType::UInt),
        ("true", NcType::Int64) => Some(NcType::UInt64),
        ("false", NcType::UByte) => Some(NcType::Byte),
        ("false", NcType::UShort) => Some(NcType::Short),
        ("false", NcType::UInt) => Some(NcType::Int),
        ("false", NcType::UInt64) => Some(NcType::Int64),
        _ => None,
    }
}

/// A number given in the stored type (a `_FillValue` of a signed variable) as the value its bits
/// hold in `view`'s type: -1 stored in a byte is 255 unsigned.
fn reinterpret(value: f64, stored: &NcType, view: &NcType) -> f64 {
    let bits = match stored {
        NcType::Byte => value as i8 as u8 as u64,
        NcType::Short => value as i16 as u16 as u64,
        NcType::Int => value as i32 as u32 as u64,
        NcType::Int64 => value as i64 as u64,
        NcType::UByte => value as u8 as u64,
        NcType::UShort => value as u16 as u64,
        NcType::UInt => value as u32 as u64,
        _ => value as u64,
    };
    match view {
        NcType::UByte => bits as u8 as f64,
        NcType::UShort => bits as u16 as f64,
        NcType::UInt => bits as u32 as f64,
        NcType::UInt64 => bits as f64,
        NcType::Byte => bits as u8 as i8 as f64,
        NcType::Short => bits as u16 as i16 as f64,
        NcType::Int => bits as u32 as i32 as f64,
        NcType::Int64 => bits as i64 as f64,
        _ => value,
    }
}

/// What `variable` decodes to, following xarray's choice of float type (`_choose_float_dtype`):
/// the packing attributes' float type when both are given and agree (but f64 for 32-bit ints),
/// f64 for any other offset, the scale's type alone; without packing, f32 for ints of up to
/// 16 bits and for f32, f64 otherwise. Without `mask_and_scale` (or with nothing to decode),
/// ints of up to 32 bits stay whole (`i32`, `u8`).
pub fn decode_of(var: &NcVariable, mask_and_scale: bool) -> Result<Decode, String> {
    let attr = |name: &str| var.attributes.iter().find(|a| a.name == name).map(|a| &a.value);
    let view = match attr(UNSIGNED) {
        Some(netcdf_reader::NcAttrValue::Chars(text)) if mask_and_scale => unsigned_view(var.dtype(), Some(text)),
        Some(netcdf_reader::NcAttrValue::Strings(texts)) if mask_and_scale && texts.len() == 1 => {
            unsigned_view(var.dtype(), Some(&texts[0]))
        }
        _ => None,
    };
    let stored = view.as_ref().unwrap_or(var.dtype());
    let size = numeric_size(stored).ok_or_else(|| {
        format!("variable `{}` holds {stored:?} values; read_netcdf reads numeric variables", var.name())
    })?;
    let float_type_of = |name: &str| match attr(name) {
        Some(netcdf_reader::NcAttrValue::Floats(_)) => Some(DType::F32),
        Some(netcdf_reader::NcAttrValue::Doubles(_)) => Some(DType::F64),
        Some(_) => Some(DType::F64),
        None => None,
    };
    let number = |name: &str| attr(name).and_then(|v| v.as_f64());
    let all_numbers = |name: &str| -> Vec<f64> {
        attr(name).and_then(|v| attrs::to_json(v)).map_or_else(Vec::new, |(json, _)| match json {
            Json::Array(items) => items.iter().filter_map(attrs::as_float).collect(),
            one => attrs::as_float(&one).into_iter().collect(),
        })
    };
    let is_float = matches!(stored, NcType::Float | NcType::Double);
    let (scale, offset) = (number("scale_factor"), number("add_offset"));
    let mut fills = all_numbers("_FillValue");
    if let Some(view) = &view {
        // xarray converts `_FillValue` to the viewed type, but not `missing_value`.
        fills = fills.into_iter().map(|fill| reinterpret(fill, var.dtype(), view)).collect();
    }
    fills.extend(all_numbers("missing_value"));
    if !mask_and_scale || (scale.is_none() && offset.is_none() && fills.is_empty()) {
        let dtype = match stored {
            NcType::Float => DType::F32,
            NcType::Double => DType::F64,
            NcType::UByte => DType::U8,
            NcType::Byte | NcType::Short | NcType::UShort | NcType::Int => DType::I32,
            // u32 and 64-bit ints do not fit an i32: f64 holds them exactly up to 2^53.
            _ => DType::F64,
        };
        return Ok(Decode { dtype, scale: None, offset: None, fills: Vec::new(), view });
    }
    let dtype = if scale.is_some() || offset.is_some() {
        match (float_type_of("scale_factor"), float_type_of("add_offset")) {
            (Some(s), Some(o)) if s == o => {
                if size == 4 && !is_float {
                    DType::F64
                } else {
                    s
                }
            }
            (_, Some(_)) => DType::F64,
            (Some(s), None) => s,
            (None, None) => DType::F64,
        }
    } else if (size <= 4 && is_float) || (size <= 2 && !is_float) {
        DType::F32
    } else {
        DType::F64
    };
    Ok(Decode { dtype, scale, offset, fills, view })
}

fn numeric_size(t: &NcType) -> Option<usize> {
    match t {
        NcType::Byte | NcType::UByte => Some(1),
        NcType::Short | NcType::UShort => Some(2),
        NcType::Int | NcType::UInt | NcType::Float => Some(4),
        NcType::Int64 | NcType::UInt64 | NcType::Double => Some(8),
        _ => None,
    }
}

/// The shape of `var`, as the array will have it (a dim beyond `usize` saturates; [`read`]
/// refuses such a variable).
pub fn shape_of(var: &NcVariable) -> Vec<usize> {
    var.dimensions().iter().map(|d| usize::try_from(d.size).unwrap_or(usize::MAX)).collect()
}

/// The number of values of `var`; `None` when it does not fit in a `usize`.
pub fn value_count(var: &NcVariable) -> Option<usize> {
    var.dimensions().iter().try_fold(1usize, |n, d| n.checked_mul(usize::try_from(d.size).ok()?))
}

/// Reads variable `name` of the file at `path` with its metadata, refusing one that would not
/// fit in this machine's memory (see [`read_within`]).
pub fn read(ctx: &TaskContext, path: &Path, name: &str, mask_and_scale: bool) -> Result<Array, ReadError> {
    read_within(ctx, path, name, mask_and_scale, physical_memory())
}

/// [`read`], refusing before anything is allocated a variable (or one of its coordinate
/// variables) whose stored and decoded values together would take more than `max_bytes`, or, in
/// a netCDF-3 file (where values are stored as they are), more than the file holds. A header
/// may declare any size: without these checks a file of a few bytes makes the read allocate
/// terabytes, which aborts the process rather than failing the task. The fuzz target passes a
/// small `max_bytes` to stay within its memory limit.
pub fn read_within(
    ctx: &TaskContext,
    path: &Path,
    name: &str,
    mask_and_scale: bool,
    max_bytes: u64,
) -> Result<Array, ReadError> {
    let file = open(path)?;
    let var = find(&file, path, name)?;
    let fail = |e: String| ReadError::Failed(format!("reading variable `{name}` of {}: {e}", path.display()));
    let decode = decode_of(var, mask_and_scale).map_err(fail)?;
    let limits = Limits::of(&file, path, max_bytes).map_err(fail)?;
    let bytes = limits.check(var, decode.dtype.size()).map_err(fail)?;
    ctx.will_allocate(bytes);
    let array = read_values(&file, var, &decode, shape_of(var)).map_err(fail)?;
    let mut array = array;
    *array.attrs_mut() = metadata(&file, var, &decode, &limits).map_err(fail)?;
    Ok(array)
}

/// This machine's physical memory (`u64::MAX` when it cannot be read): no read may need more.
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system constants.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(pages), Ok(page)) if pages > 0 && page > 0 => pages.saturating_mul(page),
        _ => u64::MAX,
    }
}

/// What a read may allocate, checked before it does.
pub struct Limits {
    max_bytes: u64,
    /// The file's length when its values are stored uncompressed (netCDF-3), so that none of its
    /// variables can hold more.
    stored_within: Option<u64>,
}

impl Limits {
    fn of(file: &NcFile, path: &Path, max_bytes: u64) -> Result<Limits, String> {
        let stored_within = match file.format() {
            NcFormat::Classic | NcFormat::Offset64 | NcFormat::Cdf5 => {
                Some(std::fs::metadata(path).map_err(|e| e.to_string())?.len())
            }
            NcFormat::Nc4 | NcFormat::Nc4Classic => None,
        };
        Ok(Limits { max_bytes, stored_within })
    }

    /// The bytes reading `var` into values of `decoded_size` bytes takes (its stored values and
    /// the decoded ones), or why it cannot be read.
    fn check(&self, var: &NcVariable, decoded_size: usize) -> Result<u64, String> {
        let shape: Vec<u64> = var.dimensions().iter().map(|d| d.size).collect();
        let stored_size = numeric_size(var.dtype()).unwrap_or(8) as u64;
        let len = value_count(var)
            .ok_or_else(|| format!("its shape {shape:?} has more values than memory can index"))?
            as u64;
        let stored = len.saturating_mul(stored_size);
        if let Some(file_len) = self.stored_within
            && stored > file_len
        {
            return Err(format!(
                "its shape {shape:?} declares {len} values ({}), more than the whole file ({}): the header is wrong or \
                 the file is cut short",
                format_size(stored),
                format_size(file_len)
            ));
        }
        let bytes = len.saturating_mul(stored_size + decoded_size as u64);
        if bytes > self.max_bytes {
            return Err(format!(
                "its shape {shape:?} holds {len} values, which take {} to read and decode, more than the {} of memory \
                 a read may have",
                format_size(bytes),
                format_size(self.max_bytes)
            ));
        }
        Ok(bytes)
    }
}

/// Reads the stored values of `var` (as the other signedness when `_Unsigned` says) and decodes
/// them.
fn read_values(file: &NcFile, var: &NcVariable, decode: &Decode, shape: Vec<usize>) -> Result<Array, String> {
    macro_rules! viewed_as {
        ($t:ty, $as:ty) => {{
            let raw: Vec<$t> = read_raw(file, var, shape.iter().product())?;
            // The same bits with the other signedness (`as` between equal sizes keeps them).
            convert(raw.into_iter().map(|v| v as $as).collect::<Vec<$as>>(), decode, shape)
        }};
    }
    match (var.dtype(), &decode.view) {
        (NcType::Byte, Some(NcType::UByte)) => viewed_as!(i8, u8),
        (NcType::Short, Some(NcType::UShort)) => viewed_as!(i16, u16),
        (NcType::Int, Some(NcType::UInt)) => viewed_as!(i32, u32),
        (NcType::Int64, Some(NcType::UInt64)) => viewed_as!(i64, u64),
        (NcType::UByte, Some(NcType::Byte)) => viewed_as!(u8, i8),
        (NcType::UShort, Some(NcType::Short)) => viewed_as!(u16, i16),
        (NcType::UInt, Some(NcType::Int)) => viewed_as!(u32, i32),
        (NcType::UInt64, Some(NcType::Int64)) => viewed_as!(u64, i64),
        _ => read_stored(file, var, decode, shape),
    }
}

/// Reads the stored values of `var` as their own type and decodes them.
fn read_stored(file: &NcFile, var: &NcVariable, decode: &Decode, shape: Vec<usize>) -> Result<Array, String> {
    macro_rules! stored_as {
        ($t:ty) => {{
            let raw: Vec<$t> = read_raw(file, var, shape.iter().product())?;
            convert(raw, decode, shape)
        }};
    }
    match var.dtype() {
        NcType::Byte => stored_as!(i8),
        NcType::UByte => stored_as!(u8),
        NcType::Short => stored_as!(i16),
        NcType::UShort => stored_as!(u16),
        NcType::Int => stored_as!(i32),
        NcType::UInt => stored_as!(u32),
        NcType::Int64 => stored_as!(i64),
        NcType::UInt64 => stored_as!(u64),
        NcType::Float => stored_as!(f32),
        NcType::Double => stored_as!(f64),
        other => Err(format!("variable holds {other:?} values; read_netcdf reads numeric variables")),
    }
}

fn read_raw<T: NcReadable + Copy + Default>(file: &NcFile, var: &NcVariable, len: usize) -> Result<Vec<T>, String> {
    let mut raw = vec_of(len)?;
    raw.resize(len, T::default());
    file.read_variable_into::<T>(var.name(), &mut raw).map_err(|e| e.to_string())?;
    Ok(raw)
}

/// An empty vector with room for `len` values, or an error where the allocator has no such room
/// (rather than the abort of a failed `Vec` allocation).
fn vec_of<T>(len: usize) -> Result<Vec<T>, String> {
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| {
        format!("no memory for {len} values ({})", format_size((len as u64).saturating_mul(size_of::<T>() as u64)))
    })?;
    Ok(values)
}

/// A stored number as each output type.
trait Stored: Copy {
    fn f32(self) -> f32;
    fn f64(self) -> f64;
    fn i32(self) -> Option<i32>;
    fn u8(self) -> Option<u8>;
}

macro_rules! stored {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            #[inline]
            fn f32(self) -> f32 { self as f32 }
            #[inline]
            fn f64(self) -> f64 { self as f64 }
            #[inline]
            fn i32(self) -> Option<i32> { i32::try_from(self).ok() }
            #[inline]
            fn u8(self) -> Option<u8> { u8::try_from(self).ok() }
        }
    )*};
}
stored!(i8, u8, i16, u16, i32, u32, i64, u64);

impl Stored for f32 {
    fn f32(self) -> f32 {
        self
    }
    fn f64(self) -> f64 {
        self.into()
    }
    fn i32(self) -> Option<i32> {
        None
    }
    fn u8(self) -> Option<u8> {
        None
    }
}

impl Stored for f64 {
    fn f32(self) -> f32 {
        self as f32
    }
    fn f64(self) -> f64 {
        self
    }
    fn i32(self) -> Option<i32> {
        None
    }
    fn u8(self) -> Option<u8> {
        None
    }
}

/// Applies `decode` to the stored values: masks, then scales and offsets in the output type
/// (as xarray does: `data.astype(dtype); data *= scale_factor; data += add_offset`).
fn convert<T: Stored>(raw: Vec<T>, decode: &Decode, shape: Vec<usize>) -> Result<Array, String> {
    let is_fill = |v: T| {
        let v = v.f64();
        decode.fills.iter().any(|&f| f == v || (f.is_nan() && v.is_nan()))
    };
    match decode.dtype {
        DType::F32 => {
            let (scale, offset) = (decode.scale.map(|s| s as f32), decode.offset.map(|o| o as f32));
            let mut values = vec_of(raw.len())?;
            values.extend(raw.into_iter().map(|v| {
                if is_fill(v) {
                    return f32::NAN;
                }
                let mut x = v.f32();
                if let Some(s) = scale {
                    x *= s;
                }
                if let Some(o) = offset {
                    x += o;
                }
                x
            }));
            Array::from_vec(shape, values)
        }
        DType::F64 => {
            let mut values = vec_of(raw.len())?;
            values.extend(raw.into_iter().map(|v| {
                if is_fill(v) {
                    return f64::NAN;
                }
                let mut x = v.f64();
                if let Some(s) = decode.scale {
                    x *= s;
                }
                if let Some(o) = decode.offset {
                    x += o;
                }
                x
            }));
            Array::from_vec(shape, values)
        }
        DType::I32 => {
            let mut values = vec_of(raw.len())?;
            for v in raw {
                values.push(v.i32().ok_or("a value does not fit in i32")?);
            }
            Array::from_vec(shape, values)
        }
        DType::U8 => {
            let mut values = vec_of(raw.len())?;
            for v in raw {
                values.push(v.u8().ok_or("a value does not fit in u8")?);
            }
            Array::from_vec(shape, values)
        }
        // The decoding chooses only the four types above (as xarray does for netCDF's types).
        other => Err(format!("cannot decode a variable into {other}")),
    }
}

/// The array attributes of `var`: its name, dims, attributes, encoding, coordinate variables
/// and the file's global attributes.
fn metadata(file: &NcFile, var: &NcVariable, decode: &Decode, limits: &Limits) -> Result<Attrs, String> {
    let mut out = Attrs::new();
    out.insert(attrs::VARIABLE.into(), Json::String(var.name().into()));
    let dims: Vec<Json> = var.dimensions().iter().map(|d| Json::String(d.name.clone())).collect();
    out.insert(attrs::DIMS.into(), Json::Array(dims));
    let decoded = decode.scale.is_some() || decode.offset.is_some() || !decode.fills.is_empty();
    let moved = |name: &str| (decoded && PACKING.contains(&name)) || (decode.view.is_some() && name == UNSIGNED);
    let (values, types) =
        attrs::map_of(var.attributes.iter().filter(|a| !moved(&a.name)).map(|a| (a.name.as_str(), &a.value)));
    out.insert(attrs::ATTRS.into(), Json::Object(values));
    out.insert(attrs::ATTR_TYPES.into(), Json::Object(types));
    out.insert(attrs::ENCODING.into(), Json::Object(encoding(var, decoded, decode.view.is_some())));
    out.insert(attrs::COORDS.into(), Json::Object(coordinates(file, var, limits)?));
    let globals = file.global_attributes().map_err(|e| e.to_string())?;
    let (values, types) = attrs::map_of(globals.iter().map(|a| (a.name.as_str(), &a.value)));
    out.insert(attrs::GLOBAL_ATTRS.into(), Json::Object(values));
    out.insert(attrs::GLOBAL_ATTR_TYPES.into(), Json::Object(types));
    Ok(out)
}

/// How the variable is stored: its netCDF type and, when decoding used them, the packing
/// attributes and their type.
fn encoding(var: &NcVariable, decoded: bool, viewed: bool) -> Map<String, Json> {
    let mut encoding = Map::new();
    if let Some(name) = dtype_name(var.dtype()) {
        encoding.insert("dtype".into(), Json::String(name.into()));
    }
    if viewed
        && let Some(attr) = var.attributes.iter().find(|a| a.name == UNSIGNED)
        && let Some((json, _)) = attrs::to_json(&attr.value)
    {
        encoding.insert(UNSIGNED.into(), json);
    }
    if decoded {
        for attr in var.attributes.iter().filter(|a| PACKING.contains(&a.name.as_str())) {
            if let Some((json, type_name)) = attrs::to_json(&attr.value) {
                encoding.insert(attr.name.clone(), json);
                if matches!(attr.name.as_str(), "scale_factor" | "add_offset") {
                    encoding.insert("packing_type".into(), Json::String(type_name.unwrap_or("f64").into()));
                }
            }
        }
    }
    encoding
}

/// The name of a numeric netCDF type, as `encoding.dtype` and coordinates' `dtype` give it.
pub fn dtype_name(t: &NcType) -> Option<&'static str> {
    Some(match t {
        NcType::Byte => "i8",
        NcType::UByte => "u8",
        NcType::Short => "i16",
        NcType::UShort => "u16",
        NcType::Int => "i32",
        NcType::UInt => "u32",
        NcType::Int64 => "i64",
        NcType::UInt64 => "u64",
        NcType::Float => "f32",
        NcType::Double => "f64",
        _ => return None,
    })
}

/// The coordinate variables of `var`'s dims (a 1-d variable named like its dim), values and
/// attributes as stored. Each is checked against `limits` first: a variable with an empty dim
/// has no values, but its other dims' coordinates may still declare any length.
fn coordinates(file: &NcFile, var: &NcVariable, limits: &Limits) -> Result<Map<String, Json>, String> {
    let mut coords = Map::new();
    let variables = file.variables().map_err(|e| e.to_string())?;
    for dim in var.dimensions() {
        let Some(coord) = variables.iter().find(|v| v.is_coordinate_variable_for(&dim.name)) else { continue };
        let Some(dtype) = dtype_name(coord.dtype()) else { continue };
        limits.check(coord, size_of::<f64>()).map_err(|e| format!("coordinate `{}`: {e}", coord.name()))?;
        let values =
            file.read_variable_as_f64(coord.name()).map_err(|e| format!("coordinate `{}`: {e}", coord.name()))?;
        let values: Vec<Json> = match coord.dtype() {
            NcType::Float => values.iter().map(|&v| attrs::float32(v as f32)).collect(),
            NcType::Double => values.iter().map(|&v| attrs::float(v)).collect(),
            _ => values.iter().map(|&v| Json::from(v as i64)).collect(),
        };
        let (attr_values, types) = attrs::map_of(coord.attributes.iter().map(|a| (a.name.as_str(), &a.value)));
        let mut entry = Map::new();
        entry.insert("dims".into(), Json::Array(vec![Json::String(dim.name.clone())]));
        entry.insert("dtype".into(), Json::String(dtype.into()));
        entry.insert("values".into(), Json::Array(values));
        entry.insert("attrs".into(), Json::Object(attr_values));
        entry.insert("attr_types".into(), Json::Object(types));
        coords.insert(dim.name.clone(), Json::Object(entry));
    }
    Ok(coords)
}
