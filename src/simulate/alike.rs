//! Which past cycle is most like the one predicted: what a plugin estimates from its data at
//! dispatch, and what a task whose inputs differ from the plan's produces, only a real run
//! measures, and it follows the cycle's weather. A cycle's vars (`wet: 0.55`, `thresholds:
//! [...]`) are what a recipe says of its weather, so the prediction takes those figures from the
//! recorded run whose vars are nearest to this cycle's, not simply from the newest.
//!
//! Nearness is a sum over the vars of either (Gower's distance, for mixed kinds of values): a
//! number differs by its difference as a share of the range that var spans over the cycles
//! compared (so `wet: 0.02` and `0.05` are near when the cycles range from 0.02 to 0.6; a
//! number inside a list or object, whose range is not kept, by its difference relative to the
//! larger, at most 1); a list by how far its lengths differ plus, in proportion to what they
//! share, how its items differ; an object by its members; anything else, or a var only one of
//! them has, by 0 (equal) or 1. Ties go to the newest run.
//!
//! Between two recorded weathers the figures are interpolated ([`alike`]): when this cycle's
//! vars differ from the nearest run's in one number only (`wet: 0.30`, the nearest run at
//! 0.20) and a run with the same other vars lies on the other side of it (0.40), both are
//! taken, weighted by how near each is along that number. Past the recorded range the nearest
//! run is taken alone, and its figures moved by [`super::growth`] (a step the number sizes) or
//! [`super::trend`] (what the data made of a step, where it moved along the number): extending
//! the line through the two nearest runs in full (`wet: 0.55` from runs at 0.45 and 0.05)
//! overshot where the figures level off as the number grows (the files of a cycle at 0.55 are
//! about those at 0.45), and on 28 recorded passes of the cycles files took 3 fewer peaks within
//! 10% than the nearest run alone.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// A number among this cycle's vars, or a list's length, outside every recorded run's: what
/// follows the data (a plugin's estimate from its inputs, a command's files, a task's time) is
/// then the nearest run's, and may be far from what this cycle's data makes of it. A longer
/// list (`thresholds` with 5 items after 2 and 3) fans a step out over more tasks than any run
/// measured together, as a larger number takes the weather past any run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Beyond {
    pub var: String,
    /// What is compared: the var's value, or its length when it is a list.
    pub of: Measure,
    pub value: f64,
    pub recorded_min: f64,
    pub recorded_max: f64,
}

/// What [`Beyond`] compares of a var.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    Value,
    Length,
}

/// A var's number ([`Measure::Value`]) or list length ([`Measure::Length`]); None for the rest.
fn measure(value: &Value) -> Option<(Measure, f64)> {
    match value {
        Value::Array(items) => Some((Measure::Length, items.len() as f64)),
        _ => value.as_f64().map(|number| (Measure::Value, number)),
    }
}

/// The numbers and list lengths among `now`'s vars that lie outside the values the
/// `candidates` (run vars as JSON text) had for them; a var no candidate had of the same kind
/// is not compared.
pub fn beyond_recorded(now: &Map<String, Value>, candidates: &[Option<&str>]) -> Vec<Beyond> {
    let parsed = parse(candidates);
    let mut beyond = Vec::new();
    for (name, value) in now {
        let Some((of, value)) = measure(value) else { continue };
        let recorded = parsed
            .iter()
            .flatten()
            .filter_map(|run| run.get(name).and_then(measure))
            .filter_map(|(kind, v)| (kind == of).then_some(v));
        let Some((low, high)) = recorded.fold(None, |range: Option<(f64, f64)>, v| {
            Some(range.map_or((v, v), |(low, high)| (low.min(v), high.max(v))))
        }) else {
            continue;
        };
        if value < low || value > high {
            beyond.push(Beyond { var: name.clone(), of, value, recorded_min: low, recorded_max: high });
        }
    }
    beyond
}

/// The runs (indices in `candidates`: run vars as JSON text, oldest first) whose figures make
/// this cycle's, with their weights (between 0 and 1, summing to 1): the nearest, and along the
/// one number they differ in, when there is one, the run across from it. None when there are
/// no candidates.
pub fn alike(now: &Map<String, Value>, candidates: &[Option<&str>]) -> Vec<(usize, f64)> {
    let parsed = parse(candidates);
    let Some(nearest) = nearest(now, &parsed) else { return Vec::new() };
    let Some((name, x, a)) = parsed[nearest].as_ref().and_then(|near| one_number_apart(now, near)) else {
        return vec![(nearest, 1.0)];
    };
    // Along `name`, all else as now (the newest of equals): the nearest run on the other side
    // of `x`.
    let mut across: Option<(usize, f64)> = None;
    for (at, vars) in parsed.iter().enumerate() {
        let Some((other, _, b)) = vars.as_ref().and_then(|vars| one_number_apart(now, vars)) else { continue };
        if other != name {
            continue;
        }
        if (b - x) * (a - x) < 0.0 && across.is_none_or(|(_, best)| (b - x).abs() <= (best - x).abs()) {
            across = Some((at, b));
        }
    }
    match across {
        Some((at, b)) => {
            let toward_b = (x - a) / (b - a);
            vec![(nearest, 1.0 - toward_b), (at, toward_b)]
        }
        None => vec![(nearest, 1.0)],
    }
}

/// Each candidate's vars, `None` for a run without them (recorded before runs kept them) or
/// with text that is not a JSON object.
pub(super) fn parse(candidates: &[Option<&str>]) -> Vec<Option<Map<String, Value>>> {
    candidates.iter().map(|text| text.and_then(|t| serde_json::from_str(t).ok())).collect()
}

/// How far each candidate's vars are from `now`'s (0: the same; infinite for a run without
/// them), as [`alike`] measures nearness, each number's range spanning `also` too (the cycle
/// predicted, when `now` is a recorded run's).
pub fn distances(now: &Map<String, Value>, candidates: &[Option<&str>], also: Option<&Map<String, Value>>) -> Vec<f64> {
    let parsed = parse(candidates);
    let spans = spans(now, parsed.iter().flatten().chain(also));
    parsed.iter().map(|vars| vars.as_ref().map_or(f64::INFINITY, |vars| distance(now, vars, &spans))).collect()
}

/// The index in `parsed` of the run nearest to `now`, the newest of equals; `None` when there
/// are none. A run without vars is farther than any with them.
fn nearest(now: &Map<String, Value>, parsed: &[Option<Map<String, Value>>]) -> Option<usize> {
    let spans = spans(now, parsed.iter().flatten());
    let mut best: Option<(usize, f64)> = None;
    for (at, vars) in parsed.iter().enumerate() {
        let distance = vars.as_ref().map_or(f64::INFINITY, |vars| distance(now, vars, &spans));
        if best.is_none_or(|(_, nearest)| distance <= nearest) {
            best = Some((at, distance));
        }
    }
    best.map(|(at, _)| at)
}

/// The one var `now` and `recorded` differ in, when it is a number in both: its name, `now`'s
/// value and `recorded`'s.
pub(super) fn one_number_apart<'a>(
    now: &'a Map<String, Value>,
    recorded: &Map<String, Value>,
) -> Option<(&'a str, f64, f64)> {
    if now.len() != recorded.len() {
        return None;
    }
    let mut differing = now.iter().filter(|(k, v)| recorded.get(*k) != Some(v));
    let (name, value) = differing.next()?;
    if differing.next().is_some() {
        return None;
    }
    Some((name.as_str(), value.as_f64()?, recorded.get(name)?.as_f64()?))
}

/// How far apart two cycles' vars are (0: the same): each of `now`'s numbers that has a
/// range in `spans` is measured against it, anything else by [`value_distance`].
fn distance(now: &Map<String, Value>, recorded: &Map<String, Value>, spans: &HashMap<&str, f64>) -> f64 {
    let only_recorded = recorded.keys().filter(|k| !now.contains_key(*k)).count() as f64;
    let shared_or_now: f64 = now
        .iter()
        .map(|(name, a)| match (recorded.get(name), a.as_f64(), spans.get(name.as_str())) {
            (None, ..) => 1.0,
            (Some(b), Some(x), Some(&span)) => b.as_f64().map_or(1.0, |y| spanned(x, y, span)),
            (Some(b), ..) => value_distance(a, b),
        })
        .sum();
    shared_or_now + only_recorded
}

/// The range each of `now`'s numeric vars spans over `now` and `runs`.
fn spans<'a>(
    now: &'a Map<String, Value>,
    runs: impl Iterator<Item = &'a Map<String, Value>> + Clone,
) -> HashMap<&'a str, f64> {
    let mut spans = HashMap::new();
    for (name, value) in now {
        let Some(own) = value.as_f64() else { continue };
        let values = runs.clone().filter_map(|run| run.get(name).and_then(Value::as_f64));
        let (low, high) = values.fold((own, own), |(low, high), v| (low.min(v), high.max(v)));
        spans.insert(name.as_str(), high - low);
    }
    spans
}

/// `x` and `y` apart as a share of `span` (a span of 0: every value so far was `x`).
fn spanned(x: f64, y: f64, span: f64) -> f64 {
    if span > 0.0 { ((x - y).abs() / span).min(1.0) } else { unequal(&x, &y) }
}

fn value_distance(a: &Value, b: &Value) -> f64 {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => relative(x, y),
            _ => unequal(a, b),
        },
        (Value::Array(x), Value::Array(y)) => list_distance(x, y),
        // Nested numbers have no kept range: relative to the larger.
        (Value::Object(x), Value::Object(y)) => {
            let members = x.len().max(y.len()).max(1) as f64;
            (distance(x, y, &HashMap::new()) / members).min(1.0)
        }
        _ => unequal(a, b),
    }
}

fn relative(x: f64, y: f64) -> f64 {
    let scale = x.abs().max(y.abs());
    if scale == 0.0 { 0.0 } else { ((x - y).abs() / scale).min(1.0) }
}

/// Lengths first (a list of 6 thresholds is far from one of 2), then the items they share.
fn list_distance(x: &[Value], y: &[Value]) -> f64 {
    let (short, long) = (x.len().min(y.len()), x.len().max(y.len()));
    if long == 0 {
        return 0.0;
    }
    let shared = short as f64 / long as f64;
    let items =
        if short == 0 { 0.0 } else { x.iter().zip(y).map(|(a, b)| value_distance(a, b)).sum::<f64>() / short as f64 };
    ((1.0 - shared) + shared * items).min(1.0)
}

fn unequal<T: PartialEq>(a: &T, b: &T) -> f64 {
    if a == b { 0.0 } else { 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    /// The distance of `recorded` from `now` among `others` (which set the ranges).
    fn among(now: &str, recorded: &str, others: &[&str]) -> f64 {
        let (now, recorded) = (vars(now), vars(recorded));
        let others: Vec<_> = others.iter().map(|o| vars(o)).collect();
        let spans = spans(&now, others.iter().chain([&recorded]));
        distance(&now, &recorded, &spans)
    }

    #[test]
    fn the_same_weather_is_nearest_and_the_newest_of_equals_wins() {
        let now = vars(r#"{"wet": 0.55, "thresholds": [0.5, 4.0]}"#);
        let runs = [
            Some(r#"{"wet": 0.5, "thresholds": [0.5, 4.0]}"#),
            Some(r#"{"wet": 0.05, "thresholds": [0.5, 4.0]}"#),
            Some(r#"{"wet": 0.5, "thresholds": [0.5, 4.0]}"#),
            Some(r#"{"wet": 0.55, "thresholds": [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]}"#),
            None,
        ];
        assert_eq!(nearest(&now, &parse(&runs)), Some(2));
        assert_eq!(
            among(r#"{"wet": 0.55, "thresholds": [0.5, 4.0]}"#, r#"{"wet": 0.55, "thresholds": [0.5, 4.0]}"#, &[]),
            0.0
        );
    }

    #[test]
    fn a_number_is_measured_against_the_range_its_var_spans() {
        // 0.20 is nearer 0.05 than 0.40 on a range of 0.02 to 0.60, though relatively farther.
        let now = vars(r#"{"wet": 0.20}"#);
        let runs =
            [Some(r#"{"wet": 0.05}"#), Some(r#"{"wet": 0.40}"#), Some(r#"{"wet": 0.60}"#), Some(r#"{"wet": 0.02}"#)];
        assert_eq!(nearest(&now, &parse(&runs)), Some(0));
        let far = among(r#"{"wet": 0.02}"#, r#"{"wet": 0.60}"#, &[r#"{"wet": 0.3}"#]);
        assert_eq!(far, 1.0);
        // One value all along: equal is 0, and a new value is a full step away.
        assert_eq!(among(r#"{"wet": 0.1}"#, r#"{"wet": 0.1}"#, &[r#"{"wet": 0.1}"#]), 0.0);
        assert_eq!(among(r#"{"n": 3}"#, r#"{"n": 4}"#, &[]), 1.0);
    }

    /// Three runs of one model along `wet`, and two of another.
    const RUNS: [Option<&str>; 5] = [
        Some(r#"{"wet": 0.05, "model": "ukv"}"#),
        Some(r#"{"wet": 0.40, "model": "ukv"}"#),
        Some(r#"{"wet": 0.20, "model": "ukv"}"#),
        Some(r#"{"wet": 0.35, "model": "glm"}"#),
        Some(r#"{"wet": 0.50, "model": "glm"}"#),
    ];

    #[test]
    fn between_two_recorded_weathers_both_are_taken_by_how_near_each_is() {
        let runs = RUNS;
        let taken = alike(&vars(r#"{"wet": 0.30, "model": "ukv"}"#), &runs);
        // 0.20 is nearest; across from it, 0.40 (not 0.35: another model).
        assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), [2, 1], "{taken:?}");
        assert!((taken[0].1 - 0.5).abs() < 1e-9 && (taken[1].1 - 0.5).abs() < 1e-9, "{taken:?}");
        let taken = alike(&vars(r#"{"wet": 0.35, "model": "ukv"}"#), &runs);
        assert!((taken[0].1 - 0.75).abs() < 1e-9, "0.35 is three quarters of the way to 0.40: {taken:?}");
        // A var other than one number apart: the nearest alone.
        assert_eq!(alike(&vars(r#"{"wet": 0.3, "model": "ecm"}"#), &runs).len(), 1);
        assert_eq!(alike(&vars(r#"{"wet": 0.2, "model": "ukv"}"#), &runs), [(2, 1.0)], "an equal run is taken alone");
        assert_eq!(alike(&vars(r#"{"wet": 0.2}"#), &[]), []);
    }

    #[test]
    fn past_the_recorded_range_the_nearest_run_is_taken_alone() {
        let runs = RUNS;
        // 0.50 (with model ukv): past 0.40, which 0.20 lies beyond; the run at 0.50 is of
        // another model.
        assert_eq!(alike(&vars(r#"{"wet": 0.5, "model": "ukv"}"#), &runs), [(1, 1.0)]);
        // Below the range likewise: 0.0 from 0.05.
        assert_eq!(alike(&vars(r#"{"wet": 0.0, "model": "ukv"}"#), &runs), [(0, 1.0)]);
        let dry = [Some(r#"{"wet": 0.03}"#), Some(r#"{"wet": 0.05}"#), Some(r#"{"wet": 0.04}"#)];
        assert_eq!(alike(&vars(r#"{"wet": 0.45}"#), &dry), [(1, 1.0)], "a first wet cycle after dry ones");
    }

    #[test]
    fn list_lengths_weigh_more_than_their_items() {
        let now = r#"{"thresholds": [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]}"#;
        let six = among(now, r#"{"thresholds": [1, 2, 3, 4, 5, 6]}"#, &[]);
        let two = among(now, r#"{"thresholds": [0.5, 1.0]}"#, &[]);
        assert!(six < two, "{six} {two}");
    }

    #[test]
    fn runs_without_vars_are_taken_only_when_there_is_nothing_else() {
        let now = vars(r#"{"wet": 0.1}"#);
        assert_eq!(nearest(&now, &parse(&[None, Some(r#"{"other": 1}"#), None])), Some(1));
        assert_eq!(nearest(&now, &parse(&[None, Some("not json")])), Some(1));
        assert_eq!(nearest(&now, &parse(&[None, None])), Some(1));
        assert_eq!(nearest(&now, &parse(&[])), None);
    }

    #[test]
    fn strings_and_missing_vars_count_one_each() {
        let now = r#"{"model": "ukv", "wet": 0}"#;
        assert_eq!(among(now, r#"{"model": "ukv", "wet": 0}"#, &[]), 0.0);
        assert_eq!(among(now, r#"{"model": "glm", "wet": 0}"#, &[]), 1.0);
        assert_eq!(among(now, r#"{"wet": 0, "extra": true}"#, &[]), 2.0);
    }

    #[test]
    fn a_number_outside_every_recorded_value_is_beyond_and_one_inside_or_new_is_not() {
        let runs = [Some(r#"{"wet": 0.03, "thresholds": [1]}"#), None, Some(r#"{"wet": 0.05, "name": "a"}"#)];
        let beyond = beyond_recorded(&vars(r#"{"wet": 0.45, "thresholds": [1], "new": 3}"#), &runs);
        let wet = Beyond { var: "wet".into(), of: Measure::Value, value: 0.45, recorded_min: 0.03, recorded_max: 0.05 };
        assert_eq!(beyond, [wet]);
        assert!(beyond_recorded(&vars(r#"{"wet": 0.04}"#), &runs).is_empty());
        assert_eq!(beyond_recorded(&vars(r#"{"wet": 0.01}"#), &runs)[0].recorded_max, 0.05);
    }

    #[test]
    fn a_list_longer_or_shorter_than_every_recorded_one_is_beyond_by_its_length() {
        let runs =
            [Some(r#"{"thresholds": [1, 2]}"#), Some(r#"{"thresholds": [1, 2, 3]}"#), Some(r#"{"thresholds": 7}"#)];
        let longer = beyond_recorded(&vars(r#"{"thresholds": [1, 2, 3, 4, 5]}"#), &runs);
        let thresholds =
            Beyond { var: "thresholds".into(), of: Measure::Length, value: 5.0, recorded_min: 2.0, recorded_max: 3.0 };
        assert_eq!(longer, [thresholds]);
        assert_eq!(beyond_recorded(&vars(r#"{"thresholds": []}"#), &runs)[0].value, 0.0);
        // Within the recorded lengths, whatever the items: the number beside them is not a length.
        assert!(beyond_recorded(&vars(r#"{"thresholds": [8, 9]}"#), &runs).is_empty());
        assert_eq!(beyond_recorded(&vars(r#"{"thresholds": 9}"#), &runs)[0].of, Measure::Value);
    }
}
