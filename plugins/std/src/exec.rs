//! `exec`: one external command per task, run through the engine ([`TaskContext::command`]) so
//! that its whole process tree is admitted against the budget, measured, killed on timeout or
//! interruption, and its output kept in a log file.
//!
//! Args:
//! - `command`: the argv (no shell), a list of strings (numbers are taken as their text). Each
//!   item may hold `{input.NAME}` — the file path of input `NAME` — and `{output}` — the
//!   `output` path. An item that is exactly `{input.NAME}` of a gathered input becomes one
//!   argument per gathered value, in dim order; elsewhere a gathered input is an error.
//!   A path filled in at the start of an item that is relative and starts with `-` gets `./`
//!   before it, so that the command never reads it as an option.
//! - `output` (optional): the file the command writes; its parent folders are created, a stale
//!   file there is removed before the command runs (a directory there is an error: it never
//!   satisfies a file output), and the task succeeds only if the command exits 0 and the file
//!   then exists as a file. Written atomically: `{output}` is a hidden temporary name beside it
//!   (ending in the output's own file name, so tools that go by the extension behave), renamed
//!   into place once the command succeeded. The task's value is this path (nothing without
//!   `output`).
//! - `env` (optional): a map of environment variables added for the command; values may hold
//!   the same templates as `command`, except gathered inputs. Names are checked: not empty, no
//!   `=`, no NUL.
//! - `reads` (optional): files or folders the command reads that its argv does not name, for
//!   `--resume` (which also takes every `command` item naming an existing file as an input).
//!
//! How inputs become files: a path value is passed as it is (it must exist, else the task fails
//! as a missing input, which the step's `on_missing` decides about); an array is handed over as
//! a `.npy` file — its spill file when the engine has spilled it (no copy), else written once
//! into the task's scratch folder and removed after the command; a bytes value likewise, as a
//! raw file. JSON or nothing cannot be handed over.
//!
//! The braces `{input.…}` and `{output}` are this plugin's own templates, not the engine's: the
//! recipe's templates pass them through, and `command` and `env` are marked
//! [`ArgSpec::file_refs`], so they are filled in once — a dim, var or `--set` value holding
//! `{output}` reaches the command as that text, and so does `{{output}}` written in the recipe.
//!
//! Estimate: [`DEFAULT_ESTIMATE`] per task. The command's memory is not knowable from here; the
//! recipe's `memory:` hint, then the step's measured history, do the rest.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use runner_plugin::file_refs::{self, Piece, pieces, whole_input};
use runner_plugin::serde_json::Value as Json;
use runner_plugin::{
    ArgError, ArgSpec, Args, CommandSpec, Input, InputMeta, Inputs, InputsForEstimate, Plugin, Storage, TaskContext,
    TaskError, Value, ValueMeta,
};

use crate::npy;

/// What one task is estimated to need before anything is known of the command: about what a
/// Python interpreter with NumPy loaded holds, plus room for modest data.
pub const DEFAULT_ESTIMATE: u64 = 64 << 20;

const ARGS: &[ArgSpec] = &[
    ArgSpec::required(
        "command",
        "the argv, no shell: a list such as [python3, tools/x.py, \"{input.field}\", --out, \"{output}\"]",
    )
    .may_name_inputs()
    .file_refs(),
    ArgSpec::optional("output", "none", "the file the command writes; the task's value").output_path(),
    ArgSpec::optional("env", "{}", "environment variables added for the command, e.g. {OMP_NUM_THREADS: \"1\"}")
        .file_refs(),
    ArgSpec::optional("reads", "[]", "files or folders the command reads that `command` does not name (for --resume)")
        .input_path(),
];

pub struct Exec;

impl Plugin for Exec {
    fn name(&self) -> &'static str {
        "exec"
    }

    fn about(&self) -> &'static str {
        "runs an external command per task: {input.NAME} is an input's file, {output} the output file"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        let parsed = Parsed::from_args(args)?;
        if parsed.output.is_none() && parsed.mentions_output() {
            return Err(ArgError::new("command", "`{output}` is used but the step has no `output` arg"));
        }
        Ok(())
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let parsed = Parsed::from_args(args)?;
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        for (arg, item) in parsed.items() {
            let whole = whole_input(item);
            for piece in pieces(item) {
                let Piece::Input(name) = piece else { continue };
                let Some(meta) = inputs.iter().find(|m| m.name == name) else {
                    return Err(ArgError::new(
                        arg,
                        format!(
                            "`{{input.{name}}}` names no input of the step; its inputs are: {}",
                            if names.is_empty() { "none".to_string() } else { names.join(", ") }
                        ),
                    ));
                };
                if meta.gathered.is_some() && (whole.is_none() || arg != "command") {
                    return Err(ArgError::new(
                        arg,
                        format!(
                            "input `{name}` is a gathered list; use it as a whole item of `command`, \
                             `\"{{input.{name}}}\"`, which becomes one argument per value"
                        ),
                    ));
                }
                if matches!(meta.item, ValueMeta::Json | ValueMeta::None) {
                    return Err(ArgError::new(
                        arg,
                        format!(
                            "input `{name}` is {}, which cannot be handed to a command as a file; \
                             expected a path, an array or bytes",
                            meta.item
                        ),
                    ));
                }
            }
        }
        Ok(if parsed.output.is_some() { ValueMeta::Path } else { ValueMeta::None })
    }

    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        DEFAULT_ESTIMATE
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let parsed = Parsed::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let mut files = InputFiles::new(ctx);
        let result = run_command(ctx, &parsed, inputs, &mut files);
        files.remove_written();
        result
    }
}

fn run_command(
    ctx: &TaskContext,
    parsed: &Parsed,
    inputs: &Inputs,
    files: &mut InputFiles,
) -> Result<Value, TaskError> {
    for read in &parsed.reads {
        if !Path::new(read).exists() {
            return Err(TaskError::missing(format!("`reads`: no file or folder {read}")));
        }
    }
    let output = parsed.output.as_deref().map(PathBuf::from);
    if let Some(output) = &output {
        crate::support::prepare_output(output)?;
    }
    // What the command is told to write: a temporary name, renamed into place on success.
    let written = match &output {
        Some(output) if parsed.mentions_output() => Some(
            runner_plugin::files::temp_path_keeping_name(output)
                .ok_or_else(|| TaskError::msg(format!("output {} does not name a file", output.display())))?,
        ),
        _ => output.clone(),
    };
    let result = run_and_place(ctx, parsed, inputs, files, output.as_deref(), written.as_deref());
    if let (Some(output), Some(written)) = (&output, &written)
        && written != output
        && result.is_err()
    {
        let _ = std::fs::remove_file(written);
    }
    result
}

/// Runs the command, writing `written`, and moves that to `output` once it succeeded.
fn run_and_place(
    ctx: &TaskContext,
    parsed: &Parsed,
    inputs: &Inputs,
    files: &mut InputFiles,
    output: Option<&Path>,
    written: Option<&Path>,
) -> Result<Value, TaskError> {
    let mut argv: Vec<OsString> = Vec::with_capacity(parsed.command.len());
    for item in &parsed.command {
        match whole_input(item) {
            Some(name) => {
                let input = inputs.get(name)?;
                for at in 0..input.len() {
                    argv.push(never_an_option(files.path_of(input, at)?).into_os_string());
                }
            }
            None => argv.push(render(item, inputs, written, files)?),
        }
    }
    let mut spec = CommandSpec::new(argv);
    for (key, value) in &parsed.env {
        spec = spec.env(key, render(value, inputs, written, files)?);
    }
    let outcome = ctx.command(&spec)?.check()?;
    let (Some(output), Some(written)) = (output, written) else { return Ok(Value::None) };
    let not_written = |what: &str| {
        TaskError::msg(format!(
            "command `{}` exited with status 0 but {what} (log: {})",
            outcome.command,
            outcome.log_path.display()
        ))
    };
    match std::fs::symlink_metadata(written) {
        Ok(meta) if meta.is_dir() => {
            let _ = std::fs::remove_dir_all(written);
            return Err(not_written(&format!(
                "wrote a directory at {}, not the file `output` names",
                written.display()
            )));
        }
        Ok(_) if std::fs::metadata(written).is_ok_and(|m| m.is_file()) => {}
        _ => return Err(not_written(&format!("did not write its output {}", written.display()))),
    }
    if written != output {
        runner_plugin::files::place(written, output).map_err(TaskError::msg)?;
    }
    Ok(Value::Path(output.to_path_buf()))
}

/// A relative path that starts with `-` with `./` before it, so that no command reads it as
/// an option (`cat -n.txt` would number the lines of stdin).
fn never_an_option(path: PathBuf) -> PathBuf {
    if path.is_relative() && path.as_os_str().as_encoded_bytes().first() == Some(&b'-') {
        Path::new(".").join(path)
    } else {
        path
    }
}

/// One template item rendered: inputs as their (single) file path, `{output}` as the output.
fn render(item: &str, inputs: &Inputs, output: Option<&Path>, files: &mut InputFiles) -> Result<OsString, TaskError> {
    let mut out = OsString::new();
    for (at, piece) in pieces(item).into_iter().enumerate() {
        // Only a path at the start of an item can be read as an option.
        let path = |path: PathBuf| if at == 0 { never_an_option(path) } else { path };
        match piece {
            Piece::Text(text) => out.push(text),
            Piece::Output => match output {
                Some(output) => out.push(path(output.to_path_buf())),
                None => return Err(TaskError::msg("`{output}` is used but the step has no `output` arg")),
            },
            Piece::Input(name) => {
                let input = inputs.get(name)?;
                if input.is_gathered() {
                    return Err(TaskError::msg(format!(
                        "input `{name}` is a gathered list; only a whole item `{{input.{name}}}` of `command` can expand it"
                    )));
                }
                out.push(path(files.path_of(input, 0)?));
            }
        }
    }
    Ok(out)
}

/// The args, read.
#[derive(Debug)]
struct Parsed {
    command: Vec<String>,
    output: Option<String>,
    env: Vec<(String, String)>,
    reads: Vec<String>,
}

impl Parsed {
    fn from_args(args: &Args) -> Result<Parsed, ArgError> {
        const EXPECTED: &str = "a list of strings (the argv, no shell), e.g. [python3, tools/x.py, \"{input.field}\"]";
        let command = match args.get("command") {
            Some(Json::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|item| {
                    scalar_text(item).ok_or_else(|| {
                        ArgError::new("command", format!("`command` must be {EXPECTED}; got the item {item}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(Json::Array(_)) => {
                return Err(ArgError::new("command", format!("`command` is empty; expected {EXPECTED}")));
            }
            Some(other) => return Err(ArgError::new("command", format!("`command` must be {EXPECTED}; got {other}"))),
            None => return Err(ArgError::new("command", "missing required argument `command`")),
        };
        let output = match args.get("output") {
            None | Some(Json::Null) => None,
            Some(Json::String(path)) if !path.is_empty() => Some(path.clone()),
            Some(other) => return Err(ArgError::new("output", format!("`output` must be a file path, got {other}"))),
        };
        if let Some(item) = command.iter().find(|item| item.contains('\0')) {
            return Err(ArgError::new(
                "command",
                format!("`command` item {item:?} holds a NUL byte, which no argv can"),
            ));
        }
        let env = match args.get("env") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::Object(map)) => map
                .iter()
                .map(|(key, value)| {
                    check_env_name(key)?;
                    let value = scalar_text(value).ok_or_else(|| {
                        ArgError::new("env", format!("`env` values must be strings; `{key}` is {value}"))
                    })?;
                    if value.contains('\0') {
                        return Err(ArgError::new("env", format!("`env` value of `{key}` holds a NUL byte")));
                    }
                    Ok((key.clone(), value))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(ArgError::new("env", format!("`env` must be a map of names to strings, got {other}")));
            }
        };
        const READS: &str = "a list of file or folder paths, e.g. [in/static/orography.nc]";
        let reads = match args.get("reads") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::String(path)) => vec![path.clone()],
            Some(Json::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| ArgError::new("reads", format!("`reads` must be {READS}; got the item {item}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(ArgError::new("reads", format!("`reads` must be {READS}; got {other}"))),
        };
        Ok(Parsed { command, output, env, reads })
    }

    /// Every template item with the arg it comes from.
    fn items(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.command.iter().map(|c| ("command", c.as_str())).chain(self.env.iter().map(|(_, v)| ("env", v.as_str())))
    }

    fn mentions_output(&self) -> bool {
        self.items().any(|(_, item)| file_refs::mentions_output(item))
    }
}

/// An environment variable's name as the OS takes it: not empty, no `=` (which would end the
/// name and start its value), no NUL.
fn check_env_name(name: &str) -> Result<(), ArgError> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.contains('=') {
        "holds `=`, which would end the name and begin its value"
    } else if name.contains('\0') {
        "holds a NUL byte"
    } else {
        return Ok(());
    };
    Err(ArgError::new("env", format!("`env` name {name:?} {problem}; expected a name such as OMP_NUM_THREADS")))
}

/// A string, number or boolean as text.
fn scalar_text(value: &Json) -> Option<String> {
    match value {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The files inputs are handed over as, made at most once per value.
struct InputFiles<'c, 'a> {
    ctx: &'c TaskContext<'a>,
    /// (input name, position in it, file) for each value already resolved.
    known: Vec<(String, usize, PathBuf)>,
    /// Files written here, to remove after the command.
    written: Vec<PathBuf>,
}

impl<'c, 'a> InputFiles<'c, 'a> {
    fn new(ctx: &'c TaskContext<'a>) -> Self {
        InputFiles { ctx, known: Vec::new(), written: Vec::new() }
    }

    /// The file of value `at` of `input`.
    fn path_of(&mut self, input: &Input<'_>, at: usize) -> Result<PathBuf, TaskError> {
        if let Some((_, _, path)) = self.known.iter().find(|(n, i, _)| n == input.name() && *i == at) {
            return Ok(path.clone());
        }
        let value = input
            .values()
            .nth(at)
            .ok_or_else(|| TaskError::msg(format!("input `{}` has no value {at}", input.name())))?;
        let path = self.file_of(input.name(), at, value)?;
        self.known.push((input.name().to_string(), at, path.clone()));
        Ok(path)
    }

    fn file_of(&mut self, name: &str, at: usize, value: &Value) -> Result<PathBuf, TaskError> {
        let storage = match value {
            Value::Path(path) if path.exists() => return Ok(path.clone()),
            Value::Path(path) => {
                return Err(TaskError::missing(format!("input `{name}`: no file {}", path.display())));
            }
            Value::Array(array) if let Some(object) = crate::python_object::PythonObject::of(array) => {
                return Err(TaskError::msg(format!(
                    "input `{name}` is a Python object ({object}), which cannot be handed to a command as a file: \
                     return a numpy.ndarray from the call, or write a file there and return its path"
                )));
            }
            Value::Array(array) => array.storage(),
            Value::Bytes(bytes) => bytes,
            other => {
                return Err(TaskError::msg(format!(
                    "input `{name}` is {}, which cannot be handed to a command as a file",
                    other.kind()
                )));
            }
        };
        if let Storage::External(external) = storage
            && let Some(path) = external.file_path()
        {
            return Ok(path.to_path_buf());
        }
        let extension = if matches!(value, Value::Array(_)) { "npy" } else { "bin" };
        let path = self.ctx.scratch_dir()?.join(format!("input-{name}-{at}.{extension}"));
        let written = match value {
            Value::Array(array) => npy::write_array(&path, array),
            _ => std::fs::write(&path, storage.bytes()).map_err(|e| format!("writing {}: {e}", path.display())),
        };
        written.map_err(|e| TaskError::msg(format!("handing input `{name}` to the command: {e}")))?;
        self.written.push(path.clone());
        Ok(path)
    }

    fn remove_written(&mut self) {
        for path in self.written.drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, array, gathered, meta, single};
    use runner_plugin::serde_json::json;

    #[test]
    fn args_are_checked_with_messages_naming_the_arg() {
        let check = |args| Exec.check(&testing::args(args)).map_err(|e| (e.arg, e.message));
        assert!(check(json!({"command": ["python3", "x.py", 5, true]})).is_ok());
        let (arg, message) = check(json!({"command": "python3 x.py"})).unwrap_err();
        assert_eq!(arg.as_deref(), Some("command"));
        assert!(message.contains("must be a list of strings (the argv, no shell)"), "{message}");
        assert!(check(json!({"command": []})).unwrap_err().1.contains("`command` is empty"));
        assert!(check(json!({"command": ["a", ["b"]]})).unwrap_err().1.contains("got the item [\"b\"]"));
        let (arg, message) = check(json!({"command": ["cp", "a", "{output}"]})).unwrap_err();
        assert_eq!(
            (arg.as_deref(), message.as_str()),
            (Some("command"), "`{output}` is used but the step has no `output` arg")
        );
        assert!(check(json!({"command": ["x"], "env": {"A": [1]}})).unwrap_err().1.contains("`A` is [1]"));
        for (name, problem) in [("A=B", "holds `=`"), ("", "is empty"), ("A\u{0}B", "holds a NUL byte")] {
            let (arg, message) = check(json!({"command": ["env"], "env": {name: "x"}})).unwrap_err();
            assert_eq!(arg.as_deref(), Some("env"));
            assert!(message.contains(problem), "{name:?}: {message}");
        }
        assert!(check(json!({"command": ["a\u{0}b"]})).unwrap_err().1.contains("NUL byte"));
    }

    #[test]
    fn plan_rejects_unknown_and_misused_inputs() {
        let args = |command: Json| json!({"command": command, "output": "o.npy"});
        let field = meta("field", ValueMeta::Path);
        let members = InputMeta { name: "members".into(), gathered: Some(12), item: ValueMeta::Path };
        let plan = |command, metas: &[InputMeta]| testing::plan(&Exec, args(command), metas);
        assert_eq!(
            plan(json!(["t", "{input.field}", "{output}"]), std::slice::from_ref(&field)).unwrap(),
            (ValueMeta::Path, DEFAULT_ESTIMATE)
        );
        let error = plan(json!(["t", "{input.feild}"]), &[field.clone(), members.clone()]).unwrap_err();
        assert_eq!(error.arg.as_deref(), Some("command"));
        assert_eq!(error.message, "`{input.feild}` names no input of the step; its inputs are: field, members");
        assert!(plan(json!(["t", "{input.members}"]), std::slice::from_ref(&members)).is_ok());
        let error = plan(json!(["t", "--in={input.members}"]), std::slice::from_ref(&members)).unwrap_err();
        assert!(
            error.message.contains("input `members` is a gathered list; use it as a whole item"),
            "{}",
            error.message
        );
        let json_input = meta("stats", ValueMeta::Json);
        let error = plan(json!(["t", "{input.stats}"]), &[json_input]).unwrap_err();
        assert!(error.message.contains("cannot be handed to a command as a file"), "{}", error.message);
        let none = testing::plan(&Exec, json!({"command": ["true"]}), &[]).unwrap();
        assert_eq!(none.0, ValueMeta::None);
    }

    #[test]
    fn arrays_become_npy_files_paths_pass_as_they_are_and_gathers_expand() {
        let dir = tempfile::tempdir().unwrap();
        let given = dir.path().join("given.txt");
        std::fs::write(&given, "x").unwrap();
        let output = dir.path().join("out/listing.txt");
        // The command lists its arguments into the output, and checks each .npy argument loads.
        let script = "import sys\n\
            for a in sys.argv[2:4]: assert open(a, 'rb').read(6) == b'\\x93NUMPY', a\n\
            open(sys.argv[1], 'w').write('\\n'.join(sys.argv[2:]))";
        let value = testing::run(
            &Exec,
            json!({
                "command": ["python3", "-c", script, "{output}", "{input.members}", "p={input.path}"],
                "output": output.to_str().unwrap(),
            }),
            &[
                gathered("members", vec![array(&[2], vec![1.0f32, 2.0]), array(&[1], vec![7i32])]),
                single("path", Value::Path(given.clone())),
            ],
        )
        .unwrap();
        let Value::Path(path) = value else { panic!("a path") };
        assert_eq!(path, output);
        let listing = std::fs::read_to_string(&output).unwrap();
        let items: Vec<&str> = listing.lines().collect();
        assert_eq!(items.len(), 3, "{listing}");
        assert!(items[0].ends_with("input-members-0.npy") && items[1].ends_with("input-members-1.npy"), "{listing}");
        assert_eq!(items[2], format!("p={}", given.display()));
        // The files handed over were removed after the command.
        assert!(!Path::new(items[0]).exists());
    }

    #[test]
    fn a_missing_path_input_is_a_missing_input_and_a_silent_command_a_clear_failure() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.nc");
        let error =
            testing::run(&Exec, json!({"command": ["cat", "{input.a}"]}), &[single("a", Value::Path(missing.clone()))])
                .unwrap_err();
        assert_eq!(error.kind(), runner_plugin::FailureKind::MissingInput);
        assert_eq!(error.message(), format!("input `a`: no file {}", missing.display()));

        let output = dir.path().join("never.npy");
        std::fs::write(&output, "stale").unwrap();
        let error =
            testing::run(&Exec, json!({"command": ["true"], "output": output.to_str().unwrap()}), &[]).unwrap_err();
        assert!(error.message().contains("exited with status 0 but did not write its output"), "{}", error.message());
        assert!(!output.exists(), "the stale output was removed before the command ran");

        let error = testing::run(&Exec, json!({"command": ["sh", "-c", "echo broken >&2; exit 4"]}), &[]).unwrap_err();
        assert!(error.message().contains("exited with status 4"), "{}", error.message());
        assert!(error.message().contains("  | broken"), "{}", error.message());
    }
}
