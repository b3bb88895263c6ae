//! The feedback store: one SQLite file (default `runner.db`) with a row per run and a row per
//! task, from which later runs learn their estimates and `runner history` reports.
//!
//! - [`Store::open`] opens or creates the file (WAL, `synchronous=NORMAL`, a 10 s busy timeout),
//!   applies the schema migrations ([`schema`]) and marks as `killed` the runs whose process is
//!   gone ([`owner`]).
//! - [`Store::start_run`] inserts the run row (status `running`) and returns a [`RunRecorder`]:
//!   worker threads hand it [`TaskRecord`]s, a writer thread inserts them in batches ([`writer`]),
//!   and [`RunRecorder::finish`] completes the run row.
//! - [`query`] reads the history back: per-task rows of a step's recent runs for the estimator,
//!   per-run per-step aggregates for `runner history`.
//!
//! Several processes may record into one file at once: each writer takes the write lock only for
//! the length of one batch, and waits for the other's (busy timeout) rather than failing.

mod owner;
pub mod query;
pub mod schema;
pub mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

pub use query::{HistoryRun, HistoryTask, StepHistory};
pub use schema::SCHEMA_VERSION;
pub use writer::{RunRecorder, RunWritten};

use owner::Owner;

/// The store's file name when neither `--db` nor `RUNNER_DB` names one.
pub const DEFAULT_DB: &str = "runner.db";

/// The page size of a new file.
pub const PAGE_SIZE: u32 = 16 * 1024;

/// How long a connection waits for another process's write lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong with the store. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open feedback store {}: {source}", path.display())]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("cannot create the directory of feedback store {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("{} is not a runner feedback store: {reason}", path.display())]
    NotAStore { path: PathBuf, reason: String },
    #[error(
        "feedback store {} has schema version {found}, newer than this runner understands ({known}); \
         use a newer runner, or another file with --db",
        path.display()
    )]
    TooNew { path: PathBuf, found: u32, known: u32 },
    #[error("feedback store {}: migrating the schema to version {version} failed: {source}", path.display())]
    Migrate { path: PathBuf, version: u32, source: rusqlite::Error },
    #[error("feedback store {}: {what} failed: {source}", path.display())]
    Sql { path: PathBuf, what: &'static str, source: rusqlite::Error },
    #[error("feedback store {}: cannot start the writer thread: {source}", path.display())]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error(
        "feedback store {}: recording run {run_id} failed, {lost} task rows were not written: {source}",
        path.display()
    )]
    Write { path: PathBuf, run_id: i64, lost: u64, source: rusqlite::Error },
    #[error("feedback store {}: the writer thread of run {run_id} panicked", path.display())]
    WriterPanicked { path: PathBuf, run_id: i64 },
}

impl StoreError {
    pub(crate) fn sql(path: &Path, what: &'static str, source: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: path.to_path_buf(), what, source }
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
    /// Its process died without finishing it (noticed by a later [`Store::open`]).
    Killed,
    /// Its recorder was dropped without [`RunRecorder::finish`] (the runner gave up on it).
    Aborted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Killed => "killed",
            RunStatus::Aborted => "aborted",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "running" => RunStatus::Running,
            "ok" => RunStatus::Ok,
            "failed" => RunStatus::Failed,
            "killed" => RunStatus::Killed,
            "aborted" => RunStatus::Aborted,
            _ => return None,
        })
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
    /// Not run because something it depends on failed.
    Skipped,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Ok => "ok",
            TaskStatus::Failed => "failed",
            TaskStatus::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<TaskStatus> {
        Some(match text {
            "ok" => TaskStatus::Ok,
            "failed" => TaskStatus::Failed,
            "skipped" => TaskStatus::Skipped,
            _ => return None,
        })
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task's row, as a worker hands it to [`RunRecorder::record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    pub step: Arc<str>,
    /// The task's index values, e.g. `member=3,lead=12`; empty for a step without dims.
    pub key: String,
    pub plugin: &'static str,
    pub status: TaskStatus,
    pub attempts: u32,
    pub input_bytes: u64,
    /// The estimate the task was admitted with.
    pub estimate_bytes: u64,
    /// `history`, `hint` or `plugin`.
    pub estimate_source: &'static str,
    /// What the plugin itself estimated for this task (the estimator calibrates it).
    pub plugin_estimate_bytes: u64,
    pub peak_bytes: u64,
    pub output_bytes: u64,
    pub wall_ms: u64,
    pub error: Option<String>,
}

/// The run row written when a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    pub recipe: String,
    pub cycle: String,
    pub budget_bytes: u64,
    pub workers: u32,
}

/// The run row's remaining columns, written by [`RunRecorder::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOutcome {
    /// [`RunStatus::Ok`] or [`RunStatus::Failed`] (any status is stored as given).
    pub status: RunStatus,
    pub wall_ms: u64,
    pub peak_rss_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub spilled_bytes: u64,
}

/// A run row as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRow {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub budget_bytes: u64,
    pub workers: u32,
    pub wall_ms: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub spilled_bytes: Option<u64>,
    pub tasks_ok: Option<u64>,
    pub tasks_failed: Option<u64>,
    pub tasks_skipped: Option<u64>,
    pub underestimates: Option<u64>,
    pub pid: u32,
}

/// An open feedback store. Not `Sync`: one per thread (each [`RunRecorder`] has its own
/// connection on its writer thread).
pub struct Store {
    conn: Connection,
    path: PathBuf,
    owner: Owner,
    killed: Vec<i64>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Byte counts are `u64`, SQLite integers `i64`: saturate rather than fail a batch.
pub(crate) fn to_sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn from_sql_int(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(crate) fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Opens a connection to `path` configured for the store (no schema work).
pub(crate) fn connect(path: &Path) -> Result<Connection, StoreError> {
    let open_err = |source| StoreError::Open { path: path.to_path_buf(), source };
    let conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    // For a new file only (and before WAL, which fixes it): fewer, larger pages make recording
    // about 15% cheaper.
    conn.pragma_update(None, "page_size", PAGE_SIZE).map_err(open_err)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).map_err(|source| {
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
                StoreError::NotAStore { path: path.to_path_buf(), reason: "it is not an SQLite database".into() }
            } else {
                open_err(source)
            }
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!("feedback store {}: journal mode is {mode}, not WAL", path.display());
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(open_err)?;
    Ok(conn)
}

const RUN_COLUMNS: &str = "run_id, recipe, cycle, started_at, finished_at, status, budget_bytes, workers, wall_ms, \
     peak_rss_bytes, peak_reserved_bytes, spilled_bytes, tasks_ok, tasks_failed, tasks_skipped, underestimates, pid";

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    let opt = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(from_sql_int));
    let status: String = row.get(5)?;
    Ok(RunRow {
        run_id: row.get(0)?,
        recipe: row.get(1)?,
        cycle: row.get(2)?,
        started_at: row.get(3)?,
        finished_at: row.get(4)?,
        status: RunStatus::parse(&status).unwrap_or(RunStatus::Killed),
        budget_bytes: from_sql_int(row.get(6)?),
        workers: row.get(7)?,
        wall_ms: opt(8)?,
        peak_rss_bytes: opt(9)?,
        peak_reserved_bytes: opt(10)?,
        spilled_bytes: opt(11)?,
        tasks_ok: opt(12)?,
        tasks_failed: opt(13)?,
        tasks_skipped: opt(14)?,
        underestimates: opt(15)?,
        pid: row.get(16)?,
    })
}

impl Store {
    /// Opens the store at `path`, creating the file (and its directory) if needed, migrating its
    /// schema, and marking as [`RunStatus::Killed`] the runs left `running` by a process that is
    /// gone. A file from a newer runner, or not a runner store, is refused.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { path: path.clone(), source })?;
        }
        let mut conn = connect(&path)?;
        schema::migrate(&mut conn, &path)?;
        let mut store = Store { conn, path, owner: Owner::current(), killed: Vec::new() };
        store.killed = store.mark_killed_runs()?;
        Ok(store)
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
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

    pub(crate) fn err(&self, what: &'static str, source: rusqlite::Error) -> StoreError {
        StoreError::sql(&self.path, what, source)
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Marks `killed` the `running` runs whose owner process is gone; returns their ids.
    fn mark_killed_runs(&self) -> Result<Vec<i64>, StoreError> {
        let what = "looking for runs left unfinished by a killed process";
        let mut stmt = self
            .conn
            .prepare("SELECT run_id, pid, proc_start, boot_id, host FROM runs WHERE status = 'running'")
            .map_err(|e| self.err(what, e))?;
        let running = stmt
            .query_map([], |row| {
                let owner = Owner {
                    pid: row.get(1)?,
                    start_ticks: row.get::<_, Option<i64>>(2)?.map(from_sql_int),
                    boot_id: row.get(3)?,
                    host: row.get(4)?,
                };
                Ok((row.get::<_, i64>(0)?, owner))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        let mut killed = Vec::new();
        for (run_id, owner) in running {
            if self.owner.is_gone(&owner) {
                let changed = self
                    .conn
                    .execute("UPDATE runs SET status = 'killed' WHERE run_id = ?1 AND status = 'running'", [run_id])
                    .map_err(|e| self.err("marking a killed run", e))?;
                if changed > 0 {
                    tracing::info!(
                        "feedback store {}: run {run_id} was killed before it finished",
                        self.path.display()
                    );
                    killed.push(run_id);
                }
            }
        }
        Ok(killed)
    }

    /// Inserts the run row (status `running`) and starts the writer thread that records its
    /// tasks.
    pub fn start_run(&self, start: &RunStart) -> Result<RunRecorder, StoreError> {
        let owner = &self.owner;
        self.conn
            .execute(
                "INSERT INTO runs (recipe, cycle, started_at, status, budget_bytes, workers, pid, proc_start, boot_id, \
                 host, runner_version) VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    start.recipe,
                    start.cycle,
                    now_text(),
                    to_sql_int(start.budget_bytes),
                    start.workers,
                    owner.pid,
                    owner.start_ticks.map(to_sql_int),
                    owner.boot_id,
                    owner.host,
                    env!("CARGO_PKG_VERSION"),
                ],
            )
            .map_err(|e| self.err("inserting the run row", e))?;
        let run_id = self.conn.last_insert_rowid();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in [RunStatus::Running, RunStatus::Ok, RunStatus::Failed, RunStatus::Killed, RunStatus::Aborted] {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        for s in [TaskStatus::Ok, TaskStatus::Failed, TaskStatus::Skipped] {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn store_opens_migrates_once_and_records_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/runner.db");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let recorder = store
            .start_run(&RunStart { recipe: "r".into(), cycle: "c1".into(), budget_bytes: 1 << 30, workers: 2 })
            .unwrap();
        let step: Arc<str> = Arc::from("s");
        for i in 0..10u64 {
            recorder.record(TaskRecord {
                step: step.clone(),
                key: format!("i={i}"),
                plugin: "noop",
                status: TaskStatus::Ok,
                attempts: 1,
                input_bytes: i,
                estimate_bytes: 10,
                estimate_source: "plugin",
                plugin_estimate_bytes: 10,
                peak_bytes: i * 2,
                output_bytes: 0,
                wall_ms: 1,
                error: None,
            });
        }
        let run_id = recorder.run_id();
        let written = recorder
            .finish(RunOutcome {
                status: RunStatus::Ok,
                wall_ms: 5,
                peak_rss_bytes: 1,
                peak_reserved_bytes: 2,
                spilled_bytes: 0,
            })
            .unwrap();
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
