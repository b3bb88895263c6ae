//! Recording a run's tasks off the scheduler's hot path.
//!
//! Workers send [`TaskRecord`]s into a bounded channel ([`CHANNEL_CAPACITY`]); when it is full a
//! sender waits (back-pressure: the records in flight never exceed the capacity plus one batch).
//! One writer thread per run, with its own connection, takes them out and inserts them in
//! transactions of up to [`BATCH_ROWS`] rows, or whatever arrived within [`FLUSH_INTERVAL`] of a
//! batch's first row, 32 rows per prepared `INSERT`, binding only what differs from the row
//! bound before in the same place. A batch is written a step at a time, so a
//! step's rows get consecutive task ids, recorded as one `task_blocks` row (the history reads
//! find a step's rows by these blocks; a per-row index would double the cost of recording). Each
//! transaction takes the write lock immediately (`BEGIN IMMEDIATE`) and holds it only while
//! inserting, so concurrent runs on one file take turns. The run row is completed in the same
//! transaction as the last batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, Statement, TransactionBehavior, params};

use super::{RunOutcome, RunStatus, StoreError, TaskRecord, TaskStatus, connect, now_text, to_sql_int};

/// Messages (a record, or a worker's batch of up to a few hundred) that may wait in the channel
/// before senders block.
pub const CHANNEL_CAPACITY: usize = 256;
/// Rows per transaction at most.
pub const BATCH_ROWS: usize = 10_000;
/// A batch is written at the latest this long after its first row arrived.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// Attempts at a batch that finds the file locked for longer than the busy timeout.
const BUSY_ATTEMPTS: u32 = 3;

/// Rows per `INSERT` statement: one statement per row spends most of its time starting and
/// finishing the statement rather than inserting.
const ROWS_PER_INSERT: usize = 32;
/// Parameters every row of a statement shares: run id, step, plugin.
const SHARED_PARAMS: usize = 3;
/// Parameters of each row of its own (see [`bind_row`]).
const ROW_PARAMS: usize = 11;

/// `INSERT INTO tasks` of `rows` rows: `?1`..`?3` shared, then [`ROW_PARAMS`] per row. Task ids
/// are left to SQLite, which appends (one more than the largest) faster than it places a given id.
fn insert_tasks_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO tasks (run_id, step, plugin, key, status, attempts, input_bytes, estimate_bytes, \
         estimate_source, plugin_estimate_bytes, peak_bytes, output_bytes, wall_ms, error) VALUES ",
    );
    for row in 0..rows {
        let first = SHARED_PARAMS + row * ROW_PARAMS + 1;
        let own: Vec<String> = (first..first + ROW_PARAMS).map(|p| format!("?{p}")).collect();
        let separator = if row > 0 { ", " } else { "" };
        sql.push_str(&format!("{separator}(?1, ?2, ?3, {})", own.join(", ")));
    }
    sql
}

const INSERT_BLOCK: &str =
    "INSERT INTO task_blocks (run_id, step, first_task_id, last_task_id, tasks) VALUES (?1, ?2, ?3, ?4, ?5)";

const FINISH_RUN: &str = "UPDATE runs SET finished_at = ?2, status = ?3, wall_ms = ?4, peak_rss_bytes = ?5, \
     peak_reserved_bytes = ?6, spilled_bytes = ?7, tasks_ok = ?8, tasks_failed = ?9, tasks_skipped = ?10, \
     underestimates = ?11 WHERE run_id = ?1";

enum Message {
    Tasks(Vec<TaskRecord>),
    Finish(RunOutcome),
}

/// What a run's writer did, returned by [`RunRecorder::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunWritten {
    pub run_id: i64,
    /// Task rows committed.
    pub rows: u64,
    /// Transactions committed.
    pub batches: u64,
    /// Time the writer thread spent writing (inserting and committing), not waiting for records.
    pub write_time: Duration,
    /// CPU time of the writer thread, all of it (0 where the platform cannot tell).
    pub cpu_time: Duration,
}

/// Records one run's tasks; see the [module](self) documentation. `Sync`: workers share it by
/// reference. Dropping it without [`finish`](RunRecorder::finish) still writes what was recorded
/// and marks the run [`RunStatus::Aborted`].
pub struct RunRecorder {
    run_id: i64,
    path: PathBuf,
    sender: Option<Sender<Message>>,
    writer: Option<JoinHandle<WriterEnd>>,
    /// Records the channel refused (the writer thread was gone).
    dropped: AtomicU64,
    committed: Arc<AtomicU64>,
}

impl std::fmt::Debug for RunRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecorder").field("run_id", &self.run_id).field("path", &self.path).finish_non_exhaustive()
    }
}

impl RunRecorder {
    pub(crate) fn start(path: &Path, run_id: i64) -> Result<RunRecorder, StoreError> {
        let conn = connect(path)?;
        let (sender, receiver) = channel::bounded(CHANNEL_CAPACITY);
        let committed = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            conn,
            run_id,
            receiver,
            committed: committed.clone(),
            groups: Vec::new(),
            counts: Counts::default(),
            received: 0,
            batches: 0,
            write_time: Duration::ZERO,
        };
        let writer = std::thread::Builder::new()
            .name(format!("store-writer-{run_id}"))
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Spawn { path: path.to_path_buf(), source })?;
        Ok(RunRecorder {
            run_id,
            path: path.to_path_buf(),
            sender: Some(sender),
            writer: Some(writer),
            dropped: AtomicU64::new(0),
            committed,
        })
    }

    /// The run's id in the `runs` table.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// Queues one task row, as a message of its own ([`record_all`](RunRecorder::record_all)
    /// sends many in one). Blocks only while the channel is full. After
    /// a write error the writer discards what it receives, counting it as lost, and
    /// [`finish`](RunRecorder::finish) reports the error.
    pub fn record(&self, task: TaskRecord) {
        self.record_all(vec![task]);
    }

    /// Queues a batch of task rows in one message: what workers use, so the channel is crossed
    /// once per batch. Blocks only while the channel is full.
    pub fn record_all(&self, tasks: Vec<TaskRecord>) {
        let count = tasks.len() as u64;
        let sent = self.sender.as_ref().is_some_and(|s| s.send(Message::Tasks(tasks)).is_ok());
        if !sent {
            self.dropped.fetch_add(count, Ordering::Relaxed);
        }
    }

    /// Task rows committed so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Writes every queued record, completes the run row with `outcome` (in the same transaction
    /// as the last rows) and stops the writer. A write error is returned with the number of rows
    /// that were lost; the run row then stays `running` and a later open marks it killed.
    pub fn finish(mut self, outcome: RunOutcome) -> Result<RunWritten, StoreError> {
        if let Some(sender) = self.sender.take() {
            // An error here means the writer has stopped; join reports why.
            let _ = sender.send(Message::Finish(outcome));
        }
        self.join()
    }

    fn join(&mut self) -> Result<RunWritten, StoreError> {
        self.sender = None;
        let Some(writer) = self.writer.take() else {
            return Err(StoreError::WriterPanicked { path: self.path.clone(), run_id: self.run_id });
        };
        let end =
            writer.join().map_err(|_| StoreError::WriterPanicked { path: self.path.clone(), run_id: self.run_id })?;
        match end.error {
            None => Ok(RunWritten {
                run_id: self.run_id,
                rows: end.written,
                batches: end.batches,
                write_time: end.write_time,
                cpu_time: end.cpu_time,
            }),
            Some(source) => Err(StoreError::Write {
                path: self.path.clone(),
                run_id: self.run_id,
                lost: self.dropped.load(Ordering::Relaxed) + end.received - end.written,
                source,
            }),
        }
    }
}

impl Drop for RunRecorder {
    fn drop(&mut self) {
        if self.writer.is_some()
            && let Err(e) = self.join()
        {
            tracing::warn!("{e}");
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    ok: u64,
    failed: u64,
    skipped: u64,
    underestimates: u64,
}

impl Counts {
    fn add(&mut self, task: &TaskRecord) {
        match task.status {
            TaskStatus::Ok => self.ok += 1,
            TaskStatus::Failed => self.failed += 1,
            TaskStatus::Skipped => self.skipped += 1,
        }
        if task.status != TaskStatus::Skipped && task.peak_bytes > task.estimate_bytes {
            self.underestimates += 1;
        }
    }
}

/// How the writer thread ended.
struct WriterEnd {
    received: u64,
    written: u64,
    batches: u64,
    write_time: Duration,
    cpu_time: Duration,
    error: Option<rusqlite::Error>,
}

/// A batch's rows of one step (and plugin), by index in the batch, in recording order.
struct Group {
    step: Arc<str>,
    plugin: &'static str,
    rows: Vec<u32>,
}

/// What one transaction writes.
struct Batch<'a> {
    run_id: i64,
    tasks: &'a [TaskRecord],
    groups: &'a [Group],
    finish: Option<(RunOutcome, Counts)>,
}

struct Writer {
    conn: Connection,
    run_id: i64,
    receiver: Receiver<Message>,
    /// Reused from batch to batch (see [`Writer::group`]).
    groups: Vec<Group>,
    committed: Arc<AtomicU64>,
    /// Of committed rows.
    counts: Counts,
    received: u64,
    batches: u64,
    write_time: Duration,
}

impl Writer {
    fn run(mut self) -> WriterEnd {
        let error = self.serve().err();
        if error.is_some() {
            // Count what still arrives as lost, until `finish` or the recorder is dropped, so
            // that senders never block on a writer that has stopped writing.
            for message in self.receiver.iter() {
                match message {
                    Message::Tasks(tasks) => self.received += tasks.len() as u64,
                    Message::Finish(_) => break,
                }
            }
        }
        WriterEnd {
            received: self.received,
            written: self.committed.load(Ordering::Relaxed),
            batches: self.batches,
            write_time: self.write_time,
            cpu_time: thread_cpu_time(),
            error,
        }
        // The receiver drops here: senders blocked on a full channel wake up and give up.
    }

    fn serve(&mut self) -> rusqlite::Result<()> {
        let mut batch: Vec<TaskRecord> = Vec::with_capacity(BATCH_ROWS);
        let mut deadline = Instant::now();
        loop {
            let message = if batch.is_empty() {
                self.receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                self.receiver.recv_deadline(deadline)
            };
            match message {
                Ok(Message::Tasks(mut tasks)) => {
                    self.received += tasks.len() as u64;
                    if batch.is_empty() {
                        deadline = Instant::now() + FLUSH_INTERVAL;
                    }
                    batch.append(&mut tasks);
                    if batch.len() >= BATCH_ROWS {
                        self.write(&mut batch, None)?;
                    }
                }
                Ok(Message::Finish(outcome)) => return self.write(&mut batch, Some(outcome)),
                Err(RecvTimeoutError::Timeout) => self.write(&mut batch, None)?,
                Err(RecvTimeoutError::Disconnected) => {
                    // The recorder was dropped without `finish`.
                    let aborted = RunOutcome {
                        status: RunStatus::Aborted,
                        wall_ms: 0,
                        peak_rss_bytes: 0,
                        peak_reserved_bytes: 0,
                        spilled_bytes: 0,
                    };
                    return self.write(&mut batch, Some(aborted));
                }
            }
        }
    }

    /// Commits `batch` (and the run row's completion), retrying a few times if the file stays
    /// locked beyond the busy timeout. Clears the batch once it is committed.
    fn write(&mut self, batch: &mut Vec<TaskRecord>, finish: Option<RunOutcome>) -> rusqlite::Result<()> {
        let started = Instant::now();
        let used = self.group(batch);
        let mut counts = self.counts;
        for task in batch.iter() {
            counts.add(task);
        }
        let write = Batch {
            run_id: self.run_id,
            tasks: batch,
            groups: &self.groups[..used],
            finish: finish.map(|outcome| (outcome, counts)),
        };
        let mut attempt = 1;
        let result = loop {
            match write.commit(&mut self.conn) {
                Err(e) if attempt < BUSY_ATTEMPTS && is_busy(&e) => attempt += 1,
                result => break result,
            }
        };
        self.write_time += started.elapsed();
        result?;
        self.counts = counts;
        self.batches += 1;
        self.committed.fetch_add(batch.len() as u64, Ordering::Release);
        batch.clear();
        Ok(())
    }

    /// Sorts the batch's rows by step, keeping their order within a step, into the first groups
    /// of `self.groups`; returns how many groups there are.
    fn group(&mut self, batch: &[TaskRecord]) -> usize {
        fn same(group: &Group, task: &TaskRecord) -> bool {
            (Arc::ptr_eq(&group.step, &task.step) || group.step == task.step) && group.plugin == task.plugin
        }
        let groups = &mut self.groups;
        let mut used = 0;
        let mut current = 0;
        for (index, task) in batch.iter().enumerate() {
            if used == 0 || !same(&groups[current], task) {
                current = match groups[..used].iter().position(|g| same(g, task)) {
                    Some(found) => found,
                    None => {
                        if used == groups.len() {
                            groups.push(Group { step: task.step.clone(), plugin: task.plugin, rows: Vec::new() });
                        } else {
                            groups[used].step = task.step.clone();
                            groups[used].plugin = task.plugin;
                            groups[used].rows.clear();
                        }
                        used += 1;
                        used - 1
                    }
                };
            }
            groups[current].rows.push(index as u32);
        }
        used
    }
}

impl Batch<'_> {
    /// One transaction: the rows, a step at a time, each step's consecutive task ids as a
    /// block, and the run row's completion if this is the last batch.
    fn commit(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if !self.tasks.is_empty() {
            // The write lock is ours (`BEGIN IMMEDIATE`), and SQLite gives each new row one more
            // than the largest id (while that is below 2⁶³ − 1): so this batch's rows get the ids
            // from max + 1 in insertion order, and each step's rows are one block.
            let mut next_id: i64 = tx.query_row("SELECT coalesce(max(task_id), 0) + 1 FROM tasks", [], |r| r.get(0))?;
            let mut many = tx.prepare_cached(&insert_tasks_sql(ROWS_PER_INSERT))?;
            let mut one = tx.prepare_cached(&insert_tasks_sql(1))?;
            let mut block = tx.prepare_cached(INSERT_BLOCK)?;
            // Bindings survive the reset after each statement: what rows share is bound once.
            for insert in [&mut many, &mut one] {
                insert.raw_bind_parameter(1, self.run_id)?;
            }
            block.raw_bind_parameter(1, self.run_id)?;
            // The task last bound to each row of each statement: a value equal to what is bound
            // already (most of a step's statuses, sources, sizes) is not bound again.
            let mut bound_many: [Option<&TaskRecord>; ROWS_PER_INSERT] = [None; ROWS_PER_INSERT];
            let mut bound_one: [Option<&TaskRecord>; 1] = [None];
            for group in self.groups {
                let first = next_id;
                for insert in [&mut many, &mut one] {
                    insert.raw_bind_parameter(2, &*group.step)?;
                    insert.raw_bind_parameter(3, group.plugin)?;
                }
                let chunks = group.rows.chunks_exact(ROWS_PER_INSERT);
                let rest = chunks.remainder();
                for chunk in chunks {
                    for (row, &index) in chunk.iter().enumerate() {
                        let task = &self.tasks[index as usize];
                        bind_row(&mut many, row, task, bound_many[row].replace(task))?;
                    }
                    many.raw_execute()?;
                }
                for &index in rest {
                    let task = &self.tasks[index as usize];
                    bind_row(&mut one, 0, task, bound_one[0].replace(task))?;
                    one.raw_execute()?;
                }
                next_id += group.rows.len() as i64;
                debug_assert_eq!(tx.last_insert_rowid(), next_id - 1, "task ids are consecutive");
                block.raw_bind_parameter(2, &*group.step)?;
                block.raw_bind_parameter(3, first)?;
                block.raw_bind_parameter(4, next_id - 1)?;
                block.raw_bind_parameter(5, next_id - first)?;
                block.raw_execute()?;
            }
        }
        if let Some((outcome, counts)) = self.finish {
            let finished = outcome.status != RunStatus::Aborted;
            tx.execute(
                FINISH_RUN,
                params![
                    self.run_id,
                    now_text(),
                    outcome.status.as_str(),
                    finished.then_some(to_sql_int(outcome.wall_ms)),
                    finished.then_some(to_sql_int(outcome.peak_rss_bytes)),
                    finished.then_some(to_sql_int(outcome.peak_reserved_bytes)),
                    finished.then_some(to_sql_int(outcome.spilled_bytes)),
                    to_sql_int(counts.ok),
                    to_sql_int(counts.failed),
                    to_sql_int(counts.skipped),
                    to_sql_int(counts.underestimates),
                ],
            )?;
        }
        tx.commit()
    }
}

/// One integer column of a task row, as SQLite stores it.
type IntField = fn(&TaskRecord) -> i64;

/// Binds `task` as row `row` of an insert statement whose row holds `bound`'s values now (if
/// any): only the values that differ are bound.
fn bind_row(
    insert: &mut Statement<'_>,
    row: usize,
    task: &TaskRecord,
    bound: Option<&TaskRecord>,
) -> rusqlite::Result<()> {
    let at = SHARED_PARAMS + row * ROW_PARAMS;
    let changed = |field: IntField| bound.is_none_or(|b| field(b) != field(task));
    insert.raw_bind_parameter(at + 1, task.key.as_str())?;
    if bound.is_none_or(|b| b.status != task.status) {
        insert.raw_bind_parameter(at + 2, task.status.as_str())?;
    }
    let ints: [(usize, IntField); 7] = [
        (3, |t| i64::from(t.attempts)),
        (4, |t| to_sql_int(t.input_bytes)),
        (5, |t| to_sql_int(t.estimate_bytes)),
        (7, |t| to_sql_int(t.plugin_estimate_bytes)),
        (8, |t| to_sql_int(t.peak_bytes)),
        (9, |t| to_sql_int(t.output_bytes)),
        (10, |t| to_sql_int(t.wall_ms)),
    ];
    for (param, field) in ints {
        if changed(field) {
            insert.raw_bind_parameter(at + param, field(task))?;
        }
    }
    if bound.is_none_or(|b| b.estimate_source != task.estimate_source) {
        insert.raw_bind_parameter(at + 6, task.estimate_source)?;
    }
    if bound.is_none_or(|b| b.error.is_some() || task.error.is_some()) {
        insert.raw_bind_parameter(at + 11, task.error.as_deref())?;
    }
    Ok(())
}

fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for clock_gettime to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_sync<T: Sync + Send>() {}

    #[test]
    fn recorder_is_shareable_between_workers() {
        assert_sync::<RunRecorder>();
    }

    #[test]
    fn multi_row_inserts_number_their_parameters_in_order() {
        assert_eq!(
            insert_tasks_sql(2).split("VALUES ").nth(1).unwrap(),
            "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14), \
             (?1, ?2, ?3, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)"
        );
    }
}
