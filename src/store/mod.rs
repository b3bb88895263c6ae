//! The feedback store: one SQLite file (default `runner.db`) with a row per run and a row per
//! task, from which later runs learn their estimates and `runner history` and `runner report`
//! tell what happened.
//!
//! - [`Store::open`] opens or creates the file for recording: it looks at the file read-only
//!   first and refuses one that is not a runner store without changing a byte (`connect`),
//!   then sets WAL, applies the schema migrations ([`schema`]) and marks as `killed` (with an
//!   estimated `finished_at`) the runs whose process is gone ([`crate::process_identity`]).
//!   [`Store::open_read_only`] is for commands that only read: it never writes, not even beside
//!   the file.
//! - [`Store::start_run`] inserts the run row (status `running`) and returns a [`RunRecorder`]:
//!   worker threads hand it [`TaskRecord`]s, the sampler [`Sample`]s and [`RunEvent`]s, a writer
//!   thread inserts them in batches ([`writer`]), and [`RunRecorder::finish`] completes the run
//!   row.
//! - [`query`] reads the history back: per-task rows of a step's recent runs for the estimator,
//!   per-run per-step aggregates and failures for `runner history`; [`prune`] deletes old runs.
//!
//! Several processes may record into one file at once: each writer takes the write lock only for
//! the length of one batch, and waits for the other's rather than failing.

mod connect;
pub mod prune;
pub mod query;
pub mod schema;
pub mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::measure::PeakSource;
use crate::plan::EstimateSource;
use crate::process_identity::ProcessIdentity;

pub use connect::{BUSY_NOTICE_AFTER, PAGE_SIZE};
pub use prune::{Prune, Pruned};
pub use query::{FailedTask, HistoryRun, HistoryTask, RecordedTask, RunFilter, StepHistory, TimelineTask};
pub use schema::SCHEMA_VERSION;
pub use writer::{RunInterrupt, RunRecorder, RunWritten};

use connect::Found;

/// The store's file name when neither `--db` nor `RUNNER_DB` names one.
pub const DEFAULT_DB: &str = "runner.db";

/// What can go wrong with the store. Every message names the file and says SQLite's reason once
/// (the SQLite error is part of the message, not a chained source that would repeat it).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open feedback store {}: {error}", path.display())]
    Open { path: PathBuf, error: rusqlite::Error },
    #[error("feedback store {}: {what} failed: {error}", path.display())]
    Io { path: PathBuf, what: &'static str, error: std::io::Error },
    #[error("{} is not a runner feedback store: {reason}", path.display())]
    NotAStore { path: PathBuf, reason: String },
    #[error(
        "feedback store {} has schema version {found}, newer than this runner understands ({known}); \
         use a newer runner, or another file with --db",
        path.display()
    )]
    TooNew { path: PathBuf, found: u32, known: u32 },
    #[error(
        "feedback store {} has schema version {found}, older than this runner's ({known}); a command that \
         only reads does not change it: the next `runner run` that records into it migrates it",
        path.display()
    )]
    TooOld { path: PathBuf, found: u32, known: u32 },
    #[error("feedback store {} was opened read-only: {what} needs a store opened for recording", path.display())]
    ReadOnly { path: PathBuf, what: &'static str },
    #[error("feedback store {}: migrating the schema to version {version} failed: {error}", path.display())]
    Migrate { path: PathBuf, version: u32, error: rusqlite::Error },
    #[error("feedback store {}: {what} failed: {error}", path.display())]
    Sql { path: PathBuf, what: &'static str, error: rusqlite::Error },
    #[error("feedback store {}: cannot start the writer thread: {error}", path.display())]
    Spawn { path: PathBuf, error: std::io::Error },
    #[error(
        "feedback store {}: recording run {run_id} failed, {lost} task rows were not written: {error}",
        path.display()
    )]
    Write { path: PathBuf, run_id: i64, lost: u64, error: rusqlite::Error },
    #[error("feedback store {}: the writer thread of run {run_id} panicked", path.display())]
    WriterPanicked { path: PathBuf, run_id: i64 },
}

impl StoreError {
    pub(crate) fn sql(path: &Path, what: &'static str, error: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: path.to_path_buf(), what, error }
    }
}

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
    /// Its process died without finishing it (noticed by a later [`Store::open`], or seen gone
    /// by a reader). Its rows still teach what they measured.
    Killed,
    /// Its recorder was dropped without [`RunRecorder::finish`] (the runner gave up on it).
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

/// One task's row, as a worker hands it to [`RunRecorder::record`].
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
    pub attempts: u32,
    pub input_bytes: u64,
    /// The estimate the task was admitted with, and where it came from.
    pub estimate_bytes: u64,
    pub estimate_source: EstimateSource,
    /// What the plugin itself estimated for this task (the estimator calibrates it).
    pub plugin_estimate_bytes: u64,
    pub peak_bytes: u64,
    pub peak_source: PeakSource,
    pub output_bytes: u64,
    pub wall_ms: u64,
    /// The worker that ran it, `0..workers`.
    pub worker: u32,
    /// When it started, in ms since the run started (its end is `start_ms + wall_ms`).
    pub start_ms: u64,
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
            attempts: u32::from(status != TaskStatus::Skipped),
            input_bytes: 0,
            estimate_bytes: 0,
            estimate_source: EstimateSource::Plugin,
            plugin_estimate_bytes: 0,
            peak_bytes: 0,
            peak_source: PeakSource::Allocator,
            output_bytes: 0,
            wall_ms: 0,
            worker: 0,
            start_ms: 0,
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
        }
    }
}

/// The run row's remaining columns, written by [`RunRecorder::finish`]. The writer counts the
/// rest (tasks by status, under-estimates, estimate and peak sums) from the rows it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// [`RunStatus::Ok`], [`RunStatus::Failed`] or [`RunStatus::Interrupted`] (any status is
    /// stored as given).
    pub status: RunStatus,
    pub wall_ms: u64,
    pub peak_rss_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub spilled_bytes: u64,
    pub spill_count: u64,
    pub spill_error: Option<String>,
    pub oversized: u64,
}

impl RunOutcome {
    /// An outcome of `status` with every figure 0: a starting point for
    /// `RunOutcome { ..RunOutcome::new(status) }`.
    pub fn new(status: RunStatus) -> RunOutcome {
        RunOutcome {
            status,
            wall_ms: 0,
            peak_rss_bytes: 0,
            peak_reserved_bytes: 0,
            spilled_bytes: 0,
            spill_count: 0,
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
    pub peak_rss_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
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

/// An open feedback store. Not `Sync`: one per thread (each [`RunRecorder`] has its own
/// connection on its writer thread).
pub struct Store {
    conn: Connection,
    path: PathBuf,
    read_only: bool,
    killed: Vec<i64>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).field("read_only", &self.read_only).finish_non_exhaustive()
    }
}

/// Byte counts are `u64`, SQLite integers `i64`: saturate rather than fail a batch.
pub(crate) fn to_sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn from_sql_int(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Hashes are any 64 bits; SQLite keeps them as the i64 with the same bits.
pub(crate) fn hash_to_sql(hash: u64) -> i64 {
    hash as i64
}

pub(crate) fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `started_at` plus `ms`, in the same format; `started_at` itself if it does not parse.
fn time_after(started_at: &str, ms: u64) -> String {
    match chrono::DateTime::parse_from_rfc3339(started_at) {
        Ok(start) => (start.with_timezone(&chrono::Utc) + chrono::Duration::milliseconds(to_sql_int(ms)))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        Err(_) => started_at.to_string(),
    }
}

const RUN_COLUMNS: &str = "run_id, recipe, cycle, started_at, finished_at, status, executor, budget_bytes, workers, \
     tasks_total, wall_ms, peak_rss_bytes, peak_reserved_bytes, spilled_bytes, spill_count, spill_error, tasks_ok, \
     tasks_failed, tasks_skipped, underestimates, oversized, estimate_bytes_sum, peak_bytes_sum, recorded_ms, \
     resumed_from, pid, proc_start, boot_id, host, pid_ns";

/// The owner of a run row, from its last five [`RUN_COLUMNS`] starting at `at`.
fn run_owner(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ProcessIdentity> {
    Ok(ProcessIdentity {
        pid: row.get(at)?,
        start_ticks: row.get::<_, Option<i64>>(at + 1)?.map(from_sql_int),
        boot_id: row.get(at + 2)?,
        host: row.get(at + 3)?,
        pid_ns: row.get(at + 4)?,
    })
}

/// A stored status, with a `running` run whose owner is gone read as killed (a reader cannot
/// mark it, and must not show it as going on).
pub(crate) fn status_now(stored: &str, owner: impl FnOnce() -> rusqlite::Result<ProcessIdentity>) -> RunStatus {
    match RunStatus::parse(stored) {
        Some(RunStatus::Running) if owner().is_ok_and(|o| o.is_gone()) => RunStatus::Killed,
        Some(status) => status,
        None => RunStatus::Killed,
    }
}

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    let opt = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(from_sql_int));
    let status: String = row.get(5)?;
    let executor: String = row.get(6)?;
    Ok(RunRow {
        run_id: row.get(0)?,
        recipe: row.get(1)?,
        cycle: row.get(2)?,
        started_at: row.get(3)?,
        finished_at: row.get(4)?,
        status: status_now(&status, || run_owner(row, 25)),
        executor: Executor::parse(&executor).unwrap_or_default(),
        budget_bytes: from_sql_int(row.get(7)?),
        workers: row.get(8)?,
        tasks_total: opt(9)?,
        wall_ms: opt(10)?,
        peak_rss_bytes: opt(11)?,
        peak_reserved_bytes: opt(12)?,
        spilled_bytes: opt(13)?,
        spill_count: opt(14)?,
        spill_error: row.get(15)?,
        tasks_ok: opt(16)?,
        tasks_failed: opt(17)?,
        tasks_skipped: opt(18)?,
        underestimates: opt(19)?,
        oversized: opt(20)?,
        estimate_bytes_sum: opt(21)?,
        peak_bytes_sum: opt(22)?,
        recorded_ms: opt(23)?,
        resumed_from: row.get(24)?,
        pid: row.get(25)?,
    })
}

impl Store {
    /// Opens the store at `path` for recording, creating the file (and its directory) if
    /// needed, migrating its schema, and marking as [`RunStatus::Killed`] the runs left
    /// `running` by a process that is gone. A file from a newer runner, or not a runner store,
    /// is refused before anything is written to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let found = connect::inspect(&path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::create_dir_all(dir).map_err(|error| StoreError::Io {
                path: path.clone(),
                what: "creating its directory",
                error,
            })?;
        }
        let mut conn = connect::open_writer(&path, found)?;
        schema::migrate(&mut conn, &path)?;
        let mut store = Store { conn, path, read_only: false, killed: Vec::new() };
        store.killed = store.mark_killed_runs()?;
        Ok(store)
    }

    /// Opens the store at `path` for reading only: nothing is written, to the file or beside it
    /// (it works in a directory this process cannot write). `None` when there is no store
    /// there yet (no file, or an empty one). A store of an older schema is refused
    /// ([`StoreError::TooOld`]): reading it needs the migration a recording run makes.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Option<Store>, StoreError> {
        let path = path.as_ref().to_path_buf();
        if connect::inspect(&path)? == Found::Nothing {
            return Ok(None);
        }
        let conn = connect::open_reader(&path)?;
        match connect::inspect_connection(&conn, &path)? {
            Found::Nothing => Ok(None),
            Found::Store { version } if version < SCHEMA_VERSION => {
                Err(StoreError::TooOld { path, found: version, known: SCHEMA_VERSION })
            }
            Found::Store { .. } => Ok(Some(Store { conn, path, read_only: true, killed: Vec::new() })),
        }
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The runs [`Store::open`] found abandoned by a dead process and marked killed.
    pub fn killed_at_open(&self) -> &[i64] {
        &self.killed
    }

    /// The file's schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|e| self.err("reading the schema version", e))
    }

    pub(crate) fn err(&self, what: &'static str, error: rusqlite::Error) -> StoreError {
        StoreError::sql(&self.path, what, error)
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn writable(&self, what: &'static str) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly { path: self.path.clone(), what });
        }
        Ok(())
    }

    /// Marks `killed` the `running` runs whose owner process is gone, with `finished_at` as
    /// far as their committed rows and samples reach, and their rows counted by status; returns
    /// their ids.
    fn mark_killed_runs(&self) -> Result<Vec<i64>, StoreError> {
        let what = "looking for runs left unfinished by a killed process";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, started_at, recorded_ms, pid, proc_start, boot_id, host, pid_ns FROM runs \
                 WHERE status = 'running'",
            )
            .map_err(|e| self.err(what, e))?;
        let running = stmt
            .query_map([], |row| {
                let recorded: Option<i64> = row.get(2)?;
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    recorded.map_or(0, from_sql_int),
                    run_owner(row, 3)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        let mut killed = Vec::new();
        for (run_id, started_at, recorded_ms, owner) in running {
            if !owner.is_gone() {
                continue;
            }
            let changed = self
                .conn
                .execute(
                    &format!(
                        "UPDATE runs SET status = 'killed', finished_at = ?2, \
                         tasks_ok = counts.ok, tasks_failed = counts.failed, tasks_skipped = counts.skipped \
                         FROM (SELECT coalesce(sum(t.status = 0), 0) AS ok, coalesce(sum(t.status = 1), 0) AS failed, \
                           coalesce(sum(t.status = 2), 0) AS skipped FROM {}) AS counts \
                         WHERE run_id = ?1 AND status = 'running'",
                        query::RUN_ROWS
                    ),
                    params![run_id, time_after(&started_at, recorded_ms)],
                )
                .map_err(|e| self.err("marking a killed run", e))?;
            if changed > 0 {
                tracing::info!("feedback store {}: run {run_id} was killed before it finished", self.path.display());
                killed.push(run_id);
            }
        }
        Ok(killed)
    }

    /// Inserts the run row (status `running`) and the key layouts of its steps, and starts the
    /// writer thread that records its tasks.
    pub fn start_run(&self, start: &RunStart) -> Result<RunRecorder, StoreError> {
        self.writable("starting a run")?;
        let owner = ProcessIdentity::current();
        let run_id = (|| {
            let tx = self.conn.unchecked_transaction()?;
            tx.execute(
                "INSERT INTO runs (recipe, cycle, started_at, status, executor, budget_bytes, workers, tasks_total, \
                 resumed_from, pid, proc_start, boot_id, host, pid_ns, runner_version) \
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    start.recipe,
                    start.cycle,
                    now_text(),
                    start.executor.as_str(),
                    to_sql_int(start.budget_bytes),
                    start.workers,
                    to_sql_int(start.tasks_total),
                    start.resumed_from,
                    owner.pid,
                    owner.start_ticks.map(to_sql_int),
                    owner.boot_id,
                    owner.host,
                    owner.pid_ns,
                    env!("CARGO_PKG_VERSION"),
                ],
            )?;
            let run_id = tx.last_insert_rowid();
            let mut dims = tx.prepare(
                "INSERT INTO step_dims (run_id, step, pos, name, value0, value_step, size, divisor) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for keys in &start.keys {
                let mut divisor: u64 = keys.dims.iter().map(|d| d.size.max(1)).product();
                for (pos, dim) in keys.dims.iter().enumerate() {
                    divisor /= dim.size.max(1);
                    dims.execute(params![
                        run_id,
                        keys.step,
                        pos as i64,
                        dim.name,
                        dim.value0,
                        dim.value_step,
                        to_sql_int(dim.size.max(1)),
                        to_sql_int(divisor),
                    ])?;
                }
            }
            drop(dims);
            tx.commit()?;
            Ok(run_id)
        })()
        .map_err(|e| self.err("inserting the run row", e))?;
        RunRecorder::start(&self.path, run_id).inspect_err(|_| {
            // Best effort: the error being returned is what matters.
            let _ = self.conn.execute("UPDATE runs SET status = 'aborted' WHERE run_id = ?1", [run_id]);
        })
    }

    /// One run row.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        self.conn
            .query_row(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"), [run_id], run_row)
            .optional()
            .map_err(|e| self.err("reading a run row", e))
    }

    /// The last `last` runs (of `recipe`, or of any recipe), oldest first.
    pub fn runs(&self, recipe: Option<&str>, last: usize) -> Result<Vec<RunRow>, StoreError> {
        let what = "listing runs";
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE ?1 IS NULL OR recipe = ?1 ORDER BY run_id DESC LIMIT ?2"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt
            .query_map(params![recipe, to_sql_int(last as u64)], run_row)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        rows.reverse();
        Ok(rows)
    }

    /// The recipes that have runs, by name.
    pub fn recipes(&self) -> Result<Vec<String>, StoreError> {
        let what = "listing recipes";
        let mut stmt =
            self.conn.prepare("SELECT DISTINCT recipe FROM runs ORDER BY recipe").map_err(|e| self.err(what, e))?;
        stmt.query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))
    }

    /// The steps that have rows in runs of `recipe` (or of any recipe), by name.
    pub fn steps(&self, recipe: Option<&str>) -> Result<Vec<String>, StoreError> {
        let what = "listing steps";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT b.step FROM task_blocks AS b JOIN runs AS r ON r.run_id = b.run_id \
                 WHERE ?1 IS NULL OR r.recipe = ?1 ORDER BY b.step",
            )
            .map_err(|e| self.err(what, e))?;
        stmt.query_map([recipe], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))
    }

    /// A run's memory samples, in time order.
    pub fn samples(&self, run_id: i64) -> Result<Vec<Sample>, StoreError> {
        let what = "reading a run's memory samples";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t_ms, reserved_bytes, live_bytes, rss_bytes, resident_bytes, spilled_bytes, running_tasks, \
                 external_bytes FROM samples WHERE run_id = ?1 ORDER BY t_ms",
            )
            .map_err(|e| self.err(what, e))?;
        stmt.query_map([run_id], |row| {
            let int = |i: usize| row.get::<_, i64>(i).map(from_sql_int);
            Ok(Sample {
                t_ms: int(0)?,
                reserved_bytes: int(1)?,
                live_bytes: int(2)?,
                rss_bytes: int(3)?,
                resident_bytes: int(4)?,
                spilled_bytes: int(5)?,
                running_tasks: int(6)?,
                external_bytes: int(7)?,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| self.err(what, e))
    }

    /// A run's events, in time order.
    pub fn events(&self, run_id: i64) -> Result<Vec<RunEvent>, StoreError> {
        let what = "reading a run's events";
        let mut stmt = self
            .conn
            .prepare("SELECT t_ms, kind, bytes, detail FROM events WHERE run_id = ?1 ORDER BY t_ms, event_id")
            .map_err(|e| self.err(what, e))?;
        let rows = stmt
            .query_map([run_id], |row| {
                let kind: String = row.get(1)?;
                Ok((
                    from_sql_int(row.get(0)?),
                    kind,
                    row.get::<_, Option<i64>>(2)?.map(from_sql_int),
                    row.get::<_, Option<String>>(3)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        // Kinds a newer runner wrote are left out rather than misread.
        Ok(rows
            .into_iter()
            .filter_map(|(t_ms, kind, bytes, detail)| {
                Some(RunEvent { t_ms, kind: EventKind::parse(&kind)?, bytes, detail })
            })
            .collect())
    }
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

    #[test]
    fn killed_runs_end_where_their_records_end() {
        assert_eq!(time_after("2026-11-01T00:00:00.000Z", 61_500), "2026-11-01T00:01:01.500Z");
        assert_eq!(time_after("not a time", 5), "not a time");
    }

    #[test]
    fn store_opens_migrates_once_and_records_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/runner.db");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let recorder = store.start_run(&RunStart::new("r", "c1", 1 << 30, 2)).unwrap();
        let step: Arc<str> = Arc::from("s");
        for i in 0..10u64 {
            recorder.record(TaskRecord {
                task_index: Some(i),
                key: Some(format!("i={i}")),
                input_bytes: i,
                estimate_bytes: 10,
                plugin_estimate_bytes: 10,
                peak_bytes: i * 2,
                wall_ms: 1,
                ..TaskRecord::new(step.clone(), "noop", TaskStatus::Ok)
            });
        }
        let run_id = recorder.run_id();
        let written = recorder.finish(RunOutcome { wall_ms: 5, ..RunOutcome::new(RunStatus::Ok) }).unwrap();
        assert_eq!(written.rows, 10);
        let row = store.run(run_id).unwrap().unwrap();
        assert_eq!(row.status, RunStatus::Ok);
        assert_eq!((row.tasks_ok, row.underestimates), (Some(10), Some(4)));
        drop(store);
        let again = Store::open(&path).unwrap();
        assert_eq!(again.runs(Some("r"), 10).unwrap().len(), 1);
        assert!(again.killed_at_open().is_empty());
    }
}
