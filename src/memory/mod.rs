//! The memory ledger: what running tasks have reserved plus the buffers resident for their
//! consumers, against the run's budget, and the admission decisions made from it.
//!
//! Reservations are estimates, and estimates can be wrong, so the ledger also watches what each
//! running task really holds (its live bytes, from [`crate::measure`]): a task counts as the
//! larger of the two. A task may grow its reservation when it announces a large allocation
//! ([`Ledger::try_grow`]); dispatch pauses while the process's live heap is over budget.

pub mod spill;

use crate::measure;

/// One running task's claim.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    tag: u32,
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
#[derive(Debug, Clone)]
pub struct Ledger {
    budget: u64,
    running: Vec<Reservation>,
    resident: u64,
    peak_used: u64,
}

impl Ledger {
    pub fn new(budget: u64) -> Ledger {
        Ledger { budget, running: Vec::new(), resident: 0, peak_used: 0 }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes the running tasks hold: for each, the larger of its reservation and its live bytes.
    pub fn held_by_tasks(&self) -> u64 {
        self.running.iter().map(|r| r.bytes.max(measure::task_live(r.tag))).sum()
    }

    /// Bytes of buffers kept for consumers.
    pub fn resident(&self) -> u64 {
        self.resident
    }

    /// Everything the ledger counts.
    pub fn used(&self) -> u64 {
        self.held_by_tasks() + self.resident
    }

    /// The highest `used()` seen at any admission, growth or new buffer.
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    fn note_peak(&mut self) {
        self.peak_used = self.peak_used.max(self.used());
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
        if measure::live_bytes() > self.budget {
            return Admission::Wait;
        }
        if self.used().saturating_add(estimate) <= self.budget { Admission::Fits } else { Admission::Wait }
    }

    /// How many more tasks of `estimate` bytes each, up to `wanted`, fit beside everything
    /// already running (one reading of the counters for the lot: a worker claiming a batch of
    /// quick tasks asks once, not once per task). Never admits anything alone.
    pub fn admit_many(&self, estimate: u64, wanted: usize) -> usize {
        if self.running.is_empty() || measure::live_bytes() > self.budget {
            return 0;
        }
        let room = self.budget.saturating_sub(self.used());
        let fitting = room.checked_div(estimate).unwrap_or(u64::MAX);
        wanted.min(usize::try_from(fitting).unwrap_or(usize::MAX))
    }

    /// Records that task `tag` started with `bytes` reserved.
    pub fn start(&mut self, tag: u32, bytes: u64) {
        self.start_all([tag], bytes);
    }

    /// Records that the tasks `tags` started with `bytes` reserved each; the peak is taken once
    /// for the lot, since reading it walks every running task.
    pub fn start_all(&mut self, tags: impl IntoIterator<Item = u32>, bytes: u64) {
        self.running.extend(tags.into_iter().map(|tag| Reservation { tag, bytes, growing: false }));
        self.note_peak();
    }

    /// Releases task `tag`'s reservation.
    pub fn finish(&mut self, tag: u32) {
        if let Some(at) = self.running.iter().position(|r| r.tag == tag) {
            self.running.swap_remove(at);
        }
    }

    /// Task `tag` is about to allocate `bytes` more than it holds: grows its reservation to
    /// cover them if that fits the budget, or if every other running task is itself waiting to
    /// grow (so waiting could never end). Returns false when the caller should wait and retry.
    pub fn try_grow(&mut self, tag: u32, bytes: u64) -> bool {
        let Some(at) = self.running.iter().position(|r| r.tag == tag) else { return true };
        let live = measure::task_live(tag);
        let needed = live.saturating_add(bytes);
        let current = self.running[at].bytes.max(live);
        if needed <= self.running[at].bytes {
            self.running[at].growing = false;
            return true;
        }
        let others_all_waiting = self.running.iter().enumerate().all(|(i, r)| i == at || r.growing);
        let fits = self.used() - current + needed <= self.budget;
        if fits || others_all_waiting {
            self.running[at].bytes = needed;
            self.running[at].growing = false;
            self.note_peak();
            true
        } else {
            self.running[at].growing = true;
            false
        }
    }

    /// Stops counting task `tag` as waiting to grow (it gave up or was woken to re-check).
    pub fn stop_growing(&mut self, tag: u32) {
        if let Some(r) = self.running.iter_mut().find(|r| r.tag == tag) {
            r.growing = false;
        }
    }

    /// A buffer of `bytes` is now resident for its consumers.
    pub fn add_resident(&mut self, bytes: u64) {
        self.resident += bytes;
        self.note_peak();
    }

    /// A resident buffer of `bytes` was freed.
    pub fn remove_resident(&mut self, bytes: u64) {
        self.resident -= bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Tags far from anything the engine measures, so live bytes read 0.
    const A: u32 = 3_000_001;
    const B: u32 = 3_000_002;

    // Budgets far above the test process's own heap, which the live guard also watches.
    const U: u64 = 1 << 30;

    #[test]
    fn admits_what_fits_and_runs_the_oversized_alone() {
        let mut ledger = Ledger::new(1000 * U);
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

    #[test]
    fn batches_admit_as_many_as_fit() {
        let mut ledger = Ledger::new(1000 * U);
        assert_eq!(ledger.admit_many(U, 10), 0, "a batch follows a task admitted on its own");
        ledger.start(A, 600 * U);
        assert_eq!(ledger.admit_many(100 * U, 10), 4);
        assert_eq!(ledger.admit_many(100 * U, 3), 3);
        assert_eq!(ledger.admit_many(500 * U, 3), 0);
        assert_eq!(ledger.admit_many(0, 7), 7);
    }

    #[test]
    fn growth_waits_unless_everyone_else_waits() {
        let mut ledger = Ledger::new(1000 * U);
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
}
