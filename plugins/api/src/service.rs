//! Long-lived helper processes that serve many tasks one after another ([`TaskContext::serve`]):
//! a warm Python interpreter is the case in point. Starting an interpreter and importing a
//! large library can cost seconds; a service pays that once and then answers task after task.
//!
//! The engine owns the processes: it starts one when no idle one of the same [`ServiceSpec`]
//! is there, keeps idle ones between tasks, and kills and replaces one that crashes, hangs past
//! the task's timeout, is cancelled or runs out of memory. While a task uses a service, what the
//! service's process tree holds above its resident *baseline* is the task's: it counts in the
//! run's budget while the task runs and its peak becomes the task's peak. The baseline itself
//! (the interpreter and its imports) is counted in the budget as the run's standing memory, not
//! charged to any task.
//!
//! The protocol spoken over the pipes is the plugin's own; the engine only moves bytes.
//!
//! [`TaskContext::serve`]: crate::TaskContext::serve

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;

/// Which process to start, and which idle processes may serve a task: only those started from an
/// equal spec (argv, environment additions and key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ServiceSpec {
    /// The program and its arguments (no shell; the program is looked up in `PATH` when it has
    /// no `/`). Its stdin carries requests; its stdout carries replies; its stderr goes to a log.
    pub argv: Vec<OsString>,
    /// Variables added to (or replacing in) the runner's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Keeps services apart that would otherwise be shared, e.g. one step's from another's.
    pub key: String,
    /// Replace the process after a task that leaves it holding more than this many bytes
    /// resident (a slow leak must not grow without end).
    pub recycle_above: Option<u64>,
}

impl ServiceSpec {
    /// A service from its argv; the first item is the program.
    pub fn new<I, S>(argv: I) -> ServiceSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        ServiceSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            key: String::new(),
            recycle_above: None,
        }
    }

    /// Adds an environment variable (builder style).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> ServiceSpec {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets the key that keeps this service apart from others of the same argv (builder style).
    pub fn key(mut self, key: impl Into<String>) -> ServiceSpec {
        self.key = key.into();
        self
    }

    /// Sets the resident size past which the process is replaced after a task (builder style).
    pub fn recycle_above(mut self, bytes: Option<u64>) -> ServiceSpec {
        self.recycle_above = bytes;
        self
    }
}

/// What prepares a spare service before it waits idle (see [`crate::TaskContext::prestart`]).
pub type WarmUp = Box<dyn FnOnce(ServiceIo<'_>) -> Result<(), crate::TaskError> + Send>;

/// Where the engine takes the process's resident memory as its baseline from now on.
pub trait Rebase {
    /// Memory the process holds from now on is its baseline (the run's standing memory), not
    /// the task's: e.g. once an interpreter has imported the module a task calls.
    fn rebase(&mut self);
}

/// A service's pipes, lent to one task.
pub struct ServiceIo<'a> {
    /// Requests: the process's stdin.
    pub requests: &'a mut dyn Write,
    /// Replies: the process's stdout.
    pub replies: &'a mut dyn Read,
    /// The task's log file: where the process should send what the task prints.
    pub log_path: &'a Path,
    /// True when the process was started for this task.
    pub fresh: bool,
    rebase: &'a mut dyn Rebase,
    spoiled: &'a mut bool,
}

impl<'a> ServiceIo<'a> {
    #[doc(hidden)]
    pub fn new(
        requests: &'a mut dyn Write,
        replies: &'a mut dyn Read,
        log_path: &'a Path,
        fresh: bool,
        rebase: &'a mut dyn Rebase,
        spoiled: &'a mut bool,
    ) -> ServiceIo<'a> {
        ServiceIo { requests, replies, log_path, fresh, rebase, spoiled }
    }

    /// What the process holds now is its baseline, not the task's (see [`Rebase`]).
    pub fn rebase(&mut self) {
        self.rebase.rebase();
    }

    /// The conversation is out of step (a reply could not be read whole): the process must not
    /// serve another task. A task that fails cleanly (its callable raised) leaves it usable.
    pub fn spoil(&mut self) {
        *self.spoiled = true;
    }
}
