//! The conversation with a warm interpreter (`worker.py`): requests and replies as one
//! little-endian `u64` length, a JSON header, then the payloads the header lists, back to back.
//!
//! Values cross as themselves, not as files. A returned value of [`SHARE_FROM`] bytes or more
//! is read into shared memory the engine lends ([`TaskContext::shared_buffer`]), and an
//! interpreter that consumes it maps those pages (privately: its writes stay its own) instead of
//! being sent a copy, as it maps a spilled value's file; the header then names the path
//! (`"shm"`) and the length. Other buffers (smaller values, arrays from Rust plugins) are written
//! down the pipe straight from the engine's memory and become NumPy arrays over the received
//! bytes; a returned `numpy.ndarray` is read straight into a new array value. Any other Python
//! object crosses as a pickle (protocol 5) whose large buffers travel out of band; the engine
//! keeps it as one `u8` array — the pickle stream, then each buffer at a 64-byte aligned
//! offset — with the frames and the object's type in its
//! `python_object` attribute, so it is counted, spilled and passed on like any array (the
//! attribute travels with it into spill, value and cache files), and any interpreter can load
//! it. [`crate::python_object::PythonObject::of`] is the one place that tells such an array
//! from one of numbers: a Rust plugin's array input refuses it, naming the object's type,
//! rather than reading the pickle's bytes as `u8`s.

use std::io::{Read, Write};

use runner_plugin::serde_json::{self, Value as Json, json};
use runner_plugin::{Array, DType, SharedBufferMut, Storage, TaskContext, TaskError, Value};

use crate::python_object::{OBJECT_ATTR, PythonObject};

/// Offsets of out-of-band buffers in an object's bytes are multiples of this.
const ALIGN: usize = 64;
/// Returned values of this many bytes or more go to shared memory: below it, a page of its own
/// and a mapping per consumer cost more than the copy through the pipe.
pub const SHARE_FROM: usize = 64 << 10;
/// A header larger than this is not a header (a conversation out of step).
const MAX_HEADER: u64 = 1 << 30;

/// A request being put together: its header's value descriptions and the payloads they name.
#[derive(Default)]
pub struct Outgoing<'v> {
    payloads: Vec<&'v [u8]>,
    /// Bytes of shared memory the request names.
    shared: u64,
}

impl<'v> Outgoing<'v> {
    /// The description of `value` for the header; its buffer, if any, joins the payloads.
    pub fn describe(&mut self, value: &'v Value) -> Result<Json, TaskError> {
        Ok(match value {
            Value::None => json!({"t": "none"}),
            Value::Json(v) => json!({"t": "json", "v": v}),
            Value::Path(p) => json!({"t": "path", "v": p.to_string_lossy()}),
            Value::Bytes(b) => json!({"t": "bytes", "p": self.push(b.bytes())}),
            Value::Array(a) => {
                let mut description = match PythonObject::of(a) {
                    Some(object) => json!({"t": "object", "frames": object.frames()}),
                    None => json!({"t": "array", "dtype": a.dtype().name(), "shape": a.shape()}),
                };
                match a.storage().shared_path() {
                    Some(path) => {
                        description["shm"] = path.to_string_lossy().into();
                        description["len"] = a.nbytes().into();
                        self.shared += a.nbytes();
                    }
                    None => description["p"] = self.push(a.bytes()).into(),
                }
                description
            }
        })
    }

    fn push(&mut self, bytes: &'v [u8]) -> usize {
        self.payloads.push(bytes);
        self.payloads.len() - 1
    }

    /// Writes `header` (with the payloads' lengths) and the payloads.
    pub fn send(self, mut header: Json, to: &mut dyn Write) -> std::io::Result<()> {
        header["payloads"] = self.payloads.iter().map(|p| p.len()).collect::<Vec<_>>().into();
        if self.shared > 0 {
            header["shared"] = self.shared.into();
        }
        write_header(&header, to)?;
        for payload in self.payloads {
            to.write_all(payload)?;
        }
        to.flush()
    }
}

/// Writes a request without payloads.
pub fn send_plain(header: &Json, to: &mut dyn Write) -> std::io::Result<()> {
    write_header(header, to)?;
    to.flush()
}

fn write_header(header: &Json, to: &mut dyn Write) -> std::io::Result<()> {
    let text = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    to.write_all(&(text.len() as u64).to_le_bytes())?;
    to.write_all(&text)
}

/// A reply's header; its payloads are still in the pipe.
pub struct Reply {
    pub header: Json,
    lengths: Vec<usize>,
}

/// Reads a reply's header.
pub fn read_reply(from: &mut dyn Read) -> Result<Reply, String> {
    let mut length = [0u8; 8];
    from.read_exact(&mut length).map_err(|e| format!("the interpreter stopped answering ({e})"))?;
    let length = u64::from_le_bytes(length);
    if length > MAX_HEADER {
        return Err(format!("the interpreter's reply is out of step (a header of {length} bytes)"));
    }
    let mut text = vec![0; length as usize];
    from.read_exact(&mut text).map_err(|e| format!("the interpreter's reply ended early ({e})"))?;
    let header: Json =
        serde_json::from_slice(&text).map_err(|e| format!("the interpreter's reply is not JSON: {e}"))?;
    let lengths = header["payloads"]
        .as_array()
        .map(|items| items.iter().filter_map(|n| n.as_u64()).map(|n| n as usize).collect())
        .unwrap_or_default();
    Ok(Reply { header, lengths })
}

impl Reply {
    /// The returned value, its buffers read from `from` into memory announced to the ledger.
    pub fn value(self, ctx: &TaskContext, from: &mut dyn Read) -> Result<Value, String> {
        let description = &self.header["value"];
        let total: usize = self.lengths.iter().sum();
        match description["t"].as_str() {
            Some("none") => Ok(Value::None),
            Some("json") => Ok(Value::Json(description["v"].clone())),
            Some("path") => Ok(Value::Path(description["v"].as_str().unwrap_or_default().into())),
            Some("array") => {
                let dtype = dtype_named(description["dtype"].as_str().unwrap_or_default())?;
                let shape: Vec<usize> = description["shape"]
                    .as_array()
                    .map(|d| d.iter().filter_map(|n| n.as_u64()).map(|n| n as usize).collect())
                    .unwrap_or_default();
                let expected = shape.iter().product::<usize>() * dtype.size();
                if self.lengths != [expected] {
                    return Err(format!("the interpreter sent {total} bytes for an array of {expected}"));
                }
                ctx.will_allocate(expected as u64);
                let storage = match shared_buffer(ctx, expected) {
                    Some(mut buffer) => {
                        read_into(buffer.bytes_mut(), from)?;
                        if dtype == DType::Bool {
                            check_bools(buffer.bytes_mut())?;
                        }
                        Storage::External(buffer.freeze())
                    }
                    None => read_storage(dtype, expected, from)?,
                };
                Array::from_storage(dtype, shape, storage).map(Value::Array)
            }
            Some("object") => {
                let mut frames = Vec::with_capacity(self.lengths.len());
                let mut end = 0usize;
                for &len in &self.lengths {
                    let at = end.next_multiple_of(ALIGN);
                    frames.push([at, len]);
                    end = at + len;
                }
                ctx.will_allocate(end as u64);
                let mut read_frames = |bytes: &mut [u8]| -> Result<(), String> {
                    frames.iter().try_for_each(|&[at, len]| read_into(&mut bytes[at..at + len], from))
                };
                let storage = match shared_buffer(ctx, end) {
                    Some(mut buffer) => {
                        read_frames(buffer.bytes_mut())?;
                        Storage::External(buffer.freeze())
                    }
                    None => {
                        let mut bytes = vec![0u8; end];
                        read_frames(&mut bytes)?;
                        Storage::U8(bytes)
                    }
                };
                let mut marker = json!({ "frames": frames });
                if let Some(type_name) = description["type"].as_str() {
                    marker["type"] = type_name.into();
                }
                Ok(Value::Array(Array::from_storage(DType::U8, vec![end], storage)?.with_attr(OBJECT_ATTR, marker)))
            }
            other => Err(format!("the interpreter sent a value of unknown kind {other:?}")),
        }
    }
}

fn dtype_named(name: &str) -> Result<DType, String> {
    DType::ALL.into_iter().find(|d| d.name() == name).ok_or_else(|| format!("unknown dtype `{name}`"))
}

/// A buffer of `dtype` filled with `bytes` bytes from `from`, without a second copy.
fn read_storage(dtype: DType, bytes: usize, from: &mut dyn Read) -> Result<Storage, String> {
    fn filled<T: Default + Clone>(bytes: usize, from: &mut dyn Read) -> Result<Vec<T>, String> {
        let mut data = vec![T::default(); bytes / std::mem::size_of::<T>()];
        // SAFETY: the element types here are plain numbers (and bool, written only as 0 or 1 by
        // NumPy), so any bytes the interpreter sends are valid values; the length is exact.
        let raw = unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), bytes) };
        read_into(raw, from)?;
        Ok(data)
    }
    Ok(match dtype {
        DType::F32 => Storage::F32(filled(bytes, from)?),
        DType::F64 => Storage::F64(filled(bytes, from)?),
        DType::I8 => Storage::I8(filled(bytes, from)?),
        DType::I16 => Storage::I16(filled(bytes, from)?),
        DType::I32 => Storage::I32(filled(bytes, from)?),
        DType::I64 => Storage::I64(filled(bytes, from)?),
        DType::U8 => Storage::U8(filled(bytes, from)?),
        DType::U16 => Storage::U16(filled(bytes, from)?),
        DType::U32 => Storage::U32(filled(bytes, from)?),
        DType::U64 => Storage::U64(filled(bytes, from)?),
        DType::Bool => {
            let raw: Vec<u8> = filled(bytes, from)?;
            check_bools(&raw)?;
            Storage::Bool(raw.into_iter().map(|b| b == 1).collect())
        }
    })
}

/// Shared memory for a returned value of `len` bytes, when it is large enough to be worth it
/// and the engine has some.
fn shared_buffer(ctx: &TaskContext, len: usize) -> Option<Box<dyn SharedBufferMut>> {
    if len < SHARE_FROM { None } else { ctx.shared_buffer(len) }
}

fn check_bools(raw: &[u8]) -> Result<(), String> {
    match raw.iter().any(|&b| b > 1) {
        true => Err("the interpreter sent a bool array holding values other than 0 and 1".into()),
        false => Ok(()),
    }
}

fn read_into(buffer: &mut [u8], from: &mut dyn Read) -> Result<(), String> {
    from.read_exact(buffer).map_err(|e| format!("the interpreter's reply ended early ({e})"))
}
