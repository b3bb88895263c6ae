//! Errors a plugin reports: bad arguments at compile time, failures at run time.

use std::fmt;

/// An argument a plugin rejects. The engine turns it into a recipe error that points at the
/// argument's place in the YAML file, so `arg` should name the offending argument when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArgError {
    /// The argument at fault (`None` when the problem is the combination or the inputs).
    pub arg: Option<String>,
    /// What is wrong and what was expected, e.g. "`radius` must be a positive integer, got -1".
    pub message: String,
}

impl ArgError {
    /// An error about one named argument.
    pub fn new(arg: impl Into<String>, message: impl Into<String>) -> Self {
        ArgError { arg: Some(arg.into()), message: message.into() }
    }

    /// An error about the inputs or the arguments as a whole.
    pub fn general(message: impl Into<String>) -> Self {
        ArgError { arg: None, message: message.into() }
    }
}

/// What kind of failure a [`TaskError`] is: the engine reacts to some kinds (a step's
/// `on_missing`, a retry with a larger reservation), and reports every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailureKind {
    /// Any other failure.
    #[default]
    Error,
    /// An input the task reads (a file named in its args) does not exist: the step's
    /// `on_missing` decides whether that fails the task, skips it or drops it from gathers.
    MissingInput,
    /// The task (or the process tree it ran) ran out of memory: a retry gets a larger reservation.
    OutOfMemory,
    /// The task ran past its step's `timeout`.
    TimedOut,
    /// The run was interrupted or aborted while the task ran.
    Cancelled,
    /// The run went over its memory budget while the task's commands held more than it
    /// reserved: it was stopped to keep the budget, and runs again with a reservation
    /// grown past what it was measured at (not counted against `retries`).
    Preempted,
}

/// Why a task failed. Any `std::error::Error` converts into it, so plugins can use `?` freely.
///
/// Like `anyhow::Error`, it deliberately does not implement `std::error::Error` itself: that is
/// what lets the blanket `From` impl exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    message: String,
    kind: FailureKind,
}

impl TaskError {
    /// A failure described in words.
    pub fn msg(message: impl Into<String>) -> Self {
        TaskError { message: message.into(), kind: FailureKind::Error }
    }

    /// A failure of a given kind.
    pub fn of_kind(kind: FailureKind, message: impl Into<String>) -> Self {
        TaskError { message: message.into(), kind }
    }

    /// An input the task needs is not there, e.g. `no file work/a.nc` (see [`FailureKind::MissingInput`]).
    pub fn missing(message: impl Into<String>) -> Self {
        Self::of_kind(FailureKind::MissingInput, message)
    }

    /// The failure's description.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn kind(&self) -> FailureKind {
        self.kind
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for TaskError {
    fn from(error: E) -> Self {
        // Keep the whole chain: "reading x.npy: permission denied" beats "permission denied".
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        TaskError { message, kind: FailureKind::Error }
    }
}
