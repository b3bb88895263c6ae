//! The run page's timeline: a bar per task on its worker's lane, or — past a number of tasks no
//! browser draws as bars and no reader could tell apart — one band per step, showing per time
//! bin how many of the step's tasks ran and how many workers they kept busy.

use serde::Serialize;

/// One task on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineBar {
    /// The step's position in [`super::RunPage::steps`].
    pub step: u32,
    pub worker: u32,
    pub start_ms: u64,
    pub wall_ms: u64,
    pub estimate_bytes: u64,
    pub peak_bytes: u64,
    pub attempts: u32,
    pub failed: bool,
    pub key: String,
}

/// What the timeline shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Timeline {
    /// Every task that ran, in recording order.
    Bars(Vec<TimelineBar>),
    /// Too many tasks for bars: per step, what ran in each time bin.
    Bands(Bands),
}

impl Timeline {
    /// How many tasks it places (bars, or tasks counted into bands).
    pub fn tasks(&self) -> u64 {
        match self {
            Timeline::Bars(bars) => bars.len() as u64,
            Timeline::Bands(bands) => bands.tasks,
        }
    }
}

/// Per-step bands over `bins` time bins of `bin_ms` (a whole number) from 0, the last one
/// holding `end_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bands {
    pub bin_ms: f64,
    pub bins: usize,
    pub end_ms: u64,
    /// Tasks counted in.
    pub tasks: u64,
    /// Only the steps that placed a task, in step order.
    pub steps: Vec<StepBand>,
}

/// One step's band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepBand {
    /// The step's position in [`super::RunPage::steps`].
    pub step: u32,
    /// Per bin, the step's tasks that ran in it (a task spanning several bins counts in each).
    pub tasks: Vec<u32>,
    /// Per bin, the ms of task time the step spent in it (÷ bin length: workers kept busy).
    pub busy_ms: Vec<u32>,
}

/// A task placed in time, kept compactly once the timeline has become bands.
#[derive(Debug, Clone, Copy)]
struct Span {
    start_ms: u64,
    wall_ms: u32,
    step: u32,
}

/// Collects the tasks of a run as they are read and decides at the end between bars and bands.
#[derive(Debug)]
pub(crate) struct TimelineBuilder {
    bar_limit: usize,
    bins: usize,
    bars: Vec<TimelineBar>,
    /// Filled instead of `bars` once there are more than `bar_limit` tasks.
    spans: Vec<Span>,
    end_ms: u64,
}

impl TimelineBuilder {
    /// Bars for up to `bar_limit` tasks, else bands of (at most) `bins` bins.
    pub fn new(bar_limit: usize, bins: usize) -> TimelineBuilder {
        TimelineBuilder { bar_limit, bins: bins.max(1), bars: Vec::new(), spans: Vec::new(), end_ms: 0 }
    }

    /// Whether the next task will be a bar (and so needs its key spelled).
    pub fn wants_bars(&self) -> bool {
        self.spans.is_empty() && self.bars.len() < self.bar_limit
    }

    /// Adds a task; `bar.key` may be empty when [`Self::wants_bars`] was false.
    pub fn add(&mut self, bar: TimelineBar) {
        self.end_ms = self.end_ms.max(bar.start_ms.saturating_add(bar.wall_ms));
        if self.wants_bars() {
            self.bars.push(bar);
            return;
        }
        if self.spans.is_empty() {
            self.spans = self.bars.drain(..).map(|b| span(&b)).collect();
            self.bars = Vec::new();
        }
        self.spans.push(span(&bar));
    }

    /// The timeline, for a run whose steps are `steps` many and that lasted at least `end_ms`.
    pub fn finish(self, steps: usize, end_ms: u64) -> Timeline {
        if self.spans.is_empty() {
            return Timeline::Bars(self.bars);
        }
        Timeline::Bands(bands(&self.spans, steps, self.bins, self.end_ms.max(end_ms)))
    }
}

fn span(bar: &TimelineBar) -> Span {
    Span { start_ms: bar.start_ms, wall_ms: u32::try_from(bar.wall_ms).unwrap_or(u32::MAX), step: bar.step }
}

/// Counts spans into bins with difference arrays: O(1) per span however many bins it covers.
/// Bins are a whole number of ms long: times are recorded in whole ms, and a bin holding one
/// more ms than its neighbour would show a spike that is not there.
fn bands(spans: &[Span], steps: usize, most_bins: usize, end_ms: u64) -> Bands {
    // Many steps: fewer bins, so that the page stays a few MB.
    let most_bins = most_bins.min((400_000 / steps.max(1)).max(100)) as u64;
    let end_ms = end_ms.max(1);
    let whole_ms = end_ms.div_ceil(most_bins).max(1);
    let bins = (end_ms / whole_ms) as usize + 1;
    let bin_ms = whole_ms as f64;
    let bin_of = |t: f64| ((t / bin_ms) as usize).min(bins - 1);
    // Per step: +1/-1 where its running count changes, the same for bins fully covered, and
    // the task time of partly covered bins.
    let mut running = vec![vec![0i64; bins + 1]; steps];
    let mut covered = vec![vec![0i64; bins + 1]; steps];
    let mut partial = vec![vec![0f64; bins]; steps];
    let mut placed = vec![false; steps];
    for s in spans {
        let step = s.step as usize;
        let (start, end) = (s.start_ms as f64, (s.start_ms + u64::from(s.wall_ms)) as f64);
        let (first, last) = (bin_of(start), bin_of(end).max(bin_of(start)));
        placed[step] = true;
        running[step][first] += 1;
        running[step][last + 1] -= 1;
        if first == last {
            partial[step][first] += end - start;
        } else {
            partial[step][first] += (first + 1) as f64 * bin_ms - start;
            partial[step][last] += end - last as f64 * bin_ms;
            covered[step][first + 1] += 1;
            covered[step][last] -= 1;
        }
    }
    let steps = (0..steps)
        .filter(|&step| placed[step])
        .map(|step| {
            let (mut now, mut full) = (0i64, 0i64);
            let mut tasks = Vec::with_capacity(bins);
            let mut busy_ms = Vec::with_capacity(bins);
            for bin in 0..bins {
                now += running[step][bin];
                full += covered[step][bin];
                tasks.push(u32::try_from(now).unwrap_or(u32::MAX));
                busy_ms.push((partial[step][bin] + full as f64 * bin_ms).round() as u32);
            }
            StepBand { step: step as u32, tasks, busy_ms }
        })
        .collect();
    Bands { bin_ms, bins, end_ms, tasks: spans.len() as u64, steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(step: u32, start_ms: u64, wall_ms: u64) -> TimelineBar {
        TimelineBar {
            step,
            worker: 0,
            start_ms,
            wall_ms,
            estimate_bytes: 0,
            peak_bytes: 0,
            attempts: 1,
            failed: false,
            key: String::new(),
        }
    }

    #[test]
    fn up_to_the_limit_every_task_is_a_bar() {
        let mut builder = TimelineBuilder::new(3, 10);
        for i in 0..3 {
            assert!(builder.wants_bars());
            builder.add(bar(0, i * 10, 5));
        }
        assert!(!builder.wants_bars());
        let Timeline::Bars(bars) = builder.finish(1, 0) else { panic!("expected bars") };
        assert_eq!(bars.iter().map(|b| b.start_ms).collect::<Vec<_>>(), [0, 10, 20]);
    }

    #[test]
    fn past_the_limit_tasks_are_counted_into_bands() {
        let mut builder = TimelineBuilder::new(2, 10);
        // 95 ms (a run of at least 95) in bins of 10 ms. Step 0: a task over bins 0..=4 (0-45 ms),
        // two instant ones in bin 9. Step 2: one task of 10 ms across bins 5 and 6. Step 1 places
        // nothing.
        builder.add(bar(0, 0, 45));
        builder.add(bar(0, 91, 0));
        builder.add(bar(2, 55, 10));
        builder.add(bar(0, 93, 0));
        let Timeline::Bands(bands) = builder.finish(3, 95) else { panic!("expected bands") };
        assert_eq!((bands.bins, bands.bin_ms, bands.end_ms, bands.tasks), (10, 10.0, 95, 4));
        assert_eq!(bands.steps.iter().map(|s| s.step).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(bands.steps[0].tasks, [1, 1, 1, 1, 1, 0, 0, 0, 0, 2]);
        assert_eq!(bands.steps[0].busy_ms, [10, 10, 10, 10, 5, 0, 0, 0, 0, 0]);
        assert_eq!(bands.steps[1].tasks, [0, 0, 0, 0, 0, 1, 1, 0, 0, 0]);
        assert_eq!(bands.steps[1].busy_ms, [0, 0, 0, 0, 0, 5, 5, 0, 0, 0]);
        // Task time is conserved: 45 + 10 ms.
        let busy: u32 = bands.steps.iter().flat_map(|s| &s.busy_ms).sum();
        assert_eq!(busy, 55);
    }
}
