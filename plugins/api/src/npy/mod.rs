//! The NumPy `.npy` format: one array in a file. `read_npy` and `write_npy` use it, and so does
//! the engine for buffers it hands over as files (spills, caches, values for external commands).
//!
//! Files are written exactly as NumPy (≥ 1.23, e.g. 1.26 or 2.x) writes them: format version
//! 1.0, the header dict `{'descr': '<f4', 'fortran_order': False, 'shape': (970, 1042), }`
//! followed by NumPy's spare space for growing the first axis (21 minus the digits of
//! `shape[0]` spaces, none for a 0-d array), then spaces and a final `\n` so that magic, version,
//! length and header fill a multiple of 64 bytes (never adding zero padding: an exact fit gets 64
//! more), then the data in C order, little-endian. Every dtype of an array is written under
//! NumPy's name for it: `<f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1`. Writes are atomic: the
//! file is written under a temporary name in the target directory and renamed into place, so a
//! failed task never leaves half a file.
//!
//! Reading accepts what NumPy writes: versions 1.0, 2.0 and 3.0, any padding, and these dtypes:
//! - `f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1`, as the array dtype of the same name;
//! - `f2` (half precision), widened to f32 exactly (arrays have no f16 type);
//! - little-endian (`<`), big-endian (`>`, converted to the machine's order), native (`=` or no
//!   mark) and `|` for one-byte types;
//! - `b1` bytes: 0 is false and any other byte true, as NumPy itself treats them;
//! - Fortran order (`fortran_order: True`): converted to C order, which costs one copy of the
//!   array while it is read (the estimate counts it).
//!
//! Other dtypes (complex, strings, objects, dates, structured records) are refused with a message
//! naming the dtype found and listing those supported; anything malformed is refused naming the
//! file.

mod header_dict;

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

use crate::{Array, DType, Element};
use header_dict::{Literal, parse_header_dict};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy aligns the start of the data to this many bytes.
const ALIGN: usize = 64;
/// NumPy leaves room in the header for the first axis to grow to this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;
/// Headers longer than this are not something NumPy writes for the dtypes we support; refusing
/// them keeps a corrupt length field from causing a huge allocation.
const MAX_HEADER_LEN: usize = 1 << 20;
/// Buffer of the file reader (and of the writer on a big-endian machine, which must swap bytes);
/// the only memory besides the array itself.
pub const IO_BUFFER: usize = 64 << 10;
/// What `read_npy` reads, for messages that refuse a dtype.
pub const SUPPORTED: &str = "supported: f2 (read as f32), f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 and b1 (bool), \
                         little-endian ('<'), big-endian ('>') or native";

/// The order of an element's bytes in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// This machine's byte order.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "big") { ByteOrder::Big } else { ByteOrder::Little };
}

/// How a file stores one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileElement {
    /// IEEE half precision (`f2`), read as f32.
    Half,
    /// The array dtype of the same size.
    Same(DType),
}

impl FileElement {
    /// Bytes per element in the file.
    pub fn size(self) -> usize {
        match self {
            FileElement::Half => 2,
            FileElement::Same(dtype) => dtype.size(),
        }
    }

    /// The dtype of the array it is read into.
    pub fn dtype(self) -> DType {
        match self {
            FileElement::Half => DType::F32,
            FileElement::Same(dtype) => dtype,
        }
    }
}

/// What the header of a `.npy` file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The array's dtype once read (a half-precision file reads as f32).
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// How the file stores each element.
    pub element: FileElement,
    /// Byte order of the file's elements (little for one-byte elements).
    pub byte_order: ByteOrder,
    /// The data is in Fortran (column-major) order; it is read into C order.
    pub fortran_order: bool,
    /// Where the data starts: magic, version, length field and header text.
    pub data_offset: u64,
}

impl NpyHeader {
    /// Bytes of data the header promises in the file.
    pub fn data_bytes(&self) -> Option<u64> {
        self.bytes_of(self.element.size())
    }

    /// Bytes of the array once read.
    pub fn array_bytes(&self) -> Option<u64> {
        self.bytes_of(self.dtype.size())
    }

    /// True when reading needs a second copy of the array: a Fortran-ordered array with more than
    /// one axis longer than 1 (otherwise both orders are the same).
    pub fn needs_reorder(&self) -> bool {
        self.fortran_order && self.shape.iter().filter(|&&d| d > 1).count() > 1
    }

    fn bytes_of(&self, element_size: usize) -> Option<u64> {
        self.shape.iter().try_fold(element_size as u64, |bytes, &dim| bytes.checked_mul(dim as u64))
    }
}

/// The header NumPy writes for a C-ordered array of `dtype` and `shape`, up to the data.
pub fn header_bytes(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let shape_text = match shape {
        [] => "()".to_string(),
        [only] => format!("({only},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}", descr(dtype));
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // magic (6) + version (2) + u16 length (2) + dict + '\n', padded with spaces before the '\n'.
    let pad = ALIGN - (MAGIC.len() + 2 + 2 + dict.len() + 1) % ALIGN;
    let header_len = dict.len() + pad + 1;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + header_len);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[1, 0]);
    // Shapes have at most a few dozen dims of at most 20 digits, far below u16::MAX.
    bytes.extend_from_slice(&(header_len as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    bytes.resize(bytes.len() + pad, b' ');
    bytes.push(b'\n');
    bytes
}

/// NumPy's `dtype.str` for the little-endian layout `write_npy` writes.
pub fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
    }
}

/// Reads a NumPy dtype string (`'<f4'`, `'>i8'`, `'|b1'`, `'u1'`...) as the element it stores and
/// its byte order, or says what it is and what is supported.
fn parse_descr(descr: &str) -> Result<(FileElement, ByteOrder), String> {
    let (mark, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (Some(c), &descr[1..]),
        _ => (None, descr),
    };
    let unsupported = |what: &str| format!("unsupported dtype '{descr}' ({what}); {SUPPORTED}");
    let mut chars = code.chars();
    let kind = chars.next().ok_or_else(|| unsupported("empty"))?;
    // `None` for what is not a plain size, such as the `8[D]` of a datetime.
    let size: Option<usize> = chars.as_str().parse().ok();
    let element = match (kind, size) {
        ('f', Some(2)) => FileElement::Half,
        ('f', Some(4)) => FileElement::Same(DType::F32),
        ('f', Some(8)) => FileElement::Same(DType::F64),
        ('i', Some(1)) => FileElement::Same(DType::I8),
        ('i', Some(2)) => FileElement::Same(DType::I16),
        ('i', Some(4)) => FileElement::Same(DType::I32),
        ('i', Some(8)) => FileElement::Same(DType::I64),
        ('u', Some(1)) => FileElement::Same(DType::U8),
        ('u', Some(2)) => FileElement::Same(DType::U16),
        ('u', Some(4)) => FileElement::Same(DType::U32),
        ('u', Some(8)) => FileElement::Same(DType::U64),
        ('b', Some(1)) => FileElement::Same(DType::Bool),
        ('f' | 'i' | 'u' | 'b' | 'c', Some(size)) => {
            let name = kind_name(kind).unwrap_or_default();
            return Err(unsupported(&format!("{name}, {size} bytes per element")));
        }
        // Strings, objects and dates say their length or unit in their own ways.
        (kind, _) => {
            let named = kind_name(kind).filter(|_| !matches!(kind, 'f' | 'i' | 'u' | 'b' | 'c'));
            return Err(unsupported(named.unwrap_or("not a NumPy dtype string such as '<f4'")));
        }
    };
    let order = match mark {
        // One byte has no order; NumPy writes `|`, other tools `<`, `>` or nothing.
        _ if element.size() == 1 => ByteOrder::Little,
        Some('<') => ByteOrder::Little,
        Some('>') => ByteOrder::Big,
        Some('=') | None => ByteOrder::NATIVE,
        Some(_) => {
            return Err(unsupported(&format!("'|' marks one-byte types, but this one has {} bytes", element.size())));
        }
    };
    Ok((element, order))
}

/// NumPy's name for a dtype kind character, for messages.
fn kind_name(kind: char) -> Option<&'static str> {
    Some(match kind {
        'f' => "float",
        'i' => "signed integer",
        'u' => "unsigned integer",
        'b' => "bool",
        'c' => "complex",
        'S' | 'a' => "byte string",
        'U' => "unicode string",
        'O' => "Python object",
        'M' => "datetime",
        'm' => "timedelta",
        'V' => "raw bytes (void)",
        _ => return None,
    })
}

/// Reads a whole `.npy` file. Errors name the file.
pub fn read_array(path: &Path) -> Result<Array, String> {
    let (header, reader) = open(path)?;
    read_data(path, &header, reader)
}

/// Writes `array` to `path` atomically, creating parent directories. Errors name the file.
pub fn write_array(path: &Path, array: &Array) -> Result<(), String> {
    crate::files::write_atomically(path, |file| write_file(file, array))
}

fn write_file(file: &mut File, array: &Array) -> std::io::Result<()> {
    let header = header_bytes(array.dtype(), array.shape());
    let data = array.bytes();
    let size = array.dtype().size();
    if ByteOrder::NATIVE == ByteOrder::Little || size == 1 {
        // The data is already as the file holds it: written straight from the array, in one
        // call, rather than copied through a buffer.
        file.write_all(&header)?;
        file.write_all(data)?;
    } else {
        // `.npy` data is written little-endian whatever the machine: reverse each element's bytes.
        let mut out = BufWriter::with_capacity(IO_BUFFER, file);
        out.write_all(&header)?;
        let mut element_bytes = [0u8; 8];
        for element in data.chunks_exact(size) {
            let le = &mut element_bytes[..size];
            le.copy_from_slice(element);
            le.reverse();
            out.write_all(le)?;
        }
        out.flush()?;
    }
    // No fsync: the rename guards against failed tasks, not against power loss, and syncing
    // every output would slow a cycle down for nothing.
    Ok(())
}

/// Opens a `.npy` file and reads its header, leaving the reader at the start of the data, after
/// checking that the file holds exactly the data the header promises.
pub fn open(path: &Path) -> Result<(NpyHeader, BufReader<File>), String> {
    let fail = |what: String| format!("reading {}: {what}", path.display());
    let file = File::open(path).map_err(|e| fail(e.to_string()))?;
    let file_len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
    let mut reader = BufReader::with_capacity(IO_BUFFER, file);
    let header = read_header(&mut reader).map_err(fail)?;
    let data_bytes = header.data_bytes().ok_or_else(|| fail(format!("shape {:?} is too large", header.shape)))?;
    header.array_bytes().ok_or_else(|| fail(format!("shape {:?} is too large", header.shape)))?;
    let found = file_len.saturating_sub(header.data_offset);
    if found != data_bytes {
        let problem = if found < data_bytes { "is truncated" } else { "has trailing bytes" };
        return Err(fail(format!(
            "{problem}: the header promises {data_bytes} bytes of {} data for shape {:?}, but the file holds {found}",
            header.dtype, header.shape
        )));
    }
    Ok((header, reader))
}

/// The header of the file at `path`, if it is a readable `.npy` file.
pub fn peek_header(path: &Path) -> Result<NpyHeader, String> {
    open(path).map(|(header, _)| header)
}

fn read_header(reader: &mut impl Read) -> Result<NpyHeader, String> {
    let mut start = [0u8; 8];
    reader.read_exact(&mut start).map_err(|_| "not a .npy file: too short to hold the magic string".to_string())?;
    if &start[..6] != MAGIC {
        return Err("not a .npy file: it does not start with \\x93NUMPY".into());
    }
    let (major, minor) = (start[6], start[7]);
    let header_len = match major {
        1 => {
            let mut len = [0u8; 2];
            reader.read_exact(&mut len).map_err(|_| "truncated header length".to_string())?;
            u16::from_le_bytes(len) as usize
        }
        2 | 3 => {
            let mut len = [0u8; 4];
            reader.read_exact(&mut len).map_err(|_| "truncated header length".to_string())?;
            u32::from_le_bytes(len) as usize
        }
        _ => {
            return Err(format!("unsupported .npy format version {major}.{minor} (supported: 1.0, 2.0, 3.0)"));
        }
    };
    if header_len > MAX_HEADER_LEN {
        return Err(format!("header length {header_len} is implausibly large"));
    }
    let mut raw = vec![0u8; header_len];
    reader.read_exact(&mut raw).map_err(|_| format!("truncated header: expected {header_len} bytes"))?;
    // Versions 1 and 2 are latin-1, version 3 is UTF-8.
    let text: String = if major == 3 {
        String::from_utf8(raw).map_err(|_| "header is not valid UTF-8".to_string())?
    } else {
        raw.iter().map(|&b| char::from(b)).collect()
    };
    let fields = parse_header_dict(&text).map_err(|e| format!("malformed header {:?}: {e}", text.trim_end()))?;
    let (element, byte_order) = match &fields.descr {
        Literal::Str(descr) => parse_descr(descr)?,
        Literal::List(fields) => {
            return Err(format!("unsupported dtype: a structured dtype with fields {fields}; {SUPPORTED}"));
        }
        other => return Err(format!("malformed header {:?}: `descr` is {other:?}", text.trim_end())),
    };
    let length_field = if major == 1 { 2 } else { 4 };
    Ok(NpyHeader {
        dtype: element.dtype(),
        shape: fields.shape,
        element,
        byte_order,
        fortran_order: fields.fortran_order,
        data_offset: (8 + length_field + header_len) as u64,
    })
}

/// Reads the data the header describes into a typed array in C order.
pub fn read_data(path: &Path, header: &NpyHeader, mut reader: impl Read) -> Result<Array, String> {
    let count: usize = header.shape.iter().product();
    let fail = |what: String| format!("reading {}: {what}", path.display());
    let io = |e: std::io::Error| fail(e.to_string());
    let big = header.byte_order == ByteOrder::Big;
    let reader = &mut reader;
    // Multi-byte elements decoded in the file's byte order, a buffer at a time.
    macro_rules! decoded {
        ($t:ty) => {
            in_c_order(
                header,
                if big {
                    read_elements(reader, count, <$t>::from_be_bytes)
                } else {
                    read_elements(reader, count, <$t>::from_le_bytes)
                }
                .map_err(io)?,
            )
        };
    }
    let array = match header.element {
        FileElement::Half => {
            let decode: fn([u8; 2]) -> f32 =
                if big { |b| f16_to_f32(u16::from_be_bytes(b)) } else { |b| f16_to_f32(u16::from_le_bytes(b)) };
            in_c_order(header, read_elements(reader, count, decode).map_err(io)?)
        }
        FileElement::Same(DType::F32) => decoded!(f32),
        FileElement::Same(DType::F64) => decoded!(f64),
        FileElement::Same(DType::I16) => decoded!(i16),
        FileElement::Same(DType::I32) => decoded!(i32),
        FileElement::Same(DType::I64) => decoded!(i64),
        FileElement::Same(DType::U16) => decoded!(u16),
        FileElement::Same(DType::U32) => decoded!(u32),
        FileElement::Same(DType::U64) => decoded!(u64),
        FileElement::Same(DType::U8) => in_c_order(header, read_bytes(reader, count).map_err(io)?),
        // Same size and alignment as a byte: these collect in place, without a second buffer.
        FileElement::Same(DType::I8) => {
            in_c_order(header, read_bytes(reader, count).map_err(io)?.into_iter().map(|b| b as i8).collect())
        }
        FileElement::Same(DType::Bool) => {
            in_c_order(header, read_bytes(reader, count).map_err(io)?.into_iter().map(|b| b != 0).collect())
        }
    };
    array.map_err(fail)
}

/// An array of the header's shape from elements in the file's order: C order as it is, Fortran
/// order copied into C order.
fn in_c_order<T: Element>(header: &NpyHeader, data: Vec<T>) -> Result<Array, String> {
    if header.fortran_order {
        let fortran = ArrayD::from_shape_vec(IxDyn(&header.shape).f(), data).map_err(|e| e.to_string())?;
        Ok(Array::from_ndarray(fortran))
    } else {
        Array::from_vec(header.shape.clone(), data)
    }
}

fn read_bytes(reader: &mut impl Read, count: usize) -> std::io::Result<Vec<u8>> {
    let mut data = vec![0u8; count];
    reader.read_exact(&mut data)?;
    Ok(data)
}

/// Decodes `count` elements of `N` bytes, a buffer at a time.
fn read_elements<T, const N: usize>(
    reader: &mut impl Read,
    count: usize,
    decode: fn([u8; N]) -> T,
) -> std::io::Result<Vec<T>> {
    let mut data = Vec::with_capacity(count);
    let mut buffer = vec![0u8; IO_BUFFER / N * N];
    let mut remaining = count * N;
    while remaining > 0 {
        let chunk = &mut buffer[..remaining.min(IO_BUFFER / N * N)];
        reader.read_exact(chunk)?;
        data.extend(chunk.chunks_exact(N).map(|bytes| decode(bytes.try_into().expect("chunks of N bytes"))));
        remaining -= chunk.len();
    }
    Ok(data)
}

/// IEEE 754 half precision to single, exactly (every half is a single): sign, exponent and
/// significand moved to their places; subnormal halves become normal singles; infinities and
/// NaNs (with their payload) stay what they are, as NumPy converts them.
fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let significand = u32::from(bits & 0x3ff);
    match (exponent, significand) {
        (0, 0) => f32::from_bits(sign),
        (0, _) => {
            // significand × 2⁻²⁴, exact in f32.
            let magnitude = significand as f32 / (1u32 << 24) as f32;
            if sign == 0 { magnitude } else { -magnitude }
        }
        (0x1f, _) => f32::from_bits(sign | 0x7f80_0000 | (significand << 13)),
        _ => f32::from_bits(sign | ((exponent + 127 - 15) << 23) | (significand << 13)),
    }
}
