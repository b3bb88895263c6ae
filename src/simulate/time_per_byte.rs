//! How a step's task time follows what its data made of the task, learned within runs. Past the
//! recorded range ([`super::trend`]) a wetter cycle's tasks hold more — a neighbourhood step's
//! table covers the wet area — and take longer, but the dry runs before it say nothing of how
//! much longer from one run to the next: their tasks' mean figures sit within a few percent of
//! each other, and whole runs differ in pace by a third. Within one run, though, the tasks of a
//! step saw different rain (`wet: 0.02` gives one member a wet box of 80 kB, another 270 kB),
//! ran on the same machine at the same pace, and took longer the more they held.
//!
//! So the time per byte is the median of the slopes between every two tasks of a run with other
//! figures, over the recent runs (Theil and Sen's estimator: a task stalled by the machine is
//! one slope among hundreds, not a lever), and it is used only where the tasks' times rise with
//! their figures more often than chance would have them (Kendall's S over the runs, at least
//! [`Z_AT_LEAST`] standard deviations above 0, with [`PAIRS_AT_LEAST`] pairs or more). On the
//! recorded dry runs of `weather.yaml`, `smooth`'s tasks took 1.9 µs more per kB they held (the
//! first wet cycle's, 1.75 over the dry ones'; S 1.4 deviations above 0), on `weather_uk.yaml`'s
//! 2.05 (2.13; 2.6 deviations); `field`, whose figure moves by a fortieth with the weather and
//! whose time does not follow it within a run, came out −0.5 and −0.9 deviations, and is kept.

/// Tasks of a run the slopes are taken between at most (evenly spaced in the run's order):
/// 128 give 8,128 pairs, and a step of a million tasks its slope as quickly as one of a hundred.
const TASKS_PER_RUN: usize = 128;

/// Fewer pairs of tasks with other figures than this, and the time per byte is not known.
const PAIRS_AT_LEAST: usize = 30;

/// How many standard deviations above 0 Kendall's S must lie: one-sided, a chance of one in ten
/// that tasks whose times follow nothing are taken to.
const Z_AT_LEAST: f64 = 1.28;

/// The time a step's tasks took per byte more they held, within runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimePerByte {
    /// µs per byte of [`super::like_tasks::figure`].
    pub us_per_byte: f64,
    /// How many standard deviations above 0 Kendall's S lay.
    pub z: f64,
}

/// The time per byte of a step's tasks from its runs' `(figure, µs)`, one list per run; `None`
/// where it does not rise with the figure beyond chance, or too few tasks differ.
pub fn fit(runs: &[Vec<(u64, u64)>]) -> Option<TimePerByte> {
    let mut slopes = Vec::new();
    let (mut s, mut variance) = (0i64, 0.0);
    for run in runs {
        let tasks = sample(run);
        let before = slopes.len();
        for (i, &(figure_a, us_a)) in tasks.iter().enumerate() {
            for &(figure_b, us_b) in &tasks[i + 1..] {
                if figure_a == figure_b {
                    continue;
                }
                let (dx, dy) = (figure_b as f64 - figure_a as f64, us_b as f64 - us_a as f64);
                slopes.push(dy / dx);
                // Tied times neither rise nor fall (`signum` would count +0 as rising).
                s += match (dx * dy).partial_cmp(&0.0) {
                    Some(std::cmp::Ordering::Greater) => 1,
                    Some(std::cmp::Ordering::Less) => -1,
                    _ => 0,
                };
            }
        }
        if slopes.len() > before {
            variance += s_variance(&tasks);
        }
    }
    if slopes.len() < PAIRS_AT_LEAST || variance <= 0.0 {
        return None;
    }
    let z = s as f64 / variance.sqrt();
    let middle = slopes.len() / 2;
    let (_, &mut median, _) = slopes.select_nth_unstable_by(middle, f64::total_cmp);
    (z >= Z_AT_LEAST && median > 0.0).then_some(TimePerByte { us_per_byte: median, z })
}

/// At most [`TASKS_PER_RUN`] of a run's tasks, evenly spaced.
fn sample(run: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let step = run.len().div_ceil(TASKS_PER_RUN).max(1);
    run.iter().step_by(step).copied().collect()
}

/// The variance of Kendall's S over `tasks` when nothing follows anything, less what tasks of
/// one figure take from it (tied times are rare enough to leave).
fn s_variance(tasks: &[(u64, u64)]) -> f64 {
    let term = |n: f64| n * (n - 1.0) * (2.0 * n + 5.0);
    let mut figures: Vec<u64> = tasks.iter().map(|&(figure, _)| figure).collect();
    figures.sort_unstable();
    let ties: f64 = figures.chunk_by(|a, b| a == b).map(|tied| term(tied.len() as f64)).sum();
    (term(tasks.len() as f64) - ties) / 18.0
}

impl TimePerByte {
    /// A task's time carried from `figure` to `carried` bytes: `us` plus the time per byte of
    /// the difference, and never below `us` in proportion to its bytes: where it holds less, a
    /// task does not get faster than its data gets smaller; where it holds more, a shallow slope
    /// (one fitted across tasks of two grid sizes, `mixed.yaml`) does not leave it quicker per
    /// byte than it was.
    pub fn carry(&self, us: u64, figure: u64, carried: u64) -> u64 {
        let along = us as f64 + self.us_per_byte * (carried as f64 - figure as f64);
        let in_proportion = if figure > 0 { us as f64 * carried as f64 / figure as f64 } else { 0.0 };
        along.max(in_proportion).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `n` tasks whose figures step by 1 kB from 100 kB, each taking `base` µs plus
    /// `per_kb` µs per kB and `noise(i)`.
    fn run(n: u64, base: u64, per_kb: u64, noise: impl Fn(u64) -> u64) -> Vec<(u64, u64)> {
        (0..n).map(|i| ((100 + i) * 1000, base + per_kb * (100 + i) + noise(i))).collect()
    }

    #[test]
    fn tasks_that_take_longer_the_more_they_hold_give_their_time_per_byte() {
        // 2 µs per kB, under a stall of up to 400 µs on every third task.
        let stall = |i: u64| if i.is_multiple_of(3) { (i * 37) % 400 } else { 0 };
        let runs = [run(24, 500, 2, stall), run(24, 900, 2, stall)];
        let fitted = fit(&runs).expect("the times follow the figures");
        assert!((fitted.us_per_byte - 0.002).abs() < 0.0005, "{fitted:?}");
        assert!(fitted.z > 3.0, "{fitted:?}");
        // The runs' paces differ (500 and 900 µs): a line through both runs' tasks together
        // would not, within each, it is the same.
    }

    #[test]
    fn times_that_follow_nothing_or_fall_are_not_a_time_per_byte() {
        // Noise only: a pattern unrelated to the figure.
        let noise = |i: u64| (i * 7919) % 1000;
        assert_eq!(fit(&[run(24, 500, 0, noise), run(24, 500, 0, |i| (i * 104_729) % 1000)]), None);
        // Falling times.
        let falling: Vec<(u64, u64)> = (0..24).map(|i| (100_000 + i * 1000, 5000 - i * 100)).collect();
        assert_eq!(fit(&[falling]), None);
    }

    #[test]
    fn too_few_tasks_or_one_figure_say_nothing() {
        // Five tasks give ten pairs.
        assert_eq!(fit(&[run(5, 500, 2, |_| 0)]), None);
        let same: Vec<(u64, u64)> = (0..50).map(|i| (4000, 100 + i)).collect();
        assert_eq!(fit(&[same]), None);
        assert_eq!(fit(&[]), None);
    }

    #[test]
    fn a_large_run_is_sampled() {
        let runs = [run(100_000, 500, 3, |_| 0)];
        let fitted = fit(&runs).unwrap();
        assert!((fitted.us_per_byte - 0.003).abs() < 1e-9, "{fitted:?}");
    }

    #[test]
    fn a_task_carried_grows_by_its_time_per_byte_and_shrinks_no_faster_than_its_bytes() {
        let per_byte = TimePerByte { us_per_byte: 0.002, z: 2.0 };
        assert_eq!(per_byte.carry(1000, 4_000_000, 5_000_000), 3000);
        // 1 MB less would take 2000 µs off 1000: not below 1000 × 3/4; 0.1 MB less, 200 µs:
        // not below 1000 × 39/40 either.
        assert_eq!(per_byte.carry(1000, 4_000_000, 3_000_000), 750);
        assert_eq!(per_byte.carry(1000, 4_000_000, 3_900_000), 975);
        // 1 MB more at a slope of 0.0001 µs a byte would add 100 µs: not under 1000 × 5/4.
        let shallow = TimePerByte { us_per_byte: 0.0001, z: 2.0 };
        assert_eq!(shallow.carry(1000, 4_000_000, 5_000_000), 1250);
    }
}
