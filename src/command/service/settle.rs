//! How a task's use of a service ends: the task's result from how the service fared (killed,
//! ended, spoiled, leaking), the service kept for the next task when it can serve one, and the
//! task's log cut to its limit and closed with the runner's footer once the service is quiet.

use std::time::{Duration, Instant};

use runner_plugin::command::failure_text;
use runner_plugin::size::format_size;
use runner_plugin::{CommandExit, FailureKind, TaskError, Value};

use super::super::log::HandedLog;
use super::super::watch::Tail;
use super::{DEATH_PATIENCE, EXIT_PATIENCE, LANDED, Service, pool};
use crate::measure::PeakSource;

/// What became of a service during a task, besides the task's own result.
pub(super) struct Ending {
    pub spoiled: bool,
    pub killed: Option<Kill>,
    pub standing: u64,
    /// Whether it was started for this task.
    pub fresh: bool,
    /// When the task asked for it, its peak above the baseline, and how that was measured.
    pub started: Instant,
    pub peak: u64,
    pub source: PeakSource,
}

/// Decides the task's result from how the service fared, and keeps the service for the next
/// task if it can serve one. The log is cut to its limit once nothing writes into it any more:
/// the service is dead, or it replied (it gives its descriptors back before it does).
pub(super) fn settle(
    mut service: Service,
    ending: Ending,
    result: Result<Value, TaskError>,
    log: &mut HandedLog,
) -> Result<Value, TaskError> {
    let program = service.program();
    let footer = |log: &mut HandedLog, pid: i32, ended: &str, replaced: bool| {
        log.line(&format!(
            "--- runner: {ended} after {}; peak {} ({}: above the baseline of the service `{program}`, pid {pid}{}{}) ---",
            super::super::format_duration(ending.started.elapsed()),
            format_size(ending.peak),
            ending.source.as_str(),
            if ending.fresh { ", started for the task" } else { "" },
            if replaced { ", replaced since" } else { "" },
        ));
    };
    if let Some(kill) = ending.killed {
        service.kill();
        service.wait_exit(DEATH_PATIENCE);
        log.end_output();
        footer(log, service.pid, &kill.ended(), false);
        return Err(kill.error(&program, log));
    }
    let ended = if result.is_err() || ending.spoiled { service.wait_exit(EXIT_PATIENCE) } else { !service.is_alive() };
    if ended {
        let exit = service.exit.unwrap_or(CommandExit::Code(0));
        let oom = exit == CommandExit::Signal(libc::SIGKILL);
        log.end_output();
        // This attempt's output only: the log keeps earlier runs' before it.
        let tail = Tail::of_file(log.file(), log.start()).text();
        footer(log, service.pid, &format!("the service {exit} during the task"), false);
        let what = format!(
            "the service `{program}` (pid {}) {exit} during the task{}",
            service.pid,
            if oom { ", most likely by the kernel's out-of-memory killer" } else { "" }
        );
        let kind = if oom { FailureKind::OutOfMemory } else { FailureKind::Error };
        return Err(TaskError::of_kind(kind, failure_text(&what, &tail, log.path())));
    }
    let leaked = service.spec.recycle_above.is_some_and(|limit| ending.standing > limit);
    if leaked {
        tracing::info!(
            "service `{program}` replaced: it holds {} after the task, over its limit",
            format_size(ending.standing)
        );
    }
    let ended = if result.is_ok() { "the task succeeded" } else { "the task failed" };
    if ending.spoiled || leaked {
        let pid = service.pid;
        // Killed and waited for first: it may still be writing.
        drop(service);
        log.end_output();
        footer(log, pid, ended, true);
        return result;
    }
    log.end_output();
    footer(log, service.pid, ended, false);
    let mut pool = pool();
    pool.idle.push(service);
    let beyond = pool.take_beyond_keep();
    drop(pool);
    LANDED.notify_all();
    drop(beyond);
    result
}

/// Why a service was killed during a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kill {
    TimedOut(Duration),
    Cancelled,
    OverLimit(u64),
    /// To keep the run's budget: it held `held`, more than its task's `reserved`.
    Preempted {
        reserved: u64,
        held: u64,
    },
}

impl Kill {
    fn error(self, program: &str, log: &HandedLog) -> TaskError {
        let log = log.path().display();
        match self {
            Kill::TimedOut(after) => TaskError::of_kind(
                FailureKind::TimedOut,
                format!("timed out after {}: the service `{program}` was killed (log: {log})", seconds(after)),
            ),
            Kill::Cancelled => TaskError::of_kind(
                FailureKind::Cancelled,
                format!("cancelled: the service `{program}` was killed (log: {log})"),
            ),
            Kill::OverLimit(limit) => TaskError::of_kind(
                FailureKind::OutOfMemory,
                format!(
                    "the service `{program}` was killed: the task held more than its limit of {} (log: {log})",
                    format_size(limit)
                ),
            ),
            Kill::Preempted { reserved, held } => TaskError::of_kind(
                FailureKind::Preempted,
                format!(
                    "{} (log: {log})",
                    super::super::preempted_text(&format!("the service `{program}`"), held, reserved)
                ),
            ),
        }
    }

    /// How the task ended, for its log's footer.
    fn ended(self) -> String {
        match self {
            Kill::TimedOut(after) => format!("timed out after {} and was killed", seconds(after)),
            Kill::Cancelled => "was cancelled and killed".into(),
            Kill::OverLimit(limit) => format!("held more than its limit of {} and was killed", format_size(limit)),
            Kill::Preempted { .. } => "was preempted to keep the budget and killed".into(),
        }
    }
}

/// The failure of a task that timed out (`after`) waiting for a service of `program` to warm up.
pub(super) fn gave_up_waiting(program: &str, after: Duration, log_path: &std::path::Path) -> TaskError {
    let warm_up = super::idle_log::beside(log_path);
    TaskError::of_kind(
        FailureKind::TimedOut,
        format!(
            "timed out after {} waiting for the service `{program}` to warm up (its imports, or the class's \
             `init`, still running: see {})",
            seconds(after),
            warm_up.display()
        ),
    )
}

fn seconds(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s.fract() == 0.0 { format!("{s:.0} s") } else { format!("{s:.1} s") }
}
