//! A task's arguments after template expansion, with typed accessors whose errors say what was
//! expected. Numbers may arrive as strings (`"{wet}"` expands to `"0.3"`), so the numeric
//! accessors accept both.

use serde_json::{Map, Value as Json};

use crate::error::ArgError;
use crate::size::parse_size;

/// Documents one argument of a plugin; the engine uses the list to reject unknown or missing
/// arguments with their location, and `runner plugins` prints it.
#[derive(Debug, Clone, Copy)]
pub struct ArgSpec {
    pub name: &'static str,
    /// `None` for a required argument, else the default as shown to users.
    pub default: Option<&'static str>,
    pub about: &'static str,
    /// What the value names, so the engine can check paths before anything runs.
    pub kind: ArgKind,
    /// The plugin fills in `{input.NAME}` and `{output}` in this arg's strings: the engine hands
    /// them over with literal braces doubled ([`crate::file_refs`]).
    pub file_refs: bool,
}

/// What an argument's value is, as far as the engine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArgKind {
    /// Anything else.
    #[default]
    Value,
    /// A file or directory the task reads.
    InputPath,
    /// Text (a string, or a list of them) some of whose items may name files or directories
    /// the task reads — an argv: each item naming one that exists under the working directory
    /// is an input (for `--resume`).
    MayNameInputs,
    /// A file or directory the task writes: two tasks of a run must never render the same one,
    /// and it must stay inside the working directory unless the recipe allows otherwise.
    OutputPath,
}

impl ArgSpec {
    pub const fn required(name: &'static str, about: &'static str) -> ArgSpec {
        ArgSpec { name, default: None, about, kind: ArgKind::Value, file_refs: false }
    }

    pub const fn optional(name: &'static str, default: &'static str, about: &'static str) -> ArgSpec {
        ArgSpec { name, default: Some(default), about, kind: ArgKind::Value, file_refs: false }
    }

    /// This argument names a file or directory the task writes ([`ArgKind::OutputPath`]).
    pub const fn output_path(mut self) -> ArgSpec {
        self.kind = ArgKind::OutputPath;
        self
    }

    /// Items of this argument that name existing files are read by the task
    /// ([`ArgKind::MayNameInputs`]).
    pub const fn may_name_inputs(mut self) -> ArgSpec {
        self.kind = ArgKind::MayNameInputs;
        self
    }

    /// This argument names a file or directory the task reads ([`ArgKind::InputPath`]).
    pub const fn input_path(mut self) -> ArgSpec {
        self.kind = ArgKind::InputPath;
        self
    }

    /// The plugin fills in `{input.NAME}` and `{output}` in this arg's strings, read with
    /// [`crate::file_refs::pieces`]: the engine hands them over with every literal brace doubled,
    /// so that a value filled into the recipe's template is never read as a reference.
    pub const fn file_refs(mut self) -> ArgSpec {
        self.file_refs = true;
        self
    }

    pub fn is_required(&self) -> bool {
        self.default.is_none()
    }
}

/// The arguments of one task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    map: Map<String, Json>,
}

impl Args {
    pub fn new(map: Map<String, Json>) -> Args {
        Args { map }
    }

    pub fn get(&self, name: &str) -> Option<&Json> {
        self.map.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Json)> {
        self.map.iter()
    }

    pub fn as_map(&self) -> &Map<String, Json> {
        &self.map
    }

    fn required(&self, name: &str) -> Result<&Json, ArgError> {
        self.get(name).ok_or_else(|| ArgError::new(name, format!("missing required argument `{name}`")))
    }

    /// A number (or a string holding one).
    pub fn f64(&self, name: &str) -> Result<f64, ArgError> {
        to_f64(self.required(name)?).ok_or_else(|| expected(name, "a number", self.get(name)))
    }

    pub fn f64_or(&self, name: &str, default: f64) -> Result<f64, ArgError> {
        if self.contains(name) { self.f64(name) } else { Ok(default) }
    }

    /// A non-negative whole number (or a string holding one).
    pub fn u64(&self, name: &str) -> Result<u64, ArgError> {
        to_u64(self.required(name)?).ok_or_else(|| expected(name, "a non-negative whole number", self.get(name)))
    }

    pub fn u64_or(&self, name: &str, default: u64) -> Result<u64, ArgError> {
        if self.contains(name) { self.u64(name) } else { Ok(default) }
    }

    /// A size: bytes as a number, or a string such as `400MiB`.
    pub fn size(&self, name: &str) -> Result<u64, ArgError> {
        match self.required(name)? {
            Json::String(s) => parse_size(s).map_err(|e| ArgError::new(name, format!("`{name}`: {e}"))),
            other => to_u64(other).ok_or_else(|| expected(name, "a size such as 1048576 or \"400MiB\"", Some(other))),
        }
    }

    pub fn size_or(&self, name: &str, default: u64) -> Result<u64, ArgError> {
        if self.contains(name) { self.size(name) } else { Ok(default) }
    }

    /// A string; numbers and booleans are accepted in their text form.
    pub fn str(&self, name: &str) -> Result<String, ArgError> {
        match self.required(name)? {
            Json::String(s) => Ok(s.clone()),
            Json::Number(n) => Ok(n.to_string()),
            Json::Bool(b) => Ok(b.to_string()),
            other => Err(expected(name, "a string", Some(other))),
        }
    }

    pub fn str_or(&self, name: &str, default: &str) -> Result<String, ArgError> {
        if self.contains(name) { self.str(name) } else { Ok(default.to_string()) }
    }

    /// A list of numbers; a single number is taken as a list of one.
    pub fn f64_list(&self, name: &str) -> Result<Vec<f64>, ArgError> {
        let value = self.required(name)?;
        let items: Vec<&Json> = match value {
            Json::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        items
            .into_iter()
            .map(|item| to_f64(item).ok_or_else(|| expected(name, "a list of numbers", Some(value))))
            .collect()
    }
}

fn expected(name: &str, what: &str, got: Option<&Json>) -> ArgError {
    let got = got.map(|g| g.to_string()).unwrap_or_else(|| "nothing".into());
    ArgError::new(name, format!("`{name}` must be {what}, got {got}"))
}

fn to_f64(value: &Json) -> Option<f64> {
    match value {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => s.trim().parse().ok().filter(|v: &f64| v.is_finite()),
        _ => None,
    }
}

fn to_u64(value: &Json) -> Option<u64> {
    match value {
        Json::Number(n) => n.as_u64(),
        Json::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(json: serde_json::Value) -> Args {
        Args::new(json.as_object().unwrap().clone())
    }

    #[test]
    fn numbers_from_strings() {
        let a = args(serde_json::json!({"wet": "0.3", "n": "12", "bytes": "2MiB", "t": [1, "2.5"]}));
        assert_eq!(a.f64("wet").unwrap(), 0.3);
        assert_eq!(a.u64("n").unwrap(), 12);
        assert_eq!(a.size("bytes").unwrap(), 2 << 20);
        assert_eq!(a.f64_list("t").unwrap(), vec![1.0, 2.5]);
        assert_eq!(a.u64_or("missing", 7).unwrap(), 7);
    }

    #[test]
    fn errors_name_the_argument_and_expectation() {
        let a = args(serde_json::json!({"radius": -1}));
        let e = a.u64("radius").unwrap_err();
        assert_eq!(e.arg.as_deref(), Some("radius"));
        assert_eq!(e.message, "`radius` must be a non-negative whole number, got -1");
        assert_eq!(a.f64("nope").unwrap_err().message, "missing required argument `nope`");
    }
}
