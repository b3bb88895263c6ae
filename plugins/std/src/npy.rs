//! `read_npy` and `write_npy`: one array in a NumPy `.npy` file.
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

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use runner_plugin::ndarray::{ArrayD, IxDyn, ShapeBuilder};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, Element, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext,
    TaskError, Value, ValueMeta,
};

use crate::support::{array_shape_of, expect_array, one_input_meta, one_input_value};

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
const IO_BUFFER: usize = 64 << 10;
/// What `read_npy` reads, for messages that refuse a dtype.
const SUPPORTED: &str = "supported: f2 (read as f32), f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 and b1 (bool), \
                         little-endian ('<'), big-endian ('>') or native";

const READ_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").input_path()];
const WRITE_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").output_path()];

/// The order of an element's bytes in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    const NATIVE: ByteOrder = if cfg!(target_endian = "big") { ByteOrder::Big } else { ByteOrder::Little };
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
fn descr(dtype: DType) -> &'static str {
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
    let fail = |what: String| format!("writing {}: {what}", path.display());
    let file_name = path.file_name().ok_or_else(|| fail("the path does not name a file".into()))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create directory {}: {e}", dir.display())))?;

    // Unique per process and call, hidden, and in the same directory so the rename is atomic.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".{}-{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let temp = dir.join(temp_name);

    let written = write_file(&temp, array).and_then(|()| std::fs::rename(&temp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        fail(e.to_string())
    })
}

fn write_file(path: &Path, array: &Array) -> std::io::Result<()> {
    let mut file = File::create_new(path)?;
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
fn open(path: &Path) -> Result<(NpyHeader, BufReader<File>), String> {
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

/// A Python literal in a `.npy` header dict.
#[derive(Debug, PartialEq)]
enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
    /// A list, as its text: a structured dtype's fields, which are refused by name.
    List(String),
}

/// The three entries of a header dict, as written.
struct HeaderFields {
    descr: Literal,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses `{'descr': ..., 'fortran_order': ..., 'shape': (...), }`.
fn parse_header_dict(text: &str) -> Result<HeaderFields, String> {
    let entries = DictParser { chars: text.chars().collect(), at: 0 }.parse()?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("descr", d @ (Literal::Str(_) | Literal::List(_))) => descr = Some(d),
            ("fortran_order", Literal::Bool(f)) => fortran = Some(f),
            ("shape", Literal::Tuple(s)) => shape = Some(s),
            ("descr" | "fortran_order" | "shape", other) => {
                return Err(format!("`{key}` has the wrong type: {other:?}"));
            }
            (other, _) => return Err(format!("unexpected key '{other}'")),
        }
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(HeaderFields { descr, fortran_order, shape }),
        _ => Err("the keys 'descr', 'fortran_order' and 'shape' are required".into()),
    }
}

/// A recursive-descent parser for the small subset of Python literals `.npy` headers use.
struct DictParser {
    chars: Vec<char>,
    at: usize,
}

impl DictParser {
    fn parse(mut self) -> Result<Vec<(String, Literal)>, String> {
        self.expect('{')?;
        let mut entries = Vec::new();
        loop {
            if self.eat('}') {
                break;
            }
            let key = match self.literal()? {
                Literal::Str(key) => key,
                other => return Err(format!("expected a string key, found {other:?}")),
            };
            self.expect(':')?;
            entries.push((key, self.literal()?));
            if !self.eat(',') {
                self.expect('}')?;
                break;
            }
        }
        self.skip_space();
        if self.at != self.chars.len() {
            return Err(format!("unexpected text after the dict at offset {}", self.at));
        }
        Ok(entries)
    }

    fn literal(&mut self) -> Result<Literal, String> {
        self.skip_space();
        match self.chars.get(self.at) {
            Some(&quote @ ('\'' | '"')) => {
                self.at += 1;
                let start = self.at;
                while self.chars.get(self.at).is_some_and(|&c| c != quote) {
                    self.at += 1;
                }
                let text: String = self.chars[start..self.at].iter().collect();
                self.expect(quote)?;
                Ok(Literal::Str(text))
            }
            Some('[') => self.bracketed().map(Literal::List),
            Some('(') => {
                self.at += 1;
                let mut dims = Vec::new();
                loop {
                    if self.eat(')') {
                        break;
                    }
                    dims.push(self.whole_number()?);
                    if !self.eat(',') {
                        self.expect(')')?;
                        break;
                    }
                }
                Ok(Literal::Tuple(dims))
            }
            _ => {
                if self.word("True") {
                    Ok(Literal::Bool(true))
                } else if self.word("False") {
                    Ok(Literal::Bool(false))
                } else {
                    Err(format!("unsupported value at offset {}", self.at))
                }
            }
        }
    }

    /// The text of a bracketed literal (`[...]`, nesting and quoted brackets allowed), whole.
    fn bracketed(&mut self) -> Result<String, String> {
        let start = self.at;
        let mut depth = 0usize;
        let mut quote = None;
        while let Some(&c) = self.chars.get(self.at) {
            self.at += 1;
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '[' | '(') => depth += 1,
                (None, ']' | ')') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(self.chars[start..self.at].iter().collect());
                    }
                }
                _ => {}
            }
        }
        Err(format!("unclosed '[' at offset {start}"))
    }

    fn whole_number(&mut self) -> Result<usize, String> {
        self.skip_space();
        let start = self.at;
        while self.chars.get(self.at).is_some_and(char::is_ascii_digit) {
            self.at += 1;
        }
        let digits: String = self.chars[start..self.at].iter().collect();
        // Python 2 wrote longs as `3L`.
        self.eat('L');
        digits.parse().map_err(|_| format!("expected a dimension at offset {start}"))
    }

    fn word(&mut self, word: &str) -> bool {
        let len = word.chars().count();
        let matches = self.chars.get(self.at..self.at + len).is_some_and(|s| s.iter().copied().eq(word.chars()));
        if matches {
            self.at += len;
        }
        matches
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    /// Skips spaces, then consumes `c` if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        let found = self.chars.get(self.at) == Some(&c);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!("expected '{c}' at offset {}", self.at)) }
    }
}

/// Reads the data the header describes into a typed array in C order.
fn read_data(path: &Path, header: &NpyHeader, mut reader: impl Read) -> Result<Array, String> {
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

fn path_arg(args: &Args) -> Result<PathBuf, ArgError> {
    let path = args.str("path")?;
    if path.trim().is_empty() {
        return Err(ArgError::new("path", "`path` must name a file, got an empty string"));
    }
    Ok(PathBuf::from(path))
}

/// Heap bytes reading the file allocates besides its buffers: the array, twice while a
/// Fortran-ordered one is copied into C order.
fn read_bytes_needed(header: &NpyHeader) -> u64 {
    let array = header.array_bytes().unwrap_or(0);
    if header.needs_reorder() { 2 * array } else { array }
}

pub struct ReadNpy;

impl Plugin for ReadNpy {
    fn name(&self) -> &'static str {
        "read_npy"
    }

    fn about(&self) -> &'static str {
        "reads one array from a .npy file"
    }

    fn args(&self) -> &'static [ArgSpec] {
        READ_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args).map(|_| ())
    }

    /// Known when the file already exists; otherwise it may be made before the task runs.
    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let path = path_arg(args)?;
        Ok(match peek_header(&path) {
            Ok(header) => ValueMeta::Array { dtype: header.dtype, shape: header.shape },
            Err(_) => ValueMeta::Unknown,
        })
    }

    /// Worked out from the file's header, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The array plus the read buffers, and a second copy of the array for a Fortran-ordered
    /// file; the file's header says how big it is once the file exists.
    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let header = path_arg(args).ok().and_then(|path| peek_header(&path).ok());
        let bytes = match header {
            Some(header) => read_bytes_needed(&header),
            None => output.bytes().unwrap_or(0),
        };
        bytes + 2 * IO_BUFFER as u64
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let (header, reader) = open(&path).map_err(TaskError::msg)?;
        ctx.will_allocate(read_bytes_needed(&header));
        Ok(Value::Array(read_data(&path, &header, reader).map_err(TaskError::msg)?))
    }
}

pub struct WriteNpy;

impl Plugin for WriteNpy {
    fn name(&self) -> &'static str {
        "write_npy"
    }

    fn about(&self) -> &'static str {
        "writes its one input array to a .npy file atomically and returns the path"
    }

    fn args(&self) -> &'static [ArgSpec] {
        WRITE_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args).map(|_| ())
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        path_arg(args)?;
        let input = one_input_meta(self.name(), inputs)?;
        array_shape_of(self.name(), input, ALL_DTYPES)?;
        Ok(ValueMeta::Path)
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The data goes straight from the input buffer to the file; the header, the paths and, on a
    /// big-endian machine, a write buffer are all the task allocates.
    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        IO_BUFFER as u64
    }

    fn run(&self, _ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let (name, value) = one_input_value(self.name(), inputs)?;
        let array = expect_array(self.name(), name, value, ALL_DTYPES)?;
        write_array(&path, array).map_err(TaskError::msg)?;
        Ok(Value::Path(path))
    }
}

const ALL_DTYPES: &[DType] = &DType::ALL;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{array, meta, plan, run, single};
    use runner_plugin::serde_json::{Value as Json, json};

    /// A header as NumPy 1.26 writes it, spelled out: magic, version 1.0, the little-endian length
    /// of what follows, the dict, then spaces up to `total - 1` bytes and a newline.
    fn numpy_v1_header(dict: &str, total: usize) -> Vec<u8> {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&((total - 10) as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.resize(total - 1, b' ');
        bytes.push(b'\n');
        bytes
    }

    fn temp_dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Files as `np.save` writes them, with their arrays.
    fn numpy_files() -> Vec<(&'static str, Vec<u8>, Value)> {
        let mut f32_2x3 = numpy_v1_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 128);
        #[rustfmt::skip]
        f32_2x3.extend_from_slice(&[
            0, 0, 0, 0,  0, 0, 0x80, 0x3f,  0, 0, 0, 0x40,
            0, 0, 0x40, 0x40,  0, 0, 0x80, 0x40,  0, 0, 0xa0, 0x40,
        ]);
        let mut i32_5 = numpy_v1_header("{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 128);
        #[rustfmt::skip]
        i32_5.extend_from_slice(&[
            1, 0, 0, 0,  0xff, 0xff, 0xff, 0xff,  2, 0, 0, 0,  0, 0, 0, 0,  7, 0, 0, 0,
        ]);
        let mut u8_scalar = numpy_v1_header("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", 128);
        u8_scalar.push(7);
        let mut f64_2x1x2 = numpy_v1_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1, 2), }", 128);
        #[rustfmt::skip]
        f64_2x1x2.extend_from_slice(&[
            0, 0, 0, 0, 0, 0, 0xe0, 0x3f,
            0, 0, 0, 0, 0, 0, 0, 0xc0,
            0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
            0, 0, 0, 0, 0, 0, 0x08, 0x40,
        ]);
        // Fifteen axes: the 20 spaces NumPy reserves for growing the first axis push the header
        // past 128 bytes, so it is padded to 192.
        let ones = ["1"; 15].join(", ");
        let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({ones}), }}");
        let mut f32_15d = numpy_v1_header(&dict, 192);
        f32_15d.extend_from_slice(&[0, 0, 0x20, 0x41]);
        vec![
            ("f32 (2, 3)", f32_2x3, array(&[2, 3], vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0])),
            ("i32 (5,)", i32_5, array(&[5], vec![1i32, -1, 2, 0, 7])),
            ("u8 ()", u8_scalar, array(&[], vec![7u8])),
            ("f64 (2, 1, 2)", f64_2x1x2, array(&[2, 1, 2], vec![0.5f64, -2.0, 1.0, 3.0])),
            ("f32 15-d", f32_15d, array(&[1; 15], vec![10.0f32])),
        ]
    }

    fn same_array(a: &Value, b: &Value) -> bool {
        let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
        (a.dtype(), a.shape(), a.bytes()) == (b.dtype(), b.shape(), b.bytes())
    }

    #[test]
    fn writes_exactly_the_bytes_numpy_writes() {
        let dir = temp_dir();
        for (name, expected, value) in numpy_files() {
            let path = dir.path().join("out.npy");
            let returned = run(&WriteNpy, json!({"path": path}), &[single("array", value)]).unwrap();
            assert!(matches!(&returned, Value::Path(p) if *p == path), "{name}");
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{name}");
        }
    }

    #[test]
    fn reads_what_numpy_writes() {
        let dir = temp_dir();
        for (name, bytes, expected) in numpy_files() {
            let path = dir.path().join("in.npy");
            std::fs::write(&path, &bytes).unwrap();
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &expected), "{name}");
        }
    }

    #[test]
    fn header_of_a_uk_field_is_128_bytes() {
        let expected = numpy_v1_header("{'descr': '<f4', 'fortran_order': False, 'shape': (970, 1042), }", 128);
        assert_eq!(header_bytes(DType::F32, &[970, 1042]), expected);
    }

    #[test]
    fn round_trips_every_dtype_and_rank_through_the_plugins() {
        let dir = temp_dir();
        let values = [
            array(&[], vec![-3.25f32]),
            array(&[4], vec![1.5f64, -0.0, f64::MAX, f64::MIN_POSITIVE]),
            array(&[2, 3, 2], (0..12).map(|i| i * 1_000_003 - 7).collect::<Vec<i32>>()),
            array(&[3, 1, 5], (0..15u8).map(|i| i.wrapping_mul(37)).collect::<Vec<u8>>()),
            array(&[0, 4], Vec::<f32>::new()),
            array(&[5], vec![i8::MIN, -1, 0, 1, i8::MAX]),
            array(&[2, 2], vec![i16::MIN, -1, 1, i16::MAX]),
            array(&[3], vec![i64::MIN, -1, i64::MAX]),
            array(&[1, 3], vec![0u16, 1, u16::MAX]),
            array(&[3], vec![0u32, 1, u32::MAX]),
            array(&[3], vec![0u64, 1, u64::MAX]),
            array(&[2, 3], vec![true, false, false, true, true, false]),
        ];
        for (i, value) in values.into_iter().enumerate() {
            // Also creates the missing parent directories.
            let path = dir.path().join(format!("nested/{i}/x.npy"));
            let expected = value.meta();
            let bytes = value.as_bytes().unwrap().to_vec();
            run(&WriteNpy, json!({"path": path}), &[single("array", value)]).unwrap();
            let back = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert_eq!(back.meta(), expected);
            assert_eq!(back.as_bytes().unwrap(), bytes.as_slice());
        }
    }

    #[test]
    fn reads_version_2_headers_other_padding_and_u1_spellings() {
        let dir = temp_dir();
        let path = dir.path().join("v2.npy");
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
        bytes.extend_from_slice(&(128u32 - 12).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.resize(127, b' ');
        bytes.push(b'\n');
        bytes.extend_from_slice(&[0, 0, 0x80, 0xbf, 0, 0, 0, 0x3f]);
        std::fs::write(&path, &bytes).unwrap();
        let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert!(same_array(&value, &array(&[2], vec![-1.0f32, 0.5])));

        for descr in ["<u1", "u1"] {
            // Old NumPy aligned to 16 bytes and spelled the dict with other spacing.
            let dict = format!("{{\"descr\":\"{descr}\",\"fortran_order\":False,\"shape\":(3,)}}");
            let mut bytes = numpy_v1_header(&dict, 64);
            bytes.extend_from_slice(&[9, 8, 7]);
            std::fs::write(&path, &bytes).unwrap();
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &array(&[3], vec![9u8, 8, 7])), "{descr}");
        }
    }

    #[test]
    fn rejects_garbage_naming_the_file() {
        let dir = temp_dir();
        let path = dir.path().join("bad.npy");
        let good = |dict: &str, data: &[u8]| {
            let mut bytes = numpy_v1_header(dict, 128);
            bytes.extend_from_slice(data);
            bytes
        };
        let f32_2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "too short"),
            (b"PK\x03\x04 this is a zip file, not an array".to_vec(), "does not start with"),
            (b"\x93NUMPY\x09\x00\x10\x00".to_vec(), "version 9.0"),
            (good(f32_2, &[0; 7]), "truncated"),
            (good(f32_2, &[0; 12]), "trailing bytes"),
            (
                good("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", &[0; 16]),
                "unsupported dtype '<c8' (complex, 8 bytes per element); supported: f2 (read as f32)",
            ),
            (
                good("{'descr': '<f16', 'fortran_order': False, 'shape': (2,), }", &[0; 32]),
                "'<f16' (float, 16 bytes per element)",
            ),
            (good("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", &[0; 8]), "'|' marks one-byte types"),
            (
                good("{'descr': 'float', 'fortran_order': False, 'shape': (2,), }", &[0; 8]),
                "unsupported dtype 'float' (not a NumPy dtype string",
            ),
            (
                good("{'descr': [('x', '<f4'), ('y', '<i8')], 'fortran_order': False, 'shape': (2,), }", &[0; 24]),
                "structured dtype with fields [('x', '<f4'), ('y', '<i8')]",
            ),
            (good("{'descr': [('x', '<f4'), 'fortran_order': False, 'shape': (2,), }", &[0; 8]), "unclosed '['"),
            (good("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", &[0; 15]), "promises 16 bytes of i64"),
            (good("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", &[0; 8]), "malformed header"),
            (good("{'descr': '<f4', 'shape': (2,), }", &[0; 8]), "required"),
            (good("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", &[0; 8]), "malformed"),
            (good("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", &[0; 8]), "malformed"),
        ];
        for (bytes, complaint) in cases {
            std::fs::write(&path, &bytes).unwrap();
            let err = run(&ReadNpy, json!({"path": path}), &[]).unwrap_err();
            assert!(err.message().contains(complaint), "expected {complaint:?} in: {err}");
            assert!(err.message().contains("bad.npy"), "{err}");
        }
        let missing = dir.path().join("missing.npy");
        let err = run(&ReadNpy, json!({"path": missing}), &[]).unwrap_err();
        assert!(err.message().contains("missing.npy"), "{err}");
    }

    /// Runs `script` with NumPy, giving it `stdin`; panics saying what to install when there
    /// is no `python3` or no NumPy, so a missing tool is never taken for a passing test.
    fn python_with_numpy(script: &str, stdin: &str) {
        use std::process::{Command, Stdio};
        const NEED: &str = "these tests compare with files NumPy writes: they need `python3` with numpy \
                            (`pip install numpy`)";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{NEED}; cannot start python3: {e}"));
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("No module named 'numpy'"), "{NEED}; python3 says: {stderr}");
        assert!(out.status.success(), "python3 failed: {stderr}");
    }

    /// Saves each case with `np.save` into `dir`: its values in C order, made an array of its
    /// `descr` and shape, in Fortran order when asked.
    fn numpy_save(dir: &Path, cases: &[Json]) {
        const SCRIPT: &str = r#"
import json, os, sys
import numpy as np
dir, cases = sys.argv[1], json.load(sys.stdin)
for case in cases:
    values = [float(v) if isinstance(v, str) else v for v in case["values"]]
    a = np.array(values, dtype=np.dtype(case["descr"])).reshape(case["shape"])
    if case["fortran"]:
        a = np.asfortranarray(a)
    np.save(os.path.join(dir, case["file"]), a)
"#;
        let script = SCRIPT.replacen("sys.argv[1]", &format!("{:?}", dir.display().to_string()), 1);
        python_with_numpy(&script, &Json::Array(cases.to_vec()).to_string());
    }

    /// Element values as JSON for the script: non-finite floats as the strings Python's `float`
    /// reads.
    trait ToJson: Copy {
        fn to_json(self) -> Json;
    }
    macro_rules! exact_json {
        ($($t:ty),*) => {$(impl ToJson for $t { fn to_json(self) -> Json { json!(self) } })*};
    }
    exact_json!(i8, i16, i32, i64, u8, u16, u32, u64, bool);
    impl ToJson for f64 {
        fn to_json(self) -> Json {
            if self.is_finite() { json!(self) } else { json!(self.to_string()) }
        }
    }
    impl ToJson for f32 {
        fn to_json(self) -> Json {
            f64::from(self).to_json()
        }
    }

    /// A file NumPy is to write (`descr`, `shape`, `values` in C order, Fortran order or not) and
    /// the array `read_npy` must make of it.
    struct NumpyCase {
        file: String,
        spec: Json,
        expected: Value,
    }

    fn numpy_case<T: Element + ToJson>(descr: &str, shape: &[usize], values: Vec<T>, fortran: bool) -> NumpyCase {
        let order = descr.replace('<', "le-").replace('>', "be-").replace('|', "");
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let file = format!("{order}_{}{}.npy", dims.join("x"), if fortran { "_fortran" } else { "" });
        let spec = json!({
            "file": file,
            "descr": descr,
            "shape": shape,
            "values": values.iter().map(|v| v.to_json()).collect::<Vec<_>>(),
            "fortran": fortran,
        });
        NumpyCase { file, spec, expected: array(shape, values) }
    }

    /// What NumPy writes for every dtype `read_npy` reads, in both byte orders, C and Fortran
    /// order, 0-d and empty: read back as the same values in C order.
    #[test]
    fn reads_every_dtype_numpy_writes() {
        let two_by_three = |v: [f64; 6]| v.to_vec();
        let halves = vec![1.5f32, -0.0, 65504.0, 2f32.powi(-14), 2f32.powi(-24), -3.0 * 2f32.powi(-24), f32::INFINITY];
        let cases = vec![
            numpy_case("|i1", &[2, 3], vec![i8::MIN, -1, 0, 1, 2, i8::MAX], false),
            numpy_case("<i2", &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case(">i2", &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case("<i4", &[3], vec![i32::MIN, -7, i32::MAX], false),
            numpy_case(">i4", &[3], vec![i32::MIN, -7, i32::MAX], false),
            numpy_case("<i8", &[2, 2], vec![i64::MIN, -1, 1 << 40, i64::MAX], false),
            numpy_case(">i8", &[2, 2], vec![i64::MIN, -1, 1 << 40, i64::MAX], false),
            numpy_case("|u1", &[3], vec![0u8, 128, 255], false),
            numpy_case("<u2", &[3], vec![0u16, 258, u16::MAX], false),
            numpy_case(">u2", &[3], vec![0u16, 258, u16::MAX], false),
            numpy_case("<u4", &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case(">u4", &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case("<u8", &[4], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case(">u8", &[4], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case("<f4", &[5], vec![1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE, f32::NEG_INFINITY], false),
            numpy_case(">f4", &[5], vec![1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE, f32::NAN], false),
            numpy_case("<f8", &[2, 3], two_by_three([0.1, -2.5, 1e300, 5e-324, f64::MAX, -0.0]), false),
            numpy_case(">f8", &[2, 3], two_by_three([0.1, -2.5, 1e300, 5e-324, f64::MAX, f64::INFINITY]), false),
            numpy_case("<f2", &[7], halves.clone(), false),
            numpy_case(">f2", &[7], halves, false),
            numpy_case("|b1", &[2, 2], vec![true, false, false, true], false),
            // Fortran order, also big-endian, half and bool, and in three dims.
            numpy_case("<i4", &[2, 3], vec![0i32, 1, 2, 3, 4, 5], true),
            numpy_case(">f8", &[2, 3, 4], (0..24).map(|i| f64::from(i) * 0.5 - 3.0).collect(), true),
            numpy_case("|b1", &[3, 2], vec![true, false, false, false, true, true], true),
            numpy_case("<f2", &[2, 2], vec![1.0f32, 2.0, -0.5, 0.25], true),
            numpy_case("<u2", &[2, 1, 3], vec![1u16, 2, 3, 4, 5, 6], true),
            // 0-d and empty.
            numpy_case("<i8", &[], vec![-42i64], false),
            numpy_case(">u2", &[0, 3], Vec::<u16>::new(), false),
        ];
        let dir = temp_dir();
        let specs: Vec<Json> = cases.iter().map(|c| c.spec.clone()).collect();
        numpy_save(dir.path(), &specs);
        let mut names: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "every case has its own file");
        for case in &cases {
            let path = dir.path().join(&case.file);
            let header = peek_header(&path).unwrap();
            // The files are what the cases claim to exercise.
            let descr = case.spec["descr"].as_str().unwrap();
            let multi_byte = header.element.size() > 1;
            assert_eq!(header.byte_order == ByteOrder::Big, multi_byte && descr.starts_with('>'), "{}", case.file);
            assert_eq!(header.fortran_order, case.spec["fortran"] == true && header.shape.len() > 1, "{}", case.file);
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &case.expected), "{}: read {:?}", case.file, value);
        }
    }

    /// Every one of the 65 536 half-precision values, little- and big-endian, reads as the f32
    /// NumPy widens it to (NaNs: a NaN of the same sign).
    #[test]
    fn every_half_reads_as_numpy_widens_it() {
        let dir = temp_dir();
        let script = format!(
            "import os\nimport numpy as np\nd = {:?}\nh = np.arange(65536, dtype=np.uint16).view(np.float16)\n\
             np.save(os.path.join(d, 'le.npy'), h.astype('<f2'))\nnp.save(os.path.join(d, 'be.npy'), h.astype('>f2'))\n\
             np.save(os.path.join(d, 'f32.npy'), h.astype('<f4'))\n",
            dir.path().display().to_string()
        );
        python_with_numpy(&script, "");
        let widened = read_array(&dir.path().join("f32.npy")).unwrap();
        let widened = widened.view::<f32>().unwrap();
        for file in ["le.npy", "be.npy"] {
            let read = read_array(&dir.path().join(file)).unwrap();
            assert_eq!((read.dtype(), read.shape()), (DType::F32, &[65536][..]));
            for (bits, (&ours, &numpy)) in read.view::<f32>().unwrap().iter().zip(widened.iter()).enumerate() {
                let same = if numpy.is_nan() {
                    ours.is_nan() && ours.is_sign_negative() == numpy.is_sign_negative()
                } else {
                    ours.to_bits() == numpy.to_bits()
                };
                assert!(same, "{file}: half {bits:#06x} read as {ours:e}, NumPy says {numpy:e}");
            }
        }
    }

    /// `write_npy` writes, byte for byte, what `np.save` writes for the same values, for every
    /// dtype and for 0-d, 1-d, 3-d and empty arrays.
    #[test]
    fn writes_the_bytes_np_save_writes_for_every_dtype() {
        let cases = vec![
            numpy_case(descr(DType::F32), &[2, 3], vec![0.0f32, 1.0, -2.5, 1e30, f32::MIN_POSITIVE, -0.0], false),
            numpy_case(descr(DType::F64), &[], vec![std::f64::consts::PI], false),
            numpy_case(descr(DType::I8), &[2, 1, 3], vec![i8::MIN, -1, 0, 1, 2, i8::MAX], false),
            numpy_case(descr(DType::I16), &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case(descr(DType::I32), &[0], Vec::<i32>::new(), false),
            numpy_case(descr(DType::I64), &[970, 2], (0..1940).map(|i| (i - 970) * 1_000_000_007i64).collect(), false),
            numpy_case(descr(DType::U8), &[3], vec![0u8, 128, 255], false),
            numpy_case(descr(DType::U16), &[1, 3], vec![0u16, 258, u16::MAX], false),
            numpy_case(descr(DType::U32), &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case(descr(DType::U64), &[2, 2], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case(descr(DType::Bool), &[2, 3], vec![true, false, false, true, true, false], false),
        ];
        let theirs = temp_dir();
        let specs: Vec<Json> = cases.iter().map(|c| c.spec.clone()).collect();
        numpy_save(theirs.path(), &specs);
        let ours = temp_dir();
        let mut dtypes = Vec::new();
        for case in cases {
            let path = ours.path().join(&case.file);
            dtypes.push(case.expected.as_array().unwrap().dtype());
            run(&WriteNpy, json!({"path": path}), &[single("array", case.expected)]).unwrap();
            let expected = std::fs::read(theirs.path().join(&case.file)).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{}", case.file);
        }
        assert_eq!(dtypes, DType::ALL, "every dtype is written");
    }

    /// What NumPy writes but arrays cannot hold is refused naming the dtype and what is read.
    #[test]
    fn dtypes_numpy_writes_that_are_not_supported_are_named() {
        let dir = temp_dir();
        let script = format!(
            "import os\nimport numpy as np\nd = {:?}\n\
             np.save(os.path.join(d, 'complex.npy'), np.zeros(3, dtype=np.complex64))\n\
             np.save(os.path.join(d, 'text.npy'), np.array(['a', 'bcd']))\n\
             np.save(os.path.join(d, 'record.npy'), np.zeros(2, dtype=[('x', '<f4'), ('y', '<i8')]))\n\
             np.save(os.path.join(d, 'dates.npy'), np.array(['2026-11-01'], dtype='datetime64[D]'))\n",
            dir.path().display().to_string()
        );
        python_with_numpy(&script, "");
        for (file, complaint) in [
            ("complex.npy", "unsupported dtype '<c8' (complex, 8 bytes per element)"),
            ("text.npy", "unsupported dtype '<U3' (unicode string)"),
            ("record.npy", "structured dtype with fields [('x', '<f4'), ('y', '<i8')]"),
            ("dates.npy", "unsupported dtype '<M8[D]' (datetime)"),
        ] {
            let err = run(&ReadNpy, json!({"path": dir.path().join(file)}), &[]).unwrap_err();
            let message = err.message();
            assert!(message.contains(complaint) && message.contains(file), "{file}: {message}");
            assert!(message.contains(SUPPORTED) && !message.contains("malformed"), "{file}: {message}");
        }
    }

    /// Bytes other than 0 and 1 in a bool file are true, as NumPy treats them; a Fortran-ordered
    /// file's estimate counts the copy into C order.
    #[test]
    fn bool_bytes_and_the_cost_of_fortran_order() {
        let dir = temp_dir();
        let path = dir.path().join("b.npy");
        let mut bytes = numpy_v1_header("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", 128);
        bytes.extend_from_slice(&[0, 1, 2, 255]);
        std::fs::write(&path, &bytes).unwrap();
        let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert!(same_array(&value, &array(&[4], vec![false, true, true, true])));

        let fortran = dir.path().join("f.npy");
        let mut bytes = numpy_v1_header("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", 128);
        bytes.extend_from_slice(&[0; 12]);
        std::fs::write(&fortran, &bytes).unwrap();
        let (meta_out, estimate) = plan(&ReadNpy, json!({"path": fortran}), &[]).unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F32, shape: vec![2, 3] });
        // 6 halves read as 24 bytes of f32, copied once into C order.
        assert_eq!(estimate, 2 * 24 + 2 * IO_BUFFER as u64);
    }

    #[test]
    fn a_failed_write_leaves_no_file_behind() {
        let dir = temp_dir();
        // The target is a directory, so the final rename fails after the data was written.
        let target = dir.path().join("taken.npy");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"x").unwrap();
        let err = run(&WriteNpy, json!({"path": target}), &[single("a", array(&[2], vec![1.0f32, 2.0]))]).unwrap_err();
        assert!(err.message().contains("taken.npy"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("taken.npy")]);
    }

    #[test]
    fn plan_metadata_and_checks() {
        let dir = temp_dir();
        let path = dir.path().join("x.npy");
        assert_eq!(plan(&ReadNpy, json!({"path": path}), &[]).unwrap().0, ValueMeta::Unknown);
        write_array(&path, array(&[3, 4], vec![0.0f64; 12]).as_array().unwrap()).unwrap();
        let (meta_out, estimate) = plan(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F64, shape: vec![3, 4] });
        assert_eq!(estimate, 96 + 2 * IO_BUFFER as u64);

        let input = meta("a", ValueMeta::Array { dtype: DType::I32, shape: vec![2] });
        assert_eq!(plan(&WriteNpy, json!({"path": "o.npy"}), &[input]).unwrap().0, ValueMeta::Path);
        assert!(plan(&WriteNpy, json!({"path": "o.npy"}), &[meta("a", ValueMeta::Json)]).is_err());
        assert!(plan(&WriteNpy, json!({"path": "o.npy"}), &[]).is_err());
        let err = plan(&WriteNpy, json!({"path": ""}), &[]).unwrap_err();
        assert_eq!(err.arg.as_deref(), Some("path"));
        let err = plan(&ReadNpy, json!({"path": [1]}), &[]).unwrap_err();
        assert_eq!(err.arg.as_deref(), Some("path"));
    }
}
