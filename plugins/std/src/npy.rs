//! `read_npy` and `write_npy`: one array in a NumPy `.npy` file.
//!
//! Files are written exactly as NumPy (≥ 1.23, e.g. 1.26) writes them: format version 1.0, the
//! header dict `{'descr': '<f4', 'fortran_order': False, 'shape': (970, 1042), }` followed by
//! NumPy's spare space for growing the first axis (21 minus the digits of `shape[0]` spaces, none
//! for a 0-d array), then spaces and a final `\n` so that magic, version, length and header fill
//! a multiple of 64 bytes (never adding zero padding: an exact fit gets 64 more), then the data in
//! C order, little-endian. dtypes: `<f4`, `<f8`, `<i4`, `|u1`. Writes are atomic: the file is
//! written under a temporary name in the target directory and renamed into place, so a failed
//! task never leaves half a file.
//!
//! Reading accepts what NumPy writes: versions 1.0, 2.0 and 3.0, any padding, `'<u1'` or `'u1'`
//! for bytes. Fortran-ordered arrays, other dtypes and anything malformed are rejected with an
//! error naming the file.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
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

const READ_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").input_path()];
const WRITE_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").output_path()];

/// What the header of a `.npy` file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Where the data starts: magic, version, length field and header text.
    pub data_offset: u64,
}

impl NpyHeader {
    /// Bytes of data the header promises.
    pub fn data_bytes(&self) -> Option<u64> {
        self.shape.iter().try_fold(self.dtype.size() as u64, |bytes, &dim| bytes.checked_mul(dim as u64))
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

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I32 => "<i4",
        DType::U8 => "|u1",
    }
}

fn dtype_of_descr(descr: &str) -> Result<DType, String> {
    match descr {
        "<f4" => Ok(DType::F32),
        "<f8" => Ok(DType::F64),
        "<i4" => Ok(DType::I32),
        // Byte order means nothing for one byte; NumPy writes `|u1`, other tools `u1` or `<u1`.
        "|u1" | "<u1" | ">u1" | "=u1" | "u1" => Ok(DType::U8),
        other => Err(format!("unsupported dtype '{other}' (supported: '<f4', '<f8', '<i4', '|u1')")),
    }
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
    if cfg!(target_endian = "little") || size == 1 {
        // The data is already as the file holds it: written straight from the array, in one
        // call, rather than copied through a buffer.
        file.write_all(&header)?;
        file.write_all(data)?;
    } else {
        // `.npy` data is little-endian whatever the machine: reverse each element's bytes.
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
    let (dtype, shape) =
        parse_header_dict(&text).map_err(|e| format!("malformed header {:?}: {e}", text.trim_end()))?;
    let length_field = if major == 1 { 2 } else { 4 };
    Ok(NpyHeader { dtype, shape, data_offset: (8 + length_field + header_len) as u64 })
}

/// A Python literal in a `.npy` header dict.
#[derive(Debug, PartialEq)]
enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// Parses `{'descr': ..., 'fortran_order': ..., 'shape': (...), }` and what it describes.
fn parse_header_dict(text: &str) -> Result<(DType, Vec<usize>), String> {
    let entries = DictParser { chars: text.chars().collect(), at: 0 }.parse()?;
    let (mut dtype, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("descr", Literal::Str(d)) => dtype = Some(dtype_of_descr(&d)?),
            ("fortran_order", Literal::Bool(f)) => fortran = Some(f),
            ("shape", Literal::Tuple(s)) => shape = Some(s),
            ("descr" | "fortran_order" | "shape", other) => {
                return Err(format!("`{key}` has the wrong type: {other:?}"));
            }
            (other, _) => return Err(format!("unexpected key '{other}'")),
        }
    }
    match (dtype, fortran, shape) {
        (Some(_), Some(true), Some(_)) => {
            Err("Fortran-ordered arrays are not supported; save with np.ascontiguousarray".into())
        }
        (Some(dtype), Some(false), Some(shape)) => Ok((dtype, shape)),
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

/// Reads the data the header describes into a typed array.
fn read_data(path: &Path, header: &NpyHeader, mut reader: impl Read) -> Result<Array, String> {
    let count: usize = header.shape.iter().product();
    let shape = header.shape.clone();
    let fail = |what: String| format!("reading {}: {what}", path.display());
    let io = |e: std::io::Error| fail(e.to_string());
    let array = match header.dtype {
        DType::F32 => Array::from_vec(shape, read_elements(&mut reader, count, f32::from_le_bytes).map_err(io)?),
        DType::F64 => Array::from_vec(shape, read_elements(&mut reader, count, f64::from_le_bytes).map_err(io)?),
        DType::I32 => Array::from_vec(shape, read_elements(&mut reader, count, i32::from_le_bytes).map_err(io)?),
        DType::U8 => {
            let mut data = vec![0u8; count];
            reader.read_exact(&mut data).map_err(io)?;
            Array::from_vec(shape, data)
        }
    };
    array.map_err(fail)
}

/// Decodes `count` little-endian elements of `N` bytes, a buffer at a time.
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

fn path_arg(args: &Args) -> Result<PathBuf, ArgError> {
    let path = args.str("path")?;
    if path.trim().is_empty() {
        return Err(ArgError::new("path", "`path` must name a file, got an empty string"));
    }
    Ok(PathBuf::from(path))
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

    /// The array plus the read buffers; at dispatch the file's header says how big it is.
    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let data = output.bytes().or_else(|| {
            let header = peek_header(&path_arg(args).ok()?).ok()?;
            header.data_bytes()
        });
        data.unwrap_or(0) + 2 * IO_BUFFER as u64
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let (header, reader) = open(&path).map_err(TaskError::msg)?;
        ctx.will_allocate(header.data_bytes().unwrap_or(0));
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

    /// The data goes straight from the input buffer to the file; the header, the paths and, on a
    /// big-endian machine, a write buffer are all the task allocates.
    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

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

const ALL_DTYPES: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::U8];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{array, meta, plan, run, single};
    use runner_plugin::serde_json::json;

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
            (good("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", &[0; 8]), "Fortran"),
            (good("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", &[0; 8]), "unsupported dtype '>f4'"),
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
