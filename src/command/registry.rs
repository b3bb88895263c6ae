//! Every command process tree alive in this process, so that an interrupted (Ctrl-C, SIGTERM)
//! or aborted run can kill them all before it exits: [`kill_all`].
//!
//! A command registers right after it is spawned and deregisters before its root process is
//! reaped, so a pid in the registry is always the command's (a zombie still holds its pid).
//! Once [`kill_all`] has run, the registry is closed: a command spawned afterwards finds it
//! closed when it registers and kills itself.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use super::cgroup::{self, CgroupVersion};
use super::tree::{self, Tree};

#[derive(Debug)]
struct Entry {
    id: u64,
    /// The root process; also its process group.
    pid: i32,
    cgroup: Option<(PathBuf, CgroupVersion)>,
    log: PathBuf,
}

#[derive(Debug, Default)]
struct Registry {
    closed: bool,
    next_id: u64,
    entries: Vec<Entry>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { closed: false, next_id: 0, entries: Vec::new() });

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A live command's place in the registry; dropping it deregisters the command.
#[derive(Debug)]
pub(crate) struct Registration {
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock().entries.retain(|e| e.id != self.id);
    }
}

/// Registers a command just spawned; `None` when the registry is closed (the run is being
/// interrupted): the caller must kill the command.
pub(crate) fn register(pid: i32, cgroup: Option<(PathBuf, CgroupVersion)>, log: PathBuf) -> Option<Registration> {
    let mut registry = lock();
    if registry.closed {
        return None;
    }
    registry.next_id += 1;
    let id = registry.next_id;
    registry.entries.push(Entry { id, pid, cgroup, log });
    Some(Registration { id })
}

/// True once [`kill_all`] has run: commands that die now were killed by it.
pub(crate) fn is_closed() -> bool {
    lock().closed
}

/// Kills every live command's process tree (through its cgroup and its process group, and
/// the processes seen in its tree) and refuses to start any more. Waits until each cgroup is
/// empty (at most a few seconds) and removes it. Each command's log gets a line saying it was
/// killed. Returns how many commands were killed.
///
/// For when the process is about to exit (the CLI's Ctrl-C and SIGTERM handler): the threads
/// that ran the killed commands never return from [`super::run`] — they wait for the exit —,
/// so that no interrupted task is reported as failed, and no run finishes, records and exits
/// with its own status before the interrupt handler exits with its. To stop a run's commands
/// and go on, cancel its tasks instead (`Request::cancelled`).
pub fn kill_all() -> usize {
    let mut registry = lock();
    registry.closed = true;
    for entry in &registry.entries {
        tree::signal_group(entry.pid, libc::SIGKILL);
        Tree::new(entry.pid).kill();
        if let Some((dir, version)) = &entry.cgroup {
            cgroup::kill_cgroup(dir, *version);
            // The process is about to exit: its commands' watchers will not remove these.
            let _ = std::fs::remove_dir(dir);
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&entry.log) {
            let _ = writeln!(log, "--- runner: killed: the run was interrupted ---");
        }
    }
    registry.entries.len()
}

/// Parks the calling thread until the process exits: what a thread whose command [`kill_all`]
/// killed does instead of reporting it.
pub(crate) fn wait_for_exit() -> ! {
    loop {
        std::thread::park();
    }
}
