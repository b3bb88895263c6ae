//! Per-step statistics gathered by each worker without sharing, merged when the run ends:
//! counts, estimate and peak distributions (log-bucketed, so memory does not grow with the
//! number of tasks), and wall time.

use std::time::Duration;

/// Sub-buckets per power of two: quantiles are within about 3% of the true value.
const SUB_BUCKETS: u32 = 32;
const BUCKETS: usize = 65 * SUB_BUCKETS as usize;

/// A log-bucketed histogram of byte counts with exact min and max.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS].into_boxed_slice(), total: 0, min: u64::MAX, max: 0 }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Histogram(n={}, min={}, max={})", self.total, self.min, self.max)
    }
}

fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // ≥ 5
    let shift = exponent - SUB_BUCKETS.trailing_zeros();
    let mantissa = (value >> shift) as u32 - SUB_BUCKETS; // 0..SUB_BUCKETS
    ((exponent - SUB_BUCKETS.trailing_zeros() + 1) * SUB_BUCKETS + mantissa) as usize
}

/// Middle of a bucket's range.
fn bucket_value(bucket: usize) -> u64 {
    let bucket = bucket as u32;
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let shift = bucket / SUB_BUCKETS - 1;
    let mantissa = (bucket % SUB_BUCKETS + SUB_BUCKETS) as u64;
    let low = mantissa << shift;
    low + ((1u64 << shift) >> 1)
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.total += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `q` quantile (0..=1), exact when all values are equal; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        if self.min == self.max {
            return self.min;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_value(bucket).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

/// What one step did.
#[derive(Debug, Clone, Default)]
pub struct StepStats {
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Taken over by `--resume` from the run it resumes.
    pub reused: u64,
    pub estimate: Histogram,
    pub peak: Histogram,
    pub output_bytes: u64,
    /// Sums over the tasks that ran, for slack = Σ estimate / Σ peak − 1.
    pub estimate_sum: u64,
    pub peak_sum: u64,
    pub wall: Duration,
    /// Tasks whose measured peak exceeded their estimate.
    pub underestimates: u64,
    /// Tasks whose estimate alone exceeded the budget.
    pub oversized: u64,
}

impl StepStats {
    pub fn merge(&mut self, other: &StepStats) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.reused += other.reused;
        self.estimate.merge(&other.estimate);
        self.peak.merge(&other.peak);
        self.output_bytes += other.output_bytes;
        self.estimate_sum += other.estimate_sum;
        self.peak_sum += other.peak_sum;
        self.wall += other.wall;
        self.underestimates += other.underestimates;
        self.oversized += other.oversized;
    }

    pub fn tasks(&self) -> u64 {
        self.ok + self.failed + self.skipped + self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_close() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1_000_000);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 / 500e6 - 1.0).abs() < 0.04, "{p50}");
        assert_eq!(h.max(), 1_000_000_000);
        let mut same = Histogram::default();
        same.record(400 << 20);
        same.record(400 << 20);
        assert_eq!(same.quantile(0.5), 400 << 20);
    }

    #[test]
    fn buckets_are_monotonic() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 40, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last && b < BUCKETS);
            last = b;
        }
        for v in [100u64, 4096, 123_456_789] {
            let mid = bucket_value(bucket_of(v));
            assert!((mid as f64 / v as f64 - 1.0).abs() < 0.04, "{v} {mid}");
        }
    }
}
