//! Test support: a `Host` backed by a temporary directory, a way to run a plugin on values, and a
//! small random generator for test fields that is independent of the one `synth` uses.

use std::path::PathBuf;
use std::sync::Arc;

use runner_plugin::ndarray::{ArrayD, IxDyn};
use runner_plugin::serde_json::Value as Json;
use runner_plugin::{
    ArgError, Args, CommandExit, CommandOutcome, CommandPeakSource, CommandSpec, DimValue, Element, Host, Input,
    InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value, ValueMeta,
};

/// A host whose scratch dir is a fresh temporary directory, whose ledger ignores announcements,
/// and which runs commands plainly (no measurement: that is the engine's, tested there), with
/// their stdout and stderr in `command.log` in that directory.
pub struct TestHost {
    dir: tempfile::TempDir,
}

impl TestHost {
    pub fn new() -> TestHost {
        TestHost { dir: tempfile::tempdir().expect("temporary directory") }
    }
}

impl Host for TestHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        Ok(self.dir.path().to_path_buf())
    }

    fn will_allocate(&self, _bytes: u64) {}

    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        let (program, args) = spec.argv.split_first().ok_or_else(|| TaskError::msg("empty argv"))?;
        let started = std::time::Instant::now();
        let out = std::process::Command::new(program).args(args).envs(spec.env.iter().cloned()).output()?;
        let log_path = self.dir.path().join("command.log");
        std::fs::write(&log_path, [out.stdout.as_slice(), out.stderr.as_slice()].concat())?;
        use std::os::unix::process::ExitStatusExt as _;
        let exit = match (out.status.code(), out.status.signal()) {
            (Some(code), _) => CommandExit::Code(code),
            (None, signal) => CommandExit::Signal(signal.unwrap_or(0)),
        };
        Ok(CommandOutcome::new(
            spec.display(),
            exit,
            0,
            CommandPeakSource::Wait4Sampled,
            log_path,
            started.elapsed(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// Arguments from a JSON object literal.
pub fn args(json: Json) -> Args {
    Args::new(json.as_object().expect("arguments are a JSON object").clone())
}

/// One named input for [`run`]: a single value, or a gathered list.
pub struct TestInput {
    pub name: &'static str,
    pub gathered: bool,
    pub values: Vec<Arc<Value>>,
}

pub fn single(name: &'static str, value: Value) -> TestInput {
    TestInput { name, gathered: false, values: vec![Arc::new(value)] }
}

pub fn gathered(name: &'static str, values: Vec<Value>) -> TestInput {
    TestInput { name, gathered: true, values: values.into_iter().map(Arc::new).collect() }
}

/// Runs `plugin` once as the task with key `key`, after checking its arguments like the engine.
pub fn run_keyed(plugin: &dyn Plugin, key: &str, args_json: Json, inputs: &[TestInput]) -> Result<Value, TaskError> {
    let args = args(args_json);
    plugin.check(&args).map_err(|e| TaskError::msg(e.message))?;
    let host = TestHost::new();
    let index: Vec<(&str, DimValue)> = Vec::new();
    let ctx = TaskContext::new("test-step", key, "test-cycle", &index, 0, &host);
    with_inputs(inputs, |inputs| plugin.run(&ctx, &args, &inputs))
}

/// Calls `f` with the context of a task running on a [`TestHost`].
pub fn with_context<R>(f: impl FnOnce(&TaskContext) -> R) -> R {
    let host = TestHost::new();
    let index: Vec<(&str, DimValue)> = Vec::new();
    f(&TaskContext::new("test-step", "", "test-cycle", &index, 0, &host))
}

/// Runs `plugin` once with an empty task key.
pub fn run(plugin: &dyn Plugin, args_json: Json, inputs: &[TestInput]) -> Result<Value, TaskError> {
    run_keyed(plugin, "", args_json, inputs)
}

/// The plugin's estimate at dispatch, when it can see the input values.
pub fn estimate_at_dispatch(plugin: &dyn Plugin, args_json: Json, inputs: &[TestInput]) -> u64 {
    let args = args(args_json);
    let metas: Vec<InputMeta> = inputs.iter().map(meta_of).collect();
    let output = plugin.output(&args, &metas).expect("output metadata");
    with_inputs(inputs, |inputs| plugin.estimate(&args, InputsForEstimate::Dispatch(inputs), &output))
}

/// The plugin's output metadata and estimate at plan time, from the inputs' metadata only.
pub fn plan(plugin: &dyn Plugin, args_json: Json, metas: &[InputMeta]) -> Result<(ValueMeta, u64), ArgError> {
    let args = args(args_json);
    plugin.check(&args)?;
    let output = plugin.output(&args, metas)?;
    let estimate = plugin.estimate(&args, InputsForEstimate::Plan(metas), &output);
    Ok((output, estimate))
}

/// Metadata of a single (non-gathered) input.
pub fn meta(name: &str, item: ValueMeta) -> InputMeta {
    InputMeta { name: name.into(), gathered: None, item }
}

fn meta_of(input: &TestInput) -> InputMeta {
    InputMeta {
        name: input.name.into(),
        gathered: input.gathered.then_some(input.values.len()),
        item: input.values.first().map(|v| v.meta()).unwrap_or_default(),
    }
}

fn with_inputs<R>(inputs: &[TestInput], f: impl FnOnce(Inputs<'_>) -> R) -> R {
    let list: Vec<Input<'_>> = inputs.iter().map(|i| Input::new(i.name, i.gathered, &i.values)).collect();
    f(Inputs::new(&list))
}

/// An array value of `shape` filled from `data` in C order.
pub fn array<T: Element>(shape: &[usize], data: Vec<T>) -> Value {
    Value::Array(runner_plugin::Array::from_vec(shape.to_vec(), data).expect("data matches shape"))
}

/// The array inside a value, as an owned ndarray of `T`.
pub fn ndarray_of<T: Element>(value: &Value) -> ArrayD<T> {
    value.as_array().expect("an array").view::<T>().expect("the expected dtype").to_owned()
}

/// xorshift64*: deterministic pseudo-random numbers for test data.
pub struct TestRng(u64);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A field of `shape` with values uniform in [0, 1).
    pub fn field(&mut self, shape: &[usize]) -> ArrayD<f32> {
        ArrayD::from_shape_simple_fn(IxDyn(shape), || self.unit())
    }
}
