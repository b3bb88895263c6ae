//! The shared byte counters: one slot per running task, plus process-wide totals, and the
//! public API over them.
//!
//! The allocator updates these (through each thread's batch, see `batch.rs`), so what it calls
//! here is atomics in statics: no allocation, no locks, no thread-locals. Orderings are `Relaxed`
//! throughout: each counter is one atomic, so its own modification order is all that matters for
//! its value, and the engine's own synchronisation (spawning the task, joining it) orders
//! `begin_task` before the task's allocations and those before `end_task`.
//!
//! A task's slot is `tag % SLOTS`. Its state is one `u64` — an "active" bit, the tag's high bits
//! (which, with the slot index, name the owner exactly) and the live byte count — so checking
//! the owner and changing the count is one compare-and-swap. That keeps a late update from a task
//! that has just ended from ever landing in the counts of the next task to use the slot. The
//! count is biased so that it can dip below zero for a moment: one thread may publish the frees
//! of blocks whose allocations another thread has not published yet.

use std::sync::atomic::AtomicI64;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use runner_plugin::task_tag::NO_TASK;

use super::MeasureError;

/// Number of task counter slots (at most this many tasks can be measured at once).
pub const SLOTS: usize = 4096;
const _: () = assert!(SLOTS.is_power_of_two() && SLOTS > 1 && SLOTS <= 1 << 16);

/// Low tag bits that pick the slot.
const SLOT_BITS: u32 = SLOTS.trailing_zeros();
/// High tag bits kept in the state word to name the slot's owner.
const KEY_BITS: u32 = u32::BITS - SLOT_BITS;
/// Bits left for the biased live byte count: 43 with 4096 slots, i.e. ±4 TiB per task.
const LIVE_BITS: u32 = 63 - KEY_BITS;
const LIVE_MASK: u64 = (1 << LIVE_BITS) - 1;
/// The count field holds `BIAS + live`.
const BIAS: i64 = 1 << (LIVE_BITS - 1);
/// Set while a task owns the slot; a free slot's state is 0.
const ACTIVE: u64 = 1 << 63;

/// One task's counters, on a cache line of its own so that concurrent tasks do not slow each
/// other down through false sharing.
#[repr(align(64))]
struct Slot {
    /// `ACTIVE | key << LIVE_BITS | (BIAS + live)`, or 0 when free.
    state: AtomicU64,
    /// Highest published `live` since the task began.
    peak: AtomicU64,
}

impl Slot {
    const fn new() -> Self {
        Self { state: AtomicU64::new(0), peak: AtomicU64::new(0) }
    }
}

/// Process-wide live bytes and their peak: touched together, so on one line.
#[repr(align(64))]
struct Total {
    live: AtomicI64,
    peak: AtomicU64,
}

/// All zeros, so the table costs address space only until slots are used.
static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

static TOTAL: Total = Total { live: AtomicI64::new(0), peak: AtomicU64::new(0) };

/// Live bytes of blocks whose task has ended (outputs, mostly). Signed for the same reason as
/// the slots' counts.
static RETIRED: AtomicI64 = AtomicI64::new(0);

/// Where `begin_new_task` looks for its next tag.
static NEXT_TAG: AtomicU32 = AtomicU32::new(1);

/// A thread's unpublished bytes for one task (see `batch.rs`), settled here in one step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Pending {
    /// Allocated minus freed.
    pub bytes: i64,
    /// The highest `bytes` has been (at least 0).
    pub high: i64,
}

/// What a task's allocations amounted to, from [`super::end_task`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskMemory {
    /// The most bytes the task's own blocks held at any one time.
    pub peak_bytes: u64,
    /// Bytes the task's blocks still held when it ended: its output (or a leak).
    pub retained_bytes: u64,
}

#[inline]
fn slot_of(tag: u32) -> &'static Slot {
    &TABLE[tag as usize & (SLOTS - 1)]
}

/// The state (all but the count) of a slot owned by `tag`, with a zero count.
#[inline]
fn owner_bits(tag: u32) -> u64 {
    ACTIVE | (u64::from(tag >> SLOT_BITS) << LIVE_BITS)
}

#[inline]
fn owned_by(state: u64, tag: u32) -> bool {
    state & !LIVE_MASK == owner_bits(tag)
}

#[inline]
fn live_of(state: u64) -> i64 {
    (state & LIVE_MASK) as i64 - BIAS
}

/// The tag owning slot `index`, given its state.
fn holder(state: u64, index: usize) -> u32 {
    let key = ((state & !ACTIVE) >> LIVE_BITS) as u32;
    (key << SLOT_BITS) | index as u32
}

/// Raises `peak` to `live`; the plain load first skips the locked operation in the common case
/// where the peak is not being raised.
#[inline]
fn raise(peak: &AtomicU64, live: i64) {
    let live = live.max(0) as u64;
    if live > peak.load(Relaxed) {
        peak.fetch_max(live, Relaxed);
    }
}

/// Whether task `tag` is running. A plain load: cheap enough for every allocation.
#[inline]
pub(super) fn is_running(tag: u32) -> bool {
    tag != NO_TASK && owned_by(slot_of(tag).state.load(Relaxed), tag)
}

/// Adds `delta` bytes to the process total.
#[inline]
pub(super) fn add_to_total(delta: i64) {
    let live = TOTAL.live.fetch_add(delta, Relaxed).wrapping_add(delta);
    if delta > 0 {
        raise(&TOTAL.peak, live);
    }
}

/// Adds `delta` bytes to task `tag`'s count if it is running; returns whether it did.
#[inline]
pub(super) fn add_to_task(tag: u32, delta: i64) -> bool {
    add_to_task_with_peak(tag, delta, delta).is_some()
}

/// Adds `delta` bytes to task `tag`'s count if it is running, and raises its peak to where the
/// count was before plus `high` (the delta's own highest point); returns the new live bytes.
#[inline]
fn add_to_task_with_peak(tag: u32, delta: i64, high: i64) -> Option<i64> {
    if tag == NO_TASK {
        return None;
    }
    let slot = slot_of(tag);
    let mut state = slot.state.load(Relaxed);
    loop {
        if !owned_by(state, tag) {
            return None;
        }
        // Out of range only past ±4 TiB: refuse rather than spill into the owner bits.
        let count =
            ((state & LIVE_MASK) as i64).checked_add(delta).filter(|count| (0..=LIVE_MASK as i64).contains(count))?;
        let new = (state & !LIVE_MASK) | count as u64;
        match slot.state.compare_exchange_weak(state, new, Relaxed, Relaxed) {
            Ok(_) => {
                let live = count - BIAS;
                if high > 0 {
                    raise(&slot.peak, live - delta + high);
                }
                return Some(live);
            }
            Err(now) => state = now,
        }
    }
}

/// Settles `delta` bytes of blocks made by task `tag`: on the task while it runs, else on the
/// retired bucket (its blocks outlive it there).
#[inline]
pub(super) fn settle(tag: u32, delta: i64) {
    let high = delta.max(0);
    settle_batch(tag, Pending { bytes: delta, high });
}

/// Settles a thread's batch for task `tag` as [`settle`] does, raising the task's peak to where
/// its count was plus the batch's high point.
#[inline]
pub(super) fn settle_batch(tag: u32, pending: Pending) {
    if tag != NO_TASK && add_to_task_with_peak(tag, pending.bytes, pending.high).is_none() {
        RETIRED.fetch_add(pending.bytes, Relaxed);
    }
}

/// Starts measuring task `tag`: claims its slot with zero live and peak bytes. Call it before
/// the task runs under `task_tag::with(tag, …)`. Tags must be unique within the process (a
/// tag begun again after its end would be credited with its earlier run's frees); the engine
/// can let [`begin_new_task`] pick them.
pub fn begin_task(tag: u32) -> Result<(), MeasureError> {
    if tag == NO_TASK {
        return Err(MeasureError::NoTask);
    }
    let index = tag as usize & (SLOTS - 1);
    let slot = &TABLE[index];
    slot.state
        .compare_exchange(0, owner_bits(tag) | BIAS as u64, Relaxed, Relaxed)
        .map_err(|state| MeasureError::SlotBusy { tag, holder: holder(state, index) })?;
    // Reset only once the slot is ours: the previous owner's peak is no longer read by anyone.
    slot.peak.store(0, Relaxed);
    Ok(())
}

/// Starts measuring a new task under a fresh tag whose slot is free, and returns the tag. Tags
/// come from a process-wide counter, so they are unique (until 2^32 tasks).
pub fn begin_new_task() -> Result<u32, MeasureError> {
    // Each attempt lands on the next slot, so SLOTS attempts try every slot once.
    for _ in 0..SLOTS {
        let tag = NEXT_TAG.fetch_add(1, Relaxed);
        match begin_task(tag) {
            Ok(()) => return Ok(tag),
            Err(MeasureError::NoTask | MeasureError::SlotBusy { .. }) => continue,
            Err(other) => return Err(other),
        }
    }
    Err(MeasureError::NoFreeSlot)
}

/// Task `tag`'s published live bytes and peak, `None` when it is not running. (The thread's own
/// unpublished batch is added by the caller, which owns the batches.)
pub(super) fn published(tag: u32) -> Option<(i64, u64)> {
    let slot = slot_of(tag);
    let state = slot.state.load(Relaxed);
    if tag == NO_TASK || !owned_by(state, tag) {
        return None;
    }
    Some((live_of(state), slot.peak.load(Relaxed)))
}

/// Frees task `tag`'s slot and moves its blocks still alive (its output) to the retired bucket,
/// which later frees of them are credited to. The caller publishes its thread's batch first.
pub(super) fn end_slot(tag: u32) -> Result<TaskMemory, MeasureError> {
    let slot = slot_of(tag);
    let peak = slot.peak.load(Relaxed);
    let mut state = slot.state.load(Relaxed);
    loop {
        if tag == NO_TASK || !owned_by(state, tag) {
            return Err(MeasureError::NotRunning { tag });
        }
        match slot.state.compare_exchange_weak(state, 0, Relaxed, Relaxed) {
            Ok(_) => break,
            Err(now) => state = now,
        }
    }
    let retained = live_of(state);
    RETIRED.fetch_add(retained, Relaxed);
    let retained = retained.max(0) as u64;
    Ok(TaskMemory { peak_bytes: peak.max(retained), retained_bytes: retained })
}

/// Bytes held by every live block in the process, tagged or not (including tag headers), as
/// published: each thread may hold back up to 64 KiB of small blocks.
pub fn live_bytes() -> u64 {
    TOTAL.live.load(Relaxed).max(0) as u64
}

#[cfg(test)]
/// The highest [`live_bytes`] since the start or the last [`reset_peak`].
pub fn peak_live_bytes() -> u64 {
    TOTAL.peak.load(Relaxed).max(live_bytes())
}

#[cfg(test)]
/// Restarts [`peak_live_bytes`] from the current live bytes.
pub fn reset_peak() {
    TOTAL.peak.store(live_bytes(), Relaxed);
}

#[cfg(test)]
/// Bytes still held by blocks of tasks that have ended (their outputs, until freed).
pub fn retired_bytes() -> u64 {
    RETIRED.load(Relaxed).max(0) as u64
}
