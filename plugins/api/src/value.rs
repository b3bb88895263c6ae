//! Values passed between tasks: typed n-dimensional arrays, raw bytes, JSON, paths, or nothing.
//!
//! Arrays and bytes are *buffers*: the engine counts them against the budget while they are
//! resident and may move them to a mapped file (spill). A plugin never sees the difference: it
//! reads a buffer through [`Array::view`] or [`Value::as_bytes`] wherever the bytes live.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// String → JSON attributes carried with an array (units, names, thresholds...).
pub type Attrs = BTreeMap<String, serde_json::Value>;

/// Element type of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I32,
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 => 8,
            DType::U8 => 1,
        }
    }

    /// The name used in `runner plan` and in attributes: `f32`, `f64`, `i32`, `u8`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust element type that arrays can hold.
pub trait Element: Copy + Send + Sync + Default + 'static {
    const DTYPE: DType;
    #[doc(hidden)]
    fn into_storage(data: Vec<Self>) -> Storage;
    #[doc(hidden)]
    fn slice_of(storage: &Storage) -> Option<&[Self]>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn into_storage(data: Vec<Self>) -> Storage {
                Storage::$variant(data)
            }
            fn slice_of(storage: &Storage) -> Option<&[Self]> {
                match storage {
                    Storage::$variant(data) => Some(data),
                    Storage::External(bytes) => cast_slice(bytes.bytes()),
                    _ => None,
                }
            }
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(i32, I32);
element!(u8, U8);

/// Reinterprets bytes as elements when they are aligned; mapped files are page-aligned.
fn cast_slice<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return None;
    }
    // SAFETY: alignment and length were checked above, and every bit pattern is a valid value of
    // the element types (f32, f64, i32, u8) that implement `Element`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
}

/// Bytes that live outside the Rust heap (a mapped spill file). Implemented by the engine.
pub trait ExternalBytes: Send + Sync + fmt::Debug {
    fn bytes(&self) -> &[u8];
}

/// Where a buffer's bytes are. Plugins do not match on this; they use the views.
#[derive(Debug)]
pub enum Storage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    U8(Vec<u8>),
    /// Engine-owned bytes, e.g. a spilled buffer mapped read-only from disk.
    External(Box<dyn ExternalBytes>),
}

impl Storage {
    /// The buffer's raw bytes.
    pub fn bytes(&self) -> &[u8] {
        fn raw<T>(data: &[T]) -> &[u8] {
            // SAFETY: any initialised memory may be read as bytes; the length is exact.
            unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
        }
        match self {
            Storage::F32(d) => raw(d),
            Storage::F64(d) => raw(d),
            Storage::I32(d) => raw(d),
            Storage::U8(d) => d,
            Storage::External(e) => e.bytes(),
        }
    }

    /// True while the bytes are on the heap (counted against the budget).
    pub fn is_resident(&self) -> bool {
        !matches!(self, Storage::External(_))
    }
}

/// An n-dimensional array in standard (C) order with attributes.
#[derive(Debug)]
pub struct Array {
    dtype: DType,
    shape: Vec<usize>,
    attrs: Attrs,
    storage: Storage,
}

impl Array {
    /// Takes ownership of an ndarray without copying when it is already in standard layout.
    pub fn from_ndarray<T: Element>(array: ArrayD<T>) -> Array {
        let shape = array.shape().to_vec();
        let array = if array.is_standard_layout() { array } else { array.as_standard_layout().into_owned() };
        let (data, offset) = array.into_raw_vec_and_offset();
        let data = match offset {
            Some(0) | None => data,
            Some(start) => data[start..].to_vec(),
        };
        Array { dtype: T::DTYPE, shape, attrs: Attrs::new(), storage: T::into_storage(data) }
    }

    /// An array from a flat vector in C order. Fails when the length does not match the shape.
    pub fn from_vec<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Array, String> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(format!("shape {shape:?} holds {expected} elements but {} were given", data.len()));
        }
        Ok(Array { dtype: T::DTYPE, shape, attrs: Attrs::new(), storage: T::into_storage(data) })
    }

    /// An array over raw bytes in C order (used by readers of files, e.g. `.npy`).
    pub fn from_storage(dtype: DType, shape: Vec<usize>, storage: Storage) -> Result<Array, String> {
        let expected = shape.iter().product::<usize>() * dtype.size();
        let got = storage.bytes().len();
        if expected != got {
            return Err(format!("shape {shape:?} of {dtype} needs {expected} bytes but {got} were given"));
        }
        Ok(Array { dtype, shape, attrs: Attrs::new(), storage })
    }

    /// Adds an attribute (builder style).
    pub fn with_attr(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Array {
        self.attrs.insert(key.into(), value.into());
        self
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn attrs(&self) -> &Attrs {
        &self.attrs
    }

    pub fn attrs_mut(&mut self) -> &mut Attrs {
        &mut self.attrs
    }

    /// Size of the data in bytes.
    pub fn nbytes(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// The raw data in C order.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Replaces where the bytes live (the engine's spill). The bytes must be the same.
    #[doc(hidden)]
    pub fn replace_storage(&mut self, storage: Storage) -> Storage {
        std::mem::replace(&mut self.storage, storage)
    }

    /// A read-only view with element type `T`. Fails, saying both types, when the dtype differs.
    pub fn view<T: Element>(&self) -> Result<ArrayViewD<'_, T>, String> {
        if T::DTYPE != self.dtype {
            return Err(format!("expected an array of {}, got {}", T::DTYPE, self.dtype));
        }
        let data = T::slice_of(&self.storage).ok_or_else(|| format!("array of {} is stored unaligned", self.dtype))?;
        ArrayViewD::from_shape(IxDyn(&self.shape), data).map_err(|e| e.to_string())
    }
}

/// What a task returns and its consumers read.
#[derive(Debug, Default)]
pub enum Value {
    /// Nothing (e.g. `noop`).
    #[default]
    None,
    /// A typed n-dimensional array with attributes.
    Array(Array),
    /// Raw bytes.
    Bytes(Storage),
    /// A JSON document.
    Json(serde_json::Value),
    /// A file path (e.g. what `write_npy` wrote).
    Path(PathBuf),
}

impl Value {
    /// Shape and size, as `runner plan` shows them.
    pub fn meta(&self) -> ValueMeta {
        match self {
            Value::None => ValueMeta::None,
            Value::Array(a) => ValueMeta::Array { dtype: a.dtype, shape: a.shape.clone() },
            Value::Bytes(b) => ValueMeta::Bytes { len: b.bytes().len() as u64 },
            Value::Json(_) => ValueMeta::Json,
            Value::Path(_) => ValueMeta::Path,
        }
    }

    /// Bytes of buffer data (arrays and bytes); 0 for the small kinds.
    pub fn buffer_bytes(&self) -> u64 {
        match self {
            Value::Array(a) => a.nbytes(),
            Value::Bytes(b) => b.bytes().len() as u64,
            _ => 0,
        }
    }

    /// The array, or an error naming what the value is instead.
    pub fn as_array(&self) -> Result<&Array, String> {
        match self {
            Value::Array(a) => Ok(a),
            other => Err(format!("expected an array, got {}", other.kind())),
        }
    }

    /// Raw bytes of arrays and bytes values.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Array(a) => Some(a.bytes()),
            Value::Bytes(b) => Some(b.bytes()),
            _ => None,
        }
    }

    /// A word for error messages: `nothing`, `an array`, `bytes`, `JSON`, `a path`.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "nothing",
            Value::Array(_) => "an array",
            Value::Bytes(_) => "bytes",
            Value::Json(_) => "JSON",
            Value::Path(_) => "a path",
        }
    }
}

impl From<Array> for Value {
    fn from(array: Array) -> Value {
        Value::Array(array)
    }
}

/// What is known about a value before it exists: enough for `runner plan` and for estimates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ValueMeta {
    /// The plugin cannot say in advance.
    #[default]
    Unknown,
    None,
    Array {
        dtype: DType,
        shape: Vec<usize>,
    },
    Bytes {
        len: u64,
    },
    Json,
    Path,
}

impl ValueMeta {
    /// Buffer bytes if known (0 for the small kinds).
    pub fn bytes(&self) -> Option<u64> {
        match self {
            ValueMeta::Unknown => None,
            ValueMeta::Array { dtype, shape } => Some(shape.iter().product::<usize>() as u64 * dtype.size() as u64),
            ValueMeta::Bytes { len } => Some(*len),
            ValueMeta::None | ValueMeta::Json | ValueMeta::Path => Some(0),
        }
    }
}

impl fmt::Display for ValueMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueMeta::Unknown => f.write_str("?"),
            ValueMeta::None => f.write_str("nothing"),
            ValueMeta::Array { dtype, shape } => {
                let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
                write!(f, "{dtype}[{}]", dims.join(", "))
            }
            ValueMeta::Bytes { len } => write!(f, "bytes[{len}]"),
            ValueMeta::Json => f.write_str("json"),
            ValueMeta::Path => f.write_str("path"),
        }
    }
}

/// One value of a dimension: an integer or a string as listed in the recipe, or a date or a
/// time of a date dim (`{start: 1981-09-01, stop: 2021-01-05, step: 1d}`).
///
/// Dates and times are seconds since 1970-01-01T00:00:00Z, in UTC (no time zones, no leap
/// seconds), so that plugins can compute with them; they display in ISO 8601 form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DimValue {
    Int(i64),
    Str(std::sync::Arc<str>),
    /// A day of a dim whose values are whole days: midnight UTC of that day, in seconds since
    /// the epoch. Displays as `1981-09-01`.
    Date(i64),
    /// An instant of a dim with times of day, in seconds since the epoch. Displays as
    /// `2026-11-01T03:00Z` (with `:SS` when the seconds are not 0).
    Time(i64),
}

impl DimValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            DimValue::Int(i) => Some(*i),
            DimValue::Str(_) | DimValue::Date(_) | DimValue::Time(_) => None,
        }
    }

    /// Seconds since 1970-01-01T00:00:00Z of a date or time value.
    pub fn as_epoch_seconds(&self) -> Option<i64> {
        match self {
            DimValue::Date(s) | DimValue::Time(s) => Some(*s),
            DimValue::Int(_) | DimValue::Str(_) => None,
        }
    }

    /// True for the values of date dims.
    pub fn is_time(&self) -> bool {
        matches!(self, DimValue::Date(_) | DimValue::Time(_))
    }
}

impl fmt::Display for DimValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimValue::Int(i) => write!(f, "{i}"),
            DimValue::Str(s) => f.write_str(s),
            DimValue::Date(seconds) => {
                let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
                write!(f, "{year:04}-{month:02}-{day:02}")
            }
            DimValue::Time(seconds) => {
                let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
                let of_day = seconds.rem_euclid(86_400);
                let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
                write!(f, "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}")?;
                if second != 0 {
                    write!(f, ":{second:02}")?;
                }
                f.write_str("Z")
            }
        }
    }
}

/// The proleptic Gregorian (year, month, day) of a day number (days since 1970-01-01), by
/// Howard Hinnant's `civil_from_days`; exact for every `i64` day whose year fits an `i64`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 } as u32;
    let year = year_of_era + era.saturating_mul(400) + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod dim_value_tests {
    use super::*;

    #[test]
    fn dates_and_times_display_in_iso_form() {
        assert_eq!(DimValue::Date(0).to_string(), "1970-01-01");
        // 1981-09-01 is day 4261; 2000-02-29 is day 11016; 2026-11-01 is day 20758.
        assert_eq!(DimValue::Date(4261 * 86_400).to_string(), "1981-09-01");
        assert_eq!(DimValue::Date(11_016 * 86_400).to_string(), "2000-02-29");
        assert_eq!(DimValue::Time(20_758 * 86_400 + 3 * 3600).to_string(), "2026-11-01T03:00Z");
        assert_eq!(DimValue::Time(20_758 * 86_400 + 3 * 3600 + 61).to_string(), "2026-11-01T03:01:01Z");
        assert_eq!(DimValue::Date(-86_400).to_string(), "1969-12-31");
        assert_eq!(DimValue::Time(4261 * 86_400).as_epoch_seconds(), Some(4261 * 86_400));
        assert_eq!(DimValue::Date(0).as_int(), None);
        // Never a panic, whatever the value.
        for extreme in [i64::MIN, i64::MAX] {
            let _ = DimValue::Date(extreme).to_string();
            let _ = DimValue::Time(extreme).to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndarray_round_trip_without_copy() {
        let a = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |ix| (ix[0] * 3 + ix[1]) as f32);
        let ptr = a.as_ptr();
        let arr = Array::from_ndarray(a);
        let view = arr.view::<f32>().unwrap();
        assert_eq!(view.as_ptr(), ptr);
        assert_eq!(view[[1, 2]], 5.0);
        assert_eq!(arr.nbytes(), 24);
        assert!(arr.view::<f64>().unwrap_err().contains("expected an array of f64, got f32"));
    }

    #[test]
    fn transposed_input_is_made_standard() {
        let a = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |ix| (ix[0] * 3 + ix[1]) as i32);
        let t = a.reversed_axes();
        let arr = Array::from_ndarray(t.clone());
        assert_eq!(arr.view::<i32>().unwrap(), t.view());
    }

    #[test]
    fn meta_bytes() {
        let m = ValueMeta::Array { dtype: DType::F32, shape: vec![970, 1042] };
        assert_eq!(m.bytes(), Some(970 * 1042 * 4));
        assert_eq!(m.to_string(), "f32[970, 1042]");
        assert_eq!(ValueMeta::Unknown.bytes(), None);
    }
}
