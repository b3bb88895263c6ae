//! Forking services ([`ServiceSpec::forking`]): one process is started and warmed up, then forks
//! the run's other services of its spec and retires into a small reaper. The slow start (an
//! interpreter's imports) is paid once, and the forked services share its pages until they
//! write to them.
//!
//! The warmed process stays the runner's own child all along (so `PR_SET_PDEATHSIG` still ties
//! it to the runner, and through it its children, which ask for `SIGKILL` when it dies). It
//! reports how each of its children ended on the control socket, which is how a forked
//! service's exit status reaches the runner ([`Reaper::exit_of`]).
//!
//! Memory: each forked service gets a cgroup of its own (when commands have them), entered
//! after the fork, so what it allocates or copies from the shared pages is charged to it; the
//! shared pages stay charged to the reaper's cgroup, which is counted once as standing memory.

use std::fs::File;
use std::io::{self, IoSlice, Read as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use runner_plugin::{CommandExit, ServiceIo, TaskError};

use super::super::cgroup::TaskCgroup;
use super::super::registry::{self, Registration};
use super::super::tree::{self, Tree};
use super::sampler::resident_of;
use super::{
    DEATH_PATIENCE, EXIT_PATIENCE, NoRebase, Place, Service, blocking_pipe, launch, wait_for_exit, widen_pipes,
};
use crate::measure::external;

/// How long a warmed process may take to answer a fork request.
const FORK_PATIENCE: Duration = Duration::from_secs(30);

/// The first argument that makes the runner's executable the reaper a retired forking service
/// execs ([`offer_reaper`]).
pub const REAP_ARG: &str = "__reap-children";

/// The program a retired forking service may exec as its reaper, once [`offer_reaper`] said.
static REAPER_PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Offers `exe` (this runner's executable, run as `exe __reap-children 3`) to forking services
/// as their reaper, in `RUNNER_REAPER`: a process of a few MiB instead of, for Python, a bare
/// interpreter's ten. Only the CLI offers it: a library user's executable would not know the
/// argument.
pub fn offer_reaper(exe: std::path::PathBuf) {
    let _ = REAPER_PROGRAM.set(exe);
}

/// `RUNNER_REAPER` for a forking service's environment, when a reaper was offered.
pub(super) fn reaper_env() -> Option<(std::ffi::OsString, std::ffi::OsString)> {
    REAPER_PROGRAM.get().map(|exe| ("RUNNER_REAPER".into(), exe.clone().into_os_string()))
}

/// The reaper itself (`runner __reap-children FD`): writes `<pid> <wait status>\n` on `fd`
/// for each child of this process that ends, and returns once none is left. It allocates
/// nothing, so it stays as small as the process can be.
pub fn reap_children(fd: std::os::fd::RawFd) {
    loop {
        let mut status = 0;
        // SAFETY: waits for any child; `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return; // ECHILD: none is left
        }
        let mut line = [0u8; 32];
        let mut cursor = io::Cursor::new(&mut line[..]);
        let _ = writeln!(cursor, "{pid} {status}");
        let len = usize::try_from(cursor.position()).unwrap_or(0);
        let mut written = 0;
        while written < len {
            // SAFETY: writes initialised bytes of `line` to the descriptor it was given.
            let n = unsafe { libc::write(fd, line[written..len].as_ptr().cast(), len - written) };
            if n <= 0 {
                if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return; // the runner is gone
            }
            written += n.unsigned_abs();
        }
    }
}

/// The warmed process, and after it retired the reaper of its children.
pub(super) struct Reaper {
    pid: i32,
    control: UnixStream,
    cgroup: Option<TaskCgroup>,
    _registration: Registration,
    ended: Mutex<Ended>,
    /// Bytes of the shared pages counted in the standing memory.
    standing: u64,
}

/// What the reaper has reported so far.
#[derive(Default)]
struct Ended {
    /// `(pid, wait status)` of children that ended.
    children: Vec<(i32, i32)>,
    /// The start of a report not yet read whole.
    partial: Vec<u8>,
    /// The reaper is gone: its children died with it.
    gone: bool,
}

/// Starts a process of `places`' spec, warms it with `warm`, and forks one service per place
/// from it; the services are returned idle-ready.
pub(super) fn warm_and_fork(
    places: Vec<Place>,
    log_path: &Path,
    warm: runner_plugin::service::WarmUp,
) -> Result<Vec<Service>, TaskError> {
    let spec = places.first().map(|p| p.spec().clone()).ok_or_else(|| TaskError::msg("no service to fork"))?;
    let (control, their_end) =
        UnixStream::pair().map_err(|e| TaskError::msg(format!("cannot make a control socket: {e}")))?;
    let launched = launch(&spec, log_path, Some(OwnedFd::from(their_end)))?;
    let mut reaper = Reaper {
        pid: launched.pid,
        control,
        cgroup: launched.cgroup,
        _registration: launched.registration,
        ended: Mutex::new(Ended::default()),
        standing: 0,
    };
    let (mut requests, mut replies) = (launched.requests, launched.replies);
    let (mut rebase, mut spoiled) = (NoRebase, false);
    (warm.prepare)(ServiceIo::new(&mut requests, &mut replies, log_path, true, &mut rebase, &mut spoiled))?;
    // Its stdin ends: from now on it listens on the control socket only.
    drop((requests, replies));
    let program = runner_plugin::command::display_argv(&spec.argv[..1]);
    let mut forked = Vec::with_capacity(places.len());
    for place in places {
        match reaper.fork() {
            Ok((pid, requests, replies)) => forked.push((place, pid, requests, replies)),
            Err(e) if forked.is_empty() => {
                return Err(TaskError::msg(format!("the service `{program}` did not fork: {e}")));
            }
            Err(e) => {
                tracing::info!("the service `{program}` forked {} of its services: {e}", forked.len());
                break;
            }
        }
    }
    reaper.retire().map_err(|e| TaskError::msg(format!("the service `{program}` did not retire: {e}")))?;
    reaper.count_shared_pages();
    let reaper = std::sync::Arc::new(reaper);
    forked
        .into_iter()
        .map(|(place, pid, requests, replies)| child(place, pid, requests, replies, &reaper, log_path))
        .collect()
}

/// A forked service, in a cgroup of its own when services have them.
fn child(
    place: Place,
    pid: i32,
    requests: File,
    replies: File,
    reaper: &std::sync::Arc<Reaper>,
    log_path: &Path,
) -> Result<Service, TaskError> {
    let cgroup = reaper.cgroup.as_ref().and_then(|parent| {
        let own = TaskCgroup::create(parent.hierarchy(), None).ok()?;
        own.adopt(pid).map_err(|e| tracing::warn!("cannot move service {pid} into {}: {e}", own.dir.display())).ok()?;
        Some(own)
    });
    let registration = registry::register(pid, cgroup.as_ref().map(|c| (c.dir.clone(), c.version())), log_path.into());
    let mut service = Service {
        spec: place.fill(),
        pid,
        requests,
        replies,
        cgroup,
        standing: 0,
        registration,
        exit: None,
        reaper: Some(reaper.clone()),
        warmed_for: Vec::new(),
    };
    if service.registration.is_none() {
        service.kill();
        return Err(TaskError::of_kind(runner_plugin::FailureKind::Cancelled, "cancelled: the run was interrupted"));
    }
    Ok(service)
}

impl Reaper {
    /// Has the warmed process fork one service: its pid and its ends of the two pipes.
    fn fork(&self) -> io::Result<(i32, File, File)> {
        let (requests_read, requests) = blocking_pipe()?;
        let (replies, replies_write) = blocking_pipe()?;
        widen_pipes([requests.as_raw_fd(), replies.as_raw_fd()]);
        let fds = [requests_read.as_fd(), replies_write.as_fd()];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut ancillary = rustix::net::SendAncillaryBuffer::new(&mut space);
        ancillary.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            &self.control,
            &[IoSlice::new(b"fork\n")],
            &mut ancillary,
            rustix::net::SendFlags::empty(),
        )?;
        // The child holds its copies now.
        drop((requests_read, replies_write));
        self.control.set_read_timeout(Some(FORK_PATIENCE))?;
        let line = read_line(&self.control)?;
        let pid = line.trim().parse::<i32>().map_err(|_| io::Error::other(format!("it answered {line:?}")))?;
        Ok((pid, File::from(requests), File::from(replies)))
    }

    /// Tells the warmed process to let go of its memory; it reports its children's ends from
    /// now on.
    fn retire(&self) -> io::Result<()> {
        (&self.control).write_all(b"retire\n")?;
        self.control.set_nonblocking(true)
    }

    /// The pages the forked services still share are charged to the reaper's cgroup: counted
    /// once, as standing memory. (Without cgroups each service's own figure counts them.)
    fn count_shared_pages(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            self.standing = resident_of(self.pid, Some((cgroup.dir.as_path(), cgroup.version())));
            external::add_shared_standing(self.standing);
        }
    }

    /// How forked service `pid` ended, once it has.
    pub(super) fn exit_of(&self, pid: i32) -> Option<CommandExit> {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.read_reports(&self.control);
        if let Some(&(_, status)) = ended.children.iter().find(|(p, _)| *p == pid) {
            return Some(super::super::exit_of(status));
        }
        // The reaper died, and its children with it (their parent-death signal).
        // SAFETY: kill with signal 0 only checks that the process exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0;
        (ended.gone && !exists).then_some(CommandExit::Signal(libc::SIGKILL))
    }
}

impl Ended {
    fn read_reports(&mut self, mut control: &UnixStream) {
        let mut buffer = [0u8; 512];
        loop {
            match control.read(&mut buffer) {
                Ok(0) => {
                    self.gone = true;
                    break;
                }
                Ok(n) => self.partial.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line);
            let mut fields = text.split_whitespace().map(str::parse::<i32>);
            if let (Some(Ok(pid)), Some(Ok(status))) = (fields.next(), fields.next()) {
                self.children.push((pid, status));
            }
        }
    }
}

impl Drop for Reaper {
    /// Its last service is gone, so it ends by itself; one that never forked or retired waits
    /// on its control socket, which is closed for it; if it still runs, it is killed.
    fn drop(&mut self) {
        external::remove_shared_standing(self.standing);
        if !wait_for_exit(self.pid, EXIT_PATIENCE) {
            let _ = self.control.shutdown(std::net::Shutdown::Both);
        }
        if !wait_for_exit(self.pid, DEATH_PATIENCE) {
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
            tree::signal_group(self.pid, libc::SIGKILL);
            Tree::new(self.pid).kill();
            wait_for_exit(self.pid, DEATH_PATIENCE);
        }
    }
}

/// One `\n`-ended line from a blocking socket, read a byte at a time (the reply is short, and
/// nothing after it may be consumed).
fn read_line(mut socket: &UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match socket.read(&mut byte) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "it closed the control socket")),
            Ok(_) if byte[0] == b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
