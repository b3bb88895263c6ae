//! External commands a task runs through the engine ([`TaskContext::command`]): the command's
//! whole process tree is part of the task — admitted against the budget, measured exactly,
//! killed on timeout or interruption — and what it prints is kept in a log file.
//!
//! [`TaskContext::command`]: crate::TaskContext::command

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::TaskError;

/// What to run: an argv (no shell), environment additions, and optional limits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandSpec {
    /// The program and its arguments. The program is looked up in `PATH` when it has no `/`.
    pub argv: Vec<OsString>,
    /// Variables added to (or replacing in) the runner's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Where stdout and stderr are appended; `None` lets the engine choose (one log file per
    /// task, named in failures and in the task's record).
    pub log_path: Option<PathBuf>,
    /// Kill the process tree when its memory reaches this many bytes (an out-of-memory failure).
    pub memory_limit: Option<u64>,
    /// Kill the process tree after this long. The step's own `timeout:` applies as well.
    pub timeout: Option<Duration>,
}

impl CommandSpec {
    /// A command from its argv; the first item is the program.
    pub fn new<I, S>(argv: I) -> CommandSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        CommandSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            log_path: None,
            memory_limit: None,
            timeout: None,
        }
    }

    /// Adds an environment variable (builder style).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> CommandSpec {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Appends the command's output to `path` instead of the engine's per-task log.
    pub fn log_path(mut self, path: impl Into<PathBuf>) -> CommandSpec {
        self.log_path = Some(path.into());
        self
    }

    /// Kills the process tree once its memory reaches `bytes`.
    pub fn memory_limit(mut self, bytes: u64) -> CommandSpec {
        self.memory_limit = Some(bytes);
        self
    }

    /// Kills the process tree after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> CommandSpec {
        self.timeout = Some(timeout);
        self
    }

    /// The argv as one line for messages: items with spaces or quotes are quoted.
    pub fn display(&self) -> String {
        display_argv(&self.argv)
    }
}

/// The argv as one line for messages: items with spaces, quotes or nothing in them are quoted
/// the way a POSIX shell would need them.
pub fn display_argv(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let text = a.to_string_lossy();
            let plain =
                !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@{}".contains(c));
            if plain { text.into_owned() } else { format!("'{}'", text.replace('\'', r"'\''")) }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a command ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandExit {
    /// It exited with this status.
    Code(i32),
    /// A signal (not sent by the engine) ended it.
    Signal(i32),
}

impl CommandExit {
    pub fn success(self) -> bool {
        self == CommandExit::Code(0)
    }
}

impl fmt::Display for CommandExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandExit::Code(code) => write!(f, "exited with status {code}"),
            CommandExit::Signal(signal) => write!(f, "was killed by signal {signal} ({})", signal_name(*signal)),
        }
    }
}

/// The conventional name of a Linux signal number, e.g. `SIGKILL`.
pub fn signal_name(signal: i32) -> &'static str {
    const NAMES: [&str; 32] = [
        "signal 0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal).ok().and_then(|s| NAMES.get(s)).copied().unwrap_or("a real-time signal")
}

/// How the peak of a command's process tree was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandPeakSource {
    /// A memory cgroup of the command's own: the tree's resident bytes sampled from the cgroup,
    /// never below the largest process's own peak (`wait4`'s `ru_maxrss`).
    Cgroup,
    /// No cgroup could be made: the largest process's `ru_maxrss` from `wait4`, and the tree's
    /// resident bytes sampled from `/proc`.
    Wait4Sampled,
}

/// A command that ran to its end by itself (whatever its exit status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandOutcome {
    /// The argv as one line, for messages.
    pub command: String,
    pub exit: CommandExit,
    /// The process tree's resident bytes at their highest.
    pub peak_bytes: u64,
    pub peak_source: CommandPeakSource,
    /// The file holding its stdout and stderr.
    pub log_path: PathBuf,
    pub wall: Duration,
    /// The end of its stderr: at most the last 20 lines and 4 KiB.
    pub stderr_tail: String,
}

impl CommandOutcome {
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        command: String,
        exit: CommandExit,
        peak_bytes: u64,
        peak_source: CommandPeakSource,
        log_path: PathBuf,
        wall: Duration,
        stderr_tail: String,
    ) -> CommandOutcome {
        CommandOutcome { command, exit, peak_bytes, peak_source, log_path, wall, stderr_tail }
    }

    /// True when it exited with status 0.
    pub fn success(&self) -> bool {
        self.exit.success()
    }

    /// Itself when it exited with status 0, else a [`TaskError`] saying how it ended, with the
    /// tail of its stderr and where the whole log is.
    pub fn check(self) -> Result<CommandOutcome, TaskError> {
        if self.success() {
            return Ok(self);
        }
        Err(TaskError::msg(failure_text(
            &format!("command `{}` {}", self.command, self.exit),
            &self.stderr_tail,
            &self.log_path,
        )))
    }
}

/// A failure message: what happened, then the tail of stderr (or that it printed nothing), then
/// where the whole log is.
pub fn failure_text(what: &str, stderr_tail: &str, log_path: &Path) -> String {
    let tail = stderr_tail.trim_end();
    if tail.is_empty() {
        format!("{what}; it printed nothing on stderr (log: {})", log_path.display())
    } else {
        let indented: Vec<String> = tail.lines().map(|l| format!("  | {l}")).collect();
        format!("{what}; the end of its stderr:\n{}\n(log: {})", indented.join("\n"), log_path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_display_quotes_what_a_shell_would_split() {
        let spec = CommandSpec::new(["python3", "tools/a b.py", "--x=1", "it's", ""]);
        assert_eq!(spec.display(), r#"python3 'tools/a b.py' --x=1 'it'\''s' ''"#);
    }

    #[test]
    fn failed_outcome_says_how_with_stderr_tail_and_log() {
        let outcome = CommandOutcome::new(
            "python3 x.py".into(),
            CommandExit::Code(3),
            1 << 20,
            CommandPeakSource::Cgroup,
            PathBuf::from("logs/x.log"),
            Duration::from_millis(5),
            "Traceback\nValueError: bad\n".into(),
        );
        let error = outcome.check().unwrap_err();
        assert_eq!(
            error.message(),
            "command `python3 x.py` exited with status 3; the end of its stderr:\n  | Traceback\n  | ValueError: bad\n(log: logs/x.log)"
        );
        assert_eq!(CommandExit::Signal(9).to_string(), "was killed by signal 9 (SIGKILL)");
        assert_eq!(
            failure_text("it failed", "", Path::new("l.log")),
            "it failed; it printed nothing on stderr (log: l.log)"
        );
    }
}
