//! The log a step's services write outside its tasks — Python's start, warm-ups (imports, a
//! class's `init`), what a library prints while its interpreter is idle: `warm-up.log` beside
//! the step's task logs. Every service is told it (`RUNNER_IDLE_LOG`), also one a task started,
//! so idle output never lands in a task's log after its footer. Bounded to `--log-limit` as a
//! task's log is ([`HandedLog`]): its middle freed as it grows, then cut to its first and last
//! halves once the run's services are shut down and nothing writes to it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::super::log::{HandedLog, log_limit};

/// The idle logs this process's services write, each opened once.
static LOGS: Mutex<Vec<HandedLog>> = Mutex::new(Vec::new());

/// The idle log of the step whose task log is `task_log`.
pub(super) fn beside(task_log: &Path) -> PathBuf {
    task_log.with_file_name("warm-up.log")
}

/// Starts bounding the idle log at `path` (once: later calls find it open), after a header.
pub(super) fn open(path: &Path) {
    let mut logs = LOGS.lock().unwrap_or_else(|p| p.into_inner());
    if logs.iter().any(|log| log.path() == path) {
        return;
    }
    match HandedLog::open(path, log_limit(), "services' start-up, warm-ups and output while idle") {
        Ok(log) => logs.push(log),
        Err(e) => tracing::debug!("cannot bound the log {}: {e}", path.display()),
    }
}

/// Frees what the idle logs hold past their limit (cheap while they are within it).
pub(super) fn bound() {
    for log in LOGS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        log.bound();
    }
}

/// Cuts each idle log to its limit; called once the services that wrote them are gone.
pub(super) fn finish() {
    let logs = std::mem::take(&mut *LOGS.lock().unwrap_or_else(|p| p.into_inner()));
    for mut log in logs {
        log.end_output();
    }
}
