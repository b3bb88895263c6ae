//! External commands run as part of a task: one command's whole process tree, measured exactly,
//! killed reliably, its output kept in a log file.
//!
//! [`run`] spawns an argv (no shell) in the runner's working directory, with environment
//! additions, stdin from `/dev/null`, stdout appended to the task's log file and stderr relayed
//! into the same file (keeping its tail for error messages). The child gets a process group of
//! its own, `SIGKILL` should the runner's thread die (`PR_SET_PDEATHSIG`), and — where the
//! process may make memory cgroups ([`support`]) — a fresh memory cgroup, entered between
//! fork and exec, so every process it starts is in it from its first page.
//!
//! **Measured**: the tree's resident bytes (anonymous + shared memory, not page cache: a `dd`
//! of a 500 MiB file does not read as 500 MiB), sampled every [`SAMPLE_INTERVAL`] from the
//! cgroup's `memory.stat` — or, with no cgroup, summed over the tree's processes from `/proc` —
//! and published for the memory ledger in [`crate::measure::external`] while the command runs.
//! The recorded peak is the larger of the sampled peak and `wait4`'s `ru_maxrss` (exact for the
//! largest single process, so a spike between two samples of a one-process command is never
//! missed). The cgroup's own peak (page cache included) is kept for diagnosis.
//!
//! **Killed**: the whole tree — through the cgroup (`cgroup.kill` on v2, every pid of
//! `cgroup.procs` until it is empty on v1), through the process group, and through the
//! processes seen in the tree — on timeout, on cancellation, when a memory limit is reached
//! without a cgroup to enforce it, and when [`kill_all`] runs (the CLI calls it on Ctrl-C and
//! SIGTERM, just before the process exits; a command it killed never returns). Processes the command leaves behind when it exits (a daemon) are killed too.
//! Without a cgroup, a process that detaches itself (setsid + double fork) within one sampling
//! interval cannot be found; with one, nothing escapes.
//!
//! **Out of memory**: with a memory limit and a cgroup, the kernel enforces the limit; an OOM
//! kill is recognised from `memory.oom_control` / `memory.events`, or from a `SIGKILL` with the
//! cgroup at its limit.

mod cgroup;
mod registry;
pub mod service;
mod tree;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use runner_plugin::command::{display_argv, failure_text};
use runner_plugin::size::format_size;
use runner_plugin::{CommandExit, FailureKind, TaskError};

pub use cgroup::CgroupVersion;
pub use registry::kill_all;

use crate::measure::{PeakSource, external};
use cgroup::TaskCgroup;
use tree::Tree;

/// What a task's host passes on when a plugin runs a [`runner_plugin::CommandSpec`]: where its
/// log goes unless the spec says, the step's timeout, the memory limit (`--enforce-memory`),
/// the task's measurement tag, and its cancellation.
pub struct TaskCommand<'a> {
    pub default_log: PathBuf,
    pub timeout: Option<Duration>,
    pub limit: Option<u64>,
    pub tag: u32,
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
}

/// What one command of a task measured, for the task's record.
#[derive(Debug, Clone)]
pub struct CommandMeasured {
    pub peak: u64,
    pub source: PeakSource,
    pub log_path: PathBuf,
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
    measured(&CommandMeasured { peak: 0, source: PeakSource::Cgroup, log_path: log_path.clone() });
    let timeout = match (spec.timeout, task.timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let request = Request {
        argv: &spec.argv,
        env: &spec.env,
        log_path: &log_path,
        memory_limit: spec.memory_limit.or(task.limit),
        timeout,
        tag: task.tag,
        cancelled: task.cancelled,
        isolation: Isolation::Auto,
    };
    let finished = run(&request).map_err(|e| TaskError::msg(e.to_string()))?;
    measured(&CommandMeasured { peak: finished.peak_bytes, source: finished.peak_source, log_path: log_path.clone() });
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

/// How often a running command's memory is sampled: short enough to catch a spike of a tenth
/// of a second many times over, cheap enough (one read of `memory.stat`, ~20 µs) to cost
/// nothing beside the command.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// How long a killed command may take to die before the runner stops waiting for it.
const DEATH_PATIENCE: Duration = Duration::from_secs(10);
/// How long stderr is read after the command ended, for a process that still holds it.
const DRAIN_PATIENCE: Duration = Duration::from_millis(200);
/// Most of stderr kept for error messages: the last lines, within the last bytes.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: usize = 4096;

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
    /// The task whose external bytes are published while it runs ([`external::set`]);
    /// `task_tag::NO_TASK` publishes nothing.
    pub tag: u32,
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
            tag: runner_plugin::task_tag::NO_TASK,
            cancelled: &|| false,
            isolation: Isolation::Auto,
        }
    }
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
}

/// A command that has ended, however, with what it measured.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The argv as one line.
    pub command: String,
    pub ending: Ending,
    /// The tree's peak: max(sampled resident peak, largest process's `ru_maxrss`).
    pub peak_bytes: u64,
    pub peak_source: PeakSource,
    /// The highest sampled resident bytes of the tree.
    pub sampled_peak: u64,
    /// `ru_maxrss` from `wait4`: the largest single process of the tree that was waited for.
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
    #[error("cannot make a pipe for the command's stderr: {0}")]
    Pipe(io::Error),
    #[error("cannot reap the command's process {pid}: {source}")]
    Lost { pid: i32, source: io::Error },
}

/// Which cgroup version commands run under in this process, or why they run without one.
/// Detected once per process (and stale cgroups of killed runners removed then).
pub fn support() -> Result<CgroupVersion, &'static str> {
    cgroup::hierarchy().map(|h| h.version)
}

/// Runs a command to its end and measures it; see the module documentation.
pub fn run(request: &Request<'_>) -> Result<Finished, CommandError> {
    let program = request.argv.first().ok_or(CommandError::EmptyArgv)?;
    let command = display_argv(request.argv);
    let mut log = open_log(request.log_path)?;
    let _ =
        writeln!(log, "--- runner: {command} (started {}) ---", chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"));
    let cgroup = make_cgroup(request);
    let (stderr_read, stderr_write) = pipe().map_err(CommandError::Pipe)?;
    let started = Instant::now();
    let pid = match spawn(request, program, &log, stderr_write, cgroup.as_ref()) {
        Ok(pid) => pid,
        Err(error) => {
            let _ = writeln!(log, "--- runner: {error} ---");
            return Err(error);
        }
    };
    let mut watch = Watch::new(pid, cgroup.as_ref(), stderr_read, log, request.tag);
    let registration =
        registry::register(pid, cgroup.as_ref().map(|c| (c.dir.clone(), c.version())), request.log_path.into());
    if registration.is_none() {
        // Spawned just as `kill_all` ran: the process is exiting.
        watch.kill();
        let _ = writeln!(watch.log, "--- runner: killed: the run was interrupted ---");
        registry::wait_for_exit();
    }
    let reason = watch.until_exit(request, started);
    let leftovers_killed = if reason.is_none() { watch.kill_leftovers() } else { 0 };
    // Deregistered before the root is reaped: until then its pid cannot be recycled.
    drop(registration);
    let rusage = watch.reap();
    let wall = started.elapsed();
    watch.drain_stderr();
    external::clear(request.tag);
    let (status, rusage) = rusage.map_err(|source| CommandError::Lost { pid, source })?;
    let exit = exit_of(status);
    let max_rss = rusage.ru_maxrss.max(0) as u64 * 1024;
    let cgroup_peak = cgroup.as_ref().and_then(TaskCgroup::peak);
    let ending = reason.unwrap_or_else(|| judge(exit, cgroup.as_ref(), request.memory_limit, cgroup_peak));
    let sampled_peak = watch.sampled_peak;
    let mut peak_bytes = sampled_peak.max(max_rss);
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
        max_rss,
        cgroup_peak,
        wall,
        stderr_tail: watch.tail.text(),
        leftovers_killed,
        log_path: request.log_path.to_path_buf(),
    };
    watch.write_footer(&finished);
    Ok(finished)
}

fn open_log(path: &Path) -> Result<File, CommandError> {
    let fail = |source| CommandError::Log { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    OpenOptions::new().create(true).append(true).open(path).map_err(fail)
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

fn pipe() -> io::Result<(File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; each is then owned exactly once.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fds from pipe2, owned by nobody else.
    let (read, write) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on an fd we own.
    unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((read, write))
}

/// Spawns the command in a process group of its own, in its cgroup when it has one.
fn spawn(
    request: &Request<'_>,
    program: &OsString,
    log: &File,
    stderr: OwnedFd,
    cgroup: Option<&TaskCgroup>,
) -> Result<i32, CommandError> {
    let fail = |source| CommandError::Spawn { program: program.to_string_lossy().into_owned(), source };
    let mut command = std::process::Command::new(program);
    command
        .args(&request.argv[1..])
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(fail)?)
        .stderr(Stdio::from(stderr))
        .process_group(0);
    let procs = cgroup.map(TaskCgroup::procs_fd);
    let parent = std::process::id() as i32;
    // SAFETY: `enter` makes only async-signal-safe calls (write, prctl, getppid) on plain
    // integers, as is required between fork and exec in a multi-threaded process.
    unsafe { command.pre_exec(move || enter(procs, parent)) };
    let child = command.spawn().map_err(fail)?;
    // The runner reaps the process itself with wait4 (for its rusage); dropping std's handle
    // neither waits nor kills. `command` drops here too, closing the parent's end of stderr.
    Ok(child.id() as i32)
}

/// In the child, between fork and exec: into the cgroup (so everything it will start is
/// counted from its first page), and killed if the runner's thread goes away.
fn enter(procs: Option<RawFd>, parent: i32) -> io::Result<()> {
    // SAFETY: plain system calls on integers and a static buffer.
    unsafe {
        if let Some(fd) = procs
            && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
        {
            return Err(io::Error::last_os_error());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        // The runner died before the line above: nobody would kill this process later.
        if libc::getppid() != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
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

/// What watches a running command: its exit, its memory, its stderr, its kill.
struct Watch<'c> {
    pid: i32,
    /// Readable when the process has exited (Linux ≥ 5.3); without it, exits are noticed at
    /// the next sample.
    pidfd: Option<OwnedFd>,
    /// The read end of stderr; `None` once every writer has closed it.
    stderr: Option<File>,
    log: File,
    tail: Tail,
    cgroup: Option<&'c TaskCgroup>,
    tree: Tree,
    stat: String,
    sampled_peak: u64,
    tag: u32,
    killed_at: Option<Instant>,
    /// Set once the root process is reaped: its pid may then belong to someone else.
    reaped: bool,
}

impl<'c> Watch<'c> {
    fn new(pid: i32, cgroup: Option<&'c TaskCgroup>, stderr: File, log: File, tag: u32) -> Watch<'c> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
        // SAFETY: a fresh fd owned by nobody else.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        Watch {
            pid,
            pidfd,
            stderr: Some(stderr),
            log,
            tail: Tail::default(),
            cgroup,
            tree: Tree::new(pid),
            stat: String::new(),
            sampled_peak: 0,
            tag,
            killed_at: None,
            reaped: false,
        }
    }

    /// Samples, relays stderr and enforces the timeout, cancellation and (without a cgroup) the
    /// memory limit until the root process has exited (it is not reaped yet). Returns why the
    /// runner killed it, if it did. Once [`kill_all`] has run, it never returns.
    fn until_exit(&mut self, request: &Request<'_>, started: Instant) -> Option<Ending> {
        let mut reason = None;
        let deadline = request.timeout.map(|t| started + t);
        let mut next_sample = Instant::now();
        loop {
            if Instant::now() >= next_sample {
                let resident = self.sample();
                next_sample = Instant::now() + SAMPLE_INTERVAL;
                if reason.is_none()
                    && self.cgroup.is_none()
                    && let Some(limit) = request.memory_limit
                    && resident >= limit
                {
                    self.kill();
                    reason = Some(Ending::OutOfMemory { limit: Some(limit) });
                }
            }
            if self.has_exited() {
                return reason;
            }
            if reason.is_none() {
                if (request.cancelled)() {
                    reason = Some(Ending::Cancelled);
                } else if deadline.is_some_and(|d| Instant::now() >= d) {
                    reason = Some(Ending::TimedOut { after: request.timeout.unwrap_or_default() });
                } else if registry::is_closed() {
                    // `kill_all` killed the tree: the process is exiting.
                    registry::wait_for_exit();
                }
                if reason.is_some() {
                    self.kill();
                }
            }
            if self.killed_at.is_some_and(|at| at.elapsed() > DEATH_PATIENCE) {
                tracing::warn!("command process {} did not die within {DEATH_PATIENCE:?} of SIGKILL", self.pid);
                return reason;
            }
            let mut wake = next_sample;
            if let Some(d) = deadline.filter(|_| reason.is_none()) {
                wake = wake.min(d);
            }
            self.wait_for_events(wake.saturating_duration_since(Instant::now()));
        }
    }

    /// The tree's resident bytes now, published for the ledger.
    fn sample(&mut self) -> u64 {
        let resident = match self.cgroup {
            Some(cgroup) => cgroup.resident(&mut self.stat).unwrap_or(0),
            None => self.tree.resident(),
        };
        self.sampled_peak = self.sampled_peak.max(resident);
        external::set(self.tag, resident);
        resident
    }

    /// Waits up to `timeout` for the process to exit or stderr to have something; relays it.
    fn wait_for_events(&mut self, timeout: Duration) {
        let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 2];
        if let Some(pidfd) = &self.pidfd {
            fds[0].fd = pidfd.as_raw_fd();
        }
        if let Some(stderr) = &self.stderr {
            fds[1].fd = stderr.as_raw_fd();
        }
        // Round up, so that a wait shorter than a millisecond is not a busy loop.
        let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of 2 pollfds; negative fds are ignored by poll.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis) };
        if ready > 0 && fds[1].revents != 0 {
            self.relay_stderr();
        }
    }

    /// Copies what stderr has now into the log and the tail; notices its end.
    fn relay_stderr(&mut self) {
        let Some(stderr) = &mut self.stderr else { return };
        let mut chunk = [0u8; 16 << 10];
        loop {
            match stderr.read(&mut chunk) {
                Ok(0) => {
                    self.stderr = None;
                    return;
                }
                Ok(n) => {
                    let _ = self.log.write_all(&chunk[..n]);
                    self.tail.push(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    /// Reads stderr to its end, for a short while at most (an escaped process may hold it).
    fn drain_stderr(&mut self) {
        let until = Instant::now() + DRAIN_PATIENCE;
        while self.stderr.is_some() && Instant::now() < until {
            let Some(stderr) = &self.stderr else { break };
            let mut fd = libc::pollfd { fd: stderr.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let millis = until.saturating_duration_since(Instant::now()).as_millis().max(1) as i32;
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut fd, 1, millis) } <= 0 {
                break;
            }
            self.relay_stderr();
        }
    }

    /// True once the root process has exited (still unreaped), or is gone altogether.
    fn has_exited(&self) -> bool {
        // SAFETY: siginfo_t is plain data; waitid fills it. WNOWAIT leaves the zombie in place.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            match libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags) {
                0 => info.si_pid() != 0,
                _ => io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD),
            }
        }
    }

    /// Kills the whole tree.
    fn kill(&mut self) {
        self.killed_at.get_or_insert_with(Instant::now);
        tree::signal_group(self.pid, libc::SIGKILL);
        match self.cgroup {
            Some(cgroup) => {
                cgroup.kill();
            }
            None => {
                self.tree.kill();
            }
        }
    }

    /// Kills what the command left running when its own process ended; returns how many.
    fn kill_leftovers(&mut self) -> usize {
        let killed = match self.cgroup {
            Some(cgroup) if !cgroup.pids().is_empty() => cgroup.kill(),
            Some(_) => 0,
            None if self.tree.leftovers() > 0 => self.tree.kill().saturating_sub(1),
            None => 0,
        };
        // Whatever is left in its process group (without a cgroup, the tree may have lost it).
        tree::signal_group(self.pid, libc::SIGKILL);
        killed
    }

    /// Reaps the root process, which has exited: its wait status and resource usage.
    fn reap(&mut self) -> io::Result<(i32, libc::rusage)> {
        // A process that did not die of SIGKILL (stuck in the kernel) is left; blocking on it
        // would hang the worker.
        let flags = if self.has_exited() { 0 } else { libc::WNOHANG };
        // SAFETY: wait4 writes the status and the rusage struct (plain data).
        unsafe {
            let mut status = 0;
            let mut usage: libc::rusage = std::mem::zeroed();
            loop {
                match libc::wait4(self.pid, &mut status, flags, &mut usage) {
                    pid if pid == self.pid => {
                        self.reaped = true;
                        return Ok((status, usage));
                    }
                    0 => return Err(io::Error::new(io::ErrorKind::TimedOut, "it did not die of SIGKILL")),
                    _ => {}
                }
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    self.reaped = error.raw_os_error() == Some(libc::ECHILD);
                    return Err(error);
                }
            }
        }
    }

    fn write_footer(&mut self, finished: &Finished) {
        let ending = match finished.ending {
            Ending::Exited(exit) => exit.to_string(),
            Ending::OutOfMemory { limit: Some(limit) } => format!("ran out of memory (limit {})", format_size(limit)),
            Ending::OutOfMemory { limit: None } => "ran out of memory".into(),
            Ending::TimedOut { after } => format!("timed out after {} and was killed", format_duration(after)),
            Ending::Cancelled => "was cancelled and killed".into(),
        };
        let mut how = format!(
            "sampled {}, largest process {}",
            format_size(finished.sampled_peak),
            format_size(finished.max_rss)
        );
        if let Some(peak) = finished.cgroup_peak {
            how.push_str(&format!(", cgroup with page cache {}", format_size(peak)));
        }
        if finished.leftovers_killed > 0 {
            how.push_str(&format!("; killed {} process(es) it left running", finished.leftovers_killed));
        }
        let _ = writeln!(
            self.log,
            "--- runner: {ending} after {}; peak {} ({}: {how}) ---",
            format_duration(finished.wall),
            format_size(finished.peak_bytes),
            finished.peak_source.as_str(),
        );
    }
}

impl Drop for Watch<'_> {
    /// A watch dropped before its command was reaped (a panic in between) kills the tree.
    fn drop(&mut self) {
        external::clear(self.tag);
        if !self.reaped && !self.has_exited() {
            self.kill();
        }
    }
}

/// The end of stderr.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
    /// Whether bytes before `bytes` were dropped.
    cut: bool,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > 2 * TAIL_BYTES {
            let excess = self.bytes.len() - TAIL_BYTES;
            self.bytes.drain(..excess);
            self.cut = true;
        }
    }

    /// The last [`TAIL_LINES`] lines within the last [`TAIL_BYTES`] bytes; a line cut short at
    /// its start begins with `…`.
    fn text(&self) -> String {
        let start = self.bytes.len().saturating_sub(TAIL_BYTES);
        let text = String::from_utf8_lossy(&self.bytes[start..]);
        let lines: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
        let first = lines.len().saturating_sub(TAIL_LINES);
        let mut out = String::new();
        let cut_mid_line = if start > 0 { self.bytes[start - 1] != b'\n' } else { self.cut };
        if first == 0 && cut_mid_line {
            out.push('…');
        }
        out.push_str(&lines[first..].join("\n"));
        out
    }
}

/// `850 ms`, `2.35 s`, `10m 0s`.
fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{} ms", d.as_millis())
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
    fn tail_keeps_the_last_lines_within_the_last_bytes() {
        let mut tail = Tail::default();
        for i in 0..100 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        let text = tail.text();
        assert_eq!(text.lines().count(), TAIL_LINES);
        assert!(text.starts_with("line 80\n") && text.ends_with("line 99"), "{text}");
        let mut long = Tail::default();
        long.push(&vec![b'x'; 10_000]);
        long.push(b"\nlast\n");
        let text = long.text();
        assert!(text.starts_with('…') && text.ends_with("\nlast"), "{}", &text[..10]);
        assert!(text.len() <= TAIL_BYTES + '…'.len_utf8());
        assert_eq!(Tail::default().text(), "");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(format_duration(Duration::from_millis(2346)), "2.35 s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m 0s");
    }
}
