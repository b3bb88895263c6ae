//! Past the recorded range along a number the data follows. When this cycle lies beyond every
//! recorded run along one number (`wet: 0.45` after runs at 0.02 to 0.05, [`super::growth::along`])
//! and the number does not size a step through its args ([`super::growth`]), what the step's data
//! made of its tasks — the estimate its plugin gave at dispatch, the bytes they read, their
//! output, their files and their peaks — may have moved between the farthest run along the number
//! and the nearest. A wetter field's wet area, and the files and memory that follow it, grew
//! about in proportion to the wet fraction in the cycles files, until the rain covered the grid.
//!
//! So each figure that moved is taken from two estimates, each weighted by how near it reaches:
//! the nearest run's own figure, measured `d` from this cycle's value, and the line through the
//! two runs' mean tasks, carried on to this cycle's value, which the runs `span` apart set. The
//! line weighs `d / (d + span)`, the nearest run the rest: twenty spans past a dry spell the
//! line is nearly all there is; a quarter of a span past a wet run, that run says most.
//!
//! Re-predicting 241 recorded cycles of the cycles files (and of `quickstart.yaml` and
//! `bench_weather.yaml` with `weather.yaml`'s cycles): peaks reserved within 10% 220 with the
//! nearest run alone, 224 with the line alone, 225 weighted. The first wet cycle of
//! `commands.yaml` (`wet: 0.45` after 0.03 to 0.05) went from −67% to −3% in two stores: its
//! threshold command's files were 90% under with the nearest run alone, 7% under along the
//! line. The line alone overshot the cycle after it (0.55 from runs at 0.03 and 0.45, where the
//! rain covers the grid and the files level off): +26%, weighted +10%.
//!
//! A figure that moved by less than [`STILL`] between the two runs is fixed or noise (a grid's
//! output, a whole-field task's peak), and kept: carried twenty times the distance, noise would
//! be twenty times as large; so is a step whose peak alone moved. A task's time is not carried
//! along the line: tasks of a few milliseconds vary more from run to run than the weather moves
//! them across a dry spell, and the line through two runs' mean times pointed anywhere at the
//! first wet cycles (a thresholding step, whose time does not follow the rain, +81% to +121%; a
//! writer −100%). It follows its carried bytes instead, by the time per byte the step's tasks
//! took more within the runs where they held more ([`super::time_per_byte`]), where they did;
//! else it is kept.

use std::collections::HashMap;

use serde::Serialize;

use super::alike_figures::{Alike, Recorded};
use super::durations::format_seconds;
use super::growth::Along;
use super::time_per_byte::TimePerByte;

/// Figures closer than this (relative to the larger) in the two runs did not move.
pub const STILL: f64 = 0.02;

/// A figure of a recorded task that follows its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    PluginEstimate,
    InputBytes,
    OutputBytes,
    FileBytes,
    PeakBytes,
}

impl Figure {
    const ALL: [Figure; 5] =
        [Figure::PluginEstimate, Figure::InputBytes, Figure::OutputBytes, Figure::FileBytes, Figure::PeakBytes];

    fn of(self, recorded: &Recorded) -> u64 {
        match self {
            Figure::PluginEstimate => recorded.plugin_estimate,
            Figure::InputBytes => recorded.input_bytes,
            Figure::OutputBytes => recorded.output_bytes,
            Figure::FileBytes => recorded.file_bytes,
            Figure::PeakBytes => recorded.peak_bytes,
        }
    }

    fn set(self, recorded: &mut Recorded, value: u64) {
        let figure = match self {
            Figure::PluginEstimate => &mut recorded.plugin_estimate,
            Figure::InputBytes => &mut recorded.input_bytes,
            Figure::OutputBytes => &mut recorded.output_bytes,
            Figure::FileBytes => &mut recorded.file_bytes,
            Figure::PeakBytes => &mut recorded.peak_bytes,
        };
        *figure = value;
    }

    fn name(self) -> &'static str {
        match self {
            Figure::PluginEstimate => "estimate at dispatch",
            Figure::InputBytes => "input",
            Figure::OutputBytes => "output",
            Figure::FileBytes => "file",
            Figure::PeakBytes => "peak",
        }
    }
}

/// How a step's figures were carried along a number: what a prediction says of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    pub var: String,
    /// The farthest run's value and the nearest's, which the line runs through, and the value
    /// it is carried to.
    pub measured_from: f64,
    pub measured_to: f64,
    pub value: f64,
    /// What the line weighs against the nearest run's own figures (0 to 1).
    pub line_weight: f64,
    /// The figures that moved, and by how much.
    pub moved: Vec<Moved>,
    /// How the tasks' time followed: `None`, kept as there.
    pub time: Option<TimeCarried>,
}

/// A step's tasks' time carried with their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimeCarried {
    /// The seconds a task took per MiB more it held, within the recorded runs ([`TimePerByte`]).
    pub seconds_per_mib: f64,
    /// How many standard deviations above 0 the tasks' times rose with their figures.
    pub z: f64,
    /// The mean task's time carried, over the nearest run's.
    pub factor: f64,
}

/// A figure carried along the line: the nearest run's mean task's, and what it is multiplied by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moved {
    pub figure: Figure,
    pub mean: f64,
    pub factor: f64,
}

/// A step whose figures a prediction carried along the line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Carried {
    pub step: String,
    #[serde(flatten)]
    pub trend: Trend,
}

/// The nearest run's figures of a step, carried to this cycle's value.
#[derive(Debug, Clone)]
pub struct Extended {
    pub trend: Trend,
    pub by_index: HashMap<u64, Recorded>,
    /// The medians [`Alike`] keeps, carried likewise.
    pub output_bytes: Option<u64>,
    pub plugin_estimate: Option<u64>,
    pub file_bytes: Option<u64>,
}

/// The `near` run's figures of a step carried toward `along`'s value, along the line through
/// the `far` run's (weighted as the module says); `None` when none moved between them. The line
/// runs through the two runs' mean tasks, not through each task and the task of the same index
/// in the other run: those saw different rain, and the line through them would carry their
/// difference, not the weather's. Each task keeps its place about the mean, its distance from
/// it growing as the square root of the mean, as a count's spread does ([`Moved::carry`]).
/// A task's time follows its carried bytes at the step's `time_per_byte`, where it has one (asked
/// only once something moved).
pub fn extend(
    along: &Along,
    near: &Alike,
    far: &Alike,
    time_per_byte: impl FnOnce() -> Option<TimePerByte>,
) -> Option<Extended> {
    // How far this cycle lies past the nearest run, in spans of the line's two runs; the
    // line's weight is `reach / (reach + 1)`.
    let reach = (along.value - along.near) / (along.near - along.far_value);
    let onward = reach * (reach.abs() / (reach.abs() + 1.0));
    let moved: Vec<Moved> = Figure::ALL
        .into_iter()
        .filter_map(|figure| {
            let (now, then) = (mean_of(figure, &near.by_index)?, mean_of(figure, &far.by_index)?);
            // A figure none of the nearest run's tasks had (no file) has no tasks to carry.
            if now <= 0.0 || !moved(now, then) {
                return None;
            }
            let carried = (now + (now - then) * onward).max(0.0);
            Some(Moved { figure, mean: now, factor: carried / now })
        })
        .collect();
    // A peak moves with what a task reads, makes or is estimated at; one that moved alone is the
    // noise of a process's measured peak (a Python tool's of one weather varied by a third), which
    // twenty spans would make twenty times as large.
    if moved.iter().all(|m| m.figure == Figure::PeakBytes) {
        return None;
    }
    let time_per_byte = time_per_byte();
    let by_index = near
        .by_index
        .iter()
        .map(|(&index, recorded)| {
            let mut carried = *recorded;
            for moved in &moved {
                moved.figure.set(&mut carried, moved.carry(moved.figure.of(recorded)));
            }
            if let Some(time_per_byte) = time_per_byte {
                carried.wall_us = time_per_byte.carry(recorded.wall_us, recorded.figure(), carried.figure());
            }
            (index, carried)
        })
        .collect();
    let time = time_per_byte.map(|per_byte| TimeCarried {
        seconds_per_mib: per_byte.us_per_byte * 1e-6 * (1u64 << 20) as f64,
        z: per_byte.z,
        factor: mean_wall(&by_index) / mean_wall(&near.by_index),
    });
    let carry = |median: Option<u64>, figure| {
        median.map(|bytes| moved.iter().find(|m| m.figure == figure).map_or(bytes, |m| m.carry(bytes)))
    };
    Some(Extended {
        by_index,
        output_bytes: carry(near.output_bytes, Figure::OutputBytes),
        plugin_estimate: carry(near.plugin_estimate, Figure::PluginEstimate),
        file_bytes: carry(near.file_bytes, Figure::FileBytes),
        trend: Trend {
            var: along.var.clone(),
            measured_from: along.far_value,
            measured_to: along.near,
            value: along.value,
            line_weight: reach.abs() / (reach.abs() + 1.0),
            moved,
            time,
        },
    })
}

impl Moved {
    /// A task's figure carried as the mean was, its distance from the mean grown as the square
    /// root of the mean's growth: the wet area of a field is a count of wet cells, whose spread
    /// grows so. Kept in proportion, the spread of a dry run's tasks carried twenty spans came
    /// out several times the wet cycle's (`commands.yaml`'s first wet cycle: +13% in peak
    /// reserved, where it is −3% so); moved by the mean's bytes alone, every task came out the
    /// mean's size (−7%). At least 1 where it was not 0 (a peak of 0 is one not measured).
    fn carry(&self, value: u64) -> u64 {
        let from_mean = (value as f64 - self.mean) * self.factor.sqrt();
        let carried = (self.mean * self.factor + from_mean).round().max(0.0) as u64;
        if value > 0 { carried.max(1) } else { 0 }
    }
}

/// `smooth: estimate at dispatch ×1.45, peak ×1.44 the mean task's of the run at wet 0.05, toward
/// the line through the runs at 0.02 and 0.05 at 0.45 (93% the line's); its time as there`, for
/// a prediction's text.
pub fn carried_text(carried: &Carried) -> String {
    let Trend { var, measured_from, measured_to, value, line_weight, moved, time } = &carried.trend;
    let (low, high) = (measured_from.min(*measured_to), measured_from.max(*measured_to));
    let figures: Vec<String> = moved.iter().map(|m| format!("{} ×{:.2}", m.figure.name(), m.factor)).collect();
    let time = match time {
        Some(time) => format!(
            "its time ×{:.2}: {} per MiB more it holds, as its tasks took within the runs",
            time.factor,
            format_seconds(time.seconds_per_mib)
        ),
        None => "its time as there".to_string(),
    };
    format!(
        "{}: {} the mean task's of the run at {var} {measured_to}, toward the line through the runs at {low} and \
         {high} at {value} ({:.0}% the line's); {time}",
        carried.step,
        figures.join(", "),
        line_weight * 100.0
    )
}

/// Whether a figure moved between two runs: by [`STILL`] or more of the larger.
fn moved(a: f64, b: f64) -> bool {
    (a - b).abs() >= STILL * a.max(b) && a.max(b) > 0.0
}

/// The tasks' mean µs (1 without tasks or time, for a ratio).
fn mean_wall(tasks: &HashMap<u64, Recorded>) -> f64 {
    let sum: f64 = tasks.values().map(|recorded| recorded.wall_us as f64).sum();
    if sum > 0.0 { sum / tasks.len() as f64 } else { 1.0 }
}

/// The mean of `figure` over the tasks; `None` without tasks.
fn mean_of(figure: Figure, tasks: &HashMap<u64, Recorded>) -> Option<f64> {
    let sum: f64 = tasks.values().map(|recorded| figure.of(recorded) as f64).sum();
    (!tasks.is_empty()).then(|| sum / tasks.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(file_bytes: u64, peak_bytes: u64) -> Recorded {
        Recorded { plugin_estimate: 0, output_bytes: 4000, file_bytes, wall_us: 1000, input_bytes: 4000, peak_bytes }
    }

    /// A run's figures, one task per (file, peak).
    fn run(tasks: &[(u64, u64)]) -> Alike {
        Alike {
            by_index: tasks.iter().enumerate().map(|(i, &(file, peak))| (i as u64, task(file, peak))).collect(),
            output_bytes: Some(4000),
            plugin_estimate: None,
            file_bytes: Some(tasks.iter().map(|t| t.0).min().unwrap_or(0)),
            cycle: "c".into(),
            vars: None,
        }
    }

    fn along(value: f64, near: f64, far_value: f64) -> Along {
        Along { var: "wet".into(), value, near, far: 0, far_value }
    }

    #[test]
    fn far_past_a_dry_spell_the_files_follow_the_line_and_spread_as_its_square_root() {
        // Files of 800 and 1200 bytes at 0.05, 500 and 700 at 0.03; the peaks did not move.
        let near = run(&[(800, 10_000), (1200, 10_050)]);
        let far = run(&[(500, 10_020), (700, 10_000)]);
        let extended = extend(&along(0.45, 0.05, 0.03), &near, &far, || None).expect("the files moved");
        // 20 spans past: the line weighs 20/21; the mean moves 400 bytes a span.
        let mean = 1000.0 + 400.0 * 20.0 * (20.0 / 21.0);
        assert_eq!(extended.trend.moved.len(), 1, "{:?}", extended.trend);
        let moved = extended.trend.moved[0];
        assert_eq!((moved.figure, moved.mean), (Figure::FileBytes, 1000.0));
        assert!((moved.factor - mean / 1000.0).abs() < 1e-9, "{moved:?}");
        // 200 bytes either side of the mean, ×√8.6 = 2.9.
        let spread = 200.0 * (mean / 1000.0).sqrt();
        assert_eq!(extended.by_index[&0].file_bytes, (mean - spread).round() as u64);
        assert_eq!(extended.by_index[&1].file_bytes, (mean + spread).round() as u64);
        assert_eq!(extended.by_index[&1].peak_bytes, 10_050, "a figure that moved under 2% is kept");
        assert_eq!(extended.by_index[&1].wall_us, 1000, "a task's time is kept");
        assert_eq!(extended.file_bytes, Some((mean - spread).round() as u64), "the step's median moves likewise");
        assert!((extended.trend.line_weight - 20.0 / 21.0).abs() < 1e-9);
    }

    #[test]
    fn where_the_step_s_tasks_took_longer_the_more_they_held_a_task_s_time_follows_its_carried_bytes() {
        let near = run(&[(800, 10_000), (1200, 10_050)]);
        let far = run(&[(500, 10_020), (700, 10_000)]);
        let per_byte = TimePerByte { us_per_byte: 2.0, z: 2.5 };
        let extended = extend(&along(0.45, 0.05, 0.03), &near, &far, || Some(per_byte)).unwrap();
        for index in [0, 1] {
            let (recorded, carried) = (&near.by_index[&index], &extended.by_index[&index]);
            // Output and estimate stayed: the time grows by 2 µs a byte of file more.
            let more = carried.file_bytes - recorded.file_bytes;
            assert_eq!(carried.wall_us, 1000 + 2 * more, "task {index}");
        }
        let time = extended.trend.time.expect("the time was carried");
        assert_eq!((time.seconds_per_mib, time.z), (2.0 * 1.048576, 2.5));
        let mean = |tasks: &HashMap<u64, Recorded>| tasks.values().map(|r| r.wall_us as f64).sum::<f64>() / 2.0;
        assert!((time.factor - mean(&extended.by_index) / 1000.0).abs() < 1e-9, "{time:?}");
        let text = carried_text(&Carried { step: "smooth".into(), trend: extended.trend });
        assert!(
            text.ends_with(&format!(
                "(95% the line's); its time ×{:.2}: 2.10 s per MiB more it holds, as its tasks took within the runs",
                time.factor
            )),
            "{text}"
        );
    }

    #[test]
    fn a_short_way_past_a_run_that_run_says_most() {
        // 0.55 from runs at 0.45 and 0.03: a quarter of a span, so the line weighs about a fifth.
        let near = run(&[(9800, 0)]);
        let far = run(&[(600, 0)]);
        let extended = extend(&along(0.55, 0.45, 0.03), &near, &far, || None).unwrap();
        let reach: f64 = 0.1 / 0.42;
        let line = 9200.0 * reach;
        let weighted = 9800.0 + line * reach / (reach + 1.0);
        assert_eq!(extended.by_index[&0].file_bytes, weighted.round() as u64);
        assert!(weighted < 9800.0 + line / 4.0, "{weighted}");
        assert_eq!(extended.by_index[&0].peak_bytes, 0, "a peak not measured stays so");
    }

    #[test]
    fn below_the_range_a_figure_goes_down_the_line_but_not_below_a_byte() {
        let near = run(&[(100, 5000), (300, 5000)]);
        let far = run(&[(2000, 5000)]);
        let extended = extend(&along(0.01, 0.05, 0.5), &near, &far, || None).unwrap();
        let factor = extended.trend.moved[0].factor;
        assert!(factor < 1.0, "{factor}");
        let carried = |value: f64| (200.0 * factor + (value - 200.0) * factor.sqrt()).round() as u64;
        assert_eq!(
            (extended.by_index[&0].file_bytes, extended.by_index[&1].file_bytes),
            (carried(100.0), carried(300.0))
        );
        // Far below, the mean goes down to nothing at most, and a task with a file keeps a byte.
        let far_below = extend(&along(-5.0, 0.05, 0.5), &near, &far, || None).unwrap();
        assert_eq!(far_below.trend.moved[0].factor, 0.0);
        assert_eq!((far_below.by_index[&0].file_bytes, far_below.by_index[&1].file_bytes), (1, 1));
    }

    #[test]
    fn nothing_moved_nothing_is_carried_and_the_text_names_what_did() {
        let same = run(&[(1000, 5000)]);
        assert!(extend(&along(0.45, 0.05, 0.03), &same, &run(&[(1010, 4990)]), || None).is_none());
        // Files the nearest run's tasks did not write: nothing to carry (a factor on nothing).
        assert!(extend(&along(0.45, 0.05, 0.03), &run(&[(0, 5000)]), &run(&[(800, 5000)]), || None).is_none());
        // A peak that moved while nothing the task reads or makes did: noise, not carried.
        assert!(extend(&along(0.45, 0.05, 0.03), &same, &run(&[(1000, 4000)]), || None).is_none());
        let extended = extend(&along(0.45, 0.05, 0.03), &run(&[(1000, 5000)]), &run(&[(600, 5000)]), || None).unwrap();
        let text = carried_text(&Carried { step: "smooth".into(), trend: extended.trend });
        assert!(
            text.starts_with("smooth: file ×8.62 the mean task's of the run at wet 0.05, toward the line through the runs at 0.03 and 0.05 at 0.45 (95% the line's); its time as there"),
            "{text}"
        );
    }
}
