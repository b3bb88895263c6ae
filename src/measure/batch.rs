//! Each thread's batch of counts for small blocks, so that most allocations and frees take no
//! locked instruction and touch no cache line that other threads write.
//!
//! A locked read-modify-write costs 6–15 ns on the machines measured, so one per shared counter
//! per allocation would cost several times jemalloc's own fast path; a plain add to a
//! thread-local costs under a nanosecond. So a thread adds the bytes of its small blocks (under
//! [`SMALL_BLOCK`]) to its batch and publishes the batch to the shared counters when it reaches ±[`LIMIT`] bytes,
//! when the thread starts allocating for another task, or on [`flush_thread`]. Larger blocks
//! are published at once. The shared figures therefore lag the truth by less than `LIMIT` per
//! thread, and large buffers — where the memory is — are exact.
//!
//! The batch is a const-initialised thread-local without a destructor, so using it from the
//! allocator never allocates or registers anything. The price: a thread that exits with a
//! non-empty batch never publishes it (under `LIMIT` bytes per such thread, in the process total
//! and the retired bucket). A worker's batch is published when its task ends (`end_task`);
//! rayon's threads, which run tasks' nested work, publish theirs as it fills or when they switch
//! tasks.

use std::cell::Cell;

use runner_plugin::task_tag::{self, NO_TASK};

use super::tally::{self, Pending};

/// Blocks (header included) smaller than this are counted through the batch: jemalloc's small
/// size classes end at 14 KiB.
pub(super) const SMALL_BLOCK: u64 = 16 << 10;
/// A batch is published once it holds this many bytes either way.
pub(super) const LIMIT: i64 = 64 << 10;

/// One thread's unpublished counts.
struct Batch {
    /// The task `task` counts for.
    tag: Cell<u32>,
    /// Bytes of task `tag`'s blocks allocated minus freed on this thread, unpublished.
    task: Cell<i64>,
    /// The highest `task` has been since the last publication, so that the task's peak
    /// includes the batch's own high point.
    task_high: Cell<i64>,
    /// Bytes of all small blocks allocated minus freed on this thread, unpublished.
    total: Cell<i64>,
}

thread_local! {
    static BATCH: Batch = const {
        Batch {
            tag: Cell::new(NO_TASK),
            task: Cell::new(0),
            task_high: Cell::new(0),
            total: Cell::new(0),
        }
    };
}

/// Counts a new block of `bytes` for the task this thread works for; returns the tag to record
/// in its header (`NO_TASK` when no running task was charged).
#[inline(always)]
pub(super) fn charge(bytes: u64) -> u32 {
    let tag = task_tag::current();
    // A block size is at most isize::MAX.
    let delta = bytes as i64;
    if bytes < SMALL_BLOCK
        && let Ok(tag) = BATCH.try_with(|batch| batch.charge(tag, delta))
    {
        return tag;
    }
    charge_now(tag, delta)
}

/// Counts a freed block of `bytes` whose header names `tag`.
#[inline(always)]
pub(super) fn release(tag: u32, bytes: u64) {
    let delta = -(bytes as i64);
    if bytes < SMALL_BLOCK && BATCH.try_with(|batch| batch.release(tag, delta)).is_ok() {
        return;
    }
    release_now(tag, delta);
}

/// `charge` for a large block: published at once. Out of line to keep the small path short.
#[inline(never)]
fn charge_now(tag: u32, delta: i64) -> u32 {
    tally::add_to_total(delta);
    if tally::add_to_task(tag, delta) { tag } else { NO_TASK }
}

/// `release` for a large block.
#[inline(never)]
fn release_now(tag: u32, delta: i64) {
    tally::add_to_total(delta);
    tally::settle(tag, delta);
}

/// Publishes this thread's batched counts now. The engine calls it on a thread that has
/// finished working for a task, so that the task's figures include that thread's small blocks
/// (`end_task` does it for its own thread).
pub fn flush_thread() {
    let _ = BATCH.try_with(Batch::publish);
}

/// This thread's unpublished bytes for task `tag`, and their highest since last published.
pub(super) fn pending_for(tag: u32) -> Pending {
    BATCH
        .try_with(|batch| {
            if batch.tag.get() == tag {
                Pending { bytes: batch.task.get(), high: batch.task_high.get() }
            } else {
                Pending::default()
            }
        })
        .unwrap_or_default()
}

impl Batch {
    #[inline(always)]
    fn charge(&self, tag: u32, delta: i64) -> u32 {
        self.add_total(delta);
        // A plain load of the slot: blocks of a task that is not running are charged to nobody.
        if !tally::is_running(tag) {
            return NO_TASK;
        }
        if self.tag.get() != tag {
            self.switch_to(tag);
        }
        self.add_task(delta);
        tag
    }

    #[inline(always)]
    fn release(&self, tag: u32, delta: i64) {
        self.add_total(delta);
        if tag == NO_TASK {
            return;
        }
        if tag == self.tag.get() {
            self.add_task(delta);
        } else {
            // Another task's block (a consumer freeing its input): credited to its maker now.
            tally::settle(tag, delta);
        }
    }

    #[inline(always)]
    fn add_total(&self, delta: i64) {
        let pending = self.total.get() + delta;
        self.total.set(pending);
        if pending.abs() >= LIMIT {
            self.publish_total();
        }
    }

    #[inline(always)]
    fn add_task(&self, delta: i64) {
        let bytes = self.task.get() + delta;
        self.task.set(bytes);
        self.task_high.set(self.task_high.get().max(bytes));
        if bytes.abs() >= LIMIT {
            self.publish_task();
        }
    }

    /// Starts counting for task `tag`, publishing what was counted for the previous one.
    #[cold]
    #[inline(never)]
    fn switch_to(&self, tag: u32) {
        self.publish_task();
        self.tag.set(tag);
    }

    #[cold]
    #[inline(never)]
    fn publish_task(&self) {
        let pending = Pending { bytes: self.task.replace(0), high: self.task_high.replace(0) };
        if pending.bytes != 0 || pending.high != 0 {
            tally::settle_batch(self.tag.get(), pending);
        }
    }

    #[cold]
    #[inline(never)]
    fn publish_total(&self) {
        let pending = self.total.replace(0);
        if pending != 0 {
            tally::add_to_total(pending);
        }
    }

    fn publish(&self) {
        self.publish_task();
        self.publish_total();
    }
}
