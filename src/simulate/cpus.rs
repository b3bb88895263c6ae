//! The CPUs of a local run, shared when more workers are busy than there are CPUs. A task's
//! recorded time is what it took with a CPU to itself (the runs it was recorded in had no more
//! workers than CPUs); with `n` units running on `c < n` CPUs, each runs at `c / n` of that
//! speed — every task taken to compute throughout, as the kernel's fair share gives a
//! CPU-bound task. (A task that sleeps or waits on a disk would not slow so: the store keeps no
//! CPU time per task to tell them apart.)
//!
//! Rather than move every running unit's end whenever another starts or ends, one clock counts
//! the *work* a unit running throughout has done since the start, in nanoseconds of recorded
//! time: it runs at the speed of the moment, and a unit ends when it has gone by the unit's
//! recorded time since the unit started. Between two events the speed is constant, so the next
//! end is one division away, and each start or end costs one heap operation.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The shared CPUs and the units running on them.
#[derive(Debug)]
pub struct SharedCpus {
    cpus: u64,
    busy: u64,
    /// Work done by a unit running throughout since the start (ns of recorded time).
    work: f64,
    /// The running units' ends on the work clock (and a sequence number and worker), soonest
    /// first.
    ends: BinaryHeap<Reverse<(u64, u64, u32)>>,
    seq: u64,
}

impl SharedCpus {
    /// `cpus` CPUs (at least 1), none busy.
    pub fn new(cpus: usize) -> SharedCpus {
        SharedCpus { cpus: cpus.max(1) as u64, busy: 0, work: 0.0, ends: BinaryHeap::new(), seq: 0 }
    }

    /// Recorded time a running unit gets through per unit of real time now.
    fn speed(&self) -> f64 {
        if self.busy <= self.cpus { 1.0 } else { self.cpus as f64 / self.busy as f64 }
    }

    /// `worker`'s unit of `work` ns of recorded time starts now.
    pub fn start(&mut self, work: u64, worker: u32) {
        self.seq += 1;
        self.ends.push(Reverse((self.work.ceil() as u64 + work, self.seq, worker)));
        self.busy += 1;
    }

    /// The CPUs shared.
    pub fn cpus(&self) -> usize {
        self.cpus as usize
    }

    /// How long from now (real ns) until the next unit ends.
    pub fn next_end(&self) -> Option<u64> {
        let &Reverse((end, ..)) = self.ends.peek()?;
        let left = (end as f64 - self.work).max(0.0);
        Some((left / self.speed()).ceil() as u64)
    }

    /// The clock moved on by `elapsed` real ns, at the speed of the moment.
    pub fn advance(&mut self, elapsed: u64) {
        self.work += elapsed as f64 * self.speed();
    }

    /// The next unit ends now (the clock has been moved to it): its worker.
    pub fn end(&mut self) -> Option<u32> {
        let Reverse((end, _, worker)) = self.ends.pop()?;
        self.work = self.work.max(end as f64);
        self.busy -= 1;
        Some(worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs units of `works` ns, all started at 0 on `cpus`, to their ends: (real end, worker).
    fn ends(cpus: usize, works: &[u64]) -> Vec<(u64, u32)> {
        let mut shared = SharedCpus::new(cpus);
        for (worker, &work) in works.iter().enumerate() {
            shared.start(work, worker as u32);
        }
        let mut now = 0;
        let mut ended = Vec::new();
        while let Some(after) = shared.next_end() {
            shared.advance(after);
            now += after;
            ended.push((now, shared.end().unwrap()));
        }
        ended
    }

    #[test]
    fn units_no_more_than_the_cpus_take_their_recorded_time() {
        assert_eq!(ends(2, &[100, 300]), [(100, 0), (300, 1)]);
        assert_eq!(ends(4, &[50]), [(50, 0)]);
    }

    #[test]
    fn more_units_than_cpus_share_them_and_speed_up_as_others_end() {
        // Four units of 100 on 2 CPUs: each at half speed, all end at 200.
        let four = ends(2, &[100, 100, 100, 100]);
        assert_eq!(four.iter().map(|e| e.0).collect::<Vec<_>>(), [200, 200, 200, 200]);
        // 100 and 300 on 1 CPU: the short one ends at 200 (half speed); the long one has 200
        // left, alone at full speed: it ends at 400, the CPU's whole work.
        assert_eq!(ends(1, &[100, 300]), [(200, 0), (400, 1)]);
    }

    #[test]
    fn a_unit_started_later_joins_the_sharing_from_then() {
        let mut shared = SharedCpus::new(1);
        shared.start(100, 0);
        shared.advance(50);
        // 50 done; the second unit of 100 starts at 50 and both run at half speed.
        shared.start(100, 1);
        let after = shared.next_end().unwrap();
        assert_eq!(after, 100, "the first has 50 left at half speed");
        shared.advance(after);
        assert_eq!(shared.end(), Some(0));
        // The second did 50 of its 100 meanwhile, and has the CPU to itself.
        assert_eq!(shared.next_end(), Some(50));
        shared.advance(50);
        assert_eq!(shared.end(), Some(1));
    }
}
