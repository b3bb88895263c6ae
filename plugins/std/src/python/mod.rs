//! `python`: calls a Python callable per task in a warm interpreter — a service process of the
//! engine ([`TaskContext::serve`]) that imports once and serves task after task, so a step
//! pays Python's start and its imports once per worker, not once per task.
//!
//! Args:
//! - `call`: `"package.module:name"` — a function, or (with `init`) a class instantiated once
//!   per interpreter with `init` as keyword arguments and then called per task, as IMPROVER's
//!   plugin classes are (`Threshold(threshold_values=[...])(cube)`).
//! - `args`: the positional arguments, a list; by default every input in the recipe's order (a
//!   gathered input as one list) that `kwargs` does not name. An item `"{input.NAME}"` is that input's value (a gathered one
//!   as a list), `"*{input.NAME}"` spreads a gathered input as separate arguments; anything else
//!   is passed as the JSON value it is.
//! - `kwargs`: keyword arguments, a map; values as for `args` (but no `*`).
//! - `python`: the interpreter (a venv's `bin/python`); by default `$RUNNER_PYTHON`, else
//!   `python3`. `pythonpath`: folders put before `PYTHONPATH`. `env`: variables added.
//! - `output`: a file the call writes (IMPROVER's `save_netcdf`): `"{output}"` in `args` or
//!   `kwargs` is its path; its folder is made and a stale file removed before the call, the
//!   task fails unless the file exists after it, and the path is the task's value when the
//!   callable returns `None`. Checked and claimed like every output path. The strings of
//!   `args` and `kwargs` are filled in once ([`ArgSpec::file_refs`]): a value holding `{output}`
//!   reaches the callable as that text, as does `{{output}}` written in the recipe.
//! - `fork`: `true` (the default) starts one interpreter, which imports, and forks the run's
//!   others from it; `false` starts each afresh.
//! - `isolate`: `true` gives the step interpreters of its own (by default steps that name the
//!   same interpreter share them). `max_resident`: replace an interpreter that holds more than
//!   this after a task (a leak).
//!
//! The callable's return value is the task's value: a `numpy.ndarray` of a numeric or bool
//! dtype becomes an array that any plugin reads, `None` nothing, a `pathlib.Path` a path, plain
//! JSON data (dicts with string keys, lists, strings, numbers, bools) JSON, anything else a
//! pickled object (see `protocol`). Before each task the interpreter imports the module (and
//! instantiates `init`) unmeasured: that is its baseline, not the task's.

mod protocol;

use std::ffi::OsString;
use std::path::Path;

use runner_plugin::file_refs::{self, Piece};
use runner_plugin::serde_json::{Map, Value as Json, json};
use runner_plugin::{
    ArgError, ArgSpec, Args, FailureKind, InputMeta, Inputs, InputsForEstimate, Plugin, ServiceIo, ServiceSpec,
    TaskContext, TaskError, Value, ValueMeta,
};

use protocol::Outgoing;

/// The interpreter's side of the conversation.
const WORKER: &str = include_str!("worker.py");

/// What `python -c` runs: the worker's code, taken out of the environment, so that `ps` shows
/// one short line per interpreter and nothing the interpreter starts inherits the code.
const BOOT: &str = "import os; exec(compile(os.environ.pop('RUNNER_PYTHON_WORKER'), '<string>', 'exec'))";

/// What a task is estimated to need before it has been measured, besides twice its inputs (the
/// interpreter's copy and what it makes of them): room for modest intermediate data.
pub const BASE_ESTIMATE: u64 = 64 << 20;

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("call", "the callable, \"package.module:name\" (a function, or a class with `init`)"),
    ArgSpec::optional("init", "none", "keyword arguments to instantiate the class once per interpreter"),
    ArgSpec::optional(
        "args",
        "the inputs in order",
        "positional arguments: \"{input.NAME}\", \"*{input.NAME}\" or values",
    )
    .file_refs(),
    ArgSpec::optional("kwargs", "{}", "keyword arguments: \"{input.NAME}\" or values").file_refs(),
    ArgSpec::optional("python", "$RUNNER_PYTHON or python3", "the interpreter, e.g. venv/bin/python"),
    ArgSpec::optional("pythonpath", "[]", "folders put before PYTHONPATH"),
    ArgSpec::optional("env", "{}", "environment variables added for the interpreter"),
    ArgSpec::optional("output", "none", "a file the call writes; \"{output}\" in args is its path").output_path(),
    ArgSpec::optional("isolate", "false", "true: this step's interpreters serve no other step"),
    ArgSpec::optional(
        "fork",
        "true",
        "false: start each interpreter afresh instead of forking it from one that imported",
    ),
    ArgSpec::optional("max_resident", "none", "replace an interpreter holding more than this after a task"),
];

pub struct Python;

impl Plugin for Python {
    fn name(&self) -> &'static str {
        "python"
    }

    fn about(&self) -> &'static str {
        "calls a Python callable per task in a warm interpreter: \"package.module:name\""
    }

    /// `python: {interpreter: venv/bin/python, pythonpath: [lib]}` at the top of a recipe.
    fn section_keys(&self) -> Vec<(&'static str, &'static str)> {
        let same = |arg: &'static str| (arg, arg);
        vec![("interpreter", "python"), same("pythonpath"), same("env"), same("fork"), same("max_resident")]
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        let call = Call::from_args(args)?;
        if call.output.is_none() && call.items().any(|(_, item)| mentions_output(item)) {
            return Err(ArgError::new("args", "`{output}` is used but the step has no `output` arg"));
        }
        check_interpreter(&call.python)
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let call = Call::from_args(args)?;
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        for (arg, item) in call.items() {
            let Some(reference) = Reference::of(item) else { continue };
            let Some(meta) = inputs.iter().find(|m| m.name == reference.name) else {
                return Err(ArgError::new(
                    arg,
                    format!(
                        "`{}` names no input of the step; its inputs are: {}",
                        reference.text(),
                        if names.is_empty() { "none".to_string() } else { names.join(", ") }
                    ),
                ));
            };
            if reference.spread && (arg != "args" || meta.gathered.is_none()) {
                return Err(ArgError::new(
                    arg,
                    format!(
                        "`{}` spreads a gathered input into positional arguments; input `{}` {}",
                        reference.text(),
                        reference.name,
                        if meta.gathered.is_none() {
                            "is a single value: write `{input.NAME}`"
                        } else {
                            "can be spread in `args` only"
                        }
                    ),
                ));
            }
        }
        Ok(ValueMeta::Unknown)
    }

    fn estimate(&self, _args: &Args, inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        BASE_ESTIMATE + 2 * inputs.buffer_bytes().unwrap_or(0)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let call = Call::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let spec = call.service(ctx.step());
        // The run's interpreters are started (forked from one that imported, by default) while
        // the first task waits; idle ones are prepared for this step's callable meanwhile, once.
        let (target, init) = (call.target.clone(), call.init.clone());
        let key = format!("{target} {}", init.as_ref().map(Json::to_string).unwrap_or_default());
        ctx.prestart(&spec, &key, move |io| {
            let prepare = prepare_request(&target, &init, &io.log_path.to_string_lossy());
            protocol::send_plain(&prepare, io.requests)?;
            let reply = protocol::read_reply(io.replies).map_err(TaskError::msg)?;
            match reply.header["ok"] {
                Json::Bool(true) => Ok(()),
                _ => Err(TaskError::msg(format!("preparing `{target}` failed: {}", reply.header["message"]))),
            }
        });
        ctx.serve(&spec, |io| call.run(ctx, inputs, io))
    }
}

/// Imports the callable's module and instantiates `init` (the service's baseline, not the
/// task's); what it prints goes to `log`.
fn prepare_request(target: &str, init: &Option<Json>, log: &str) -> Json {
    json!({"op": "prepare", "call": target, "init": init, "log": log})
}

/// A step's args, read.
struct Call {
    target: String,
    init: Option<Json>,
    args: Option<Vec<Json>>,
    kwargs: Map<String, Json>,
    python: OsString,
    pythonpath: Vec<String>,
    env: Vec<(String, String)>,
    isolate: bool,
    fork: bool,
    max_resident: Option<u64>,
    output: Option<String>,
}

impl Call {
    fn from_args(args: &Args) -> Result<Call, ArgError> {
        let target = args.str("call")?;
        check_target(&target)?;
        let init = match args.get("init") {
            None | Some(Json::Null) => None,
            Some(Json::Object(map)) => Some(Json::Object(map.clone())),
            Some(other) => {
                return Err(ArgError::new("init", format!("`init` must be a map of keyword arguments, got {other}")));
            }
        };
        let list = match args.get("args") {
            None => None,
            Some(Json::Array(items)) => Some(items.clone()),
            Some(other) => return Err(ArgError::new("args", format!("`args` must be a list, got {other}"))),
        };
        let kwargs = match args.get("kwargs") {
            None => Map::new(),
            Some(Json::Object(map)) => map.clone(),
            Some(other) => return Err(ArgError::new("kwargs", format!("`kwargs` must be a map, got {other}"))),
        };
        let python = match args.get("python") {
            None => std::env::var_os("RUNNER_PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into()),
            Some(Json::String(path)) if !path.is_empty() => OsString::from(path),
            Some(other) => {
                return Err(ArgError::new("python", format!("`python` must be the interpreter's path, got {other}")));
            }
        };
        let pythonpath = match args.get("pythonpath") {
            None => Vec::new(),
            Some(Json::String(one)) => vec![one.clone()],
            Some(Json::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ArgError::new("pythonpath", "`pythonpath` must be a list of folders"))?,
            Some(other) => {
                return Err(ArgError::new(
                    "pythonpath",
                    format!("`pythonpath` must be a list of folders, got {other}"),
                ));
            }
        };
        let env = match args.get("env") {
            None => Vec::new(),
            Some(Json::Object(map)) => map
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        Json::String(s) => s.clone(),
                        Json::Number(_) | Json::Bool(_) => v.to_string(),
                        _ => return Err(ArgError::new("env", format!("env `{k}` must be a string, got {v}"))),
                    };
                    check_env_name(k)?;
                    Ok((k.clone(), value))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(ArgError::new("env", format!("`env` must be a map, got {other}"))),
        };
        let flag = |name: &str, default: bool| match args.get(name) {
            None => Ok(default),
            Some(Json::Bool(b)) => Ok(*b),
            Some(other) => Err(ArgError::new(name, format!("`{name}` must be true or false, got {other}"))),
        };
        let isolate = flag("isolate", false)?;
        let fork = flag("fork", true)?;
        let max_resident = if args.contains("max_resident") { Some(args.size("max_resident")?) } else { None };
        let output = if args.contains("output") { Some(args.str("output")?) } else { None };
        Ok(Call { target, init, args: list, kwargs, python, pythonpath, env, isolate, fork, max_resident, output })
    }

    /// Every arg item that may reference an input: `(arg name, item)`.
    fn items(&self) -> impl Iterator<Item = (&'static str, &Json)> {
        let positional = self.args.iter().flatten().map(|item| ("args", item));
        positional.chain(self.kwargs.values().map(|item| ("kwargs", item)))
    }

    /// The interpreter that serves this step.
    fn service(&self, step: &str) -> ServiceSpec {
        let mut spec = ServiceSpec::new([self.python.clone(), "-c".into(), BOOT.into(), "runner-python-worker".into()])
            .env("RUNNER_PYTHON_WORKER", WORKER)
            .env("PYTHONUNBUFFERED", "1")
            .key(if self.isolate { step.to_string() } else { String::new() })
            .recycle_above(self.max_resident)
            .forking(self.fork);
        if !self.pythonpath.is_empty() {
            let mut path = self.pythonpath.join(":");
            if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
                path.push(':');
                path.push_str(&existing.to_string_lossy());
            }
            spec = spec.env("PYTHONPATH", path);
        }
        for (key, value) in &self.env {
            spec = spec.env(key, value);
        }
        spec
    }

    /// One task's conversation: prepare (unmeasured), then the call.
    fn run(&self, ctx: &TaskContext, inputs: &Inputs, mut io: ServiceIo<'_>) -> Result<Value, TaskError> {
        let log = io.log_path.to_string_lossy().into_owned();
        let prepare = prepare_request(&self.target, &self.init, &log);
        self.exchange(&mut io, |to| protocol::send_plain(&prepare, to))?
            .map_err(|e| self.failure(&e, &io, "preparing"))?;
        io.rebase();
        let mut outgoing = Outgoing::default();
        let args = self.positional(inputs, &mut outgoing)?;
        let mut kwargs = Map::new();
        for (name, item) in &self.kwargs {
            kwargs.insert(name.clone(), self.argument(item, inputs, &mut outgoing)?);
        }
        let header = json!({
            "op": "call", "call": self.target, "init": self.init, "log": log, "args": args, "kwargs": kwargs,
        });
        if let Some(output) = &self.output {
            crate::support::prepare_output(Path::new(output))?;
        }
        let reply = self.exchange(&mut io, move |to| outgoing.send(header, to))?;
        let said = match &reply {
            Ok(reply) => &reply.header,
            Err(header) => header,
        };
        let mapped = |kind: &str| said["mapped"][kind].as_u64().unwrap_or(0);
        io.mapped(mapped("shared"), mapped("file"));
        let reply = reply.map_err(|e| self.failure(&e, &io, "calling"))?;
        let value = reply.value(ctx, io.replies).map_err(|e| {
            io.spoil();
            TaskError::msg(format!("`{}`: {e}", self.target))
        })?;
        match &self.output {
            Some(output) if !Path::new(output).is_file() => Err(TaskError::msg(format!(
                "`{}` returned but did not write its output {output} (log: {})",
                self.target,
                io.log_path.display()
            ))),
            Some(output) if matches!(value, Value::None) => Ok(Value::Path(output.into())),
            _ => Ok(value),
        }
    }

    /// Sends a request and reads the reply's header: `Err` when the conversation broke (the
    /// service is spoiled), `Ok(Err(header))` when the interpreter reports a Python exception.
    fn exchange(
        &self,
        io: &mut ServiceIo<'_>,
        send: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<Result<protocol::Reply, Json>, TaskError> {
        let broken = |io: &mut ServiceIo<'_>, what: String| {
            io.spoil();
            TaskError::msg(format!("`{}`: {what}", self.target))
        };
        if let Err(e) = send(io.requests) {
            return Err(broken(io, format!("the interpreter stopped reading requests ({e})")));
        }
        let reply = match protocol::read_reply(io.replies) {
            Ok(reply) => reply,
            Err(e) => return Err(broken(io, e)),
        };
        Ok(if reply.header["ok"] == Json::Bool(true) { Ok(reply) } else { Err(reply.header) })
    }

    /// A Python exception as a task failure: its type and message, its last frames, the log.
    fn failure(&self, error: &Json, io: &ServiceIo<'_>, doing: &str) -> TaskError {
        let kind = error["type"].as_str().unwrap_or("Exception");
        let message = error["message"].as_str().unwrap_or_default();
        let traceback = error["traceback"].as_str().unwrap_or_default();
        let frames: Vec<&str> = traceback.lines().collect();
        let tail = frames[frames.len().saturating_sub(12)..].join("\n");
        let what = format!("{doing} `{}` raised {kind}: {message}", self.target);
        let text = if tail.is_empty() {
            format!("{what} (log: {})", io.log_path.display())
        } else {
            runner_plugin::command::failure_text(&what, &tail, io.log_path)
                .replace("; the end of its stderr:", "; the end of the traceback:")
        };
        let failure = if matches!(kind, "FileNotFoundError") { FailureKind::MissingInput } else { FailureKind::Error };
        TaskError::of_kind(failure, text)
    }

    /// The positional arguments' descriptions: the `args` list, or every input in order.
    fn positional<'v>(&self, inputs: &Inputs<'v>, outgoing: &mut Outgoing<'v>) -> Result<Vec<Json>, TaskError> {
        match &self.args {
            Some(items) => items.iter().map(|item| self.argument(item, inputs, outgoing)).collect(),
            None => inputs
                .iter()
                .filter(|input| !self.kwargs.values().any(|v| Reference::of(v).is_some_and(|r| r.name == input.name())))
                .map(|input| describe_input(input, outgoing, false))
                .collect(),
        }
    }

    /// One arg item's description: a referenced input, or the JSON value itself.
    fn argument<'v>(&self, item: &Json, inputs: &Inputs<'v>, outgoing: &mut Outgoing<'v>) -> Result<Json, TaskError> {
        match Reference::of(item) {
            Some(reference) => describe_input(inputs.get(reference.name)?, outgoing, reference.spread),
            None => Ok(json!({"t": "json", "v": self.with_output(item)?})),
        }
    }

    /// `item` with its strings (at any depth) as they are meant ([`file_refs`]): `{output}`
    /// replaced by the output path, `{input.NAME}` inside a longer string left as that text.
    fn with_output(&self, item: &Json) -> Result<Json, TaskError> {
        Ok(match item {
            Json::String(text) => Json::String(file_refs::render(text, |piece| match (piece, &self.output) {
                (Piece::Output, Some(path)) => Ok(path.clone()),
                (Piece::Output, None) => Err(TaskError::msg("`{output}` is used but the step has no `output` arg")),
                (Piece::Input(name), _) => Ok(format!("{{input.{name}}}")),
                (Piece::Text(text), _) => Ok(text.to_string()),
            })?),
            Json::Array(items) => Json::Array(items.iter().map(|i| self.with_output(i)).collect::<Result<_, _>>()?),
            Json::Object(map) => Json::Object(
                map.iter().map(|(k, v)| Ok((k.clone(), self.with_output(v)?))).collect::<Result<_, TaskError>>()?,
            ),
            other => other.clone(),
        })
    }
}

/// An input's value (or its gathered list, or its values spread) described for the header.
fn describe_input<'v>(
    input: &runner_plugin::Input<'v>,
    outgoing: &mut Outgoing<'v>,
    spread: bool,
) -> Result<Json, TaskError> {
    if !input.is_gathered() {
        return outgoing.describe(input.one()?);
    }
    let items = input.values().map(|v| outgoing.describe(v)).collect::<Result<Vec<_>, _>>()?;
    Ok(json!({"t": if spread { "star" } else { "list" }, "items": items}))
}

/// True when a string of `item`, at any depth, holds `{output}`.
fn mentions_output(item: &Json) -> bool {
    match item {
        Json::String(s) => file_refs::mentions_output(s),
        Json::Array(items) => items.iter().any(mentions_output),
        Json::Object(map) => map.values().any(mentions_output),
        _ => false,
    }
}

/// `"{input.NAME}"` or `"*{input.NAME}"`, exactly.
struct Reference<'a> {
    name: &'a str,
    spread: bool,
}

impl<'a> Reference<'a> {
    fn of(item: &'a Json) -> Option<Reference<'a>> {
        let text = item.as_str()?;
        let (spread, rest) = match text.strip_prefix('*') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let name = rest.strip_prefix("{input.")?.strip_suffix('}')?;
        (!name.is_empty() && !name.contains(['{', '}'])).then_some(Reference { name, spread })
    }

    fn text(&self) -> String {
        format!("{}{{input.{}}}", if self.spread { "*" } else { "" }, self.name)
    }
}

/// `package.module:name.attr`: a dotted module path, a colon, a dotted attribute path.
/// Refuses, before anything runs, an interpreter that is not there: a path that is no file, or
/// a bare name no folder of `PATH` holds.
fn check_interpreter(python: &std::ffi::OsStr) -> Result<(), ArgError> {
    let path = std::path::Path::new(python);
    let found = if python.as_encoded_bytes().contains(&b'/') {
        path.is_file()
    } else {
        std::env::var_os("PATH").is_some_and(|dirs| std::env::split_paths(&dirs).any(|dir| dir.join(path).is_file()))
    };
    if found {
        return Ok(());
    }
    let whence = if python.as_encoded_bytes().contains(&b'/') { "no such file" } else { "not on the PATH" };
    Err(ArgError::new(
        "python",
        format!(
            "the Python interpreter `{}` is not there ({whence}); expected a Python's path such as venv/bin/python, \
             given by the step's `python:`, the recipe's `python: {{interpreter: ...}}`, --python or $RUNNER_PYTHON",
            path.display()
        ),
    ))
}

fn check_target(target: &str) -> Result<(), ArgError> {
    let dotted = |text: &str| !text.is_empty() && text.split('.').all(is_identifier);
    match target.split_once(':') {
        Some((module, name)) if dotted(module) && dotted(name) => Ok(()),
        _ => Err(ArgError::new(
            "call",
            format!(
                "`{target}` is not a callable's name; expected \"package.module:name\", e.g. \"improver.threshold:Threshold\""
            ),
        )),
    }
}

fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
}

fn check_env_name(name: &str) -> Result<(), ArgError> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(ArgError::new(
            "env",
            format!("`{name}` is not an environment variable name; expected letters, digits and _"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_reach_the_callable_as_meant_and_only_the_recipe_s_output_is_a_path() {
        // As the engine hands `kwargs` over ([`ArgSpec::file_refs`]): text braces doubled.
        let args = Args::new(
            json!({"call": "m:f", "output": "out/x.nc", "kwargs": {
                "path": "{output}", "text": "{{output}} {{a}}", "deep": ["x={output}", {"k": "}}"}]
            }})
            .as_object()
            .unwrap()
            .clone(),
        );
        let call = Call::from_args(&args).unwrap();
        let rendered = call.with_output(&Json::Object(call.kwargs.clone())).unwrap();
        assert_eq!(rendered, json!({"path": "out/x.nc", "text": "{output} {a}", "deep": ["x=out/x.nc", {"k": "}"}]}));
        let no_output = Call { output: None, ..call };
        let error = no_output.with_output(&json!("{output}")).unwrap_err();
        assert!(error.to_string().contains("no `output` arg"), "{error}");
        assert!(no_output.with_output(&json!("{{output}}")).is_ok(), "a literal needs no output");
    }
}
