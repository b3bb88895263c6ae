//! How the engine holds a Python object that is not an array of numbers (what a `python`
//! step returned, pickled): a 1-d `u8` array marked by its [`OBJECT_ATTR`]. The `python` plugin
//! makes such values ([`crate::python`]); every Rust plugin reading an array input must tell
//! them from arrays of numbers, and [`PythonObject::of`] is the one place that does.

use std::fmt;

#[cfg(test)]
use runner_plugin::Value;
use runner_plugin::serde_json::Value as Json;
#[cfg(test)]
use runner_plugin::serde_json::json;
use runner_plugin::{Array, DType};

/// The attribute that marks a `u8` array as a pickled Python object: `{"frames": [[offset,
/// length], ...], "type": "dict"}`, the pickle stream first. Read only through
/// [`PythonObject::of`].
pub const OBJECT_ATTR: &str = "python_object";

/// A value that is a pickled Python object rather than an array of numbers, as the engine
/// holds it: a 1-d `u8` array whose [`OBJECT_ATTR`] lists its frames (and, when the
/// interpreter said, its type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PythonObject<'a> {
    frames: &'a Json,
    /// Its Python type as the interpreter named it (`dict`, `numpy.ma.MaskedArray`,
    /// `numpy.ndarray of dtype '<U1'`); `None` for an object kept before types were recorded.
    type_name: Option<&'a str>,
}

impl<'a> PythonObject<'a> {
    /// The pickled object `array` holds, or `None` when it is an array of numbers.
    pub fn of(array: &'a Array) -> Option<PythonObject<'a>> {
        let marker = array.attrs().get(OBJECT_ATTR)?;
        let frames = marker.get("frames").filter(|f| f.is_array())?;
        (array.dtype() == DType::U8 && array.shape().len() == 1)
            .then(|| PythonObject { frames, type_name: marker.get("type").and_then(Json::as_str) })
    }

    /// A value as a `python` step's pickled `type_name` reaches the plugins (for their tests).
    #[cfg(test)]
    pub(crate) fn sample(type_name: &str) -> Value {
        let pickle = vec![0x80u8, 5, b'}', b'.'];
        let frames = json!({"frames": [[0, pickle.len()]], "type": type_name});
        Value::Array(Array::from_vec(vec![pickle.len()], pickle).unwrap().with_attr(OBJECT_ATTR, frames))
    }

    /// Where its pickle stream and out-of-band buffers lie in the array's bytes.
    pub fn frames(&self) -> &'a Json {
        self.frames
    }

    /// Why a Rust plugin's array input `input` refuses this object.
    pub fn not_an_array(&self, input: &str) -> String {
        format!(
            "input `{input}` is a Python object ({self}), not an array: return a plain numpy.ndarray of a \
             numeric or bool dtype for a Rust plugin to read"
        )
    }
}

/// `a pickled dict`, or `a pickled object` when its type is not known.
impl fmt::Display for PythonObject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a pickled {}", self.type_name.unwrap_or("object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(bytes: usize, marker: Json) -> Array {
        Array::from_vec(vec![bytes], vec![0u8; bytes]).unwrap().with_attr(OBJECT_ATTR, marker)
    }

    #[test]
    fn a_pickled_object_is_told_from_an_array_of_numbers() {
        let dict = object(100, json!({"frames": [[0, 100]], "type": "dict"}));
        let found = PythonObject::of(&dict).expect("a pickled object");
        assert_eq!(found.to_string(), "a pickled dict");
        assert_eq!(
            found.not_an_array("fields"),
            "input `fields` is a Python object (a pickled dict), not an array: return a plain numpy.ndarray of a \
             numeric or bool dtype for a Rust plugin to read"
        );
        // Kept before the type was recorded: still an object.
        let untyped = object(8, json!({"frames": [[0, 8]]}));
        assert_eq!(PythonObject::of(&untyped).unwrap().to_string(), "a pickled object");
        // Plain bytes, and arrays that only carry a look-alike attribute, are arrays.
        assert_eq!(PythonObject::of(&Array::from_vec(vec![3], vec![1u8, 2, 3]).unwrap()), None);
        assert_eq!(PythonObject::of(&object(4, json!("dict"))), None);
        let numbers =
            Array::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap().with_attr(OBJECT_ATTR, json!({"frames": []}));
        assert_eq!(PythonObject::of(&numbers), None);
    }
}
