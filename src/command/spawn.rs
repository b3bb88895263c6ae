//! Starting a command without copying the runner: a `vfork`-style child (`clone` with
//! `CLONE_VM | CLONE_VFORK`, as glibc's `posix_spawn` does) that shares the runner's memory
//! until it calls `execve`, so nothing of the runner — however much it holds — is ever counted
//! as the command's (a `fork` copies the page tables and `ru_maxrss` then includes them).
//!
//! Between clone and exec the child makes only plain system calls on data the parent prepared
//! beforehand (no allocation, no lock): default signal handlers and the parent's signal mask
//! back, a process group of its own, stdin/stdout/stderr, its memory cgroup (it writes `0` into
//! the cgroup's `cgroup.procs`, so everything it starts is in the cgroup from its first page),
//! `PR_SET_PDEATHSIG`, and `execve`. Should any of it fail, the errno is left in the plan the
//! two share and the child exits; the parent, which resumes only once the child has exec'd or
//! exited, reaps it and reports the error. The parent returns only once a close-on-exec pipe
//! the child holds has closed: the kernel wakes a vfork parent just before it gives the child
//! its new memory, and a `/proc/<pid>/status` read in that moment would show the runner's.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// What the child needs, all prepared by the parent: pointers into the parent's memory, which
/// the child shares.
#[repr(C)]
struct Plan {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// Given to the child as fd 3, or -1.
    control: RawFd,
    /// `cgroup.procs` of the command's cgroup, or -1.
    procs: RawFd,
    parent: libc::pid_t,
    /// Signals above this have no handler to default.
    last_signal: libc::c_int,
    /// The parent thread's signal mask, restored just before exec.
    mask: libc::sigset_t,
    /// Set by the child when a step before exec failed.
    error: AtomicI32,
}

/// The child's stack: only a handful of system calls run on it.
const CHILD_STACK: usize = 64 << 10;

/// The fds a command starts with.
pub(super) struct Stdio<'a> {
    /// `/dev/null` when `None`.
    pub stdin: Option<&'a OwnedFd>,
    pub stdout: &'a OwnedFd,
    pub stderr: &'a OwnedFd,
    /// Given as fd 3 when set (a service's control socket, see [`super::service`]).
    pub control: Option<&'a OwnedFd>,
}

/// Starts `argv` (its program looked up in `PATH` when it has no `/`) with `env` added to the
/// runner's environment, in a process group of its own, in cgroup `procs` when given. Returns
/// its pid once it has exec'd.
pub(super) fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    stdio: Stdio<'_>,
    procs: Option<RawFd>,
) -> io::Result<i32> {
    let program = argv.first().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let path = c_string(resolve(program, env)?.as_os_str())?;
    let argv: Vec<CString> = argv.iter().map(|a| c_string(a)).collect::<io::Result<_>>()?;
    let envp: Vec<CString> = environment(env).iter().map(|e| c_string(e)).collect::<io::Result<_>>()?;
    let argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).chain([std::ptr::null()]).collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).chain([std::ptr::null()]).collect();
    let null = std::fs::File::open("/dev/null")?;
    let stdin = stdio.stdin.map_or(null.as_raw_fd(), AsRawFd::as_raw_fd);
    let mut plan = Plan {
        path: path.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        stdin,
        stdout: stdio.stdout.as_raw_fd(),
        stderr: stdio.stderr.as_raw_fd(),
        control: stdio.control.map_or(-1, AsRawFd::as_raw_fd),
        procs: procs.unwrap_or(-1),
        parent: std::process::id() as libc::pid_t,
        last_signal: libc::SIGRTMAX(),
        // SAFETY: sigset_t is plain data; filled in below.
        mask: unsafe { std::mem::zeroed() },
        error: AtomicI32::new(0),
    };
    // Closed in the child by its exec (close-on-exec), or by its exit: once the parent reads
    // its end, the child's memory is its own. (The kernel wakes a vfork parent a moment
    // before it switches the child to its new memory; a /proc read then would see the runner's.)
    let (exec_done, exec_done_write) = super::watch::pipe()?;
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down: the child starts at its (16-byte aligned) top.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: all signals are blocked around the clone, so no handler of the runner runs on
    // the child's stack while it shares the runner's memory; `child` makes only system calls
    // on `plan`, which outlives it (the parent is suspended until the child exec'd or exited).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut plan.mask);
        let pid = libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut plan).cast(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        pid
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(exec_done_write);
    wait_for_eof(&exec_done);
    let error = plan.error.load(Ordering::Acquire);
    if error != 0 {
        // SAFETY: reaping the child that just exited.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// Waits until every writer of the (non-blocking) pipe `read` has closed it.
fn wait_for_eof(read: &std::fs::File) {
    let mut byte = [0u8; 1];
    loop {
        let mut fd = libc::pollfd { fd: read.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a read into a one-byte buffer.
        unsafe {
            if libc::poll(&mut fd, 1, -1) < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
            match libc::read(read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) {
                0 => return,
                n if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock => continue,
                n if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                n if n < 0 => return,
                _ => continue,
            }
        }
    }
}

/// Runs in the child, on its own stack, sharing the parent's memory: system calls only.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive until this process exec'd or exited.
    let plan = unsafe { &*(arg as *const Plan) };
    // SAFETY: plain system calls on integers and on the plan's prepared pointers.
    unsafe {
        // Handlers of the runner would run runner code in this process: default them. The
        // ignored SIGPIPE of Rust's runtime is defaulted too, as std's Command does.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=plan.last_signal {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && (old.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
                && old.sa_sigaction != libc::SIG_DFL
            {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let ok = libc::setpgid(0, 0) == 0
            && libc::dup2(plan.stdin, 0) == 0
            && libc::dup2(plan.stdout, 1) == 1
            && libc::dup2(plan.stderr, 2) == 2
            && (plan.control < 0 || give_as_fd3(plan.control))
            && (plan.procs < 0 || libc::write(plan.procs, b"0".as_ptr().cast(), 1) == 1);
        if !ok {
            fail(plan, *libc::__errno_location());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        // The runner died before the line above: nobody would kill this process later.
        if libc::getppid() != plan.parent {
            fail(plan, libc::ESRCH);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        libc::execve(plan.path, plan.argv, plan.envp);
        fail(plan, *libc::__errno_location())
    }
}

/// Makes `fd` the child's fd 3, open across exec (`dup2` onto itself would keep close-on-exec).
///
/// # Safety
/// Called in the child between clone and exec, where only system calls may run.
unsafe fn give_as_fd3(fd: RawFd) -> bool {
    // SAFETY: plain fd system calls on the child's own fd table.
    unsafe { if fd == 3 { libc::fcntl(3, libc::F_SETFD, 0) == 0 } else { libc::dup2(fd, 3) == 3 } }
}

/// Leaves `errno` for the parent and exits the child.
fn fail(plan: &Plan, errno: i32) -> ! {
    plan.error.store(if errno == 0 { libc::EINVAL } else { errno }, Ordering::Release);
    // SAFETY: ends this process at once, running nothing of the runner's.
    unsafe { libc::_exit(127) }
}

fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{} holds a NUL byte", text.to_string_lossy()))
    })
}

/// The runner's environment with `additions` (which win over the same names), and the
/// command's owner ([`super::orphans::OWNER_VAR`]: this runner, whatever the additions say).
fn environment(additions: &[(OsString, OsString)]) -> Vec<OsString> {
    let owner = super::orphans::OWNER_VAR;
    let mut env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k != owner && !additions.iter().any(|(name, _)| name == k)).collect();
    env.extend(additions.iter().filter(|(k, _)| k != owner).cloned());
    env.push((owner.into(), super::orphans::owner_value().into()));
    env.into_iter()
        .map(|(mut k, v)| {
            k.push("=");
            k.push(v);
            k
        })
        .collect()
}

/// The file `program` runs: itself when it holds a `/`, else the first executable of that name
/// in `PATH` (the command's own `PATH` when `env` sets one).
fn resolve(program: &OsStr, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).or_else(|| std::env::var_os("PATH"));
    let path = path.unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let candidate = if dir.as_os_str().is_empty() { Path::new(".").join(program) } else { dir.join(program) };
        let Ok(c) = c_string(candidate.as_os_str()) else { continue };
        // SAFETY: access(2) reads a NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 && candidate.is_file() {
            return Ok(candidate);
        }
        denied |= candidate.is_file();
    }
    Err(io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_in_the_commands_path() {
        assert_eq!(resolve(OsStr::new("./x"), &[]).unwrap(), Path::new("./x"));
        let sh = resolve(OsStr::new("sh"), &[]).unwrap();
        assert!(sh.ends_with("sh") && sh.is_absolute(), "{}", sh.display());
        let none = [("PATH".into(), "/nonexistent-dir".into())];
        assert_eq!(resolve(OsStr::new("sh"), &none).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        let env = environment(&[("RUNNER_TEST_X".into(), "1=2".into())]);
        assert!(env.iter().any(|e| e == "RUNNER_TEST_X=1=2"));
    }
}
