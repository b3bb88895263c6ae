//! External commands run as part of a task: one command's whole process tree, measured exactly,
//! killed reliably, its output kept in a bounded log file.
//!
//! [`run`] spawns an argv (no shell) in the runner's working directory, with environment
//! additions, stdin from `/dev/null`, stdout and stderr relayed into the task's log file
//! ([`log`]: capped at `--log-limit`, head and tail kept; stderr's tail kept for error
//! messages). The child is started without copying the runner ([`spawn`]: `vfork`-style, so
//! nothing of the runner's memory is ever the command's), in a process group of its own, with
//! `SIGKILL` should the runner's thread die (`PR_SET_PDEATHSIG`), and — where the process may
//! make memory cgroups ([`support`]) — in a fresh memory cgroup entered before exec, so every
//! process it starts is in it from its first page.
//!
//! **Measured** ([`watch`]): the tree's resident bytes (anonymous + shared memory, not page
//! cache nor file pages: a `dd` of a 500 MiB file does not read as 500 MiB, nor do a Python's
//! shared libraries), sampled every [`SAMPLE_INTERVAL`] from the cgroup's `memory.stat` — or,
//! with no cgroup, summed over the tree's processes from `/proc` — and published for the memory
//! ledger in [`crate::measure::external`] while the command runs. The recorded peak is the
//! larger of the sampled peak and the largest process's own anonymous + shared high-water
//! mark, so that a spike between two samples is not missed. `ru_maxrss` and the cgroup's own
//! peak (page cache included) are kept for diagnosis.
//!
//! **Killed**: the whole tree — through the cgroup (`cgroup.kill` on v2, every pid of
//! `cgroup.procs` until it is empty on v1), through the process group, and through the
//! processes seen in the tree — on timeout, on cancellation, when a memory limit is reached
//! without a cgroup to enforce it, and when [`kill_all`] runs (the CLI calls it on Ctrl-C and
//! SIGTERM, just before the process exits; a command it killed never returns). Processes the
//! command leaves behind when it exits (a daemon) are killed too, and those of a runner that
//! was killed are killed by the next one to start commands (their cgroups outlive it).
//! Without a cgroup, a process that detaches itself (setsid + double fork) within one sampling
//! interval cannot be found; with one, nothing escapes.
//!
//! **Out of memory**: with a memory limit and a cgroup, the kernel enforces the limit; an OOM
//! kill is recognised from `memory.oom_control` / `memory.events`, or from a `SIGKILL` with the
//! cgroup at its limit.

mod cgroup;
mod log;
mod orphans;
mod registry;
pub mod service;
mod spawn;
mod tree;
mod tree_peak;
mod watch;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runner_plugin::command::{display_argv, failure_text};
use runner_plugin::size::format_size;
use runner_plugin::{CommandExit, FailureKind, TaskError};

pub use cgroup::CgroupVersion;
pub use log::{file_name_of, log_limit, set_log_limit, task_log_path};
pub use registry::kill_all;
pub use tree_peak::{reset_tree_peak, tree_peak};
pub use watch::SAMPLE_INTERVAL;

use crate::measure::{PeakSource, external};
use cgroup::TaskCgroup;
use log::Log;
use watch::Watch;

/// What a task's host passes on when a plugin runs a [`runner_plugin::CommandSpec`]: where its
/// log goes unless the spec says, the step's timeout, the memory limit (`--enforce-memory`),
/// the task's measurement tag, and its cancellation.
pub struct TaskCommand<'a> {
    pub default_log: PathBuf,
    /// The step's timeout, counted from `started` (the task's start).
    pub timeout: Option<Duration>,
    pub started: Instant,
    pub limit: Option<u64>,
    /// What the task reserved, when its processes may be preempted to hold the budget; 0: never.
    pub reserved: u64,
    pub tag: u32,
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
}

/// What one command of a task measured, for the task's record.
#[derive(Debug, Clone)]
pub struct CommandMeasured {
    pub peak: u64,
    pub source: PeakSource,
    pub log_path: PathBuf,
    /// How long the task waited for its service (an interpreter) to be started or warmed up
    /// for it; zero for a command, which starts at once.
    pub waited: Duration,
}

/// Runs a plugin's command `spec` as part of `task`: killed at the sooner of the spec's and the
/// task's timeout or when it is cancelled. `measured` hears what the tree measured (also when
/// the command fails); the plugin gets the [`runner_plugin::CommandOutcome`].
pub fn run_for_task(
    spec: &runner_plugin::CommandSpec,
    task: &TaskCommand<'_>,
    mut measured: impl FnMut(&CommandMeasured),
) -> Result<runner_plugin::CommandOutcome, TaskError> {
    let log_path = spec.log_path.clone().unwrap_or_else(|| task.default_log.clone());
    measured(&CommandMeasured {
        peak: 0,
        source: PeakSource::Cgroup,
        log_path: log_path.clone(),
        waited: Duration::ZERO,
    });
    // Whichever ends sooner: the command's own timeout from now, or the task's from its start.
    let now = Instant::now();
    let (timeout, timeout_from) = match (spec.timeout, task.timeout) {
        (Some(own), Some(step)) if now + own < task.started + step => (Some(own), None),
        (_, Some(step)) => (Some(step), Some(task.started)),
        (own, None) => (own, None),
    };
    let request = Request {
        argv: &spec.argv,
        env: &spec.env,
        log_path: &log_path,
        memory_limit: spec.memory_limit.or(task.limit),
        timeout,
        timeout_from,
        log_limit: log_limit(),
        tag: task.tag,
        reserved: task.reserved,
        cancelled: task.cancelled,
        isolation: Isolation::Auto,
    };
    let finished = run(&request).map_err(|e| TaskError::msg(e.to_string()))?;
    measured(&CommandMeasured {
        peak: finished.peak_bytes,
        source: finished.peak_source,
        log_path: log_path.clone(),
        waited: Duration::ZERO,
    });
    let exit = finished.exit()?;
    let source = match finished.peak_source {
        PeakSource::Cgroup => runner_plugin::CommandPeakSource::Cgroup,
        _ => runner_plugin::CommandPeakSource::Wait4Sampled,
    };
    Ok(runner_plugin::CommandOutcome::new(
        finished.command,
        exit,
        finished.peak_bytes,
        source,
        finished.log_path,
        finished.wall,
        finished.stderr_tail,
    ))
}

/// Whether a command may get a cgroup of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// A cgroup where the process can make one ([`support`]), else `wait4` and `/proc`.
    #[default]
    Auto,
    /// Never a cgroup: `wait4` and `/proc` sampling (the fallback, forced).
    NoCgroup,
}

/// What [`run`] runs.
pub struct Request<'a> {
    /// The program (looked up in `PATH` when it has no `/`) and its arguments.
    pub argv: &'a [OsString],
    /// Added to the runner's environment.
    pub env: &'a [(OsString, OsString)],
    /// stdout and stderr are appended here (parent folders created).
    pub log_path: &'a Path,
    /// The tree is killed when its memory reaches this (an out-of-memory ending).
    pub memory_limit: Option<u64>,
    /// The tree is killed after this long.
    pub timeout: Option<Duration>,
    /// What `timeout` counts from: the command's start unless given (a task's start).
    pub timeout_from: Option<Instant>,
    /// The most of the command's output its log keeps (`log_limit()` unless set).
    pub log_limit: u64,
    /// The task whose external bytes are published while it runs (`measure::external::set`);
    /// `task_tag::NO_TASK` publishes nothing.
    pub tag: u32,
    /// What the task reserved, when the command may be preempted to hold the budget
    /// (`measure::preempt`); 0: never.
    pub reserved: u64,
    /// Polled while the command runs: true kills the tree (a cancelled ending).
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
    pub isolation: Isolation,
}

impl<'a> Request<'a> {
    /// A request with no environment additions, limit, timeout, task or cancellation.
    pub fn new(argv: &'a [OsString], log_path: &'a Path) -> Request<'a> {
        Request {
            argv,
            env: &[],
            log_path,
            memory_limit: None,
            timeout: None,
            timeout_from: None,
            log_limit: log_limit(),
            tag: runner_plugin::task_tag::NO_TASK,
            reserved: 0,
            cancelled: &|| false,
            isolation: Isolation::Auto,
        }
    }
}

/// Why a command or service was stopped to keep the budget.
pub(crate) fn preempted_text(what: &str, held: u64, reserved: u64) -> String {
    format!(
        "{what} was preempted: the run went over its memory budget while it held {}, more than the {} its task reserved; the task runs again with at least that reserved",
        format_size(held),
        format_size(reserved)
    )
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// By itself, with this status (or a signal nobody in the runner sent).
    Exited(CommandExit),
    /// Killed at its memory limit: by the kernel (in its cgroup), or by the runner (no cgroup).
    OutOfMemory { limit: Option<u64> },
    /// Killed at its timeout.
    TimedOut { after: Duration },
    /// Killed because the caller cancelled it.
    Cancelled,
    /// Killed to keep the run within its budget, holding more than its task reserved.
    Preempted { reserved: u64 },
}

/// A command that has ended, however, with what it measured.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The argv as one line.
    pub command: String,
    pub ending: Ending,
    /// The tree's peak: max(sampled resident peak, largest process's own anonymous + shared
    /// peak).
    pub peak_bytes: u64,
    pub peak_source: PeakSource,
    /// The highest sampled resident bytes of the tree.
    pub sampled_peak: u64,
    /// The largest process's anonymous + shared peak (`VmHWM − RssFile`, see `command::watch`).
    pub largest_process: u64,
    /// `ru_maxrss` from `wait4`, file pages included: the largest single process of the tree
    /// that was waited for (for diagnosis).
    pub max_rss: u64,
    /// The cgroup's own peak usage, page cache included.
    pub cgroup_peak: Option<u64>,
    pub wall: Duration,
    /// The last lines of stderr (at most 20 lines and 4 KiB).
    pub stderr_tail: String,
    /// Processes still running when the command's own process ended, which were killed.
    pub leftovers_killed: usize,
    pub log_path: PathBuf,
}

impl Finished {
    /// True when it exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.ending == Ending::Exited(CommandExit::Code(0))
    }

    /// How it exited when it ended by itself (its status is the caller's to judge); otherwise
    /// the task failure its ending is, with its kind.
    pub fn exit(&self) -> Result<CommandExit, TaskError> {
        let command = &self.command;
        let (kind, what) = match self.ending {
            Ending::Exited(exit) => return Ok(exit),
            Ending::OutOfMemory { limit } => {
                let limit = limit.map_or(String::new(), |l| format!(" (limit {})", format_size(l)));
                (
                    FailureKind::OutOfMemory,
                    format!("command `{command}` ran out of memory at {}{limit}", format_size(self.peak_bytes)),
                )
            }
            Ending::TimedOut { after } => (
                FailureKind::TimedOut,
                format!("command `{command}` timed out after {}: its process tree was killed", format_duration(after)),
            ),
            Ending::Cancelled => {
                (FailureKind::Cancelled, format!("command `{command}` was cancelled: its process tree was killed"))
            }
            Ending::Preempted { reserved } => {
                (FailureKind::Preempted, preempted_text(&format!("command `{command}`"), self.peak_bytes, reserved))
            }
        };
        Err(TaskError::of_kind(kind, failure_text(&what, &self.stderr_tail, &self.log_path)))
    }

    /// The task failure this ending is; `None` for a command that ended by itself.
    pub fn failure(&self) -> Option<TaskError> {
        self.exit().err()
    }
}

/// Why a command could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("no command to run: the argv is empty")]
    EmptyArgv,
    #[error("cannot open the command's log file {}: {source}", path.display())]
    Log { path: PathBuf, source: io::Error },
    #[error("cannot start `{program}`: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("cannot make a pipe for the command's output: {0}")]
    Pipe(io::Error),
    #[error("cannot reap the command's process {pid}: {source}")]
    Lost { pid: i32, source: io::Error },
}

/// Which cgroup version commands run under in this process, or why they run without one.
/// Detected once per process (and stale cgroups of killed runners removed then).
pub fn support() -> Result<CgroupVersion, &'static str> {
    cgroup::hierarchy().map(|h| h.version)
}

/// Kills what runners that were killed left running: their cgroups' processes (emptied and
/// removed when this process first looks at the hierarchy) and, cgroup or not, every process
/// whose environment names a runner that is gone ([`orphans`]). Returns how many processes
/// the second found.
pub fn kill_what_killed_runners_left() -> usize {
    let _ = support();
    orphans::kill_orphans()
}

/// Runs a command to its end and measures it; see the module documentation.
pub fn run(request: &Request<'_>) -> Result<Finished, CommandError> {
    let program = request.argv.first().ok_or(CommandError::EmptyArgv)?;
    let command = display_argv(request.argv);
    let mut log = Log::open(request.log_path, request.log_limit)
        .map_err(|source| CommandError::Log { path: request.log_path.to_path_buf(), source })?;
    log.line(&log::header_line(&command));
    let cgroup = make_cgroup(request);
    let (stdout_read, stdout_write) = watch::pipe().map_err(CommandError::Pipe)?;
    let (stderr_read, stderr_write) = watch::pipe().map_err(CommandError::Pipe)?;
    let started = Instant::now();
    let stdio = spawn::Stdio { stdin: None, stdout: &stdout_write, stderr: &stderr_write, control: None };
    let spawned = spawn::spawn(request.argv, request.env, stdio, cgroup.as_ref().map(TaskCgroup::procs_fd));
    // The child has its own copies: the pipes end when it (and what it starts) close them.
    drop((stdout_write, stderr_write));
    let pid = match spawned {
        Ok(pid) => pid,
        Err(source) => {
            let error = CommandError::Spawn { program: program.to_string_lossy().into_owned(), source };
            log.line(&format!("--- runner: {error} ---"));
            return Err(error);
        }
    };
    let mut watch = Watch::new(pid, cgroup.as_ref(), stdout_read, stderr_read, log, request.tag);
    let registration =
        registry::register(pid, cgroup.as_ref().map(|c| (c.dir.clone(), c.version())), request.log_path.into());
    if registration.is_none() {
        // Spawned just as `kill_all` ran: the process is exiting.
        watch.kill();
        watch.log.line("--- runner: killed: the run was interrupted ---");
        registry::wait_for_exit();
    }
    let reason = watch.until_exit(request, started);
    let leftovers_killed = if reason.is_none() { watch.kill_leftovers() } else { 0 };
    // Deregistered before the root is reaped: until then its pid cannot be recycled.
    drop(registration);
    let rusage = watch.reap();
    let wall = started.elapsed();
    watch.drain_output();
    external::clear(request.tag);
    let (status, rusage) = rusage.map_err(|source| CommandError::Lost { pid, source })?;
    let exit = exit_of(status);
    let max_rss = rusage.ru_maxrss.max(0) as u64 * 1024;
    let cgroup_peak = cgroup.as_ref().and_then(TaskCgroup::peak);
    let ending = reason.unwrap_or_else(|| judge(exit, cgroup.as_ref(), request.memory_limit, cgroup_peak));
    let sampled_peak = watch.sampled_peak;
    let largest_process = watch.largest_process();
    // Not `ru_maxrss`: it counts the file pages of every library mapped (see `watch`).
    let mut peak_bytes = sampled_peak.max(largest_process);
    if let (Some(cgroup), Some(cgroup_peak)) = (&cgroup, cgroup_peak)
        && !cgroup.reached_limit()
    {
        // A spike in the last samples before the exit, which neither figure saw: the cgroup's
        // peak usage less the page cache it holds now. While the tree's page cache only grows,
        // that is at most the tree's anonymous + shared peak (the page cache counts shared
        // memory too), so it never counts a library's pages. Not once usage reached the
        // cgroup's limit: the kernel then reclaims its cache, and what it reclaimed would read
        // as the command's.
        peak_bytes = peak_bytes.max(cgroup_peak.saturating_sub(cgroup.page_cache().unwrap_or(u64::MAX)));
    }
    if let (Ending::OutOfMemory { .. }, Some(cgroup_peak)) = (ending, cgroup_peak) {
        // It needed at least what the cgroup held when the kernel killed it.
        peak_bytes = peak_bytes.max(cgroup_peak);
    }
    let peak_source = if cgroup.is_some() { PeakSource::Cgroup } else { PeakSource::Wait4Sampled };
    let finished = Finished {
        command,
        ending,
        peak_bytes,
        peak_source,
        sampled_peak,
        largest_process,
        max_rss,
        cgroup_peak,
        wall,
        stderr_tail: watch.stderr_tail(),
        leftovers_killed,
        log_path: request.log_path.to_path_buf(),
    };
    watch.write_footer(&finished);
    Ok(finished)
}

/// A cgroup for the command when the request and the process allow one; a cgroup that cannot
/// be made is a warning and the command is measured without.
fn make_cgroup(request: &Request<'_>) -> Option<TaskCgroup> {
    if request.isolation == Isolation::NoCgroup {
        return None;
    }
    let hierarchy = cgroup::hierarchy().ok()?;
    TaskCgroup::create(hierarchy, request.memory_limit)
        .map_err(|e| tracing::warn!("cannot make a cgroup for a command under {}: {e}", hierarchy.parent.display()))
        .ok()
}

/// Decides how a command that ended by itself ended: an OOM kill in its cgroup, or its status.
fn judge(exit: CommandExit, cgroup: Option<&TaskCgroup>, limit: Option<u64>, cgroup_peak: Option<u64>) -> Ending {
    let Some(cgroup) = cgroup else { return Ending::Exited(exit) };
    let oom_killed = cgroup.oom_kills().is_some_and(|n| n > 0);
    // Kernels without an `oom_kill` count: a SIGKILL with the cgroup at its limit.
    let at_limit = matches!((limit, cgroup_peak), (Some(l), Some(p)) if p + (256 << 10) >= l);
    if oom_killed || (exit == CommandExit::Signal(libc::SIGKILL) && at_limit) {
        return Ending::OutOfMemory { limit: cgroup.limit };
    }
    if exit == CommandExit::Signal(libc::SIGKILL) && registry::is_closed() {
        // Killed by `kill_all`: the process is exiting.
        registry::wait_for_exit();
    }
    Ending::Exited(exit)
}

fn exit_of(status: i32) -> CommandExit {
    if libc::WIFSIGNALED(status) {
        CommandExit::Signal(libc::WTERMSIG(status))
    } else {
        CommandExit::Code(libc::WEXITSTATUS(status))
    }
}

/// `850 ms`, `2 s`, `2.35 s`, `10m 0s`.
fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{} ms", d.as_millis())
    } else if secs < 60.0 && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else if secs < 60.0 {
        format!("{secs:.2} s")
    } else {
        format!("{}m {}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2 s");
        assert_eq!(format_duration(Duration::from_millis(2346)), "2.35 s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m 0s");
    }
}
