//! Service processes — long-lived helpers such as warm Python interpreters — lent to tasks one at
//! a time ([`runner_plugin::service`]): started on first use, kept idle between tasks, measured
//! per task above their baseline, killed and replaced when they crash, hang, leak or are
//! cancelled, and all shut down when the runner ends ([`shutdown_all`]).
//!
//! **Started** from one thread that lives as long as the process ([`on_spawner`]): the child's
//! `PR_SET_PDEATHSIG` fires when the thread that forked it ends, and a worker thread ends with
//! its run, so an interpreter forked there would die between two cycles of a replay. It gets a
//! process group and, where commands do, a memory cgroup of its own, entered before exec.
//!
//! **Measured**, while a task holds it: the tree's resident anonymous + shared memory (from its
//! cgroup, or summed over `/proc`) sampled every [`super::SAMPLE_INTERVAL`] and published as the
//! task's external bytes above the *baseline* (what it held when the task began, or when the
//! plugin said so with `rebase`); the root process's high-water mark is reset through
//! `/proc/PID/clear_refs` at the start, so a spike between two samples is seen in `VmHWM` at the
//! end (file-backed pages the task mapped are taken out: they are not what the budget is
//! about). The baseline is counted in the ledger as standing memory
//! ([`crate::measure::external::standing`]), not charged to tasks.
//!
//! **Let go** near the end of a run: idle services beyond what the tasks left can use at once
//! are stopped, and no new one is started past that ([`keep_at_most`]).
//!
//! An allocator that keeps freed memory for reuse (glibc's does) would make a task reusing what
//! the previous one freed read as needing nothing: a plugin's service returns freed memory to
//! the kernel after each task (the Python plugin calls `malloc_trim`).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Condvar, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use runner_plugin::command::display_argv;
use runner_plugin::{CommandExit, FailureKind, ServiceIo, ServiceSpec, TaskError, Value};

mod fork;
mod idle_log;
mod sampler;
mod settle;
mod warm;

use super::cgroup::{self, TaskCgroup};
use super::log::{HandedLog, log_limit};
use super::registry::{self, Registration};
use super::tree::{self, Tree};
use super::watch::blocking_pipe;
use super::{CommandMeasured, TaskCommand, spawn};
use crate::measure::{PeakSource, external};
pub use fork::{REAP_ARG, offer_reaper, reap_children};
use sampler::{RebaseHandle, Sampler};
use settle::{Ending, Kill, settle};
pub use warm::prestart;

/// The services of this process: idle ones waiting for a task of their spec, and how many of
/// each spec are alive (idle, lent or warming up).
struct Pool {
    idle: Vec<Service>,
    live: Vec<(ServiceSpec, usize)>,
    /// One entry per warm-up running in the background (see [`prestart`]).
    warming: Vec<ServiceSpec>,
    /// The most services the run's tasks can still use at once ([`keep_at_most`]).
    keep: usize,
    /// The most alive at once since the run began ([`begin_run`]).
    most: usize,
}

impl Pool {
    fn live(&self, spec: &ServiceSpec) -> usize {
        self.live.iter().find(|(s, _)| s == spec).map_or(0, |(_, n)| *n)
    }

    /// One warm-up of `spec` has ended.
    fn stop_warming(&mut self, spec: &ServiceSpec) {
        if let Some(at) = self.warming.iter().position(|s| s == spec) {
            self.warming.swap_remove(at);
        }
    }

    /// Idle services beyond [`Pool::keep`], out of the pool for the caller to drop outside the
    /// lock. Only while every service alive is of one spec: with several, which of them the
    /// tasks left will ask for cannot be told, and stopping the wrong one costs a new start.
    fn take_beyond_keep(&mut self) -> Vec<Service> {
        let [(_, live)] = self.live[..] else { return Vec::new() };
        let beyond = live.saturating_sub(self.keep).min(self.idle.len());
        let from = self.idle.len() - beyond;
        self.idle.split_off(from)
    }

    fn count(&mut self, spec: &ServiceSpec, delta: isize) {
        match self.live.iter_mut().find(|(s, _)| s == spec) {
            Some((_, n)) => *n = n.saturating_add_signed(delta),
            None if delta > 0 => self.live.push((spec.clone(), delta as usize)),
            None => {}
        }
        self.live.retain(|(_, n)| *n > 0);
        self.most = self.most.max(self.alive());
    }

    fn alive(&self) -> usize {
        self.live.iter().map(|(_, n)| n).sum()
    }
}

static POOL: Mutex<Pool> =
    Mutex::new(Pool { idle: Vec::new(), live: Vec::new(), warming: Vec::new(), keep: usize::MAX, most: 0 });
/// Signalled when a warming spare becomes idle (or fails).
static LANDED: Condvar = Condvar::new();

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a killed service may take to die before the runner stops waiting for it.
const DEATH_PATIENCE: Duration = Duration::from_secs(10);

/// How long a service that failed its task may take to end by itself before it is taken as
/// alive (and killed, its conversation being out of step).
const EXIT_PATIENCE: Duration = Duration::from_millis(500);

/// One live service process.
struct Service {
    spec: ServiceSpec,
    pid: i32,
    requests: File,
    replies: File,
    cgroup: Option<TaskCgroup>,
    /// Bytes counted for it in the standing memory.
    standing: u64,
    registration: Option<Registration>,
    /// How it ended, once reaped.
    exit: Option<CommandExit>,
    /// The process it was forked from, which reaps it, when it was forked.
    reaper: Option<std::sync::Arc<fork::Reaper>>,
    /// The warm-ups it had (their keys, [`runner_plugin::service::WarmUp::key`]).
    warmed_for: Vec<String>,
}

impl Service {
    fn set_standing(&mut self, bytes: u64) {
        external::set_service_standing(self.standing, bytes);
        self.standing = bytes;
    }

    /// Reaps it if it has ended; true while it runs.
    fn is_alive(&mut self) -> bool {
        if self.exit.is_some() {
            return false;
        }
        let exit = match &self.reaper {
            Some(reaper) => reaper.exit_of(self.pid),
            None => reap(self.pid),
        };
        let Some(exit) = exit else { return true };
        self.exit = Some(exit);
        self.registration = None;
        false
    }

    /// Waits up to `patience` for it to end; true once it has.
    fn wait_exit(&mut self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while self.is_alive() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    fn kill(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        if self.exit.is_none() {
            tree::signal_group(self.pid, libc::SIGKILL);
            Tree::new(self.pid).kill();
        }
    }

    /// The program, for messages (a service's argv may carry a whole script).
    fn program(&self) -> String {
        display_argv(&self.spec.argv[..1])
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.is_alive() {
            self.kill();
            self.wait_exit(DEATH_PATIENCE);
        }
        self.set_standing(0);
        pool().count(&self.spec, -1);
    }
}

/// Runs `work` for `task` with a service of `spec`: an idle one, or a new one. `measured` hears
/// what the task's use of it measured (also when the task fails). The service writes what the
/// task prints into the task's log itself; the runner frames this attempt's output there with
/// its header and footer and bounds it to `--log-limit` ([`HandedLog`]).
pub fn serve_for_task(
    spec: &ServiceSpec,
    task: &TaskCommand<'_>,
    work: &mut dyn FnMut(ServiceIo<'_>) -> Result<Value, TaskError>,
    mut measured: impl FnMut(&CommandMeasured),
) -> Result<Value, TaskError> {
    let log_path = task.default_log.as_path();
    let started = Instant::now();
    let program = display_argv(&spec.argv[..spec.argv.len().min(1)]);
    let mut log = HandedLog::open(log_path, log_limit(), &format!("a task on the service `{program}`"))
        .map_err(|e| TaskError::msg(format!("cannot open the log {}: {e}", log_path.display())))?;
    // A warm-up that hangs (an import waiting on a lock, a stuck file system) must not hold the
    // task past its timeout: the wait for it gives up as the sampler would have killed it.
    let give_up = || {
        let over = task.timeout.filter(|&t| started.elapsed() > t);
        over.or_else(|| (task.cancelled)().then(|| task.timeout.unwrap_or_default()))
    };
    // The wait is from here: the log is opened whether the service is ready or not.
    let asked = Instant::now();
    let (mut service, fresh) = match take_idle(spec, &give_up) {
        Ok(Idle::Service(service)) => (service, false),
        Ok(Idle::Start(place)) => match start(place, log_path) {
            Ok(service) => (service, true),
            Err(e) => {
                log.line(&format!("--- runner: {e} ---"));
                return Err(e);
            }
        },
        Err(after) => {
            let e = settle::gave_up_waiting(&program, after, log_path);
            log.line(&format!("--- runner: {e} ---"));
            return Err(e);
        }
    };
    // Until here the task has only waited for its service: a prediction adds that wait where
    // its run starts interpreters, and learns the task's own time without it.
    let waited = asked.elapsed();
    let sampler = Sampler::new(&service);
    sampler.rebase();
    let mut spoiled = false;
    let result = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| sampler.watch(task, &log));
        let mut rebase = RebaseHandle { sampler: &sampler };
        let io =
            ServiceIo::new(&mut service.requests, &mut service.replies, log_path, fresh, &mut rebase, &mut spoiled);
        // A plugin's panic must not leave the watcher sampling (the scope would wait for it
        // forever) nor the service's standing figure behind the sampler's.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(io)));
        sampler.finish(watcher);
        result
    });
    // Counted by the sampler since the task began; from now on, what the service holds as the
    // task ends, until its next task's baseline.
    service.standing = sampler.counted_standing();
    let result = result.unwrap_or_else(|panic| {
        external::clear(task.tag);
        std::panic::resume_unwind(panic)
    });
    let peak = sampler.peak_above_baseline();
    let standing = sampler.sample();
    service.set_standing(standing);
    external::clear(task.tag);
    let source = if service.cgroup.is_some() { PeakSource::ServiceCgroup } else { PeakSource::ServiceProc };
    measured(&CommandMeasured { peak, source, log_path: log_path.to_path_buf(), waited });
    let killed = sampler.killed.into_inner().unwrap_or_else(|p| p.into_inner());
    let ending = Ending { spoiled, killed, standing, fresh, started, peak, source };
    settle(service, ending, result, &mut log)
}

/// A service of a spec counted as alive before it is started, so that two workers deciding at
/// once cannot start more than their share; dropped unused, it is uncounted.
struct Place {
    /// `None` once a started service has taken the place over.
    spec: Option<ServiceSpec>,
}

impl Place {
    /// Counts one more service of `spec`; the caller holds the pool's lock.
    fn reserve(pool: &mut Pool, spec: &ServiceSpec) -> Place {
        pool.count(spec, 1);
        Place { spec: Some(spec.clone()) }
    }

    fn spec(&self) -> &ServiceSpec {
        self.spec.as_ref().expect("a place is filled only once, when its service starts")
    }

    /// The place becomes the service's: its `Drop` uncounts it from now on.
    fn fill(mut self) -> ServiceSpec {
        self.spec.take().expect("a place is filled only once, when its service starts")
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(spec) = &self.spec {
            pool().count(spec, -1);
        }
    }
}

/// What a task gets from the pool: an idle service, or a place to start one in.
enum Idle {
    Service(Service),
    Start(Place),
}

/// How often a task waiting for a service that is warming up looks at its own timeout.
const GIVE_UP_CHECK: Duration = Duration::from_millis(50);

/// An idle service of `spec` that is still alive, waiting for one that is warming up rather
/// than starting another; else a place counted for a new one. `Err` with the task's timeout
/// once `give_up` says the task may wait no longer.
fn take_idle(spec: &ServiceSpec, give_up: &dyn Fn() -> Option<Duration>) -> Result<Idle, Duration> {
    loop {
        let mut service = {
            let mut pool = pool();
            loop {
                if let Some(at) = pool.idle.iter().position(|s| s.spec == *spec) {
                    break pool.idle.swap_remove(at);
                }
                if !pool.warming.contains(spec) {
                    return Ok(Idle::Start(Place::reserve(&mut pool, spec)));
                }
                if let Some(after) = give_up() {
                    return Err(after);
                }
                pool = LANDED.wait_timeout(pool, GIVE_UP_CHECK).unwrap_or_else(|p| p.into_inner()).0;
            }
        };
        if service.is_alive() {
            return Ok(Idle::Service(service));
        }
        // Died while idle (killed from outside, or by an interruption): the next one.
        tracing::info!("service `{}` (pid {}) ended while idle: {:?}", service.program(), service.pid, service.exit);
    }
}

/// A warm-up's baseline is all standing memory: there is no task to rebase.
struct NoRebase;

impl runner_plugin::service::Rebase for NoRebase {
    fn rebase(&mut self) {}
}

/// At most `services` of the tasks left can run at once (`usize::MAX`: any number): idle
/// services beyond that many alive are stopped now, those that finish a task later are
/// stopped instead of kept, and none is started past it ([`prestart`]). Their memory — an
/// interpreter's imports — is the run's again for its last tasks (often its largest, a gather).
pub fn keep_at_most(services: usize) {
    let mut pool = pool();
    pool.keep = services;
    let beyond = pool.take_beyond_keep();
    drop(pool);
    if !beyond.is_empty() {
        tracing::debug!("{} idle services stopped: no task left can use them", beyond.len());
    }
    drop(beyond);
}

/// A run begins: how many services are alive in this process (idle, lent or warming up), of
/// every spec — what it finds warm — and from which [`most_alive`] counts.
pub fn begin_run() -> usize {
    let mut pool = pool();
    pool.most = pool.alive();
    pool.most
}

/// The most services alive at once since the run began ([`begin_run`]): those a run started,
/// where its peak may have caught fewer standing (its first task alone, the others starting).
pub fn most_alive() -> usize {
    pool().most
}

/// Kills every idle service and waits for each to end (its cgroup removed). Called when the
/// runner is done; a service holds nothing that needs a gentler end.
pub fn shutdown_all() {
    let mut services: Vec<Service> = std::mem::take(&mut pool().idle);
    // All trees are killed before any is waited for (each drop then empties its cgroup and
    // reaps), so that the kernel frees their memory at once.
    for service in &mut services {
        if service.is_alive() {
            Tree::new(service.pid).kill();
        }
    }
    drop(services);
    idle_log::finish();
}

fn ensure_log_folder(log_path: &Path) -> Result<(), TaskError> {
    if let Some(parent) = log_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| TaskError::msg(format!("cannot create the log folder {}: {e}", parent.display())))?;
    }
    Ok(())
}

/// Starts a service in `place`, its stderr appended to `log_path`.
fn start(place: Place, log_path: &Path) -> Result<Service, TaskError> {
    let launched = launch(place.spec(), log_path, None)?;
    Ok(Service {
        spec: place.fill(),
        pid: launched.pid,
        requests: launched.requests,
        replies: launched.replies,
        cgroup: launched.cgroup,
        standing: 0,
        registration: Some(launched.registration),
        exit: None,
        reaper: None,
        warmed_for: Vec::new(),
    })
}

/// A process of a spec, started and registered.
struct Launched {
    pid: i32,
    requests: File,
    replies: File,
    cgroup: Option<TaskCgroup>,
    registration: Registration,
}

/// Starts a process of `spec` (with `control` as its fd 3 when given), its stderr appended to
/// `log_path`, in a cgroup of its own when commands have them.
fn launch(spec: &ServiceSpec, log_path: &Path, control: Option<OwnedFd>) -> Result<Launched, TaskError> {
    let program = display_argv(&spec.argv[..spec.argv.len().min(1)]);
    if spec.argv.is_empty() {
        return Err(TaskError::msg("a service needs a program to run: its argv is empty"));
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| TaskError::msg(format!("cannot open the log {}: {e}", log_path.display())))?;
    let cgroup = cgroup::hierarchy().ok().and_then(|h| {
        TaskCgroup::create(h, None)
            .map_err(|e| tracing::warn!("cannot make a cgroup for a service under {}: {e}", h.parent.display()))
            .ok()
    });
    let procs = cgroup.as_ref().map(TaskCgroup::procs_fd);
    let argv = spec.argv.clone();
    let mut env = spec.env.clone();
    let idle_log = idle_log::beside(log_path);
    idle_log::open(&idle_log);
    env.push(("RUNNER_IDLE_LOG".into(), idle_log.into_os_string()));
    if control.is_some() {
        env.push(("RUNNER_FORK_FD".into(), "3".into()));
        env.extend(fork::reaper_env());
    }
    let spawned = on_spawner(move || spawn(&argv, &env, log, control.as_ref(), procs))
        .map_err(|e| TaskError::msg(format!("cannot start the service `{program}`: {e}")))?;
    let (pid, requests, replies) = spawned;
    let registration = registry::register(pid, cgroup.as_ref().map(|c| (c.dir.clone(), c.version())), log_path.into());
    let Some(registration) = registration else {
        // Started just as the run was interrupted: it must not outlive the interruption.
        if let Some(cgroup) = &cgroup {
            cgroup.kill();
        }
        tree::signal_group(pid, libc::SIGKILL);
        wait_for_exit(pid, DEATH_PATIENCE);
        return Err(TaskError::of_kind(FailureKind::Cancelled, "cancelled: the run was interrupted"));
    };
    widen_pipes([requests.as_raw_fd(), replies.as_raw_fd()]);
    Ok(Launched { pid, requests, replies, cgroup, registration })
}

/// How child `pid` of the runner ended, if it has (reaped then).
fn reap(pid: i32) -> Option<CommandExit> {
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a valid status pointer.
    match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
        0 => None,
        // -1: reaped already, or never ours; either way it does not run for us any more.
        _ => Some(super::exit_of(status)),
    }
}

/// Waits up to `patience` for child `pid` of the runner to end; true once it has.
fn wait_for_exit(pid: i32, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while reap(pid).is_none() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

const PIPE_BYTES: libc::c_int = 1 << 20;

/// Gives a service's pipes [`PIPE_BYTES`]: larger pipes move large values in fewer wake-ups (a
/// 512 MiB value crossed at 1.45 ms per MiB through the default 64 KiB, 0.5 through 1 MiB). A
/// refusal only costs speed.
fn widen_pipes(fds: [RawFd; 2]) {
    for fd in fds {
        // SAFETY: fcntl on an open pipe's fd; it changes nothing else.
        unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES) };
    }
}

fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    log: File,
    control: Option<&OwnedFd>,
    procs: Option<RawFd>,
) -> io::Result<(i32, File, File)> {
    let (requests_read, requests) = blocking_pipe()?;
    let (replies, replies_write) = blocking_pipe()?;
    let log = OwnedFd::from(log);
    let stdio = spawn::Stdio { stdin: Some(&requests_read), stdout: &replies_write, stderr: &log, control };
    let pid = spawn::spawn(argv, env, stdio, procs)?;
    // The child holds its own copies; the parent keeps its ends only.
    Ok((pid, File::from(requests), File::from(replies)))
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on the thread that starts every service, which lives as long as the process: a
/// child's `PR_SET_PDEATHSIG` fires when the thread that forked it ends.
fn on_spawner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (sender, jobs) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("runner-services".into())
            .spawn(move || {
                for job in jobs {
                    job();
                }
            })
            .expect("a thread can be started");
        sender
    });
    let (reply, answer) = mpsc::sync_channel(1);
    sender
        .send(Box::new(move || {
            let _ = reply.send(f());
        }))
        .expect("the spawner thread lives as long as the process");
    answer.recv().expect("the spawner thread answers every job")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_talking_to_a_service_comes_back_and_takes_its_bytes_with_it() {
        let _alone = external::exclusive();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("task.log");
        let before = (external::standing(), external::total());
        let (done, ended) = mpsc::channel();
        // On a thread of its own: a watcher left sampling would hold it forever.
        std::thread::spawn(move || {
            let cancelled = || false;
            let task = TaskCommand {
                default_log: log,
                timeout: None,
                started: Instant::now(),
                limit: None,
                reserved: 0,
                tag: 3_100_001,
                cancelled: &cancelled,
            };
            // `cat` serves until its stdin closes; the plugin's code panics mid-conversation,
            // after a rebase made the service's baseline standing memory.
            let spec = ServiceSpec::new(["cat"]);
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = serve_for_task(
                    &spec,
                    &task,
                    &mut |mut io| {
                        io.rebase();
                        panic!("a plugin's bug")
                    },
                    |_| {},
                );
            }));
            let _ = done.send(panicked.is_err());
        });
        assert_eq!(ended.recv_timeout(Duration::from_secs(30)), Ok(true), "the panic came back");
        assert_eq!(
            (external::standing(), external::total()),
            before,
            "the service's and the task's bytes left with it"
        );
    }
}
