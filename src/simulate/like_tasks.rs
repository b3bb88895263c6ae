//! What tasks like one take, on average. One run's time for a task is one draw: the same
//! millisecond of work took 0.5 ms in one run and 5 ms in the next when the process was
//! descheduled, and whole runs of `mixed.yaml` differ by a third in a step's task-seconds. So a
//! prediction gives a task the mean time of the recorded tasks like it — of its step, about its
//! size (what their data made of them within [`SAME_SIZE`] of its own), in the recent runs whose
//! vars are near the alike run's (within [`NEAR_VARS`] of each var's range over the runs and the
//! cycle predicted, as [`super::alike`] measures nearness) — where there are at least
//! [`AT_LEAST`] of them; else the alike run's own time for it. The mean, not the median: the
//! stalls a run has somewhere are part of what its tasks cost.

/// How near (a share of each var's range, [`super::alike::distances`]) a run's vars must be to
/// the alike run's for its tasks to count as like this cycle's.
pub const NEAR_VARS: f64 = 0.1;

/// How near (a share of the larger) two figures must be for their tasks to count as the same
/// size.
const SAME_SIZE: f64 = 0.1;

/// Whether two tasks' figures are about the same size: within [`SAME_SIZE`] of the larger.
pub fn about_the_same(a: u64, b: u64) -> bool {
    a.abs_diff(b) as f64 <= SAME_SIZE * a.max(b) as f64
}

/// Fewer like tasks than this, and a task keeps the alike run's time.
const AT_LEAST: usize = 3;

/// What a task's data made of it, as compared between tasks: the estimate its plugin gave at
/// dispatch, its output's bytes and its file's, summed.
pub fn figure(plugin_estimate: u64, output_bytes: u64, file_bytes: u64) -> u64 {
    plugin_estimate.saturating_add(output_bytes).saturating_add(file_bytes)
}

/// Recorded tasks' figures and times, for the mean time of those of about a size.
#[derive(Debug, Clone, Default)]
pub struct LikeTasks {
    /// Ascending.
    figures: Vec<u64>,
    /// `sums[i]`: the µs of the first `i` tasks in `figures`' order.
    sums: Vec<u64>,
}

impl LikeTasks {
    /// From the tasks' `(figure, µs)`.
    pub fn new(mut tasks: Vec<(u64, u64)>) -> LikeTasks {
        tasks.sort_unstable();
        let mut sums = Vec::with_capacity(tasks.len() + 1);
        sums.push(0);
        let mut sum = 0u64;
        for &(_, wall_us) in &tasks {
            sum = sum.saturating_add(wall_us);
            sums.push(sum);
        }
        LikeTasks { figures: tasks.into_iter().map(|(figure, _)| figure).collect(), sums }
    }

    /// The mean µs of the tasks [`about_the_same`] size as `figure`, when there are at least
    /// [`AT_LEAST`].
    pub fn mean_wall_us(&self, figure: u64) -> Option<u64> {
        // The figures about the same as `figure` are those from (1 - SAME_SIZE) × figure to
        // figure / (1 - SAME_SIZE).
        let low = (figure as f64 * (1.0 - SAME_SIZE)).ceil() as u64;
        let high = (figure as f64 / (1.0 - SAME_SIZE)).floor() as u64;
        let from = self.figures.partition_point(|&f| f < low);
        let to = self.figures.partition_point(|&f| f <= high);
        let count = to.saturating_sub(from);
        (count >= AT_LEAST).then(|| (self.sums[to] - self.sums[from]) / count as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_takes_the_mean_time_of_the_recorded_tasks_of_about_its_size() {
        let like = LikeTasks::new(vec![(100, 10), (95, 20), (104, 60), (300, 1000), (50, 7)]);
        // 95, 100 and 104 are within a tenth of 100; 300 and 50 are not.
        assert_eq!(like.mean_wall_us(100), Some(30));
        // Only two tasks near 300 or 50 (itself and none other): too few to say.
        assert_eq!(like.mean_wall_us(300), None);
        assert_eq!(LikeTasks::default().mean_wall_us(0), None);
    }

    #[test]
    fn tasks_that_hold_nothing_are_alike() {
        let like = LikeTasks::new(vec![(0, 3), (0, 5), (0, 7)]);
        assert_eq!(like.mean_wall_us(0), Some(5));
    }
}
