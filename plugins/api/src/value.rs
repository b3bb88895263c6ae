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

/// Element type of an array: numpy's common numeric dtypes and bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// One byte per element, 0 (false) or 1 (true), viewed as Rust `bool`.
    Bool,
}

impl DType {
    /// Every dtype, in the order `runner plugins` and error messages list them.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The name used in `runner plan` and in attributes: `f32`, `i64`, `u16`, `bool`...
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust element type that arrays can hold: `f32`, `f64`, `i8`..`i64`, `u8`..`u64`, `bool`.
pub trait Element: Copy + Send + Sync + Default + 'static {
    const DTYPE: DType;
    #[doc(hidden)]
    fn into_storage(data: Vec<Self>) -> Storage;
    /// The elements, from heap storage of this type or from external bytes; an error says why
    /// the bytes cannot be viewed as `Self`.
    #[doc(hidden)]
    fn slice_of(storage: &Storage) -> Result<&[Self], String>;
}

/// Element types for which every bit pattern is a valid value, so external bytes can be viewed
/// as them after checking only length and alignment. `bool` is not one of them.
///
/// # Safety
/// Implement only for types whose every bit pattern of `size_of::<Self>()` bytes is valid.
unsafe trait AnyBitPattern: Element {}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn into_storage(data: Vec<Self>) -> Storage {
                Storage::$variant(data)
            }
            fn slice_of(storage: &Storage) -> Result<&[Self], String> {
                match storage {
                    Storage::$variant(data) => Ok(data),
                    Storage::External(bytes) => cast_slice(bytes.bytes()),
                    other => Err(mismatch::<Self>(other)),
                }
            }
        }
        // SAFETY: integers and floats are valid for every bit pattern.
        unsafe impl AnyBitPattern for $t {}
    };
}
element!(f32, F32);
element!(f64, F64);
element!(i8, I8);
element!(i16, I16);
element!(i32, I32);
element!(i64, I64);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);

/// `bool` is one byte that must be 0 or 1: external bytes (a spilled buffer mapped from its
/// file) are checked before they are viewed, because any other byte would be undefined
/// behaviour. The check reads each byte once; a buffer the engine spilled always passes it.
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn into_storage(data: Vec<Self>) -> Storage {
        Storage::Bool(data)
    }
    fn slice_of(storage: &Storage) -> Result<&[Self], String> {
        match storage {
            Storage::Bool(data) => Ok(data),
            Storage::External(bytes) => bool_slice(bytes.bytes()),
            other => Err(mismatch::<Self>(other)),
        }
    }
}

fn mismatch<T: Element>(storage: &Storage) -> String {
    let held = storage.dtype().map_or("bytes", DType::name);
    format!("array of {} is stored as {held}", T::DTYPE)
}

/// Reinterprets bytes as elements when they are aligned; mapped files are page-aligned.
fn cast_slice<T: AnyBitPattern>(bytes: &[u8]) -> Result<&[T], String> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) {
        return Err(format!("{} bytes are not a whole number of {} elements", bytes.len(), T::DTYPE));
    }
    if !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(format!("array of {} is stored unaligned", T::DTYPE));
    }
    // SAFETY: alignment and length were checked above, and `AnyBitPattern` promises that every
    // bit pattern is a valid `T`.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
}

/// Views bytes as `bool`s after checking that each is 0 or 1.
fn bool_slice(bytes: &[u8]) -> Result<&[bool], String> {
    if let Some(at) = bytes.iter().position(|&b| b > 1) {
        return Err(format!("array of bool holds byte {:#04x} at element {at}; a bool must be 0 or 1", bytes[at]));
    }
    // SAFETY: `bool` has size and alignment 1, and 0 and 1 are its valid bit patterns, which
    // every byte was just checked to be.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<bool>(), bytes.len()) })
}

/// Bytes that live outside the Rust heap: a mapped spill file, or shared memory holding a value
/// that other processes map ([`SharedBufferMut`]). Implemented by the engine.
pub trait ExternalBytes: Send + Sync + fmt::Debug {
    fn bytes(&self) -> &[u8];

    /// True when the bytes are in memory and counted as the engine's (shared memory), false when
    /// they are a mapped file on disk (a spilled value), which the budget does not count.
    fn in_memory(&self) -> bool {
        false
    }

    /// A path another process of this user may open and map, privately, to read these bytes
    /// from offset 0 without a copy (`/proc/PID/fd/N` of shared memory, or a spill file),
    /// while this value lives. `None` when there is none.
    fn shared_path(&self) -> Option<&std::path::Path> {
        None
    }

    /// The reader is done with `range` of the bytes for now: memory holding them may be given
    /// back (a mapped file's pages are dropped and read again if touched later).
    fn done_reading(&self, range: std::ops::Range<usize>) {
        let _ = range;
    }

    /// The file these bytes are mapped from, when it holds the value in its file form — a
    /// `.npy` file for an array (header and data), the bytes themselves for a bytes value —
    /// so that a task handing the value to an external command can pass this path instead of
    /// writing a copy. `None` when there is no such file.
    fn file_path(&self) -> Option<&std::path::Path> {
        None
    }
}

/// Shared memory the engine lends a task to fill with a value's bytes ([`crate::TaskContext::shared_buffer`]):
/// once frozen it is the value's storage, counted as the task's memory like a heap buffer, and
/// other processes (a warm interpreter consuming the value) map it instead of being sent a copy.
pub trait SharedBufferMut: Send {
    /// The buffer, zeroed at first.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The filled buffer as a value's storage.
    fn freeze(self: Box<Self>) -> Box<dyn ExternalBytes>;
}

/// Where a buffer's bytes are. Plugins do not match on this; they use the views.
#[derive(Debug)]
pub enum Storage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
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
            Storage::I8(d) => raw(d),
            Storage::I16(d) => raw(d),
            Storage::I32(d) => raw(d),
            Storage::I64(d) => raw(d),
            Storage::U8(d) => d,
            Storage::U16(d) => raw(d),
            Storage::U32(d) => raw(d),
            Storage::U64(d) => raw(d),
            Storage::Bool(d) => raw(d),
            Storage::External(e) => e.bytes(),
        }
    }

    /// The element type of heap storage; `None` for external bytes, which have none of their own.
    pub fn dtype(&self) -> Option<DType> {
        Some(match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::I8(_) => DType::I8,
            Storage::I16(_) => DType::I16,
            Storage::I32(_) => DType::I32,
            Storage::I64(_) => DType::I64,
            Storage::U8(_) => DType::U8,
            Storage::U16(_) => DType::U16,
            Storage::U32(_) => DType::U32,
            Storage::U64(_) => DType::U64,
            Storage::Bool(_) => DType::Bool,
            Storage::External(_) => return None,
        })
    }

    /// True while the bytes are in memory (counted against the budget): on the heap or in shared
    /// memory, not in a spill file.
    pub fn is_resident(&self) -> bool {
        match self {
            Storage::External(external) => external.in_memory(),
            _ => true,
        }
    }

    /// Where another process may map these bytes without a copy ([`ExternalBytes::shared_path`]).
    pub fn shared_path(&self) -> Option<&std::path::Path> {
        match self {
            Storage::External(external) => external.shared_path(),
            _ => None,
        }
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

    /// An array over a storage in C order: heap storage of `dtype` itself, or external bytes
    /// (e.g. a mapped file). Fails when the storage holds another element type or the wrong
    /// number of bytes for the shape.
    pub fn from_storage(dtype: DType, shape: Vec<usize>, storage: Storage) -> Result<Array, String> {
        if let Some(held) = storage.dtype().filter(|&held| held != dtype) {
            return Err(format!("an array of {dtype} cannot be stored as {held}"));
        }
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

    /// Tells the engine the task is done reading `elements` (a range of indices into the array
    /// in C order) for now. Nothing changes for an array in memory; for one the engine spilled
    /// to a mapped file, the pages holding them are let go, so a task that streams through
    /// inputs larger than the budget (a `mean` over many spilled members) holds only the part
    /// it is working on. Reading them again later is correct, only slower.
    pub fn done_reading(&self, elements: std::ops::Range<usize>) {
        if let Storage::External(external) = &self.storage {
            let size = self.dtype.size();
            let end = elements.end.saturating_mul(size).min(external.bytes().len());
            external.done_reading(elements.start.saturating_mul(size).min(end)..end);
        }
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
        let data = T::slice_of(&self.storage)?;
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

    /// External bytes that start `offset` bytes past an 8-aligned address (0: aligned like a
    /// mapped file).
    #[derive(Debug)]
    struct External {
        words: Vec<u64>,
        offset: usize,
        len: usize,
    }

    impl External {
        fn at(offset: usize, bytes: &[u8]) -> Storage {
            let mut words = vec![0u64; (offset + bytes.len()).div_ceil(8)];
            // SAFETY: the words hold at least `offset + bytes.len()` bytes; u64 has no invalid bytes.
            let raw = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
            raw[offset..offset + bytes.len()].copy_from_slice(bytes);
            Storage::External(Box::new(External { words, offset, len: bytes.len() }))
        }

        fn of(bytes: &[u8]) -> Storage {
            External::at(0, bytes)
        }
    }

    impl ExternalBytes for External {
        fn bytes(&self) -> &[u8] {
            // SAFETY: as in `at`.
            unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>().add(self.offset), self.len) }
        }
    }

    /// An array of `values` built on the heap, then the same bytes as external storage: both
    /// views must give the values back.
    fn heap_and_external<T: Element + PartialEq + fmt::Debug>(values: Vec<T>) {
        let shape = vec![values.len()];
        let heap = Array::from_vec(shape.clone(), values.clone()).unwrap();
        assert_eq!(heap.dtype(), T::DTYPE);
        assert_eq!(heap.nbytes(), (values.len() * T::DTYPE.size()) as u64);
        assert_eq!(heap.view::<T>().unwrap().as_slice().unwrap(), values.as_slice());
        let external = Array::from_storage(T::DTYPE, shape, External::of(heap.bytes())).unwrap();
        assert!(!external.storage().is_resident());
        assert_eq!(external.view::<T>().unwrap().as_slice().unwrap(), values.as_slice(), "{}", T::DTYPE);
    }

    #[test]
    fn every_dtype_views_on_the_heap_and_in_external_bytes() {
        heap_and_external(vec![1.5f32, -2.0]);
        heap_and_external(vec![1.5f64, f64::MIN]);
        heap_and_external(vec![i8::MIN, 0, i8::MAX]);
        heap_and_external(vec![i16::MIN, -1, i16::MAX]);
        heap_and_external(vec![i32::MIN, -1, i32::MAX]);
        heap_and_external(vec![i64::MIN, -1, i64::MAX]);
        heap_and_external(vec![0u8, 255]);
        heap_and_external(vec![0u16, u16::MAX]);
        heap_and_external(vec![0u32, u32::MAX]);
        heap_and_external(vec![0u64, u64::MAX]);
        heap_and_external(vec![true, false, true]);
        let sizes: Vec<usize> = DType::ALL.iter().map(|d| d.size()).collect();
        assert_eq!(sizes, [4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1]);
    }

    #[test]
    fn external_bytes_that_are_not_bools_are_refused() {
        let array = Array::from_storage(DType::Bool, vec![3], External::of(&[1, 0, 2])).unwrap();
        let err = array.view::<bool>().unwrap_err();
        assert!(err.contains("byte 0x02 at element 2") && err.contains("0 or 1"), "{err}");
    }

    #[test]
    fn storage_of_another_dtype_is_refused() {
        let err = Array::from_storage(DType::Bool, vec![2], Storage::U8(vec![0, 1])).unwrap_err();
        assert_eq!(err, "an array of bool cannot be stored as u8");
        let err = Array::from_storage(DType::U16, vec![3], External::of(&[0; 4])).unwrap_err();
        assert!(err.contains("needs 6 bytes but 4"), "{err}");
        let unaligned = Array::from_storage(DType::U16, vec![2], External::at(1, &[0; 4])).unwrap();
        assert_eq!(unaligned.view::<u16>().unwrap_err(), "array of u16 is stored unaligned");
    }

    #[test]
    fn meta_bytes() {
        let m = ValueMeta::Array { dtype: DType::F32, shape: vec![970, 1042] };
        assert_eq!(m.bytes(), Some(970 * 1042 * 4));
        assert_eq!(m.to_string(), "f32[970, 1042]");
        assert_eq!(ValueMeta::Unknown.bytes(), None);
    }
}
