//! Past the recorded range along a number that sets a step's size. When this cycle's vars
//! differ from the nearest recorded run's in one number only and lie beyond every run along it
//! (`size: 600` after runs at 300, 320 and 400), the nearest run's figures are those of a
//! smaller cycle. Where two runs along that number show the step's output another size from
//! inputs of the same size (none, for a step that makes a grid), the number sets its size
//! through the step's args, and its figures are carried on as they grew between those runs,
//! as a power of the number: an output 1.78 times as large at 400 as at 300 grows as
//! `size^2.0`, so at 600 it is 2.25 times the run at 400's. Its output, file, time and peak
//! grow by that factor; the tasks that read it read more than their recorded tasks did, and
//! grow with what they read ([`super::predict`]).
//!
//! Only a step whose args the number sets, and whose output the plan cannot size, is grown
//! ([`super::alike_plan::sized_by_args`]). A step whose output stays the same size along the
//! number is not: a synthetic field of a wetter weather is the same grid, and what the weather
//! makes of the steps after it only the data shows; where that moved between the runs along the
//! number, it is carried toward the line through them instead ([`super::trend`]). Growing every
//! figure, time included, by its own power of the number was tried on the cycles files and
//! dropped: the first wet cycle after dry ones came out several times too long.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::alike;
use super::alike_figures::Recorded;

/// The largest power a figure is taken to grow by (a grid of three dimensions by its side).
pub const MAX_EXPONENT: f64 = 3.0;

/// Outputs closer than this (relative) in two runs along the number are the same size: it does
/// not set the step's.
const SAME_SIZE: f64 = 0.02;

/// This cycle's one number beyond the runs along it: the nearest run's value, and the farthest
/// run's (index among the candidates) to measure how a step grew between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Along {
    pub var: String,
    pub value: f64,
    pub near: f64,
    pub far: usize,
    pub far_value: f64,
}

/// How a step's figures grow from the nearest run's to this cycle's value of `var`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    pub var: String,
    /// The values its growth was measured between, and the one it is carried to.
    pub measured_from: f64,
    pub measured_to: f64,
    pub value: f64,
    /// The power of the number its output grew by between the two runs.
    pub exponent: f64,
    /// What the nearest run's figures are multiplied by.
    pub factor: f64,
}

/// A step whose figures a prediction grew past the recorded range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grown {
    pub step: String,
    #[serde(flatten)]
    pub growth: Growth,
}

/// `temperature grows as size^2.0 between the runs at 300 and 400: ...` for a prediction's text.
pub fn grown_text(grown: &Grown) -> String {
    let Growth { var, measured_from, measured_to, value, exponent, factor } = &grown.growth;
    let (low, high) = (measured_from.min(*measured_to), measured_from.max(*measured_to));
    format!(
        "{} grows as {var}^{exponent:.1} between the runs at {low} and {high}: at {value} its output, \
         time and peak are taken {factor:.2} times the run at {measured_to}'s, and what reads it grows with what it reads",
        grown.step
    )
}

/// This cycle's one number when every run along it had the same value, the nearest run's: how a
/// step whose args it sets grows with it is not measured, and its figures are the nearest run's
/// (`size: 320` after two runs at 300).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OneValue {
    pub var: String,
    pub value: f64,
    /// The one value the runs along it had.
    pub recorded: f64,
}

/// A step whose args this cycle's number sets, with one recorded value of it ([`OneValue`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotGrown {
    pub step: String,
    #[serde(flatten)]
    pub along: OneValue,
}

/// `temperature's args follow size, which the runs had at 300 only: ...`, for a prediction's text.
pub fn not_grown_text(not_grown: &NotGrown) -> String {
    let OneValue { var, value, recorded } = &not_grown.along;
    format!(
        "{}'s args follow {var}, which the runs had at {recorded} only: how its output, time and peak grow with it \
         is not measured, and at {value} they are taken as at {recorded}",
        not_grown.step
    )
}

/// How this cycle lies past the recorded runs along its one number ([`along`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Past {
    /// A second value among the runs along it: how a step grows is measured between them.
    Measured(Along),
    /// Every run along it had the nearest run's value.
    OneValue(OneValue),
}

/// When `now` (vars) differs from the `nearest` candidate (run vars as JSON text) in one
/// number only, with no run along it on the other side of `now`'s value: that number, and the
/// farthest run along it — or, where every run along it had the nearest run's value, that one
/// value.
pub fn along(now: &Map<String, Value>, candidates: &[Option<&str>], nearest: usize) -> Option<Past> {
    let parsed = alike::parse(candidates);
    let (var, value, near) = parsed.get(nearest)?.as_ref().and_then(|run| alike::one_number_apart(now, run))?;
    let mut far: Option<(usize, f64)> = None;
    for (at, run) in parsed.iter().enumerate() {
        let Some((other, _, b)) = run.as_ref().and_then(|run| alike::one_number_apart(now, run)) else { continue };
        if other != var || b == near {
            continue;
        }
        if (b - value) * (near - value) <= 0.0 {
            return None; // a run across: between the two, interpolated instead
        }
        if far.is_none_or(|(_, farthest)| (b - value).abs() > (farthest - value).abs()) {
            far = Some((at, b));
        }
    }
    let var = var.to_string();
    match far {
        None => Some(Past::OneValue(OneValue { var, value, recorded: near })),
        Some((far, far_value)) => (value > 0.0 && near > 0.0 && far_value > 0.0).then_some(Past::Measured(Along {
            var,
            value,
            near,
            far,
            far_value,
        })),
    }
}

/// How a step grows along `along`, from its tasks in the nearest run and in the far one; `None`
/// when its inputs differed between them (what it reads made the difference) or its output was
/// the same size in both (the number does not set it).
pub fn growth(along: &Along, near: &HashMap<u64, Recorded>, far: &HashMap<u64, Recorded>) -> Option<Growth> {
    let (near_in, near_out) = sizes(near)?;
    let (far_in, far_out) = sizes(far)?;
    if relative_change(near_in, far_in) > SAME_SIZE / 2.0 || near_out == 0 || far_out == 0 {
        return None;
    }
    if relative_change(near_out, far_out) < SAME_SIZE {
        return None;
    }
    let exponent = ((near_out as f64 / far_out as f64).ln() / (along.near / along.far_value).ln())
        .clamp(-MAX_EXPONENT, MAX_EXPONENT);
    Some(Growth {
        var: along.var.clone(),
        measured_from: along.far_value,
        measured_to: along.near,
        value: along.value,
        exponent,
        factor: (along.value / along.near).powf(exponent),
    })
}

/// A step's recorded figures, grown by `factor`: what its data made of them.
pub fn grow(records: &mut HashMap<u64, Recorded>, factor: f64) {
    for recorded in records.values_mut() {
        recorded.output_bytes = scaled(recorded.output_bytes, factor);
        recorded.file_bytes = scaled(recorded.file_bytes, factor);
        recorded.wall_us = scaled(recorded.wall_us, factor);
        recorded.peak_bytes = scaled(recorded.peak_bytes, factor);
    }
}

/// `value` × `factor`, rounded.
pub fn scaled(value: u64, factor: f64) -> u64 {
    (value as f64 * factor).round() as u64
}

/// The median task's input bytes and data made (output and file); `None` without tasks.
fn sizes(records: &HashMap<u64, Recorded>) -> Option<(u64, u64)> {
    let mut inputs: Vec<u64> = records.values().map(|r| r.input_bytes).collect();
    let mut made: Vec<u64> = records.values().map(|r| r.output_bytes + r.file_bytes).collect();
    inputs.sort_unstable();
    made.sort_unstable();
    let middle = inputs.len().checked_sub(1)? / 2;
    Some((inputs[middle], made[middle]))
}

/// How far apart `a` and `b` are, relative to the larger (0 for two zeros).
fn relative_change(a: u64, b: u64) -> f64 {
    let larger = a.max(b);
    if larger == 0 { 0.0 } else { a.abs_diff(b) as f64 / larger as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    /// [`along`] where a second value measures growth.
    fn measured(now: &Map<String, Value>, candidates: &[Option<&str>], nearest: usize) -> Option<Along> {
        match along(now, candidates, nearest)? {
            Past::Measured(along) => Some(along),
            Past::OneValue(_) => None,
        }
    }

    /// [`along`] where the runs had one value.
    fn one_value(now: &Map<String, Value>, candidates: &[Option<&str>], nearest: usize) -> Option<OneValue> {
        match along(now, candidates, nearest)? {
            Past::OneValue(one) => Some(one),
            Past::Measured(_) => None,
        }
    }

    fn task(input_bytes: u64, output_bytes: u64) -> Recorded {
        Recorded { plugin_estimate: 0, output_bytes, file_bytes: 0, wall_us: 1000, input_bytes, peak_bytes: 2000 }
    }

    fn tasks(input_bytes: u64, output_bytes: u64) -> HashMap<u64, Recorded> {
        (0..3).map(|i| (i, task(input_bytes, output_bytes))).collect()
    }

    const GRIDS: [Option<&str>; 4] =
        [Some(r#"{"size": 300}"#), Some(r#"{"size": 320}"#), Some(r#"{"size": 400}"#), Some(r#"{"other": 1}"#)];

    #[test]
    fn a_number_beyond_the_runs_along_it_is_measured_from_the_farthest() {
        let found = measured(&vars(r#"{"size": 600}"#), &GRIDS, 2).unwrap();
        assert_eq!(found, Along { var: "size".into(), value: 600.0, near: 400.0, far: 0, far_value: 300.0 });
        // Below the range: from the nearest (300) and the farthest (400).
        let below = measured(&vars(r#"{"size": 250}"#), &GRIDS, 0).unwrap();
        assert_eq!((below.near, below.far_value), (300.0, 400.0));
    }

    #[test]
    fn between_runs_or_with_one_value_along_it_nothing_grows() {
        assert_eq!(measured(&vars(r#"{"size": 350}"#), &GRIDS, 1), None, "a run across: interpolated");
        let one = [Some(r#"{"size": 300}"#), Some(r#"{"size": 300}"#)];
        assert_eq!(measured(&vars(r#"{"size": 320}"#), &one, 1), None, "one value: no growth to measure");
        let two_vars = [Some(r#"{"size": 300, "wet": 1}"#), Some(r#"{"size": 400, "wet": 2}"#)];
        assert_eq!(measured(&vars(r#"{"size": 600, "wet": 2}"#), &two_vars, 1), None, "the far run differs in two");
    }

    #[test]
    fn a_number_the_runs_had_one_value_of_is_named_with_it() {
        let one = [Some(r#"{"size": 300}"#), Some(r#"{"other": 1}"#), Some(r#"{"size": 300}"#)];
        let found = one_value(&vars(r#"{"size": 320}"#), &one, 2);
        assert_eq!(found, Some(OneValue { var: "size".into(), value: 320.0, recorded: 300.0 }));
        assert_eq!(one_value(&vars(r#"{"size": 600}"#), &GRIDS, 2), None, "other values along it: measured");
        assert_eq!(one_value(&vars(r#"{"size": 300}"#), &one, 0), None, "the same vars: nothing past them");
        assert_eq!(one_value(&vars(r#"{"size": 350}"#), &GRIDS, 1), None, "a run across: interpolated");
        let text = not_grown_text(&NotGrown { step: "grid".into(), along: found.unwrap() });
        assert_eq!(
            text,
            "grid's args follow size, which the runs had at 300 only: how its output, time and peak grow with it is \
             not measured, and at 320 they are taken as at 300"
        );
    }

    #[test]
    fn a_grid_made_from_its_side_grows_as_its_square() {
        let along = measured(&vars(r#"{"size": 600}"#), &GRIDS, 2).unwrap();
        let growth = growth(&along, &tasks(0, 400 * 400), &tasks(0, 300 * 300)).unwrap();
        assert!((growth.exponent - 2.0).abs() < 1e-9, "{growth:?}");
        assert!((growth.factor - 2.25).abs() < 1e-9, "{growth:?}");
        let mut records = tasks(0, 400 * 400);
        grow(&mut records, growth.factor);
        assert_eq!((records[&0].output_bytes, records[&0].wall_us, records[&0].peak_bytes), (360_000, 2250, 4500));
    }

    #[test]
    fn the_text_names_the_runs_from_low_to_high_and_the_factor_on_the_nearest() {
        let growth = Growth {
            var: "size".into(),
            measured_from: 600.0,
            measured_to: 300.0,
            value: 250.0,
            exponent: 2.0,
            factor: 0.694,
        };
        let text = grown_text(&Grown { step: "grid".into(), growth });
        let expected = "grid grows as size^2.0 between the runs at 300 and 600: at 250 its output, time and peak are \
                        taken 0.69 times the run at 300's";
        assert!(text.starts_with(expected), "{text}");
    }

    #[test]
    fn a_step_the_number_does_not_size_or_whose_inputs_moved_does_not_grow() {
        let along = measured(&vars(r#"{"size": 600}"#), &GRIDS, 2).unwrap();
        assert_eq!(growth(&along, &tasks(0, 1000), &tasks(0, 1005)), None, "the same output along it");
        assert_eq!(growth(&along, &tasks(4000, 2000), &tasks(2000, 1000)), None, "its inputs made the difference");
        assert_eq!(growth(&along, &HashMap::new(), &tasks(0, 1000)), None, "no tasks recorded");
        let steep = growth(&along, &tasks(0, 1 << 30), &tasks(0, 1)).unwrap();
        assert_eq!(steep.exponent, MAX_EXPONENT);
    }
}
