//! A running task's figures as the engine reads them: the shared counters ([`super::tally`])
//! plus the calling thread's unpublished batch ([`super::batch`]), which only this module
//! combines — so the counters never depend on the batches, and the batches only settle into
//! the counters.

use super::tally::{self, TaskMemory};
use super::{MeasureError, batch};

/// Task `tag`'s (live, peak) bytes as published, with this thread's unpublished batch for it.
fn running_counts(tag: u32) -> Option<(u64, u64)> {
    let (published, peak) = tally::published(tag)?;
    let pending = batch::pending_for(tag);
    let live = (published + pending.bytes).max(0) as u64;
    let batch_high = (published + pending.high).max(0) as u64;
    // The peak is raised just after the count changes, so it may trail it for an instant.
    Some((live, peak.max(live).max(batch_high)))
}

/// Bytes task `tag`'s blocks hold now; 0 if it is not running. Includes this thread's batch;
/// other threads' batches of small blocks may each hold back up to 64 KiB.
pub fn task_live(tag: u32) -> u64 {
    running_counts(tag).map_or(0, |(live, _)| live)
}

#[cfg(test)]
/// The most bytes task `tag`'s blocks have held at once so far; 0 if it is not running. Exact
/// for one thread and for large blocks; other threads' small blocks may be seen up to 64 KiB
/// (per thread) late.
pub fn task_peak(tag: u32) -> u64 {
    running_counts(tag).map_or(0, |(_, peak)| peak)
}

/// Stops measuring task `tag` and frees its slot. Its blocks still alive (its output) move to
/// the retired bucket, which later frees of them are credited to.
///
/// Publishes this thread's batch first; call it after the task and all the work it handed out
/// have returned. Work the task handed to other threads through the plugin API's helpers
/// (`ctx.join`, `par_map`, `par_chunks_mut`) runs under its tag on rayon's threads, whose
/// batches are published when they reach ±64 KiB or switch tasks; what such a thread has not
/// published yet (under 64 KiB each) is missed here and reaches the retired bucket later.
pub fn end_task(tag: u32) -> Result<TaskMemory, MeasureError> {
    batch::flush_thread();
    tally::end_slot(tag)
}
