//! The memory ledger: what running tasks have reserved plus the buffers resident for their
//! consumers, against the run's budget, and the admission decisions made from it.
//!
//! Reservations are estimates, and estimates can be wrong, so the ledger also watches what each
//! running task really holds (its live bytes, from [`crate::measure`]): a task counts as the
//! larger of the two. A task may grow its reservation when it announces a large allocation
//! ([`Ledger::try_grow`]); dispatch pauses while the process's live heap is over budget.

pub mod shared;
pub mod spill;

pub use crate::measure::external::Standing;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Where the ledger reads what running tasks really hold. The engine's own meter reads the
/// counting allocator and the resident bytes of the external processes tasks run; a remote
/// executor could feed one from its jobs. Reads must be cheap (a few atomics): the ledger calls
/// them under the scheduler's lock.
pub trait Meter: Sync {
    /// Bytes the task holding reservation `slot` has live now (0 when no task runs there yet).
    fn task_live(&self, slot: TaskSlot) -> u64;
    /// Bytes live in the whole process: its heap, plus what external processes hold.
    fn process_live(&self) -> u64;
    /// Bytes held for the run by no task: service processes at their baseline (warm
    /// interpreters between tasks). Counted in [`Ledger::used`].
    fn standing(&self) -> u64 {
        0
    }
    /// [`Meter::standing`] and what it is made of (read when the ledger takes a new peak).
    fn standing_parts(&self) -> Standing {
        Standing { bytes: self.standing(), shared: 0, services: 0 }
    }
    /// True when no running task ever holds more than its reservation says (a simulation's
    /// tasks grow their reservation to their predicted peak instead): the ledger then counts
    /// the reservations' total, without reading each running task at every admission.
    fn holds_reservations_only(&self) -> bool {
        false
    }
}

/// Standing memory as a run recorded it at its peak, and the workers that run had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RanStanding {
    pub standing: Standing,
    pub workers: usize,
}

impl RanStanding {
    /// The same services' baseline on `workers` workers: as many per worker as the run had
    /// (each kind of service, one per worker: a recipe whose steps run in two kinds of
    /// interpreter had two per worker), but a run that started fewer services than it had
    /// workers had no more tasks to lend them to, and its count is kept.
    pub fn on_workers(self, workers: usize) -> Standing {
        let services = self.standing.services;
        if (services as usize) < self.workers {
            return self.standing.with_services(services);
        }
        let per_worker = services as f64 / self.workers.max(1) as f64;
        self.standing.with_services((per_worker * workers as f64).round() as u64)
    }
}

/// Names one running task's reservation; chosen by the scheduler, which maps it to whatever
/// measures the task (see `Meter::task_live`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskSlot(pub u32);

/// A running task's reservation in the ledger, as its holder owns it: made by
/// [`Ledger::reserve`] (or [`Ledger::reserve_unpeaked`]) and given back by [`Ledger::release`], which
/// consumes it. Neither `Copy` nor `Clone`: whoever holds it holds the bytes, and there is no
/// other way for the scheduler to end a task's reservation.
///
/// Releasing needs the ledger, which lives behind the scheduler's lock (or in the simulation's
/// loop), so a guard cannot release itself in `Drop`, as DataFusion's `MemoryReservation`
/// does through its pool's own lock: it may be dropped where that lock is already held, and
/// taking it there would deadlock. The protocol therefore consumes it explicitly under the
/// lock, where a task ends (`State::finish`) or goes back to wait (`State::reestimate`).
/// `Drop` is the safety net for a path that forgot it (an early return, a panic unwinding past
/// it): the slot goes on a process-wide list that its ledger releases at the scheduler's next
/// pick ([`Ledger::reclaim_dropped`]; so a lost guard cannot keep admission waiting for
/// the rest of the run), and debug builds panic besides — unless already unwinding — so the
/// tests find the path.
#[must_use = "a reservation is given back with `Ledger::release`, under the lock"]
#[derive(Debug)]
pub struct Reservation {
    ledger: u32,
    slot: TaskSlot,
}

impl Reservation {
    /// The slot the reservation is in (what the meter measures the task by).
    pub fn slot(&self) -> TaskSlot {
        self.slot
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        DROPPED.lock().unwrap_or_else(|p| p.into_inner()).push((self.ledger, self.slot));
        DROPPED_COUNT.fetch_add(1, Ordering::Release);
        if cfg!(debug_assertions) && !std::thread::panicking() {
            panic!("the reservation in slot {} was dropped without Ledger::release", self.slot.0);
        }
    }
}

/// Reservations dropped unreleased, with their ledger's id, for that ledger to release; and how
/// many there are (read at every pick: one relaxed load while there are none).
static DROPPED: Mutex<Vec<(u32, TaskSlot)>> = Mutex::new(Vec::new());
static DROPPED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Each ledger's id, so that a dropped guard is released by its own ledger only.
static NEXT_LEDGER: AtomicU32 = AtomicU32::new(0);

/// One running task's claim.
#[derive(Debug, Clone, Copy)]
struct Claim {
    slot: TaskSlot,
    bytes: u64,
    /// Waiting in [`Ledger::try_grow`] for room.
    growing: bool,
}

/// Why a task may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It fits the budget beside everything else.
    Fits,
    /// It does not fit, but nothing else is running, so waiting would never end: it runs alone.
    /// `oversized` when its estimate alone exceeds the budget.
    Alone { oversized: bool },
    /// Wait for running tasks to finish.
    Wait,
}

/// Reservations and resident buffers against the budget.
#[derive(Clone)]
pub struct Ledger<'m> {
    /// What its [`Reservation`]s name it by.
    id: u32,
    budget: u64,
    meter: &'m dyn Meter,
    running: Vec<Claim>,
    /// Where each slot's reservation is in `running` (`NOT_RUNNING` when it holds none): finding
    /// a reservation costs the same under 4 workers or 4,096.
    positions: Vec<u32>,
    /// Σ of `running`'s bytes, and how many of them wait to grow.
    reserved_total: u64,
    growing: usize,
    resident: u64,
    peak_used: u64,
    /// [`Meter::standing_parts`] when `peak_used` was taken.
    standing_at_peak: Standing,
}

/// A slot holding no reservation, in [`Ledger::positions`].
const NOT_RUNNING: u32 = u32::MAX;

impl std::fmt::Debug for Ledger<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("budget", &self.budget)
            .field("running", &self.running.len())
            .field("resident", &self.resident)
            .finish_non_exhaustive()
    }
}

impl<'m> Ledger<'m> {
    pub fn new(budget: u64, meter: &'m dyn Meter) -> Ledger<'m> {
        Ledger {
            id: NEXT_LEDGER.fetch_add(1, Ordering::Relaxed),
            budget,
            meter,
            running: Vec::new(),
            positions: Vec::new(),
            reserved_total: 0,
            growing: 0,
            resident: 0,
            peak_used: 0,
            standing_at_peak: Standing::default(),
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes the running tasks hold: for each, the larger of its reservation and its live bytes.
    pub fn held_by_tasks(&self) -> u64 {
        if self.meter.holds_reservations_only() {
            return self.reserved_total;
        }
        self.running.iter().map(|r| r.bytes.max(self.meter.task_live(r.slot))).sum()
    }

    /// What the task in `slot` holds by its meter (nothing beyond its reservation when the
    /// meter says tasks never exceed theirs).
    fn live(&self, slot: TaskSlot) -> u64 {
        if self.meter.holds_reservations_only() { 0 } else { self.meter.task_live(slot) }
    }

    /// Where the reservation of `slot` is in `running`.
    fn position(&self, slot: TaskSlot) -> Option<usize> {
        match self.positions.get(slot.0 as usize) {
            Some(&at) if at != NOT_RUNNING => Some(at as usize),
            _ => None,
        }
    }

    /// Sets the bytes of the reservation at `at`, keeping the totals.
    fn set_bytes(&mut self, at: usize, bytes: u64) {
        self.reserved_total = self.reserved_total - self.running[at].bytes + bytes;
        self.running[at].bytes = bytes;
    }

    /// Marks the reservation at `at` waiting to grow, or not, keeping the count.
    fn set_growing(&mut self, at: usize, growing: bool) {
        if self.running[at].growing != growing {
            self.running[at].growing = growing;
            if growing {
                self.growing += 1;
            } else {
                self.growing -= 1;
            }
        }
    }

    /// Bytes of buffers kept for consumers.
    pub fn resident(&self) -> u64 {
        self.resident
    }

    /// Everything the ledger counts: running tasks, buffers kept for consumers, and memory
    /// standing for the run (service processes at their baseline).
    pub fn used(&self) -> u64 {
        self.used_with(self.meter.standing())
    }

    /// [`Ledger::used`] with `standing` read already.
    fn used_with(&self, standing: u64) -> u64 {
        self.held_by_tasks() + self.resident + standing
    }

    /// The highest `used()` seen at any admission, growth or new buffer.
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }

    /// Tasks holding a reservation.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Takes the peak of [`Ledger::used`] now (after a lot of [`Ledger::reserve_unpeaked`]).
    pub fn note_peak(&mut self) {
        let standing = self.meter.standing();
        let used = self.used_with(standing);
        if used > self.peak_used {
            self.peak_used = used;
            self.standing_at_peak = Standing { bytes: standing, ..self.meter.standing_parts() };
        }
    }

    /// Of [`Ledger::peak_used`], the bytes standing for the run (service processes at their
    /// baseline) when it was taken: what a simulation, whose tasks run no service, adds.
    pub fn standing_at_peak(&self) -> Standing {
        self.standing_at_peak
    }

    /// May a task estimated at `estimate` start now?
    pub fn admission(&self, estimate: u64) -> Admission {
        if self.running.is_empty() {
            return if self.used().saturating_add(estimate) <= self.budget {
                Admission::Fits
            } else {
                Admission::Alone { oversized: estimate > self.budget }
            };
        }
        // The process's live heap includes what estimates missed; while it is over budget,
        // starting more work can only make it worse.
        if self.meter.process_live() > self.budget {
            return Admission::Wait;
        }
        if self.used().saturating_add(estimate) <= self.budget { Admission::Fits } else { Admission::Wait }
    }

    /// The bytes a batch of a quick step's tasks may reserve beside everything already running
    /// (one reading of the counters for the lot: a worker claiming a batch asks once, not once
    /// per task). Nothing when nothing runs: a batch never starts anything alone.
    pub fn batch_room(&self) -> u64 {
        if self.running.is_empty() || self.meter.process_live() > self.budget {
            return 0;
        }
        self.budget.saturating_sub(self.used())
    }

    /// Records that the task in `slot` started with `bytes` reserved (the ledger's own
    /// bookkeeping: the scheduler reserves through [`Ledger::reserve`]).
    pub fn start(&mut self, slot: TaskSlot, bytes: u64) {
        self.start_all([slot], bytes);
    }

    /// Records that the tasks in `slots` started with `bytes` reserved each; the peak is taken
    /// once for the lot, since reading it walks every running task.
    pub fn start_all(&mut self, slots: impl IntoIterator<Item = TaskSlot>, bytes: u64) {
        for slot in slots {
            self.add(slot, bytes);
        }
        self.note_peak();
    }

    /// Adds the claim of the task in `slot` (the peak is the caller's to take).
    fn add(&mut self, slot: TaskSlot, bytes: u64) {
        let index = slot.0 as usize;
        if self.positions.len() <= index {
            self.positions.resize(index + 1, NOT_RUNNING);
        }
        self.positions[index] = self.running.len() as u32;
        self.running.push(Claim { slot, bytes, growing: false });
        self.reserved_total += bytes;
    }

    /// Reserves `bytes` for the task in `slot`, as [`Ledger::start`] does, and hands its
    /// holder the guard that [`Ledger::release`] takes back.
    pub fn reserve(&mut self, slot: TaskSlot, bytes: u64) -> Reservation {
        self.start(slot, bytes);
        Reservation { ledger: self.id, slot }
    }

    /// [`Ledger::reserve`] without taking the peak, for one of a lot reserved together (a
    /// batch of a quick step's tasks): [`Ledger::note_peak`] follows once for the lot, since
    /// reading the peak walks every running task.
    pub fn reserve_unpeaked(&mut self, slot: TaskSlot, bytes: u64) -> Reservation {
        self.add(slot, bytes);
        Reservation { ledger: self.id, slot }
    }

    /// Gives `reservation` back: its task holds nothing in the ledger any more.
    pub fn release(&mut self, reservation: Reservation) {
        debug_assert_eq!(reservation.ledger, self.id, "a reservation is released by the ledger that made it");
        let slot = reservation.slot;
        // Released here; its `Drop` is only for guards that are not.
        std::mem::forget(reservation);
        self.finish(slot);
    }

    /// Releases the reservations of this ledger whose guards were dropped unreleased (see
    /// [`Reservation`]). One relaxed load while there are none: the scheduler calls it at every
    /// pick.
    #[inline]
    pub fn reclaim_dropped(&mut self) {
        if DROPPED_COUNT.load(Ordering::Relaxed) != 0 {
            self.release_dropped();
        }
    }

    #[cold]
    fn release_dropped(&mut self) {
        let mut dropped = DROPPED.lock().unwrap_or_else(|p| p.into_inner());
        let id = self.id;
        let before = dropped.len();
        let mut mine = Vec::new();
        dropped.retain(|&(ledger, slot)| {
            let other = ledger != id;
            if !other {
                mine.push(slot);
            }
            other
        });
        DROPPED_COUNT.fetch_sub(before - dropped.len(), Ordering::Release);
        drop(dropped);
        for slot in mine {
            tracing::error!("internal error: the reservation in slot {} was dropped unreleased; released now", slot.0);
            self.finish(slot);
        }
    }

    /// Releases the reservation of the task in `slot` (the ledger's own bookkeeping: the
    /// scheduler holds its reservations as [`Reservation`]s, and gives them back with
    /// [`Ledger::release`]).
    pub fn finish(&mut self, slot: TaskSlot) {
        if let Some(at) = self.position(slot) {
            self.set_bytes(at, 0);
            self.set_growing(at, false);
            self.running.swap_remove(at);
            self.positions[slot.0 as usize] = NOT_RUNNING;
            if let Some(moved) = self.running.get(at) {
                self.positions[moved.slot.0 as usize] = at as u32;
            }
        }
    }

    /// What the task in `slot` has reserved (0 when it holds no reservation).
    pub fn reserved(&self, slot: TaskSlot) -> u64 {
        self.position(slot).map_or(0, |at| self.running[at].bytes)
    }

    /// The task in `slot` is about to allocate `bytes` more than it holds: grows its reservation
    /// to cover them if that fits the budget, or if every other running task is itself waiting
    /// to grow (so waiting could never end). Returns false when the caller should wait and retry.
    pub fn try_grow(&mut self, slot: TaskSlot, bytes: u64) -> bool {
        let Some(at) = self.position(slot) else { return true };
        let live = self.live(slot);
        self.try_reserve(at, live.saturating_add(bytes))
    }

    /// Makes the reservation of the task in `slot` `bytes` in all: at once when that is smaller,
    /// else as [`Ledger::try_grow`] does. Returns false when the caller should wait and retry.
    pub fn try_resize(&mut self, slot: TaskSlot, bytes: u64) -> bool {
        let Some(at) = self.position(slot) else { return true };
        if bytes <= self.running[at].bytes {
            self.set_bytes(at, bytes);
            self.set_growing(at, false);
            return true;
        }
        self.try_reserve(at, bytes)
    }

    /// Makes the reservation of the task in `slot` `bytes` in all if that fits the budget (at
    /// once when smaller), never past it, as [`Ledger::try_resize`] may: for a task claimed but
    /// not started, which can give its reservation back and wait in line (where spilling makes
    /// room for it) instead. Returns false when it does not fit.
    pub fn try_resize_within(&mut self, slot: TaskSlot, bytes: u64) -> bool {
        let Some(at) = self.position(slot) else { return true };
        if bytes > self.running[at].bytes && !self.fits_grown(at, bytes) {
            return false;
        }
        self.set_bytes(at, bytes);
        self.set_growing(at, false);
        self.note_peak();
        true
    }

    /// Whether the running task at `at` holding `needed` in all would keep the ledger within
    /// the budget (it counts now as the larger of its reservation and its live bytes).
    fn fits_grown(&self, at: usize, needed: u64) -> bool {
        let current = self.running[at].bytes.max(self.live(self.running[at].slot));
        self.used() - current + needed <= self.budget
    }

    fn try_reserve(&mut self, at: usize, needed: u64) -> bool {
        if needed <= self.running[at].bytes {
            self.set_growing(at, false);
            return true;
        }
        let others_growing = self.growing - usize::from(self.running[at].growing);
        let others_all_waiting = others_growing == self.running.len() - 1;
        if self.fits_grown(at, needed) || others_all_waiting {
            self.set_bytes(at, needed);
            self.set_growing(at, false);
            self.note_peak();
            true
        } else {
            self.set_growing(at, true);
            false
        }
    }

    /// Stops counting the task in `slot` as waiting to grow (it gave up or was woken to re-check).
    pub fn stop_growing(&mut self, slot: TaskSlot) {
        if let Some(at) = self.position(slot) {
            self.set_growing(at, false);
        }
    }

    /// A buffer of `bytes` is now resident for its consumers.
    pub fn add_resident(&mut self, bytes: u64) {
        self.resident += bytes;
        self.note_peak();
    }

    /// A resident buffer of `bytes` was freed (or spilled).
    pub fn remove_resident(&mut self, bytes: u64) {
        self.resident -= bytes;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const A: TaskSlot = TaskSlot(1);
    const B: TaskSlot = TaskSlot(2);
    const U: u64 = 1 << 30;

    /// Live bytes set by hand: task A's, task B's, the process's and the services' baseline.
    #[derive(Default)]
    struct FakeMeter {
        a: AtomicU64,
        b: AtomicU64,
        process: AtomicU64,
        standing: AtomicU64,
    }

    impl Meter for FakeMeter {
        fn task_live(&self, slot: TaskSlot) -> u64 {
            match slot {
                A => self.a.load(Ordering::Relaxed),
                B => self.b.load(Ordering::Relaxed),
                _ => 0,
            }
        }
        fn process_live(&self) -> u64 {
            self.process.load(Ordering::Relaxed)
        }
        fn standing(&self) -> u64 {
            self.standing.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn the_peak_keeps_the_standing_bytes_it_was_taken_with() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        meter.standing.store(50 * U, Ordering::Relaxed);
        ledger.start(A, 300 * U);
        assert_eq!((ledger.peak_used(), ledger.standing_at_peak().bytes), (350 * U, 50 * U));
        // More standing at a lower total is no new peak; a higher total with less is.
        ledger.finish(A);
        meter.standing.store(200 * U, Ordering::Relaxed);
        ledger.start(A, 100 * U);
        assert_eq!((ledger.peak_used(), ledger.standing_at_peak().bytes), (350 * U, 50 * U));
        meter.standing.store(20 * U, Ordering::Relaxed);
        ledger.start(B, 400 * U);
        assert_eq!((ledger.peak_used(), ledger.standing_at_peak().bytes), (520 * U, 20 * U));
    }

    #[test]
    fn expected_services_count_until_as_many_have_stood() {
        let expected = Standing { bytes: 40 * U, shared: 10 * U, services: 2 };
        // Nothing stands yet: both services' own baselines and their shared pages.
        assert_eq!(Standing::default().awaiting(expected, 0), expected);
        // One stands (forked: the shared pages counted with it): the other's own share waits.
        let one = Standing { bytes: 27 * U, shared: 10 * U, services: 1 };
        assert_eq!(one.awaiting(expected, 1), Standing { bytes: 42 * U, shared: 10 * U, services: 2 });
        // Both stood: what stands alone, also once one of them is let go near the end.
        let both = Standing { bytes: 38 * U, shared: 10 * U, services: 2 };
        assert_eq!(both.awaiting(expected, 2), both);
        assert_eq!(one.awaiting(expected, 2), one);
        assert_eq!(one.awaiting(Standing::default(), 0), one, "nothing expected");
    }

    #[test]
    fn a_recorded_standing_is_taken_to_other_workers_as_many_per_worker() {
        let standing = Standing { bytes: 25 * U, shared: 17 * U, services: 2 };
        assert_eq!(RanStanding { standing, workers: 2 }.on_workers(4).services, 4);
        // A run that started fewer services than its workers had no task for more.
        assert_eq!(RanStanding { standing, workers: 8 }.on_workers(4), standing);
        // Two kinds of interpreter, one of each per worker: two per worker on any workers.
        let two_kinds = Standing { bytes: 60 * U, shared: 0, services: 4 };
        let on_three = RanStanding { standing: two_kinds, workers: 2 }.on_workers(3);
        assert_eq!((on_three.bytes, on_three.services), (90 * U, 6));
    }

    #[test]
    fn a_standing_baseline_is_scaled_per_service_with_the_shared_pages_once() {
        let standing = Standing { bytes: 25 * U, shared: 17 * U, services: 2 };
        assert_eq!(standing.with_services(2), standing);
        assert_eq!(standing.with_services(8), Standing { bytes: 17 * U + 32 * U, shared: 17 * U, services: 8 });
        assert_eq!(standing.with_services(1).bytes, 21 * U);
        assert_eq!(Standing { bytes: 9, shared: 0, services: 0 }.with_services(4).bytes, 9, "nothing to scale by");
    }

    #[test]
    fn admits_what_fits_and_runs_the_oversized_alone() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        assert_eq!(ledger.admission(2000 * U), Admission::Alone { oversized: true });
        assert_eq!(ledger.admission(600 * U), Admission::Fits);
        ledger.start(A, 600 * U);
        assert_eq!(ledger.admission(500 * U), Admission::Wait);
        assert_eq!(ledger.admission(400 * U), Admission::Fits);
        ledger.add_resident(300 * U);
        assert_eq!(ledger.admission(400 * U), Admission::Wait);
        ledger.finish(A);
        assert_eq!(ledger.admission(400 * U), Admission::Fits);
        assert_eq!(ledger.admission(800 * U), Admission::Alone { oversized: false });
        assert_eq!(ledger.peak_used(), 900 * U);
    }

    /// A meter that promises tasks stay within their reservations (a simulation's).
    struct ReservationsOnly;

    impl Meter for ReservationsOnly {
        fn task_live(&self, _slot: TaskSlot) -> u64 {
            u64::MAX
        }
        fn process_live(&self) -> u64 {
            0
        }
        fn holds_reservations_only(&self) -> bool {
            true
        }
    }

    #[test]
    fn reservations_are_found_by_slot_and_totalled_whatever_finishes_first() {
        let meter = ReservationsOnly;
        let mut ledger = Ledger::new(1000 * U, &meter);
        ledger.start_all([TaskSlot(7), TaskSlot(3), TaskSlot(100)], 10 * U);
        ledger.finish(TaskSlot(7));
        assert_eq!(ledger.reserved(TaskSlot(100)), 10 * U, "the moved reservation is still found");
        assert_eq!(ledger.reserved(TaskSlot(7)), 0);
        assert!(ledger.try_resize(TaskSlot(100), 50 * U));
        // Its meter is not read: the reservations are what is held.
        assert_eq!(ledger.used(), 60 * U);
        ledger.finish(TaskSlot(3));
        ledger.finish(TaskSlot(100));
        assert_eq!((ledger.used(), ledger.running()), (0, 0));
        ledger.start(TaskSlot(3), U);
        assert_eq!(ledger.reserved(TaskSlot(3)), U);
    }

    #[test]
    fn a_batch_has_the_room_beside_what_runs() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        assert_eq!(ledger.batch_room(), 0, "a batch follows a task admitted on its own");
        ledger.start(A, 600 * U);
        assert_eq!(ledger.batch_room(), 400 * U);
        ledger.start(B, 500 * U);
        assert_eq!(ledger.batch_room(), 0, "over the budget (B ran alone): no room, not a wrap");
    }

    #[test]
    fn growth_waits_unless_everyone_else_waits() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        ledger.start(A, 400 * U);
        ledger.start(B, 400 * U);
        // Growth is measured from live bytes (0 here): A asks for 600 in all.
        assert!(ledger.try_grow(A, 600 * U), "600 + 400 fits");
        assert!(!ledger.try_grow(B, 500 * U), "would be 1100");
        // A now also wants more than fits: B is waiting, so A may go ahead rather than deadlock.
        assert!(ledger.try_grow(A, 700 * U));
        ledger.finish(A);
        assert!(ledger.try_grow(B, 500 * U));
    }

    #[test]
    fn live_bytes_past_a_reservation_count_and_pause_dispatch() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        ledger.start(A, 100 * U);
        meter.a.store(700 * U, Ordering::Relaxed);
        assert_eq!(ledger.used(), 700 * U, "a task counts at its live bytes once they pass its reservation");
        assert_eq!(ledger.admission(400 * U), Admission::Wait);
        assert_eq!(ledger.admission(300 * U), Admission::Fits);
        meter.process.store(1001 * U, Ordering::Relaxed);
        assert_eq!(ledger.admission(U), Admission::Wait, "the process over budget pauses dispatch");
        assert_eq!(ledger.batch_room(), 0);
    }

    #[test]
    fn a_reservation_shrinks_at_once_and_grows_only_into_room() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        ledger.start(A, 600 * U);
        ledger.start(B, 300 * U);
        assert!(ledger.try_resize(A, 200 * U));
        assert_eq!(ledger.reserved(A), 200 * U);
        assert!(ledger.try_resize(A, 700 * U), "700 + 300 fits");
        assert!(!ledger.try_resize(B, 400 * U), "700 + 400 does not");
        assert_eq!(ledger.reserved(B), 300 * U);
    }

    #[test]
    fn a_claimed_task_alone_is_resized_within_the_budget_only() {
        let meter = FakeMeter::default();
        let mut ledger = Ledger::new(1000 * U, &meter);
        ledger.add_resident(600 * U);
        ledger.start(A, 100 * U);
        // Alone, it may grow past the budget as it runs (waiting could never end)...
        assert!(ledger.try_resize(A, 500 * U));
        ledger.finish(A);
        // ... but not before it runs: it waits in line, where a spill may make room for it.
        ledger.start(A, 100 * U);
        assert!(!ledger.try_resize_within(A, 500 * U), "600 resident + 500 is over 1000");
        assert_eq!(ledger.reserved(A), 100 * U);
        assert!(ledger.try_resize_within(A, 400 * U), "600 + 400 fits");
        assert!(ledger.try_resize_within(A, 50 * U), "a smaller one always");
        assert_eq!(ledger.used(), 650 * U);
    }
}
