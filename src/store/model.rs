//! What the store holds, as Rust types: run and task statuses, where a run ran, the rows a run
//! writes ([`TaskRecord`], [`RunStart`], [`RunOutcome`], the key layouts of [`StepKeys`]) and the
//! rows read back ([`RunRow`], [`Sample`], [`RunEvent`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::plan::EstimateSource;
use crate::scheduler::TaskFigures;

/// The state of a run row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Started and not finished: in progress, or killed and not yet noticed.
    Running,
    /// Finished with every task ok.
    Ok,
    /// Finished with failed tasks.
    Failed,
    /// Its process died without finishing it (noticed by a later [`Store::open`](super::Store::open), or seen gone
    /// by a reader). Its rows still teach what they measured.
    Killed,
    /// Its recorder was dropped without [`RunRecorder::finish`](super::RunRecorder::finish) (the runner gave up on it).
    Aborted,
    /// Stopped by Ctrl-C or SIGTERM. History and learning leave such runs out unless asked.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Running,
        RunStatus::Ok,
        RunStatus::Failed,
        RunStatus::Killed,
        RunStatus::Aborted,
        RunStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Killed => "killed",
            RunStatus::Aborted => "aborted",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Ok,
    Failed,
    /// Not run because something it depends on failed (or an input is missing).
    Skipped,
    /// Not run: `--resume` took over its output from the run it resumes.
    Reused,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 4] = [TaskStatus::Ok, TaskStatus::Failed, TaskStatus::Skipped, TaskStatus::Reused];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Ok => "ok",
            TaskStatus::Failed => "failed",
            TaskStatus::Skipped => "skipped",
            TaskStatus::Reused => "reused",
        }
    }

    pub fn parse(text: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// How `task_rows.status` stores it (the `tasks` view spells it out). 0 and 1 take no
    /// bytes in an SQLite record beyond the column's header byte.
    pub fn code(self) -> i64 {
        match self {
            TaskStatus::Ok => 0,
            TaskStatus::Failed => 1,
            TaskStatus::Skipped => 2,
            TaskStatus::Reused => 3,
        }
    }

    /// It ended ok or was reused: its output was made.
    pub fn made_output(self) -> bool {
        matches!(self, TaskStatus::Ok | TaskStatus::Reused)
    }

    /// The status stored as `code`; an unknown code reads as failed.
    pub fn from_code(code: i64) -> TaskStatus {
        TaskStatus::ALL.into_iter().find(|s| s.code() == code).unwrap_or(TaskStatus::Failed)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `history`, `hint` or `plugin` back to the plan's enum.
pub fn parse_estimate_source(text: &str) -> Option<EstimateSource> {
    [EstimateSource::History, EstimateSource::Hint, EstimateSource::Plugin].into_iter().find(|s| s.as_str() == text)
}

/// Where a run's tasks ran (`runs.executor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// Worker threads of this process.
    #[default]
    Local,
    /// Jobs on a Slurm cluster.
    Slurm,
}

impl Executor {
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Local => "local",
            Executor::Slurm => "slurm",
        }
    }

    pub fn parse(text: &str) -> Option<Executor> {
        [Executor::Local, Executor::Slurm].into_iter().find(|e| e.as_str() == text)
    }
}

/// One task's row, as a worker hands it to [`RunRecorder::record`](super::RunRecorder::record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    pub step: Arc<str>,
    /// The task's linear index in its step (row-major over its `over` dims).
    pub task_index: Option<u64>,
    /// The task's index values, e.g. `member=3,lead=12`; empty for a step without dims. `None`
    /// when the store spells it from `task_index`: only for steps whose [`StepKeys`] the run
    /// declared in [`RunStart::keys`].
    pub key: Option<String>,
    pub plugin: &'static str,
    pub status: TaskStatus,
    /// What it was admitted with and measured at, as the worker reported them.
    pub figures: TaskFigures,
    /// The worker that ran it, `0..workers`.
    pub worker: u32,
    /// The file holding what it printed (external commands).
    pub log_path: Option<String>,
    /// Content hashes for `--resume`: of its rendered args, of its inputs' content, of its
    /// output. `None` (or 0, which is no hash) where there is nothing to hash.
    pub args_hash: Option<u64>,
    pub inputs_hash: Option<u64>,
    pub output_hash: Option<u64>,
    /// Where its output is, when it is a file.
    pub output_path: Option<String>,
    pub error: Option<String>,
}

impl TaskRecord {
    /// A record with `step`'s name and `plugin`, the given status, and every figure zero or
    /// absent: a starting point for `TaskRecord { ..TaskRecord::new(...) }`.
    pub fn new(step: Arc<str>, plugin: &'static str, status: TaskStatus) -> TaskRecord {
        TaskRecord {
            step,
            task_index: None,
            key: Some(String::new()),
            plugin,
            status,
            figures: TaskFigures { attempts: u32::from(status != TaskStatus::Skipped), ..TaskFigures::default() },
            worker: 0,
            log_path: None,
            args_hash: None,
            inputs_hash: None,
            output_hash: None,
            output_path: None,
            error: None,
        }
    }
}

/// How the keys of a step over integer dims (ranges and groups) are spelled from a task's index,
/// so that its rows need not store them: dim `d` of task `i` has the value
/// `value0 + value_step * ((i / divisor(d)) % size)`, where `divisor` is the product of the
/// sizes of the dims after it, and the key is `name=value` joined by `,` in dim order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepKeys {
    pub step: String,
    pub dims: Vec<KeyDim>,
}

/// One dim of [`StepKeys`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDim {
    pub name: String,
    pub value0: i64,
    pub value_step: i64,
    pub size: u64,
}

impl StepKeys {
    /// The key of task `index`, spelled as the `tasks` view spells it.
    pub fn key(&self, index: u64) -> String {
        use std::fmt::Write as _;
        let mut key = String::new();
        let mut divisor: u64 = self.dims.iter().map(|d| d.size.max(1)).product();
        for (pos, dim) in self.dims.iter().enumerate() {
            divisor /= dim.size.max(1);
            let coord = (index / divisor) % dim.size.max(1);
            let value = dim.value0.wrapping_add(dim.value_step.wrapping_mul(coord as i64));
            let _ = write!(key, "{}{}={value}", if pos > 0 { "," } else { "" }, dim.name);
        }
        key
    }
}

/// The run row written when a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    pub recipe: String,
    pub cycle: String,
    pub budget_bytes: u64,
    pub workers: u32,
    /// Tasks the run has to do.
    pub tasks_total: u64,
    pub executor: Executor,
    /// The run a `--resume` continues.
    pub resumed_from: Option<i64>,
    /// Steps whose keys the store spells from task indices (see [`TaskRecord::key`]).
    pub keys: Vec<StepKeys>,
    /// The recipe's vars as the run has them, a JSON object (`{}` for none).
    pub vars: String,
    /// Services (warm interpreters) alive in the process as the run starts: a run after
    /// another in one process (a replay's) finds its interpreters warm.
    pub warm_services: u64,
}

impl RunStart {
    /// A local run of `recipe` at `cycle` with nothing else declared.
    pub fn new(recipe: impl Into<String>, cycle: impl Into<String>, budget_bytes: u64, workers: u32) -> RunStart {
        RunStart {
            recipe: recipe.into(),
            cycle: cycle.into(),
            budget_bytes,
            workers,
            tasks_total: 0,
            executor: Executor::Local,
            resumed_from: None,
            keys: Vec::new(),
            vars: "{}".into(),
            warm_services: 0,
        }
    }
}

/// The run row's remaining columns, written by [`RunRecorder::finish`](super::RunRecorder::finish). The writer counts the
/// rest (tasks by status, under-estimates, estimate and peak sums) from the rows it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// [`RunStatus::Ok`], [`RunStatus::Failed`] or [`RunStatus::Interrupted`] (any status is
    /// stored as given).
    pub status: RunStatus,
    pub wall: Duration,
    pub peak_rss_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Of `peak_reserved_bytes`, what service processes held at their baseline; of that, the
    /// pages forked services shared (counted once), and how many services' own baselines.
    pub standing_bytes: u64,
    pub standing_shared_bytes: u64,
    pub standing_services: u64,
    /// The most services (warm interpreters) alive at once during the run: those it started,
    /// where its peak may have caught fewer standing.
    pub most_services: u64,
    pub spilled_bytes: u64,
    pub spill_count: u64,
    /// How long writing the spills took, summed over them.
    pub spill_wall: Duration,
    pub spill_error: Option<String>,
    pub oversized: u64,
}

impl RunOutcome {
    /// An outcome of `status` with every figure 0: a starting point for
    /// `RunOutcome { ..RunOutcome::new(status) }`.
    pub fn new(status: RunStatus) -> RunOutcome {
        RunOutcome {
            status,
            wall: Duration::ZERO,
            peak_rss_bytes: 0,
            peak_reserved_bytes: 0,
            standing_bytes: 0,
            standing_shared_bytes: 0,
            standing_services: 0,
            most_services: 0,
            spilled_bytes: 0,
            spill_count: 0,
            spill_wall: Duration::ZERO,
            spill_error: None,
            oversized: 0,
        }
    }
}

/// A run row as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRow {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// As stored, except that a `running` run whose process is gone reads as `killed`.
    pub status: RunStatus,
    pub executor: Executor,
    pub budget_bytes: u64,
    pub workers: u32,
    pub tasks_total: Option<u64>,
    pub wall_ms: Option<u64>,
    /// `wall_ms` to the µs (runs from before schema version 7: the middle of their whole ms).
    pub wall_us: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    /// Of `peak_reserved_bytes`, what service processes held at their baseline; of that, the
    /// pages forked services shared, and how many services' own baselines (runs from before
    /// schema version 8: `None`).
    pub standing_bytes: Option<u64>,
    pub standing_shared_bytes: Option<u64>,
    pub standing_services: Option<u64>,
    /// Services alive as the run started ([`RunStart::warm_services`]; `None` before version 9).
    pub warm_services: Option<u64>,
    /// The most services alive at once during the run ([`RunOutcome::most_services`]; `None`
    /// before version 10).
    pub most_services: Option<u64>,
    pub spilled_bytes: Option<u64>,
    pub spill_count: Option<u64>,
    pub spill_error: Option<String>,
    pub tasks_ok: Option<u64>,
    pub tasks_failed: Option<u64>,
    pub tasks_skipped: Option<u64>,
    pub underestimates: Option<u64>,
    pub oversized: Option<u64>,
    pub estimate_bytes_sum: Option<u64>,
    pub peak_bytes_sum: Option<u64>,
    /// How far into the run (ms) its committed rows and samples reach.
    pub recorded_ms: Option<u64>,
    pub resumed_from: Option<i64>,
    pub pid: u32,
    /// The recipe's vars as the run had them, a JSON object; `None` for runs recorded before
    /// runner kept them.
    pub vars: Option<String>,
}

impl RunRow {
    /// What its service processes held at their baseline at its peak reserved, as the engine
    /// counts standing memory (none recorded: nothing).
    pub fn standing(&self) -> crate::memory::Standing {
        crate::memory::Standing {
            bytes: self.standing_bytes.unwrap_or(0),
            shared: self.standing_shared_bytes.unwrap_or(0),
            services: self.standing_services.unwrap_or(0),
        }
    }

    /// What its services held at their baseline had every service it started stood at its
    /// peak: the recipe's first run, its first task alone to be measured, may peak while the
    /// others are still starting, and the next run starts them all at once.
    pub fn standing_of_started(&self) -> crate::memory::Standing {
        let standing = self.standing();
        match self.most_services {
            Some(most) if most > standing.services => standing.with_services(most),
            _ => standing,
        }
    }
}

/// One point of a run's memory over time (`samples`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Sample {
    /// Since the run started.
    pub t_ms: u64,
    /// The ledger's count: running tasks' reservations plus resident buffers.
    pub reserved_bytes: u64,
    /// The process's live heap bytes.
    pub live_bytes: u64,
    pub rss_bytes: u64,
    /// Buffers kept in memory for their consumers.
    pub resident_bytes: u64,
    /// Spilled so far.
    pub spilled_bytes: u64,
    pub running_tasks: u64,
    /// Resident bytes of external commands' processes.
    pub external_bytes: u64,
}

/// What a [`RunEvent`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// Buffers were written to the spill dir to make room.
    Spill,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Spill => "spill",
        }
    }

    pub fn parse(text: &str) -> Option<EventKind> {
        [EventKind::Spill].into_iter().find(|k| k.as_str() == text)
    }
}

/// Something that happened during a run (`events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunEvent {
    pub t_ms: u64,
    pub kind: EventKind,
    pub bytes: Option<u64>,
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(TaskStatus::from_code(s.code()), s);
        }
        for s in [EstimateSource::History, EstimateSource::Hint, EstimateSource::Plugin] {
            assert_eq!(parse_estimate_source(s.as_str()), Some(s));
        }
    }

    #[test]
    fn keys_are_spelled_from_indices_in_row_major_order() {
        let keys = StepKeys {
            step: "s".into(),
            dims: vec![
                KeyDim { name: "member".into(), value0: 0, value_step: 1, size: 3 },
                KeyDim { name: "hour".into(), value0: 6, value_step: 3, size: 4 },
            ],
        };
        assert_eq!(keys.key(0), "member=0,hour=6");
        assert_eq!(keys.key(5), "member=1,hour=9");
        assert_eq!(keys.key(11), "member=2,hour=15");
        assert_eq!(StepKeys { step: "s".into(), dims: vec![] }.key(0), "");
    }
}
