//! Values as files: how a task's output is written to a folder and read back, for tasks that
//! run in another process (`runner task` inside a Slurm job, values passing through the shared
//! dir) and for outputs kept for `--resume`.
//!
//! One value is one file named after the task, `<index>.<kind>`, written under a temporary name
//! and renamed into place, so a reader never sees half a value:
//! - an array: `.npy` (NumPy's format, [`runner_plugin::npy`]), its attributes, if any, beside
//!   it as `<index>.attrs.json`;
//! - bytes: `.bin`, the raw bytes;
//! - JSON: `.json`;
//! - a path: `.path`, the path's text;
//! - nothing: `.none`, empty.

use std::io;
use std::path::{Path, PathBuf};

use runner_plugin::{Array, Storage, Value, npy};

/// What went wrong reading or writing a value file. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ValueFileError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: {message}", path.display())]
    Format { path: PathBuf, message: String },
    #[error("no value of task {index} in {}", dir.display())]
    Missing { dir: PathBuf, index: u64 },
}

/// The kinds of value file, by extension.
const KINDS: [&str; 5] = ["npy", "bin", "json", "path", "none"];

/// Writes `value`, the output of task `index`, into `dir` (created if needed); returns the file.
pub fn write(dir: &Path, index: u64, value: &Value) -> Result<PathBuf, ValueFileError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ValueFileError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let (kind, bytes): (&str, Option<Vec<u8>>) = match value {
        Value::Array(array) => {
            let path = dir.join(format!("{index}.npy"));
            if !array.attrs().is_empty() {
                let attrs = serde_json::to_vec(array.attrs()).expect("JSON attributes serialise");
                write_atomically(&dir.join(format!("{index}.attrs.json")), &attrs).map_err(io_error(dir))?;
            }
            npy::write_array(&path, array).map_err(|message| ValueFileError::Format { path: path.clone(), message })?;
            return Ok(path);
        }
        Value::Bytes(storage) => ("bin", Some(storage.bytes().to_vec())),
        Value::Json(json) => ("json", Some(serde_json::to_vec(json).expect("JSON serialises"))),
        Value::Path(path) => ("path", Some(path.as_os_str().as_encoded_bytes().to_vec())),
        Value::None => ("none", None),
    };
    let path = dir.join(format!("{index}.{kind}"));
    write_atomically(&path, bytes.as_deref().unwrap_or_default()).map_err(io_error(&path))?;
    Ok(path)
}

/// Reads back the value of task `index` from `dir`.
#[cfg(test)]
pub fn read(dir: &Path, index: u64) -> Result<Value, ValueFileError> {
    let path = find(dir, index).ok_or_else(|| ValueFileError::Missing { dir: dir.to_path_buf(), index })?;
    read_file(&path)
}

/// Like [`read`], but bytes, and an array in the file's own layout (C order, native byte
/// order, an element type arrays hold), are mapped read-only rather than read: their pages are
/// the page cache's, reclaimable, not the reader's heap — a job's inputs, or a resumed run's
/// cached values, cost its memory nothing until read, and little after.
pub fn map(dir: &Path, index: u64) -> Result<Value, ValueFileError> {
    let path = find(dir, index).ok_or_else(|| ValueFileError::Missing { dir: dir.to_path_buf(), index })?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => {}
        Some("bin") => return map_bytes(&path),
        _ => return read_file(&path),
    }
    let header = npy::peek_header(&path).map_err(|message| ValueFileError::Format { path: path.clone(), message })?;
    let as_is = !header.needs_reorder()
        && (header.byte_order == npy::ByteOrder::NATIVE || header.element.size() == 1)
        && header.element.dtype().size() == header.element.size()
        && header.dtype != runner_plugin::DType::Bool;
    if !as_is {
        return read_file(&path);
    }
    let io_error = |source| ValueFileError::Io { path: path.clone(), source };
    let file = std::fs::File::open(&path).map_err(io_error)?;
    // SAFETY: value files are written once (under a temporary name, then renamed) and never
    // changed afterwards, so the mapped bytes do not change under the reader.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_error)?;
    let offset = header.data_offset as usize;
    let bytes = header.array_bytes().unwrap_or(0) as usize;
    if map.len() < offset + bytes {
        return Err(ValueFileError::Format {
            path: path.clone(),
            message: format!("holds {} bytes, its header promises {}", map.len(), offset + bytes),
        });
    }
    let storage = Storage::External(Box::new(MappedFile { map, offset, len: bytes, path: path.clone() }));
    let mut array = Array::from_storage(header.dtype, header.shape, storage)
        .map_err(|message| ValueFileError::Format { path: path.clone(), message })?;
    let attrs_path = path.with_extension("attrs.json");
    if attrs_path.is_file() {
        let text =
            std::fs::read(&attrs_path).map_err(|source| ValueFileError::Io { path: attrs_path.clone(), source })?;
        *array.attrs_mut() = serde_json::from_slice(&text).map_err(|e| ValueFileError::Format {
            path: attrs_path.clone(),
            message: format!("not the attributes of an array: {e}"),
        })?;
    }
    Ok(Value::Array(array))
}

/// A `.bin` value file, mapped read-only (an empty one is read: nothing to map).
fn map_bytes(path: &Path) -> Result<Value, ValueFileError> {
    let io_error = |source| ValueFileError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io_error)?;
    let len = file.metadata().map_err(io_error)?.len() as usize;
    if len == 0 {
        return Ok(Value::Bytes(Storage::U8(Vec::new())));
    }
    // SAFETY: as in `map`: value files are never changed once renamed into place.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_error)?;
    Ok(Value::Bytes(Storage::External(Box::new(MappedFile { map, offset: 0, len, path: path.to_path_buf() }))))
}

/// The data of a value file, mapped read-only (the file stays).
struct MappedFile {
    map: memmap2::Mmap,
    offset: usize,
    len: usize,
    path: PathBuf,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile").field("path", &self.path).field("len", &self.len).finish()
    }
}

impl runner_plugin::ExternalBytes for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }

    fn file_path(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

/// The file holding the value of task `index` in `dir`, if there is one.
pub fn find(dir: &Path, index: u64) -> Option<PathBuf> {
    KINDS.iter().map(|kind| dir.join(format!("{index}.{kind}"))).find(|path| path.is_file())
}

/// Reads a value file written by [`write`].
pub fn read_file(path: &Path) -> Result<Value, ValueFileError> {
    let io_error = |source| ValueFileError::Io { path: path.to_path_buf(), source };
    let kind = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    Ok(match kind {
        "npy" => {
            let mut array: Array = npy::read_array(path)
                .map_err(|message| ValueFileError::Format { path: path.to_path_buf(), message })?;
            let attrs_path = path.with_extension("attrs.json");
            if attrs_path.is_file() {
                let text = std::fs::read(&attrs_path).map_err(io_error)?;
                *array.attrs_mut() = serde_json::from_slice(&text).map_err(|e| ValueFileError::Format {
                    path: attrs_path.clone(),
                    message: format!("not the attributes of an array: {e}"),
                })?;
            }
            Value::Array(array)
        }
        "bin" => Value::Bytes(Storage::U8(std::fs::read(path).map_err(io_error)?)),
        "json" => {
            let text = std::fs::read(path).map_err(io_error)?;
            Value::Json(
                serde_json::from_slice(&text).map_err(|e| ValueFileError::Format {
                    path: path.to_path_buf(),
                    message: format!("not JSON: {e}"),
                })?,
            )
        }
        "path" => {
            let text = std::fs::read(path).map_err(io_error)?;
            // SAFETY: the bytes were written from `OsStr::as_encoded_bytes` by `write`, on this
            // kind of platform (the shared dir is read by the same build of the runner).
            Value::Path(PathBuf::from(unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(text) }))
        }
        "none" => Value::None,
        other => {
            return Err(ValueFileError::Format {
                path: path.to_path_buf(),
                message: format!("`.{other}` is not a kind of value file; expected one of: {}", KINDS.join(", ")),
            });
        }
    })
}

/// Writes `bytes` to `path` through a hidden temporary file in the same folder and a rename
/// ([`runner_plugin::files`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    runner_plugin::files::write_bytes_atomically(path, bytes).map_err(io::Error::other)
}

/// Where `cache: true` keeps a step's values: `runner-cache/<recipe>/<cycle>/<step>/` in the
/// directory the runner started in, like outputs.
pub fn cache_dir(recipe: &str, cycle: &str, step: &str) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
    };
    PathBuf::from("runner-cache").join(safe(recipe)).join(safe(cycle)).join(safe(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_value_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let array = Array::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, -0.5]).unwrap().with_attr("units", "mm/h");
        let values = [
            Value::Array(array),
            Value::Bytes(Storage::U8(vec![0, 1, 255])),
            Value::Json(serde_json::json!({"a": [1, 2]})),
            Value::Path(PathBuf::from("out/x y.npy")),
            Value::None,
        ];
        for (index, value) in values.iter().enumerate() {
            let path = write(dir.path(), index as u64, value).unwrap();
            assert_eq!(find(dir.path(), index as u64), Some(path));
            let back = read(dir.path(), index as u64).unwrap();
            assert_eq!(back.meta(), value.meta());
            assert_eq!(back.as_bytes(), value.as_bytes());
            match (&back, value) {
                (Value::Array(a), Value::Array(b)) => assert_eq!(a.attrs(), b.attrs()),
                (Value::Json(a), Value::Json(b)) => assert_eq!(a, b),
                (Value::Path(a), Value::Path(b)) => assert_eq!(a, b),
                _ => {}
            }
        }
        assert!(matches!(read(dir.path(), 99), Err(ValueFileError::Missing { index: 99, .. })));
        let mapped = map(dir.path(), 0).unwrap();
        let Value::Array(mapped) = mapped else { panic!("an array") };
        assert!(!mapped.storage().is_resident(), "mapped, not read");
        assert_eq!(mapped.view::<f32>().unwrap().as_slice().unwrap(), &[1.0, 2.0, 3.0, -0.5]);
        assert_eq!(mapped.attrs()["units"], "mm/h");
        let Value::Bytes(bytes) = map(dir.path(), 1).unwrap() else { panic!("bytes") };
        assert!(!bytes.is_resident(), "mapped, not read");
        assert_eq!(bytes.bytes(), &[0, 1, 255]);
    }
}
