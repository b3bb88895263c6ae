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
//! - [`sink`] is the engine's side: a compiled run's start row, and the scheduler's `TaskSink`
//!   that turns each finished task's report into its row.
//! - The row types, written and read, are `model`'s; run rows, samples and events are read
//!   back by `runs`, the compact encoding of a batch is `encode`'s.
//! - [`query`] reads the history back: per-task rows of a step's recent runs for the estimator,
//!   per-run per-step aggregates and failures for `runner history`; [`prune`] deletes old runs.
//!
//! Several processes may record into one file at once: each writer takes the write lock only for
//! the length of one batch, and waits for the other's rather than failing.

mod connect;
mod encode;
mod model;
pub mod prune;
pub mod query;
mod runs;
pub mod schema;
pub mod sink;
mod step_figures;
pub mod writer;

use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::process_identity::ProcessIdentity;

/// A row's figures are the worker's report's, as they are.
pub use crate::scheduler::TaskFigures;
pub use connect::PAGE_SIZE;
pub use model::{
    EventKind, Executor, KeyDim, RunEvent, RunOutcome, RunRow, RunStart, RunStatus, Sample, StepKeys, TaskRecord,
    TaskStatus, parse_estimate_source,
};
pub use prune::Prune;
pub use query::{FailedTask, HistoryRun, RunFilter, StepHistory, TimelineTask};
pub use schema::SCHEMA_VERSION;
pub use step_figures::StepFigures;
pub use writer::{RunRecorder, RunWritten};

use connect::Found;
pub use runs::SpillSpeed;
use runs::run_owner;
pub(crate) use runs::status_now;

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

/// The µs of `wall` past its whole ms (0-999): what the store keeps beside a truncated `_ms`.
pub(crate) fn micros_past_ms(wall: std::time::Duration) -> u64 {
    u64::from(wall.subsec_micros() % 1000)
}

/// A time kept as whole ms and the µs past them, in µs; rows from before the µs were kept
/// (`rest` NULL) read as the middle of their ms.
pub(crate) fn micros(ms: u64, rest: Option<u64>) -> u64 {
    ms * 1000 + rest.unwrap_or(500)
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

    /// The store at `path`, of an older schema, copied to `copy` (a new file) and the copy
    /// migrated: for a command that only reads but needs the history. The store itself is only
    /// read (`VACUUM INTO` from a read-only connection); the copy is opened read-only after.
    pub fn open_migrated_copy(path: &Path, copy: &Path) -> Result<Store, StoreError> {
        let target = copy.to_str().ok_or_else(|| StoreError::Io {
            path: copy.to_path_buf(),
            what: "copying the store to a path that is not UTF-8",
            error: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        let reader = connect::open_reader(path)?;
        reader.execute("VACUUM INTO ?1", [target]).map_err(|error| StoreError::Sql {
            path: path.to_path_buf(),
            what: "copying the store",
            error,
        })?;
        drop(reader);
        let mut store = Store::open(copy)?;
        store.read_only = true;
        Ok(store)
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
    /// far as their committed rows and samples reach, their rows counted by status, and what
    /// they had spilled and reserved at most as far as their samples tell (an interrupted run
    /// ends without its closing figures); returns their ids.
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
                         tasks_ok = counts.ok, tasks_failed = counts.failed, tasks_skipped = counts.skipped, \
                         spilled_bytes = coalesce(spilled_bytes, sampled.spilled), \
                         peak_reserved_bytes = coalesce(peak_reserved_bytes, sampled.reserved) \
                         FROM (SELECT coalesce(sum(t.status = 0), 0) AS ok, coalesce(sum(t.status = 1), 0) AS failed, \
                           coalesce(sum(t.status = 2), 0) AS skipped FROM {}) AS counts, \
                         (SELECT max(spilled_bytes) AS spilled, max(reserved_bytes) AS reserved \
                           FROM samples WHERE run_id = ?1) AS sampled \
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
                 resumed_from, pid, proc_start, boot_id, host, pid_ns, runner_version, vars, warm_services) \
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
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
                    start.vars,
                    to_sql_int(start.warm_services),
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

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
                figures: TaskFigures {
                    input_bytes: i,
                    estimate_bytes: 10,
                    plugin_estimate_bytes: 10,
                    peak_bytes: i * 2,
                    wall: Duration::from_millis(1),
                    attempts: 1,
                    ..TaskFigures::default()
                },
                task_index: Some(i),
                key: Some(format!("i={i}")),
                ..TaskRecord::new(step.clone(), "noop", TaskStatus::Ok)
            });
        }
        let run_id = recorder.run_id();
        let written =
            recorder.finish(RunOutcome { wall: Duration::from_millis(5), ..RunOutcome::new(RunStatus::Ok) }).unwrap();
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
