//! One attempt at one task, wherever it runs: on a worker thread of this process or inside a
//! job (`runner task`). This is the only place a plugin is called to do a task's work; what
//! differs between the two is a [`Site`] (where scratch files and logs go, how the reservation
//! grows, who has claimed the outputs).
//!
//! An attempt renders the task's args, claims its output paths, issues a measurement tag, calls
//! the plugin under it inside `catch_unwind` (a panic becomes the task's error), runs the
//! commands the plugin asks for, and ends with one [`TaskOutcome`]: the value or the error, the
//! task's peak and how it was measured, the log of its commands, how long it took. What is
//! applied to an outcome afterwards — retries, `on_missing`, statistics, recording — is the
//! caller's, once.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use runner_plugin::{
    Args, CommandOutcome, CommandSpec, DimValue, FailureKind, Host, Inputs, ServiceIo, ServiceSpec, TaskContext,
    TaskError, Value, task_tag,
};

use crate::command;
use crate::measure::{self, PeakSource};
use crate::memory::spill::ReadBack;
use crate::recipe::Step;

/// Where an attempt runs: what the engine around it provides.
pub trait Site: Sync {
    /// Claims the output paths `args` name for this task (two tasks never write one file); the
    /// error names the other task.
    fn claim_outputs(&self, args: &Args) -> Result<(), String>;

    /// The task's scratch folders go under this (`<root>/<step>/<key>`).
    fn scratch_root(&self) -> &Path;

    /// The logs of the task's commands go under this (`<root>/<step>/<key>.log`) unless the
    /// plugin names its own.
    fn log_root(&self) -> &Path;

    /// The task is measured under `tag` from now until [`Site::unmeasured`] (so that a ledger
    /// can read its live bytes while it runs).
    fn measured(&self, tag: u32) {
        let _ = tag;
    }

    /// The task is no longer measured.
    fn unmeasured(&self) {}

    /// The task is about to allocate `bytes` more (see [`Host::will_allocate`]).
    fn will_allocate(&self, bytes: u64) {
        let _ = bytes;
    }

    /// How many tasks may run here at once: the most service processes of one spec worth
    /// starting ahead of need (see [`command::service::prestart`]).
    fn workers(&self) -> usize {
        1
    }
}

/// One task to attempt: its step, its key and dim values, the run's cycle, its inputs.
pub struct TaskToRun<'a> {
    pub step: &'a Step,
    pub key: &'a str,
    pub index: &'a [(&'a str, DimValue)],
    pub cycle: &'a str,
    pub inputs: &'a Inputs<'a>,
}

/// What bounds one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// When the attempt started (a worker's clock reading is shared with the task before it).
    pub started: Instant,
    /// The step's `timeout:`: each command is killed at it, an in-process task fails past it.
    pub timeout: Option<Duration>,
    /// The memory limit of each command the task runs, unless the plugin sets its own
    /// (`--enforce-memory`).
    pub command_limit: Option<u64>,
    /// The attempt's reservation, when its commands and services may be preempted to keep the
    /// run within its budget ([`crate::measure::preempt`]); 0: never.
    pub reserved: u64,
}

/// How one attempt ended.
#[derive(Debug)]
pub struct TaskOutcome {
    pub result: Result<Value, TaskError>,
    /// The most the task held at once: its heap's peak, or a command's peak on top of the heap
    /// the task held while that command ran — what the ledger counts for a running task (its
    /// heap plus its commands), so what admission saw is what is recorded and learned.
    pub peak: u64,
    pub peak_source: PeakSource,
    /// The log of the task's commands, if it ran any.
    pub log_path: Option<PathBuf>,
    /// From its start to its end.
    pub elapsed: Duration,
    /// Of `elapsed`, what it waited for its services to be started or warmed up for it.
    pub waited: Duration,
    /// Of `elapsed`, reading its spilled inputs back before it ran (local tasks).
    pub read_back: ReadBack,
}

impl TaskOutcome {
    /// An attempt that failed before its plugin was called (nothing measured).
    pub fn failed(error: TaskError, started: Instant) -> TaskOutcome {
        TaskOutcome {
            result: Err(error),
            peak: 0,
            peak_source: PeakSource::Allocator,
            log_path: None,
            elapsed: started.elapsed(),
            waited: Duration::ZERO,
            read_back: ReadBack::default(),
        }
    }
}

/// The one retry rule, wherever the task ran: a failed attempt (the `attempts`-th) runs again
/// while the step's `retries` allow — one that ran out of memory with a larger reservation —
/// except for a missing input, which `on_missing` says what to make of.
pub fn may_retry(error: &TaskError, attempts: u32, retries: u32) -> bool {
    error.kind() != FailureKind::MissingInput && attempts <= retries
}

/// Makes a name (a task key, a step name) usable as a file or folder name.
pub fn file_name(name: &str) -> String {
    command::file_name_of(name)
}

/// Runs one attempt of `task` at `site` within `limits`.
pub fn attempt(task: &TaskToRun<'_>, site: &dyn Site, limits: &Limits) -> TaskOutcome {
    let step = task.step;
    let lookup = |name: &str| task.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
    let args = step.args.for_task(&lookup);
    if let Err(message) = site.claim_outputs(&args) {
        return TaskOutcome::failed(TaskError::msg(message), limits.started);
    }
    let tag = match measure::begin_new_task() {
        Ok(tag) => tag,
        Err(error) => {
            return TaskOutcome::failed(TaskError::msg(format!("cannot measure the task: {error}")), limits.started);
        }
    };
    site.measured(tag);
    let host = TaskHost { site, task, tag, limits, commands: Mutex::new(None) };
    let ctx = TaskContext::new(&step.name, task.key, task.cycle, task.index, tag, &host);
    let result = task_tag::with(tag, || catch_unwind(AssertUnwindSafe(|| step.plugin.run(&ctx, &args, task.inputs))));
    site.unmeasured();
    let memory = measure::end_task(tag);
    let elapsed = limits.started.elapsed();
    let commands = host.commands.into_inner().unwrap_or_else(|p| p.into_inner());
    let result = match (result, memory.as_ref()) {
        (Err(panic), _) => Err(TaskError::msg(format!("panicked: {}", crate::panics::message(&*panic)))),
        // A task that could not be measured fails: it never records a peak of 0.
        (Ok(_), Err(error)) => Err(TaskError::msg(format!("cannot measure the task: {error}"))),
        // An in-process task cannot be stopped: one that returns after its timeout has failed.
        (Ok(Ok(_)), Ok(_)) if limits.timeout.is_some_and(|limit| elapsed > limit) => {
            let limit = limits.timeout.unwrap_or_default();
            Err(TaskError::of_kind(
                FailureKind::TimedOut,
                format!(
                    "timed out: it ran {:.1} s, its step's timeout is {:.1} s",
                    elapsed.as_secs_f64(),
                    limit.as_secs_f64()
                ),
            ))
        }
        (Ok(result), Ok(_)) => result,
    };
    let heap_peak = memory.map_or(0, |m| m.peak_bytes);
    // A task that ran commands or used a service is measured as theirs (the heap it held
    // meanwhile is in their figure), never below its heap's own peak.
    let (peak, peak_source) = match &commands {
        Some(commands) => (commands.peak.max(heap_peak), commands.source),
        None => (heap_peak, PeakSource::Allocator),
    };
    let waited = commands.as_ref().map_or(Duration::ZERO, |c| c.waited);
    let log_path = commands.and_then(|c| c.log_path);
    TaskOutcome { result, peak, peak_source, log_path, elapsed, waited, read_back: ReadBack::default() }
}

/// What a task's commands measured: the highest of (heap held when the command started +
/// the command's tree at its peak), how, and their log.
#[derive(Debug, Clone)]
struct CommandRecord {
    peak: u64,
    source: PeakSource,
    log_path: Option<PathBuf>,
    /// What it waited for its services, all of them together.
    waited: Duration,
}

/// The engine services of one attempt (the plugin API's [`Host`]); built on the stack, so it
/// costs nothing unless the task asks for something.
struct TaskHost<'a> {
    site: &'a dyn Site,
    task: &'a TaskToRun<'a>,
    tag: u32,
    limits: &'a Limits,
    commands: Mutex<Option<CommandRecord>>,
}

impl Host for TaskHost<'_> {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self.site.scratch_root().join(file_name(&self.task.step.name)).join(file_name(self.task.key));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// True once the attempt has run past its step's timeout (a plugin that polls it can stop).
    fn cancelled(&self) -> bool {
        self.limits.timeout.is_some_and(|limit| self.limits.started.elapsed() > limit)
    }

    fn will_allocate(&self, bytes: u64) {
        self.site.will_allocate(bytes);
    }

    /// Runs the command as part of the task ([`crate::command`]): killed at the sooner of the
    /// spec's and the step's timeout or when the task is cancelled; its peak, on top of the heap
    /// the task holds meanwhile, is kept for the task's record whatever happens.
    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        let cancelled = || self.cancelled();
        let task = self.task_command(&cancelled);
        // The plugin waits for its command: what its heap holds now, it holds throughout.
        let heap = measure::task_live(self.tag);
        command::run_for_task(spec, &task, |measured| self.note(heap, measured))
    }

    /// Lends the task a service process ([`command::service`]), measured like a command.
    fn serve(
        &self,
        spec: &ServiceSpec,
        work: &mut dyn FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    ) -> Result<Value, TaskError> {
        let cancelled = || self.cancelled();
        let task = self.task_command(&cancelled);
        // Heard once the conversation is over: the heap then holds the value read back while
        // the service still held its own copy at its peak.
        command::service::serve_for_task(spec, &task, work, |measured| {
            self.note(measure::task_live(self.tag), measured)
        })
    }

    /// Shared memory for a value interpreters will map ([`crate::memory::shared`]).
    fn shared_buffer(&self, len: usize) -> Option<Box<dyn runner_plugin::SharedBufferMut>> {
        let buffer = crate::memory::shared::SharedBuffer::new(len)?;
        Some(Box::new(buffer))
    }

    /// A spare service for the other workers ([`command::service::prestart`]).
    fn prestart(&self, spec: &ServiceSpec, warm: runner_plugin::service::WarmUp) {
        let log = self.log_path().with_file_name("warm-up.log");
        command::service::prestart(spec, self.site.workers(), &log, warm);
    }
}

impl TaskHost<'_> {
    /// The task's own log: `<log root>/<step>/<key>.log`, names escaped one-to-one.
    fn log_path(&self) -> PathBuf {
        self.site.log_root().join(file_name(&self.task.step.name)).join(format!("{}.log", file_name(self.task.key)))
    }

    fn task_command<'c>(&self, cancelled: &'c (dyn Fn() -> bool + Sync)) -> command::TaskCommand<'c> {
        command::TaskCommand {
            default_log: self.log_path(),
            timeout: self.limits.timeout,
            started: self.limits.started,
            limit: self.limits.command_limit,
            reserved: self.limits.reserved,
            tag: self.tag,
            cancelled,
        }
    }

    /// Keeps the highest of (heap held + a command's or service's tree at its peak).
    fn note(&self, heap: u64, measured: &command::CommandMeasured) {
        let mut record = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let record = record.get_or_insert(CommandRecord {
            peak: 0,
            source: measured.source,
            log_path: None,
            waited: Duration::ZERO,
        });
        record.log_path = Some(measured.log_path.clone());
        record.waited += measured.waited;
        let peak = heap.saturating_add(measured.peak);
        if peak >= record.peak {
            (record.peak, record.source) = (peak, measured.source);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use runner_plugin::{ArgSpec, Plugin};

    use super::*;
    use crate::plan::Compiled;
    use crate::recipe::CompileOptions;
    use crate::registry::Registry;

    const MIB: u64 = 1 << 20;

    /// Holds a 64 MiB buffer while its command holds 48 MiB.
    struct HoldsWhileItsCommandRuns;

    impl Plugin for HoldsWhileItsCommandRuns {
        fn name(&self) -> &'static str {
            "holds_while_its_command_runs"
        }
        fn about(&self) -> &'static str {
            "test plugin"
        }
        fn args(&self) -> &'static [ArgSpec] {
            &[]
        }
        fn run(&self, ctx: &TaskContext, _args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
            let held = vec![1u8; (64 * MIB) as usize];
            let script = "import time\nx = b'x' * (48 << 20)\ntime.sleep(0.3)";
            ctx.command(&CommandSpec::new(["python3", "-c", script]))?;
            Ok(Value::Json(serde_json::json!(held.len())))
        }
    }

    struct Here(PathBuf);

    impl Site for Here {
        fn claim_outputs(&self, _args: &Args) -> Result<(), String> {
            Ok(())
        }
        fn scratch_root(&self) -> &Path {
            &self.0
        }
        fn log_root(&self) -> &Path {
            &self.0
        }
    }

    #[test]
    fn a_task_s_peak_is_its_heap_and_its_command_together() {
        let _alone = crate::measure::external::exclusive();
        let registry = Registry::new([Arc::new(HoldsWhileItsCommandRuns) as Arc<dyn runner_plugin::Plugin>]);
        let options = CompileOptions { cycle: "c".into(), ..CompileOptions::default() };
        let text = "recipe: r\nsteps:\n  s:\n    plugin: holds_while_its_command_runs\n";
        let compiled = Compiled::from_text(Path::new("r.yaml"), text, &options, &registry).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let inputs = Inputs::new(&[]);
        let step = &compiled.recipe.steps[0];
        let task = TaskToRun { step, key: "", index: &[], cycle: "c", inputs: &inputs };
        let limits = Limits { started: Instant::now(), timeout: None, command_limit: None, reserved: 0 };
        let outcome = attempt(&task, &Here(dir.path().to_path_buf()), &limits);
        assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        // What the ledger counted while the command ran: the 64 MiB buffer and the command's
        // 48 MiB (and Python's own), not the larger of the two.
        assert!(outcome.peak >= 112 * MIB, "peak {} MiB", outcome.peak / MIB);
        assert_ne!(outcome.peak_source, PeakSource::Allocator, "the command set the peak");
        assert!(outcome.log_path.is_some_and(|log| log.starts_with(dir.path())));
    }
}
