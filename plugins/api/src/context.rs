//! What a running task may ask of the engine: where it is in the index space, the cycle, a
//! scratch directory, logging, budget-aware allocation and parallel helpers that keep the
//! task's memory accounting right.

use std::path::PathBuf;

use ndarray::{ArrayD, IxDyn};

use crate::command::{CommandOutcome, CommandSpec};
use crate::error::TaskError;
use crate::service::{ServiceIo, ServiceSpec};
use crate::task_tag;
use crate::value::{DimValue, Element, Value};

/// Services the engine provides to a running task. Implemented by the engine; plugins use it
/// only through [`TaskContext`].
pub trait Host: Sync {
    /// A directory private to the task, created on first use and removed after the run.
    fn scratch_dir(&self) -> std::io::Result<PathBuf>;
    /// Tells the engine the task is about to allocate `bytes` more than it has so far, so that
    /// the run's memory ledger can make room (spilling or pausing other work) before the
    /// allocation happens rather than after.
    fn will_allocate(&self, bytes: u64);
    /// True once the task should stop: its step's `timeout` has passed, or the run is being
    /// interrupted or aborted.
    fn cancelled(&self) -> bool {
        false
    }
    /// Runs an external command as part of the task (see [`TaskContext::command`]). The default
    /// is for hosts that cannot: it fails.
    fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        Err(TaskError::msg(format!("this host cannot run commands (asked to run `{}`)", spec.display())))
    }
    /// Shared memory of `len` bytes for a value other processes will map (see
    /// [`TaskContext::shared_buffer`]). The default is for hosts that have none.
    fn shared_buffer(&self, len: usize) -> Option<Box<dyn crate::SharedBufferMut>> {
        let _ = len;
        None
    }
    /// Starts a spare service in the background (see [`TaskContext::prestart`]). The default
    /// does nothing.
    fn prestart(&self, spec: &ServiceSpec, warm: crate::service::WarmUp) {
        let _ = (spec, warm);
    }
    /// Lends the task a long-lived service process (see [`TaskContext::serve`]). The default is
    /// for hosts that cannot: it fails.
    fn serve(
        &self,
        spec: &ServiceSpec,
        work: &mut dyn FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    ) -> Result<Value, TaskError> {
        let _ = work;
        Err(TaskError::msg(format!(
            "this host cannot run services (asked for `{}`)",
            crate::command::display_argv(&spec.argv)
        )))
    }
}

/// The context of one running task.
pub struct TaskContext<'a> {
    step: &'a str,
    key: &'a str,
    cycle: &'a str,
    index: &'a [(&'a str, DimValue)],
    tag: u32,
    host: &'a dyn Host,
}

impl<'a> TaskContext<'a> {
    #[doc(hidden)]
    pub fn new(
        step: &'a str,
        key: &'a str,
        cycle: &'a str,
        index: &'a [(&'a str, DimValue)],
        tag: u32,
        host: &'a dyn Host,
    ) -> TaskContext<'a> {
        TaskContext { step, key, cycle, index, tag, host }
    }

    /// The step this task belongs to.
    pub fn step(&self) -> &str {
        self.step
    }

    /// The task's key, e.g. `member=3,lead=12` (empty for a step without `over`).
    pub fn key(&self) -> &str {
        self.key
    }

    /// The cycle being run (`--cycle`).
    pub fn cycle(&self) -> &str {
        self.cycle
    }

    /// The task's value of dimension `dim`, if the step runs over it. For a group dim this is
    /// the block number.
    pub fn index(&self, dim: &str) -> Option<&DimValue> {
        self.index.iter().find(|(name, _)| *name == dim).map(|(_, value)| value)
    }

    /// All `(dim, value)` pairs of the task, in the step's `over` order.
    pub fn indices(&self) -> &[(&'a str, DimValue)] {
        self.index
    }

    /// A directory private to this task, removed when the run ends.
    pub fn scratch_dir(&self) -> Result<PathBuf, TaskError> {
        Ok(self.host.scratch_dir()?)
    }

    /// Logs a line attributed to this task (shown with `RUST_LOG=info`).
    pub fn log(&self, message: &str) {
        tracing::info!(step = self.step, key = self.key, "{message}");
    }

    /// A zero-filled array, announced to the memory ledger before it is allocated.
    pub fn zeros<T: Element>(&self, shape: &[usize]) -> ArrayD<T> {
        let len = shape.iter().product::<usize>();
        self.host.will_allocate(len as u64 * std::mem::size_of::<T>() as u64);
        // Every element type's default is all zero bits, and `vec!` of a zero value asks the
        // allocator for zeroed memory (calloc): pages fresh from the kernel are zero already, so
        // a large output is not written twice (`ArrayD::default` would memset it).
        ArrayD::from_shape_vec(IxDyn(shape), vec![T::default(); len]).expect("the length is the shape's product")
    }

    /// True once the task should stop early (its step's `timeout` has passed, or the run is
    /// ending): a long-running plugin polls it and returns an error. Whatever the task returns
    /// after its timeout counts as timed out.
    pub fn cancelled(&self) -> bool {
        self.host.cancelled()
    }

    /// Runs an external command as part of this task and waits for it. Its whole process tree
    /// is the task's: its resident memory counts in the run's budget while it runs and its
    /// peak becomes the task's peak; it is killed (every process of the tree) on timeout —
    /// the step's `timeout:` or the spec's —, when the run is interrupted, or when it reaches
    /// the spec's memory limit. stdout and stderr are appended to a log file.
    ///
    /// Returns the outcome whenever the command ended by itself, whatever its exit status
    /// ([`CommandOutcome::check`] turns a non-zero status into an error with the tail of its
    /// stderr); an error when it could not start, timed out
    /// ([`FailureKind::TimedOut`](crate::FailureKind::TimedOut)), was cancelled
    /// ([`FailureKind::Cancelled`](crate::FailureKind::Cancelled)) or ran out of memory
    /// ([`FailureKind::OutOfMemory`](crate::FailureKind::OutOfMemory)).
    pub fn command(&self, spec: &CommandSpec) -> Result<CommandOutcome, TaskError> {
        self.host.command(spec)
    }

    /// Runs `work` with a long-lived service process started from `spec` (a warm interpreter,
    /// see [`crate::service`]): an idle one of the same spec if there is one, else a new one.
    /// What the process holds above its baseline while `work` runs is the task's (counted in
    /// the budget, its peak recorded as the task's); the process is killed on the step's
    /// timeout, on cancellation and at the memory limit. When it dies during the task, the
    /// task fails with how it ended and the end of the task's log, whatever `work` returned.
    pub fn serve(
        &self,
        spec: &ServiceSpec,
        mut work: impl FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    ) -> Result<Value, TaskError> {
        self.host.serve(spec, &mut work)
    }

    /// Asks for the run's services of `spec` to be started in the background and prepared by
    /// `warm` (its imports, say) before a task is lent one: as many as the run has workers,
    /// side by side, or for a [forking](ServiceSpec::forking) spec one, which then forks the
    /// others. Services already running that sit idle and were never prepared for `key` (what
    /// `warm` prepares: a step's callable) are prepared for it in the background too, so that
    /// a step's first task on each of them does not pay its imports. Returns at once; a plugin
    /// calls it before [`serve`](Self::serve).
    pub fn prestart(
        &self,
        spec: &ServiceSpec,
        key: &str,
        warm: impl Fn(ServiceIo<'_>) -> Result<(), TaskError> + Send + Sync + 'static,
    ) {
        let warm = crate::service::WarmUp { key: key.to_string(), prepare: std::sync::Arc::new(warm) };
        self.host.prestart(spec, warm);
    }

    /// Announces a large allocation the task is about to make by other means.
    pub fn will_allocate(&self, bytes: u64) {
        self.host.will_allocate(bytes);
    }

    /// Shared memory of `len` bytes to fill with a value's bytes and then keep as its storage
    /// ([`crate::SharedBufferMut::freeze`]): counted as this task's memory like a heap buffer,
    /// and mapped without a copy by the engine's other processes that read the value (warm
    /// interpreters). `None` when the engine has none to give (too many such values live, or
    /// a host without it): use the heap. Worth it for values of more than a few pages.
    pub fn shared_buffer(&self, len: usize) -> Option<Box<dyn crate::SharedBufferMut>> {
        self.host.shared_buffer(len)
    }

    /// Runs `a` and `b`, possibly in parallel; both are charged to this task.
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        let tag = self.tag;
        rayon::join(move || task_tag::with(tag, a), move || task_tag::with(tag, b))
    }

    /// Calls `f(index, chunk)` for consecutive chunks of `data` of `chunk_len` elements, in
    /// parallel; all the work is charged to this task.
    pub fn par_chunks_mut<T, F>(&self, data: &mut [T], chunk_len: usize, f: F)
    where
        T: Send,
        F: Fn(usize, &mut [T]) + Sync + Send,
    {
        use rayon::prelude::*;
        let tag = self.tag;
        data.par_chunks_mut(chunk_len.max(1)).enumerate().for_each(|(i, chunk)| task_tag::with(tag, || f(i, chunk)));
    }

    /// Maps `f` over `0..n` in parallel and collects the results in order; all the work is
    /// charged to this task.
    pub fn par_map<R, F>(&self, n: usize, f: F) -> Vec<R>
    where
        R: Send,
        F: Fn(usize) -> R + Sync + Send,
    {
        use rayon::prelude::*;
        let tag = self.tag;
        (0..n).into_par_iter().map(|i| task_tag::with(tag, || f(i))).collect()
    }
}
