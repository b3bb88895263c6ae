//! Watching a running command: its exit (a pidfd), its memory (sampled every
//! [`SAMPLE_INTERVAL`] and published for the ledger), its stdout and stderr (relayed into its
//! capped [`Log`], stderr's tail kept for error messages), and its kill.
//!
//! **Peak**: the tree's sampled resident anonymous + shared memory (the cgroup's `memory.stat`,
//! or the sum of `RssAnon + RssShmem` over the tree's processes), and — so that a spike between
//! two samples is not missed — each process's high-water mark less its file pages
//! (`VmHWM − RssFile` from `/proc/<pid>/status`, read every [`HWM_EVERY`] samples; `VmHWM` only
//! grows, so a spike is seen at the next read while the process lives). File pages only grow
//! in a process's life as a rule (libraries are mapped once), so this figure is at most its
//! true anonymous + shared peak: the recorded peak never counts shared-library pages, which
//! `ru_maxrss` would (~87 MiB for a Python with NumPy). A spike in a process's last
//! [`HWM_EVERY`] samples before it exits is seen, in a cgroup, as its peak usage less the page
//! cache it holds at the end (see `command::run`); without a cgroup it is missed.
//! `ru_maxrss` is kept for diagnosis.

use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use runner_plugin::size::format_size;

use super::cgroup::TaskCgroup;
use super::log::Log;
use super::tree::{self, Tree};
use super::{Ending, Finished, Request, format_duration, registry};
use crate::measure::external;

/// How often a running command's memory is sampled: short enough to catch a spike of a tenth
/// of a second many times over, cheap enough (one read of `memory.stat`, ~20 µs) to cost
/// nothing beside the command.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Every how many samples the processes' high-water marks are read (in a cgroup; without one
/// they are read at every sample, with the rest of `/proc/<pid>/status`): a spike in a
/// process's last 20 ms goes unseen (`ru_maxrss` cannot tell it: through the `vfork`-style
/// spawn it holds the runner's own peak, see `spawn`). Every 50 ms missed a 20 ms spike
/// before the exit of a NumPy tool under load.
pub const HWM_EVERY: u32 = 2;

/// How long a killed command may take to die before the runner stops waiting for it.
const DEATH_PATIENCE: Duration = Duration::from_secs(10);
/// How long output is waited for after the command ended, for a process that still holds it.
const DRAIN_PATIENCE: Duration = Duration::from_millis(200);
/// How long output already written is still read after that, for one that keeps writing.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// Most of stderr kept for error messages: the last lines, within the last bytes.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: usize = 4096;

/// A pipe: its read end (non-blocking, for the watch) and its write end (the child's).
pub(super) fn pipe() -> io::Result<(File, OwnedFd)> {
    let (read, write) = blocking_pipe()?;
    // SAFETY: fcntl on an fd we own.
    unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((File::from(read), write))
}

/// A pipe, both ends blocking and close-on-exec: `(read, write)`.
pub(super) fn blocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; each is then owned exactly once.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fds from pipe2, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Which of the command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// What watches a running command: its exit, its memory, its output, its kill.
pub(super) struct Watch<'c> {
    pid: i32,
    /// Readable when the process has exited (Linux ≥ 5.3); without it, exits are noticed at
    /// the next sample.
    pidfd: Option<OwnedFd>,
    /// The read ends of stdout and stderr; `None` once every writer has closed one.
    stdout: Option<File>,
    stderr: Option<File>,
    pub log: Log,
    tail: Tail,
    cgroup: Option<&'c TaskCgroup>,
    tree: Tree,
    stat: String,
    pub sampled_peak: u64,
    /// The largest process's high-water mark less its file pages, in a cgroup (without one,
    /// the tree keeps it).
    cgroup_largest: u64,
    samples: u32,
    tag: u32,
    killed_at: Option<Instant>,
    /// Set once the root process is reaped: its pid may then belong to someone else.
    reaped: bool,
}

impl<'c> Watch<'c> {
    pub fn new(pid: i32, cgroup: Option<&'c TaskCgroup>, stdout: File, stderr: File, log: Log, tag: u32) -> Watch<'c> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
        // SAFETY: a fresh fd owned by nobody else.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        Watch {
            pid,
            pidfd,
            stdout: Some(stdout),
            stderr: Some(stderr),
            log,
            tail: Tail::default(),
            cgroup,
            tree: Tree::new(pid),
            stat: String::new(),
            sampled_peak: 0,
            cgroup_largest: 0,
            samples: 0,
            tag,
            killed_at: None,
            reaped: false,
        }
    }

    /// The largest single process's anonymous + shared peak seen (see the module doc).
    pub fn largest_process(&self) -> u64 {
        self.cgroup_largest.max(self.tree.largest_peak())
    }

    /// Samples, relays output and enforces the timeout, cancellation and (without a cgroup)
    /// the memory limit until the root process has exited (it is not reaped yet). Returns why
    /// the runner killed it, if it did. Once [`super::kill_all`] has run, it never returns.
    pub fn until_exit(&mut self, request: &Request<'_>, started: Instant) -> Option<Ending> {
        let mut reason = None;
        let watched = crate::measure::preempt::Watched::start(request.tag, request.reserved);
        // A task's timeout counts from the task's start, a command's own from its start.
        let deadline = request.timeout.map(|t| request.timeout_from.unwrap_or(started) + t);
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
                if reason.is_none() && watched.as_ref().is_some_and(|w| w.should_yield(resident)) {
                    self.kill();
                    reason = Some(Ending::Preempted { reserved: request.reserved });
                }
            }
            if self.has_exited() {
                return reason;
            }
            if reason.is_none() {
                // The deadline first: a task's cancellation is also how its timeout shows.
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    reason = Some(Ending::TimedOut { after: request.timeout.unwrap_or_default() });
                } else if (request.cancelled)() {
                    reason = Some(Ending::Cancelled);
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
            Some(cgroup) => {
                if self.samples.is_multiple_of(HWM_EVERY) {
                    let mut buffer = std::mem::take(&mut self.stat);
                    for pid in cgroup.pids() {
                        self.cgroup_largest = self.cgroup_largest.max(tree::peak_of(pid, &mut buffer));
                    }
                    self.stat = buffer;
                }
                cgroup.resident(&mut self.stat).unwrap_or(0)
            }
            None => self.tree.resident(),
        };
        self.samples = self.samples.wrapping_add(1);
        self.sampled_peak = self.sampled_peak.max(resident);
        external::set(self.tag, resident);
        super::tree_peak::note();
        resident
    }

    /// Waits up to `timeout` for the process to exit or output to arrive; relays it.
    fn wait_for_events(&mut self, timeout: Duration) {
        let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 3];
        if let Some(pidfd) = &self.pidfd {
            fds[0].fd = pidfd.as_raw_fd();
        }
        if let Some(stdout) = &self.stdout {
            fds[1].fd = stdout.as_raw_fd();
        }
        if let Some(stderr) = &self.stderr {
            fds[2].fd = stderr.as_raw_fd();
        }
        // Round up, so that a wait shorter than a millisecond is not a busy loop.
        let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of 3 pollfds; negative fds are ignored by poll.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, millis) };
        if ready > 0 && fds[1].revents != 0 {
            self.relay(Stream::Stdout);
        }
        if ready > 0 && fds[2].revents != 0 {
            self.relay(Stream::Stderr);
        }
    }

    /// Copies what a stream has now into the log (and stderr into the tail); notices its end.
    fn relay(&mut self, stream: Stream) {
        let mut chunk = [0u8; 16 << 10];
        loop {
            let source = match stream {
                Stream::Stdout => &mut self.stdout,
                Stream::Stderr => &mut self.stderr,
            };
            let Some(file) = source else { return };
            match file.read(&mut chunk) {
                Ok(0) => {
                    *source = None;
                    return;
                }
                Ok(n) => {
                    self.log.output(&chunk[..n]);
                    if stream == Stream::Stderr {
                        self.tail.push(&chunk[..n]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    /// Reads the output to its end, waiting a short while at most for more (an escaped
    /// process may hold it), then puts the log in order. What is already in the pipes is read
    /// however late this runs: past the patience, each poll waits for nothing, and only a
    /// process that keeps writing is cut off, at [`DRAIN_LIMIT`]. (With the patience alone, a
    /// worker descheduled for 200 ms on a loaded machine left the last lines of a command that
    /// had ended out of its log.)
    pub fn drain_output(&mut self) {
        let started = Instant::now();
        let (patient_until, limit) = (started + DRAIN_PATIENCE, started + DRAIN_LIMIT);
        while (self.stdout.is_some() || self.stderr.is_some()) && Instant::now() < limit {
            let fd = |f: &Option<File>| f.as_ref().map_or(-1, |f| f.as_raw_fd());
            let mut fds = [
                libc::pollfd { fd: fd(&self.stdout), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: fd(&self.stderr), events: libc::POLLIN, revents: 0 },
            ];
            let millis = patient_until.saturating_duration_since(Instant::now()).as_millis() as i32;
            // SAFETY: two valid pollfds (a negative fd is ignored).
            match unsafe { libc::poll(fds.as_mut_ptr(), 2, millis) } {
                // A signal is no reason to leave output unread.
                -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                ready if ready <= 0 => break,
                _ => {}
            }
            if fds[0].revents != 0 {
                self.relay(Stream::Stdout);
            }
            if fds[1].revents != 0 {
                self.relay(Stream::Stderr);
            }
        }
        self.log.finish();
    }

    pub fn stderr_tail(&self) -> String {
        self.tail.text()
    }

    /// True once the root process has exited (still unreaped), or is gone altogether.
    pub fn has_exited(&self) -> bool {
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
    pub fn kill(&mut self) {
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
    pub fn kill_leftovers(&mut self) -> usize {
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
    pub fn reap(&mut self) -> io::Result<(i32, libc::rusage)> {
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

    pub fn write_footer(&mut self, finished: &Finished) {
        let ending = match finished.ending {
            Ending::Exited(exit) => exit.to_string(),
            Ending::OutOfMemory { limit: Some(limit) } => format!("ran out of memory (limit {})", format_size(limit)),
            Ending::OutOfMemory { limit: None } => "ran out of memory".into(),
            Ending::TimedOut { after } => format!("timed out after {} and was killed", format_duration(after)),
            Ending::Cancelled => "was cancelled and killed".into(),
            Ending::Preempted { .. } => "was preempted to keep the budget and killed".into(),
        };
        let mut how = format!(
            "sampled {}, largest process {} (ru_maxrss {}, file pages included)",
            format_size(finished.sampled_peak),
            format_size(finished.largest_process),
            format_size(finished.max_rss)
        );
        if let Some(peak) = finished.cgroup_peak {
            how.push_str(&format!(", cgroup with page cache {}", format_size(peak)));
        }
        if finished.leftovers_killed > 0 {
            how.push_str(&format!("; killed {} process(es) it left running", finished.leftovers_killed));
        }
        self.log.line(&format!(
            "--- runner: {ending} after {}; peak {} ({}: {how}) ---",
            format_duration(finished.wall),
            format_size(finished.peak_bytes),
            finished.peak_source.as_str(),
        ));
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

/// The end of stderr (or of a log).
#[derive(Debug, Default)]
pub(super) struct Tail {
    bytes: Vec<u8>,
    /// Whether bytes before `bytes` were dropped.
    cut: bool,
}

impl Tail {
    /// The end of what `file` holds from `from` on (empty when it cannot be read).
    pub(super) fn of_file(file: &File, from: u64) -> Tail {
        use std::os::unix::fs::FileExt as _;
        let mut tail = Tail::default();
        let len = file.metadata().map_or(0, |m| m.len());
        let start = len.saturating_sub(TAIL_BYTES as u64).max(from);
        if start >= len {
            return tail;
        }
        tail.bytes.resize((len - start) as usize, 0);
        if file.read_exact_at(&mut tail.bytes, start).is_ok() {
            tail.cut = start > from;
        } else {
            tail.bytes.clear();
        }
        tail
    }

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
    pub(super) fn text(&self) -> String {
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
}
