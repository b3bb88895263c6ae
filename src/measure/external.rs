//! Resident bytes of running tasks' external process trees (commands a task runs, see
//! [`crate::command`]), published while they run so the memory ledger can count them next to
//! the tasks' heap bytes.
//!
//! The counting allocator cannot see a child process's memory; the command runner samples it
//! (from the task's memory cgroup, or from `/proc`) every few milliseconds and publishes the
//! figure here with [`set`]. Readers ([`of`], [`total`]) are lock-free and cheap enough for every
//! admission decision.
//!
//! Layout: like the allocator's tally, one slot per running task at `tag % SLOTS`, holding an
//! "occupied" bit, the tag's high bits (which, with the slot index, name the owner exactly) and
//! the bytes in one `u64`, so that a task can never overwrite or clear another task's figure.
//! The engine's tags of measured tasks are unique per slot among running tasks (the tally's
//! `begin_task` guarantees it); a tag whose slot is held by another running task is refused
//! ([`set`] returns false) rather than mixed up with it.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use runner_plugin::task_tag::NO_TASK;

use super::SLOTS;

const SLOT_BITS: u32 = SLOTS.trailing_zeros();
/// Bits for the byte count: 43 with 4096 slots, i.e. up to 8 TiB per task.
const BYTES_BITS: u32 = 63 - (u32::BITS - SLOT_BITS);
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;
const OCCUPIED: u64 = 1 << 63;

/// One slot per running task, on its own cache line: a sampler writes it every few ms while
/// the admission path reads the others.
#[repr(align(64))]
struct Slot(AtomicU64);

static TABLE: [Slot; SLOTS] = [const { Slot(AtomicU64::new(0)) }; SLOTS];
/// Sum of every occupied slot's bytes.
static TOTAL: AtomicU64 = AtomicU64::new(0);

fn slot_of(tag: u32) -> &'static AtomicU64 {
    &TABLE[tag as usize & (SLOTS - 1)].0
}

fn owner_bits(tag: u32) -> u64 {
    OCCUPIED | (u64::from(tag >> SLOT_BITS) << BYTES_BITS)
}

/// Publishes that task `tag`'s external processes hold `bytes` resident now. Returns false (and
/// records nothing) for [`NO_TASK`], or when the slot is held by another running task.
pub fn set(tag: u32, bytes: u64) -> bool {
    if tag == NO_TASK {
        return false;
    }
    let slot = slot_of(tag);
    let owner = owner_bits(tag);
    let bytes = bytes.min(BYTES_MASK);
    let mut state = slot.load(Relaxed);
    loop {
        let previous = match state {
            0 => 0,
            s if s & !BYTES_MASK == owner => s & BYTES_MASK,
            _ => return false,
        };
        match slot.compare_exchange_weak(state, owner | bytes, Relaxed, Relaxed) {
            Ok(_) => {
                adjust_total(previous, bytes);
                return true;
            }
            Err(now) => state = now,
        }
    }
}

/// Task `tag` has no external process any more: its bytes leave the total and its slot is free.
pub fn clear(tag: u32) {
    if tag == NO_TASK {
        return;
    }
    let slot = slot_of(tag);
    let owner = owner_bits(tag);
    let mut state = slot.load(Relaxed);
    while state & !BYTES_MASK == owner {
        match slot.compare_exchange_weak(state, 0, Relaxed, Relaxed) {
            Ok(_) => {
                adjust_total(state & BYTES_MASK, 0);
                return;
            }
            Err(now) => state = now,
        }
    }
}

/// Resident bytes of task `tag`'s external processes as last published; 0 if it has none.
pub fn of(tag: u32) -> u64 {
    let state = slot_of(tag).load(Relaxed);
    if tag != NO_TASK && state & !BYTES_MASK == owner_bits(tag) { state & BYTES_MASK } else { 0 }
}

/// Resident bytes of every running task's external processes, as last published.
pub fn total() -> u64 {
    TOTAL.load(Relaxed)
}

/// Resident bytes of idle and lent service processes at their baseline (warm interpreters and
/// what they imported): memory of the run that no task is charged for, counted by the ledger.
static STANDING: AtomicU64 = AtomicU64::new(0);

/// Of [`STANDING`], the pages forked services share, counted once.
static STANDING_SHARED: AtomicU64 = AtomicU64::new(0);
/// The services whose own baselines are counted in [`STANDING`].
static STANDING_SERVICES: AtomicU64 = AtomicU64::new(0);

/// A service's own baseline counted as `now` bytes where it was `before` (0: not counted).
pub fn set_service_standing(before: u64, now: u64) {
    // Taken off first, as before this change: a reader between the two sees too little for a
    // moment, never a peak the services did not hold.
    subtract(&STANDING, before);
    add(&STANDING, now);
    match (before, now) {
        (0, 1..) => add(&STANDING_SERVICES, 1),
        (1.., 0) => subtract(&STANDING_SERVICES, 1),
        _ => {}
    }
}

/// The pages forked services share, `bytes` of them, are counted from now on.
pub fn add_shared_standing(bytes: u64) {
    add(&STANDING, bytes);
    add(&STANDING_SHARED, bytes);
}

/// The shared pages of `bytes` (as added) are no longer counted.
pub fn remove_shared_standing(bytes: u64) {
    subtract(&STANDING, bytes);
    subtract(&STANDING_SHARED, bytes);
}

fn add(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Relaxed);
}

fn subtract(counter: &AtomicU64, by: u64) {
    // Never below 0, even if a caller's figures drifted.
    let _ = counter.fetch_update(Relaxed, Relaxed, |now| Some(now.saturating_sub(by)));
}

/// What every service process holds at its baseline.
pub fn standing() -> u64 {
    STANDING.load(Relaxed)
}

/// [`standing`], and of it the shared pages and how many services' own baselines.
pub fn standing_parts() -> Standing {
    Standing {
        bytes: STANDING.load(Relaxed),
        shared: STANDING_SHARED.load(Relaxed),
        services: STANDING_SERVICES.load(Relaxed),
    }
}

/// Memory standing for the run: service processes at their baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    pub bytes: u64,
    /// Of `bytes`, the pages forked services share, counted once (their reaper's).
    pub shared: u64,
    /// The services whose own baselines make the rest.
    pub services: u64,
}

impl Standing {
    /// The same services' baseline with `services` of them: the shared pages once, and each
    /// service's own share of the rest (unchanged when the count is unknown).
    pub fn with_services(self, services: u64) -> Standing {
        match self.services {
            0 => self,
            counted => {
                let own = (self.bytes.saturating_sub(self.shared) as u128 * services as u128 / counted as u128) as u64;
                Standing { bytes: self.shared + own, shared: self.shared, services }
            }
        }
    }

    /// What the ledger counts while a run's `expected` services start: what stands now, and
    /// the baseline of each expected service not yet seen standing (`seen`: the most that
    /// stood at once this run), the shared pages too while none are counted. An interpreter
    /// is started by its first task, after that task was admitted: without this, the first
    /// tasks of a run would be admitted beside interpreters the ledger could not yet see.
    pub fn awaiting(self, expected: Standing, seen: u64) -> Standing {
        let missing = expected.services.saturating_sub(seen);
        if missing == 0 {
            return self;
        }
        let own = expected.bytes.saturating_sub(expected.shared) / expected.services;
        let shared = if self.shared == 0 { expected.shared } else { 0 };
        Standing {
            bytes: self.bytes + own * missing + shared,
            shared: self.shared + shared,
            services: self.services + missing,
        }
    }
}

fn adjust_total(previous: u64, now: u64) {
    if now >= previous {
        TOTAL.fetch_add(now - previous, Relaxed);
    } else {
        TOTAL.fetch_sub(previous - now, Relaxed);
    }
}

/// Held by the library's tests that publish external bytes (by running commands), so that the
/// test of the total sees only its own.
#[cfg(test)]
pub(crate) fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Tags far from the ones the engine hands out (from 1 upwards). The library's other tests
    // that publish external bytes hold `exclusive` too, so the total is exact here.
    const A: u32 = 3_000_001;
    const B: u32 = A + SLOTS as u32; // the same slot as A

    #[test]
    fn set_replace_clear_owner_check_and_total() {
        let _alone = exclusive();
        assert_eq!(total(), 0);
        assert!(set(A, 100 << 20));
        assert_eq!((of(A), total()), (100 << 20, 100 << 20));
        assert!(set(A, 40 << 20), "the owner replaces its own figure");
        assert_eq!((of(A), total()), (40 << 20, 40 << 20));
        assert!(!set(B, 7), "another task whose tag maps to the same slot is refused");
        assert_eq!((of(B), total()), (0, 40 << 20));
        clear(B);
        assert_eq!(of(A), 40 << 20, "clearing another tag leaves the owner's figure alone");
        for (i, tag) in [A + 1, A + 2, A + 3].into_iter().enumerate() {
            assert!(set(tag, (i as u64 + 1) << 20));
        }
        assert_eq!(total(), (40 + 1 + 2 + 3) << 20);
        for tag in [A, A + 1, A + 2, A + 3] {
            clear(tag);
            assert_eq!(of(tag), 0);
        }
        assert_eq!(total(), 0);
        assert!(set(B, 5), "a free slot can be taken by the next task");
        assert_eq!((of(B), total()), (5, 5));
        clear(B);
        assert_eq!(total(), 0);
        assert!(!set(NO_TASK, 1));
        assert_eq!(of(NO_TASK), 0);
    }
}
