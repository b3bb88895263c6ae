//! Ctrl-C and SIGTERM: before the process exits, the external commands still running are killed
//! (their whole process trees), the run is marked `interrupted` in the store ([`on_interrupt`]),
//! and its spill folder and scratch folders are removed, so an interrupted run leaves nothing
//! behind. (A SIGKILLed run cannot clean up; its
//! spill folder is removed by the next run.)

use std::path::PathBuf;
use std::sync::Mutex;

/// Folders to remove when interrupted (the runs' scratch folders).
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// What to do first when interrupted (mark the running run `interrupted` in the store), by id.
type Action = Box<dyn FnOnce() + Send>;
static ACTIONS: Mutex<Vec<(u64, Action)>> = Mutex::new(Vec::new());

/// Blocks SIGINT and SIGTERM in the calling thread — every thread spawned afterwards inherits
/// that — and waits for them on a thread of its own, where cleaning up may lock and allocate
/// (unlike inside a signal handler). Call it before spawning any other thread.
pub fn install() {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; the calls only read and write
    // the set and this thread's signal mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    let spawned = std::thread::Builder::new().name("runner-signals".into()).spawn(move || {
        let mut signal = 0;
        // SAFETY: `set` lives in this closure; sigwait writes the signal number into `signal`.
        if unsafe { libc::sigwait(&set, &mut signal) } == 0 {
            // External commands first: their process trees must not outlive the run.
            let commands = crate::command::kill_all();
            let actions = std::mem::take(&mut *ACTIONS.lock().unwrap_or_else(|p| p.into_inner()));
            actions.into_iter().for_each(|(_, action)| action());
            crate::budget::release();
            let spill_folders = crate::memory::spill::remove_active_dirs();
            for dir in SCRATCH.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
            say!("\ninterrupted: stopped, {commands} command(s) killed, {spill_folders} spill folder(s) removed");
            std::process::exit(128 + signal);
        }
    });
    if spawned.is_err() {
        // Without the waiting thread, let the signals act as usual rather than be ignored.
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

/// Removes `dir` too if the process is interrupted.
pub fn remove_on_interrupt(dir: PathBuf) {
    SCRATCH.lock().unwrap_or_else(|p| p.into_inner()).push(dir);
}

/// Runs `action` before exiting if the process is interrupted while the guard lives.
pub fn on_interrupt(action: impl FnOnce() + Send + 'static) -> InterruptGuard {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ACTIONS.lock().unwrap_or_else(|p| p.into_inner()).push((id, Box::new(action)));
    InterruptGuard(id)
}

/// Withdraws its [`on_interrupt`] action when dropped.
pub struct InterruptGuard(u64);

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        ACTIONS.lock().unwrap_or_else(|p| p.into_inner()).retain(|(id, _)| *id != self.0);
    }
}
