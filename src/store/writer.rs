//! Recording a run off the scheduler's hot path.
//!
//! Workers send batches of [`TaskRecord`]s, the sampler [`Sample`]s and [`RunEvent`]s, into a
//! bounded channel ([`CHANNEL_CAPACITY`]); when it is full a task sender waits (back-pressure:
//! the records in flight never exceed the capacity plus one batch), a sample is dropped. One
//! writer thread per run, with its own connection, takes them out and commits them:
//!
//! - **promptly**, so that a process that dies (an `abort()` or a stack overflow in a plugin, a
//!   SIGKILL) loses at most the tasks running at that moment and the few finished in its last
//!   [`COMMIT_GAP`]: rows are committed as soon as the channel is empty, but no sooner than
//!   [`COMMIT_GAP`] after the previous commit, and at the latest [`FLUSH_INTERVAL`] after the
//!   first uncommitted row or when [`BATCH_ROWS`] wait. Samples and events alone wait up to
//!   [`SAMPLE_FLUSH`] (they ride along with task rows otherwise). Each commit also moves the run
//!   row's `recorded_ms` on, from which a later open dates the end of a killed run.
//! - **compactly** (the SQL is `encode`'s): a batch is written a step at a time, so a step's rows get consecutive task
//!   ids, recorded as one `task_blocks` row that also holds what the rows share (plugin, and the
//!   first row's estimate, sources and hashes; a row stores these only where it differs), 32
//!   rows per prepared `INSERT`, binding only what differs from the row bound before in the same
//!   place. Errors, paths and hashes unlike the block's go to `task_details`, only for the rows
//!   that have them.
//!
//! - **without allocating per row**: the batches senders fill come back to them, refilled with
//!   the committed rows, through a spare channel ([`RunRecorder::spare_batch`]); a sender
//!   overwrites those rows in place, reusing their strings' room (see `StoreSink`), so a run
//!   recorded at a steady pace allocates nothing per task once the first batches exist.
//!
//! Each transaction takes the write lock immediately (`BEGIN IMMEDIATE`) and holds it only while
//! inserting, so concurrent runs on one file take turns. The run row is completed in the same
//! transaction as the last batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};
use rusqlite::Connection;

use super::connect::{self, Found};
use super::encode::{Batch, Counts, Group};
use super::{RunEvent, RunOutcome, RunStatus, Sample, StoreError, TaskRecord};

/// Messages (a worker's batch of records, a sample, an event) that may wait in the channel
/// before senders block.
pub const CHANNEL_CAPACITY: usize = 256;
/// Rows per transaction at most.
pub const BATCH_ROWS: usize = 10_000;
/// Task rows are committed at the latest this long after the first of them arrived.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// Commits are at least this far apart, so that a stream of small batches is not committed one
/// by one (a commit writes a few 16 KiB pages to the WAL).
pub const COMMIT_GAP: Duration = Duration::from_millis(20);
/// Samples and events with no task row to ride along are committed at the latest this late.
pub const SAMPLE_FLUSH: Duration = Duration::from_secs(1);
/// Batches senders make at most (while the writer is alive): what the channel and one commit
/// hold, and some. A recorded run's allocations for batches (and their rows' strings) are
/// bounded by this, however many tasks it has.
pub const MAX_BATCHES: u64 = (CHANNEL_CAPACITY + BATCH_ROWS / 64 + 64) as u64;
/// How long a sender waits for a spare batch once [`MAX_BATCHES`] exist.
pub const SPARE_WAIT: Duration = Duration::from_millis(250);
/// How long [`RunInterrupt::interrupt`] waits for the writer to commit what it has.
pub const INTERRUPT_WAIT: Duration = Duration::from_secs(3);

enum Message {
    /// The first `.1` rows of the batch are to be written; the rest are spare rows a sender
    /// keeps with the batch (their strings' room), returned with it.
    Tasks(Vec<TaskRecord>, usize),
    Sample(Sample),
    Event(RunEvent),
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
    /// Batches [`RunRecorder::spare_batch`] had to make new (see [`MAX_BATCHES`]).
    pub batches_made: u64,
}

/// Records one run; see the `writer` module's documentation. `Sync`: workers share it by
/// reference. Dropping it without [`finish`](RunRecorder::finish) still writes what was recorded
/// and marks the run [`RunStatus::Aborted`].
pub struct RunRecorder {
    run_id: i64,
    path: PathBuf,
    sender: Option<Sender<Message>>,
    writer: Option<JoinHandle<WriterEnd>>,
    /// Disconnected when the writer thread ends.
    ended: Receiver<()>,
    /// Records the channel refused (the writer thread was gone).
    dropped: AtomicU64,
    committed: Arc<AtomicU64>,
    /// Committed batches, their rows still in them, for senders to overwrite.
    spares: Receiver<Vec<TaskRecord>>,
    batches_made: AtomicU64,
}

impl std::fmt::Debug for RunRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecorder").field("run_id", &self.run_id).field("path", &self.path).finish_non_exhaustive()
    }
}

/// Ends a run's recording from another thread (the signal handler's): what was queued is
/// committed, then the run row is completed with the given outcome.
#[derive(Debug, Clone)]
pub struct RunInterrupt {
    run_id: i64,
    sender: Sender<Message>,
    ended: Receiver<()>,
}

impl RunInterrupt {
    /// The run it ends.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// Asks the writer to commit what it has and complete the run row with `outcome`, and
    /// waits up to `wait` for it. True when the writer has ended in time.
    pub fn interrupt(&self, outcome: RunOutcome, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        // A writer that has ended already refuses the message: nothing more to do then.
        let _ = self.sender.send_deadline(Message::Finish(outcome), deadline);
        matches!(self.ended.recv_deadline(deadline), Err(channel::RecvTimeoutError::Disconnected) | Ok(()))
    }
}

impl RunRecorder {
    pub(crate) fn start(path: &Path, run_id: i64) -> Result<RunRecorder, StoreError> {
        let conn = connect::open_writer(path, Found::Store { version: super::SCHEMA_VERSION })?;
        let (sender, receiver) = channel::bounded(CHANNEL_CAPACITY);
        let (end_signal, ended) = channel::bounded(0);
        // Room for every batch there is: a committed batch is only freed once senders made
        // more than MAX_BATCHES (a writer that stalled them past SPARE_WAIT).
        let (spare_sender, spares) = channel::bounded(MAX_BATCHES as usize);
        let committed = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            conn,
            path: path.to_path_buf(),
            run_id,
            receiver,
            _end_signal: end_signal,
            committed: committed.clone(),
            groups: Vec::new(),
            counts: Counts::default(),
            pending: Pending::default(),
            emptied: Vec::new(),
            spares: spare_sender,
            last_commit: Instant::now(),
            received: 0,
            batches: 0,
            write_time: Duration::ZERO,
        };
        let writer = std::thread::Builder::new()
            .name(format!("store-writer-{run_id}"))
            .spawn(move || writer.run())
            .map_err(|error| StoreError::Spawn { path: path.to_path_buf(), error })?;
        Ok(RunRecorder {
            run_id,
            path: path.to_path_buf(),
            sender: Some(sender),
            writer: Some(writer),
            ended,
            dropped: AtomicU64::new(0),
            committed,
            spares,
            batches_made: AtomicU64::new(0),
        })
    }

    /// The run's id in the `runs` table.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// Queues one task row, as a message of its own ([`record_all`](RunRecorder::record_all)
    /// sends many in one). Blocks only while the channel is full. After a write error the writer
    /// discards what it receives, counting it as lost, and [`finish`](RunRecorder::finish)
    /// reports the error.
    pub fn record(&self, task: TaskRecord) {
        self.record_all(vec![task]);
    }

    /// A batch to fill and pass to [`record_all`](RunRecorder::record_all): one the writer has
    /// committed, still holding its rows (to overwrite, reusing their strings), or a new one
    /// with room for `capacity` rows when none is spare.
    ///
    /// Once [`MAX_BATCHES`] exist, it waits for one to come back instead: then every batch is
    /// in the channel or waiting to be committed, and the channel's back-pressure would hold
    /// the sender anyway. (If the writer is gone, it makes one after [`SPARE_WAIT`].)
    pub fn spare_batch(&self, capacity: usize) -> Vec<TaskRecord> {
        if let Ok(batch) = self.spares.try_recv() {
            return batch;
        }
        if self.batches_made.load(Ordering::Relaxed) >= MAX_BATCHES
            && let Ok(batch) = self.spares.recv_timeout(SPARE_WAIT)
        {
            return batch;
        }
        self.batches_made.fetch_add(1, Ordering::Relaxed);
        Vec::with_capacity(capacity)
    }

    /// Queues a batch of task rows in one message: what workers use, so the channel is crossed
    /// once per batch. Blocks only while the channel is full.
    pub fn record_all(&self, tasks: Vec<TaskRecord>) {
        let rows = tasks.len();
        self.record_first(tasks, rows);
    }

    /// [`record_all`](RunRecorder::record_all) of the first `rows` rows of `batch`; the rows
    /// after them travel with it untouched and come back with it from
    /// [`spare_batch`](RunRecorder::spare_batch), so that their strings' room is not lost.
    pub fn record_first(&self, batch: Vec<TaskRecord>, rows: usize) {
        let rows = rows.min(batch.len());
        let sent = self.sender.as_ref().is_some_and(|s| s.send(Message::Tasks(batch, rows)).is_ok());
        if !sent {
            self.dropped.fetch_add(rows as u64, Ordering::Relaxed);
        }
    }

    /// Queues a memory sample; dropped rather than waited for when the channel is full.
    pub fn sample(&self, sample: Sample) {
        if let Some(sender) = &self.sender {
            let _ = sender.try_send(Message::Sample(sample));
        }
    }

    /// Queues an event.
    pub fn event(&self, event: RunEvent) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(Message::Event(event));
        }
    }

    /// A handle that ends this run's recording from another thread (see [`RunInterrupt`]).
    pub fn interrupt_handle(&self) -> Option<RunInterrupt> {
        let sender = self.sender.clone()?;
        Some(RunInterrupt { run_id: self.run_id, sender, ended: self.ended.clone() })
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
                batches_made: self.batches_made.load(Ordering::Relaxed),
            }),
            Some(error) => Err(StoreError::Write {
                path: self.path.clone(),
                run_id: self.run_id,
                lost: self.dropped.load(Ordering::Relaxed) + end.received - end.written,
                error,
            }),
        }
    }
}

impl Drop for RunRecorder {
    fn drop(&mut self) {
        // Said, not left to the channel's disconnection: a `RunInterrupt` may hold a sender.
        if let Some(sender) = self.sender.take() {
            let _ = sender.send(Message::Finish(RunOutcome::new(RunStatus::Aborted)));
        }
        if self.writer.is_some()
            && let Err(e) = self.join()
        {
            tracing::warn!("{e}");
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

/// What the writer holds until its next commit.
#[derive(Default)]
struct Pending {
    tasks: Vec<TaskRecord>,
    samples: Vec<Sample>,
    events: Vec<RunEvent>,
    first_task_at: Option<Instant>,
    first_sample_at: Option<Instant>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.tasks.is_empty() && self.samples.is_empty() && self.events.is_empty()
    }

    fn clear(&mut self) {
        self.tasks.clear();
        self.samples.clear();
        self.events.clear();
        self.first_task_at = None;
        self.first_sample_at = None;
    }
}

struct Writer {
    conn: Connection,
    path: PathBuf,
    run_id: i64,
    receiver: Receiver<Message>,
    /// Dropped when the thread ends, which is what [`RunInterrupt::interrupt`] waits for.
    _end_signal: Sender<()>,
    /// Reused from batch to batch (see [`Writer::group`]).
    groups: Vec<Group>,
    committed: Arc<AtomicU64>,
    /// Of committed rows.
    counts: Counts,
    pending: Pending,
    /// The batches whose rows were moved into `pending`, to be refilled with them once they are
    /// committed and handed back through `spares`.
    emptied: Vec<(Vec<TaskRecord>, usize)>,
    spares: Sender<Vec<TaskRecord>>,
    last_commit: Instant,
    received: u64,
    batches: u64,
    write_time: Duration,
}

impl Writer {
    fn run(mut self) -> WriterEnd {
        connect::waiting_on_this_thread(&self.path);
        let error = self.serve().err();
        if error.is_some() {
            // Count what still arrives as lost, until `finish` or the recorder is dropped, so
            // that senders never block on a writer that has stopped writing.
            for message in self.receiver.iter() {
                match message {
                    Message::Tasks(_, rows) => self.received += rows as u64,
                    Message::Finish(_) => break,
                    Message::Sample(_) | Message::Event(_) => {}
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

    /// When the next commit is due if nothing else arrives, or `None` if nothing waits.
    fn deadline(&self) -> Option<Instant> {
        let tasks = self.pending.first_task_at.map(|first| {
            let latest = first + FLUSH_INTERVAL;
            if self.receiver.is_empty() { latest.min(self.last_commit + COMMIT_GAP) } else { latest }
        });
        let samples = self.pending.first_sample_at.map(|first| first + SAMPLE_FLUSH);
        match (tasks, samples) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn serve(&mut self) -> rusqlite::Result<()> {
        loop {
            let message = match self.deadline() {
                None => self.receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(deadline) => self.receiver.recv_deadline(deadline),
            };
            let now = || Some(Instant::now());
            match message {
                Ok(Message::Tasks(mut batch, rows)) => {
                    self.received += rows as u64;
                    let pending = &mut self.pending;
                    pending.first_task_at = pending.first_task_at.or_else(now);
                    // The batch keeps its spare rows (shifted to its front) and gets these back
                    // after the commit: its length, so its room, never changes.
                    pending.tasks.extend(batch.drain(..rows));
                    self.emptied.push((batch, rows));
                    if pending.tasks.len() >= BATCH_ROWS {
                        self.write(None)?;
                    }
                }
                Ok(Message::Sample(sample)) => {
                    self.pending.first_sample_at = self.pending.first_sample_at.or_else(now);
                    self.pending.samples.push(sample);
                }
                Ok(Message::Event(event)) => {
                    self.pending.first_sample_at = self.pending.first_sample_at.or_else(now);
                    self.pending.events.push(event);
                }
                Ok(Message::Finish(outcome)) => return self.write(Some(outcome)),
                Err(RecvTimeoutError::Timeout) => {
                    self.write(None)?;
                    continue;
                }
                // The recorder was dropped without `finish`.
                Err(RecvTimeoutError::Disconnected) => return self.write(Some(RunOutcome::new(RunStatus::Aborted))),
            }
            // A channel that is never empty never times out (a message waiting is taken even
            // past the deadline): a writer kept busy by a stream of records, or starved of CPU
            // by the workers, must still commit on time.
            if self.deadline().is_some_and(|deadline| Instant::now() >= deadline) {
                self.write(None)?;
            }
        }
    }

    /// Commits what is pending (and the run row's completion). Clears it once committed.
    fn write(&mut self, finish: Option<RunOutcome>) -> rusqlite::Result<()> {
        if self.pending.is_empty() && finish.is_none() {
            return Ok(());
        }
        let started = Instant::now();
        let used = self.group();
        let mut counts = self.counts;
        for task in &self.pending.tasks {
            counts.add(task);
        }
        let sampled = self.pending.samples.iter().map(|s| s.t_ms).chain(self.pending.events.iter().map(|e| e.t_ms));
        counts.recorded_ms = counts.recorded_ms.max(sampled.max().unwrap_or(0));
        let batch = Batch {
            run_id: self.run_id,
            tasks: &self.pending.tasks,
            samples: &self.pending.samples,
            events: &self.pending.events,
            groups: &self.groups[..used],
            recorded_ms: counts.recorded_ms,
            finish: finish.map(|outcome| (outcome, counts)),
        };
        let result = batch.commit(&mut self.conn);
        self.write_time += started.elapsed();
        result?;
        self.last_commit = Instant::now();
        self.counts = counts;
        self.batches += 1;
        self.committed.fetch_add(self.pending.tasks.len() as u64, Ordering::Release);
        self.hand_back();
        self.pending.clear();
        Ok(())
    }

    /// Moves the committed rows back into the batches they came in, as many as each brought,
    /// and offers those to the senders; what the spare channel has no room for is freed.
    fn hand_back(&mut self) {
        let mut rows = self.pending.tasks.drain(..);
        for (mut batch, brought) in self.emptied.drain(..) {
            batch.extend(rows.by_ref().take(brought));
            if self.spares.try_send(batch).is_err() {
                break;
            }
        }
    }

    /// Sorts the pending rows by step, keeping their order within a step, into the first groups
    /// of `self.groups`; returns how many groups there are.
    fn group(&mut self) -> usize {
        fn same(group: &Group, task: &TaskRecord) -> bool {
            (Arc::ptr_eq(&group.step, &task.step) || group.step == task.step) && group.plugin == task.plugin
        }
        let groups = &mut self.groups;
        let mut used = 0;
        let mut current = 0;
        for (index, task) in self.pending.tasks.iter().enumerate() {
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

fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for clock_gettime to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_sync<T: Sync + Send>() {}

    #[test]
    fn recorder_is_shareable_between_workers() {
        assert_sync::<RunRecorder>();
    }
}
