//! The byte counters: one slot per running task, plus process-wide totals.
//!
//! The allocator updates these on every allocation and free, so everything here is atomics in
//! statics: no allocation, no locks, no thread-locals. Orderings are `Relaxed` throughout: each
//! counter is one atomic, so its own modification order is all that matters for its value, and
//! the engine's own synchronisation (spawning the task, joining it) orders `begin_task` before
//! the task's allocations and those before `end_task`.
//!
//! A task's slot is `tag % SLOTS`. Its state is one `u64` — an "active" bit, the tag's high bits
//! (which, with the slot index, name the owner exactly) and the live byte count — so checking
//! the owner and changing the count is a single compare-and-swap. That keeps a late free from a
//! task that has just ended from ever landing in the counts of the next task to use the slot.

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
/// Bits left for the live byte count: 43 with 4096 slots, i.e. up to 8 TiB per task.
const LIVE_BITS: u32 = 63 - KEY_BITS;
const LIVE_MASK: u64 = (1 << LIVE_BITS) - 1;
/// Set while a task owns the slot; a free slot's state is 0.
const ACTIVE: u64 = 1 << 63;

/// One task's counters, on a cache line of its own so that concurrent tasks do not slow each
/// other down through false sharing.
#[repr(align(64))]
struct Slot {
    /// `ACTIVE | key << LIVE_BITS | live`, or 0 when free.
    state: AtomicU64,
    /// Highest `live` since the task began.
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
    live: AtomicU64,
    peak: AtomicU64,
}

/// All zeros, so the table costs address space only until slots are used.
static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

static TOTAL: Total = Total { live: AtomicU64::new(0), peak: AtomicU64::new(0) };

/// Live bytes of blocks whose task has ended (outputs, mostly). Signed because a free racing
/// with `end_task` may subtract before `end_task` adds.
static RETIRED: AtomicI64 = AtomicI64::new(0);

/// Where `begin_new_task` looks for its next tag.
static NEXT_TAG: AtomicU32 = AtomicU32::new(1);

/// What a task's allocations amounted to, from [`end_task`].
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

/// The state bits (all but `live`) of a slot owned by `tag`.
#[inline]
fn owner_bits(tag: u32) -> u64 {
    ACTIVE | (u64::from(tag >> SLOT_BITS) << LIVE_BITS)
}

#[inline]
fn owned_by(state: u64, tag: u32) -> bool {
    state & !LIVE_MASK == owner_bits(tag)
}

/// The tag owning slot `index`, given its state.
fn holder(state: u64, index: usize) -> u32 {
    let key = ((state & !ACTIVE) >> LIVE_BITS) as u32;
    (key << SLOT_BITS) | index as u32
}

/// Raises `peak` to `value`; the plain load first skips the locked operation in the common case
/// where the peak is not being raised.
#[inline]
fn raise(peak: &AtomicU64, value: u64) {
    if value > peak.load(Relaxed) {
        peak.fetch_max(value, Relaxed);
    }
}

/// Counts a new block of `bytes` in the process total.
#[inline]
pub(super) fn total_add(bytes: u64) {
    let live = TOTAL.live.fetch_add(bytes, Relaxed).wrapping_add(bytes);
    raise(&TOTAL.peak, live);
}

/// Counts a freed block of `bytes` in the process total.
#[inline]
pub(super) fn total_sub(bytes: u64) {
    TOTAL.live.fetch_sub(bytes, Relaxed);
}

/// Charges `bytes` to task `tag` if it is running; returns whether it was charged. An
/// allocation that is not charged is recorded as `NO_TASK`, so its free is not credited either.
#[inline]
pub(super) fn charge_task(tag: u32, bytes: u64) -> bool {
    if tag == NO_TASK {
        return false;
    }
    let slot = slot_of(tag);
    let mut state = slot.state.load(Relaxed);
    loop {
        // No overflow: live < 2^43 and bytes < 2^63.
        let live = (state & LIVE_MASK) + bytes;
        if !owned_by(state, tag) || live > LIVE_MASK {
            return false;
        }
        match slot.state.compare_exchange_weak(state, state + bytes, Relaxed, Relaxed) {
            Ok(_) => {
                raise(&slot.peak, live);
                return true;
            }
            Err(now) => state = now,
        }
    }
}

/// Credits a freed block of `bytes` to the task `tag` that made it; to the retired bucket when
/// that task has ended (whether or not its slot has a new owner).
#[inline]
pub(super) fn release_task(tag: u32, bytes: u64) {
    if tag == NO_TASK {
        return;
    }
    let slot = slot_of(tag);
    let mut state = slot.state.load(Relaxed);
    loop {
        if !owned_by(state, tag) {
            RETIRED.fetch_sub(bytes as i64, Relaxed);
            return;
        }
        // A block charged to this task is counted in its live bytes, so this never clamps;
        // clamping anyway keeps a misuse (a tag reused for two tasks) from touching the owner bits.
        let freed = bytes.min(state & LIVE_MASK);
        match slot.state.compare_exchange_weak(state, state - freed, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => state = now,
        }
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
        .compare_exchange(0, owner_bits(tag), Relaxed, Relaxed)
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

/// Task `tag`'s live bytes, if it is running.
#[inline]
fn running_live(tag: u32) -> Option<u64> {
    let state = slot_of(tag).state.load(Relaxed);
    (tag != NO_TASK && owned_by(state, tag)).then_some(state & LIVE_MASK)
}

/// Bytes task `tag`'s blocks hold now; 0 if it is not running.
pub fn task_live(tag: u32) -> u64 {
    running_live(tag).unwrap_or(0)
}

/// The most bytes task `tag`'s blocks have held at once so far; 0 if it is not running.
pub fn task_peak(tag: u32) -> u64 {
    // The peak is raised just after the live count, so it may trail it for an instant.
    running_live(tag).map_or(0, |live| slot_of(tag).peak.load(Relaxed).max(live))
}

/// Stops measuring task `tag` and frees its slot. Its blocks still alive (its output) move to
/// the retired bucket, which later frees of them are credited to. Call it after the task and all
/// the work it handed out have returned: an allocation racing with the end may still raise the
/// slot's peak after it is handed to the next task.
pub fn end_task(tag: u32) -> Result<TaskMemory, MeasureError> {
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
    let retained = state & LIVE_MASK;
    RETIRED.fetch_add(retained as i64, Relaxed);
    Ok(TaskMemory { peak_bytes: peak.max(retained), retained_bytes: retained })
}

/// Bytes held by every live block in the process, tagged or not (including tag headers).
pub fn live_bytes() -> u64 {
    TOTAL.live.load(Relaxed)
}

/// The highest [`live_bytes`] since the start or the last [`reset_peak`].
pub fn peak_live_bytes() -> u64 {
    TOTAL.peak.load(Relaxed).max(live_bytes())
}

/// Restarts [`peak_live_bytes`] from the current live bytes.
pub fn reset_peak() {
    TOTAL.peak.store(live_bytes(), Relaxed);
}

/// Bytes still held by blocks of tasks that have ended (their outputs, until freed).
pub fn retired_bytes() -> u64 {
    RETIRED.load(Relaxed).max(0) as u64
}
