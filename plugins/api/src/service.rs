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
//! The protocol spoken over the pipes is the plugin's own; the engine only moves bytes. A
//! service's stderr at start is a log; `RUNNER_IDLE_LOG` in its environment names the file it
//! should write to between tasks (the engine bounds it as it bounds task logs), each task's
//! output going to the log its request names.
//!
//! **Forking services** ([`ServiceSpec::forking`]) let a run pay a slow start once: the engine
//! starts one process, warms it up ([`crate::TaskContext::prestart`]), and then has it fork the
//! run's other services, which share its pages until they write to them. Such a process is
//! started with a Unix stream socket as fd 3 (and `RUNNER_FORK_FD=3` in its environment). After
//! the warm-up the engine closes its stdin; from then on it speaks only on fd 3:
//! - the engine sends `fork\n` with two fds attached (`SCM_RIGHTS`): the new service's requests
//!   (read end) and replies (write end). The process forks; the child makes them its stdin and
//!   stdout, closes fd 3, takes a process group of its own, asks for `SIGKILL` when its parent
//!   dies, and serves tasks like any service. The parent answers `<child pid>\n`.
//! - the engine sends `retire\n` once it has what it needs: the process must stop holding its
//!   warmed-up memory (exec a small program) and from then on write `<pid> <wait status>\n` on fd
//!   3 for each child that ends, exiting when none is left. It keeps its own process (children
//!   whose parent dies are killed), so it must not exit before them. When `RUNNER_REAPER` is in
//!   its environment, that program does exactly this: exec it as `$RUNNER_REAPER
//!   __reap-children 3` (the runner's own executable, a few MiB resident).
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
    /// The process can fork the run's other services after its warm-up (see the module docs).
    pub forks: bool,
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
            forks: false,
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

    /// Declares that the process speaks the fork protocol of this module (builder style).
    pub fn forking(mut self, forks: bool) -> ServiceSpec {
        self.forks = forks;
        self
    }

    /// Sets the resident size past which the process is replaced after a task (builder style).
    pub fn recycle_above(mut self, bytes: Option<u64>) -> ServiceSpec {
        self.recycle_above = bytes;
        self
    }
}

/// The conversation that prepares a service (see [`WarmUp`]).
pub type Prepare = dyn Fn(ServiceIo<'_>) -> Result<(), crate::TaskError> + Send + Sync;

/// What prepares a service for one kind of task before it waits idle (see
/// [`crate::TaskContext::prestart`]).
#[derive(Clone)]
pub struct WarmUp {
    /// What it prepares (a step's callable, say): each service is prepared once for each key.
    pub key: String,
    pub prepare: std::sync::Arc<Prepare>,
}

/// What of the process's resident memory is not the task's: its baseline, and the engine's
/// shared memory it mapped.
pub trait Rebase {
    /// Memory the process holds from now on is its baseline (the run's standing memory), not
    /// the task's: e.g. once an interpreter has imported the module a task calls.
    fn rebase(&mut self);

    /// Beyond what it had at the task's start, the process had up to `shared` bytes of the
    /// engine's shared memory (input values it mapped, see [`crate::SharedBufferMut`]) and
    /// `file` bytes of file-backed pages (spilled inputs it mapped, files it read) resident at
    /// its peak: counted as the engine's already, or not memory the budget is about.
    fn mapped(&mut self, shared: u64, file: u64) {
        let _ = (shared, file);
    }
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

    /// Of what the process held at its peak, up to `shared` bytes were the engine's shared
    /// memory and `file` bytes file-backed pages (see [`Rebase::mapped`]).
    pub fn mapped(&mut self, shared: u64, file: u64) {
        self.rebase.mapped(shared, file);
    }

    /// The conversation is out of step (a reply could not be read whole): the process must not
    /// serve another task. A task that fails cleanly (its callable raised) leaves it usable.
    pub fn spoil(&mut self) {
        *self.spoiled = true;
    }
}
