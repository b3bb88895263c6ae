//! Failure lists as people read them: ordered by step (in recipe order) and then by the task's
//! index values, compared as numbers where they are numbers (`i=2` before `i=10`); and the tasks
//! of one step that failed with the same error told once, with the keys they cover
//! (`smooth[member=0..39] (40 tasks): ...`).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

/// One value of a task key: integers compare as numbers and come before strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KeyValue<'a> {
    Int(i64),
    Str(&'a str),
}

impl<'a> KeyValue<'a> {
    fn parse(text: &'a str) -> KeyValue<'a> {
        text.parse().map_or(KeyValue::Str(text), KeyValue::Int)
    }
}

impl std::fmt::Display for KeyValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyValue::Int(i) => write!(f, "{i}"),
            KeyValue::Str(s) => f.write_str(s),
        }
    }
}

/// A task key `dim=value,dim=value` as its pairs, in key order. A part without `=` (a string
/// value holding a comma) is kept as a value of no dim, so every key still orders.
fn parse_key(key: &str) -> Vec<(&str, KeyValue<'_>)> {
    if key.is_empty() {
        return Vec::new();
    }
    key.split(',')
        .map(|part| match part.split_once('=') {
            Some((dim, value)) => (dim, KeyValue::parse(value)),
            None => ("", KeyValue::Str(part)),
        })
        .collect()
}

/// Orders task keys by their values, numbers as numbers; keys that parse alike (`i=01`, `i=1`)
/// fall back to their text, so the order is total.
pub fn compare_keys(a: &str, b: &str) -> Ordering {
    parse_key(a).cmp(&parse_key(b)).then_with(|| a.cmp(b))
}

/// What a failure list is made of.
pub trait Failure {
    fn step(&self) -> &str;
    fn key(&self) -> &str;
    fn error(&self) -> &str;
}

/// Sorts failures by the step's position (`step_position`, e.g. its index in the recipe; an
/// unknown step goes last) and then by key value.
pub fn sort<F: Failure>(failures: &mut [F], step_position: impl Fn(&str) -> Option<usize>) {
    failures.sort_by(|a, b| {
        let position = |f: &F| step_position(f.step()).unwrap_or(usize::MAX);
        position(a).cmp(&position(b)).then_with(|| a.step().cmp(b.step())).then_with(|| compare_keys(a.key(), b.key()))
    });
}

/// The tasks of one step that failed with one error.
#[derive(Debug, PartialEq, Eq)]
pub struct FailureGroup<'a> {
    pub step: &'a str,
    pub error: &'a str,
    /// In the order of the list they came from.
    pub keys: Vec<&'a str>,
}

impl FailureGroup<'_> {
    /// `  failed: step[key]: error` for one task, `  failed: step[i=0..39] (40 tasks): error`
    /// for many.
    pub fn line(&self) -> String {
        self.line_as("failed")
    }

    /// The group's line, saying what happened to the tasks with `what` ("failed", "missing").
    pub fn line_as(&self, what: &str) -> String {
        match self.keys.as_slice() {
            [key] => format!("{what}: {}{}: {}", self.step, bracketed(key), self.error),
            keys => format!("{what}: {}{} ({} tasks): {}", self.step, describe_keys(keys), keys.len(), self.error),
        }
    }
}

/// Groups a (sorted) failure list by step and identical error, in the order each group first
/// appears.
pub fn group<F: Failure>(failures: &[F]) -> Vec<FailureGroup<'_>> {
    let mut groups: Vec<FailureGroup<'_>> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for failure in failures {
        let slot = *index.entry((failure.step(), failure.error())).or_insert_with(|| {
            groups.push(FailureGroup { step: failure.step(), error: failure.error(), keys: Vec::new() });
            groups.len() - 1
        });
        groups[slot].keys.push(failure.key());
    }
    groups
}

fn bracketed(key: &str) -> String {
    if key.is_empty() { String::new() } else { format!("[{key}]") }
}

/// Keys told briefly: a full grid of values as `[member=0..11,lead={1,2,6}]`, otherwise the
/// first few keys and how many more.
fn describe_keys(keys: &[&str]) -> String {
    if let Some(grid) = as_grid(keys) {
        return format!("[{grid}]");
    }
    const LISTED: usize = 3;
    let listed: Vec<String> = keys.iter().take(LISTED).map(|k| bracketed(k)).collect();
    match keys.len().saturating_sub(LISTED) {
        0 => listed.join(", "),
        more => format!("{} and {more} more", listed.join(", ")),
    }
}

/// `dim=a..b,dim={x,y}` when the keys are every combination of their dims' values (no more, no
/// fewer) and each dim's values are one value, a run of consecutive integers, or a few values.
fn as_grid(keys: &[&str]) -> Option<String> {
    let parsed: Vec<Vec<(&str, KeyValue<'_>)>> = keys.iter().map(|k| parse_key(k)).collect();
    let dims: Vec<&str> = parsed.first()?.iter().map(|(dim, _)| *dim).collect();
    if dims.is_empty() || dims.contains(&"") {
        return None;
    }
    let mut values: Vec<BTreeSet<KeyValue<'_>>> = vec![BTreeSet::new(); dims.len()];
    for key in &parsed {
        if key.len() != dims.len() || key.iter().zip(&dims).any(|((dim, _), expected)| dim != expected) {
            return None;
        }
        for ((_, value), set) in key.iter().zip(&mut values) {
            set.insert(*value);
        }
    }
    let distinct: BTreeSet<&Vec<(&str, KeyValue<'_>)>> = parsed.iter().collect();
    let combinations = values.iter().try_fold(1usize, |n, set| n.checked_mul(set.len()))?;
    if distinct.len() != keys.len() || combinations != keys.len() {
        return None;
    }
    let parts: Option<Vec<String>> =
        dims.iter().zip(&values).map(|(dim, set)| Some(format!("{dim}={}", describe_values(set)?))).collect();
    Some(parts?.join(","))
}

/// One dim's values in a grid: `3`, `0..39` (consecutive integers, both ends included) or a few
/// values `{1,2,6}`; `None` for many values that are not a run.
fn describe_values(set: &BTreeSet<KeyValue<'_>>) -> Option<String> {
    const FEW: usize = 4;
    let (first, last) = (set.first()?, set.last()?);
    if set.len() == 1 {
        return Some(first.to_string());
    }
    if let (KeyValue::Int(a), KeyValue::Int(b)) = (first, last) {
        let span = b.checked_sub(*a).and_then(|d| usize::try_from(d).ok());
        if span == Some(set.len() - 1) {
            return Some(format!("{a}..{b}"));
        }
    }
    (set.len() <= FEW).then(|| format!("{{{}}}", set.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct F(&'static str, String, &'static str);

    impl Failure for F {
        fn step(&self) -> &str {
            self.0
        }
        fn key(&self) -> &str {
            &self.1
        }
        fn error(&self) -> &str {
            self.2
        }
    }

    #[test]
    fn keys_order_by_value_numbers_as_numbers() {
        let mut keys = vec!["i=10", "i=2", "i=-1", "i=b", "i=a", "i=1"];
        keys.sort_by(|a, b| compare_keys(a, b));
        assert_eq!(keys, ["i=-1", "i=1", "i=2", "i=10", "i=a", "i=b"]);
        let mut keys = vec!["member=10,lead=1", "member=2,lead=12", "member=2,lead=3", ""];
        keys.sort_by(|a, b| compare_keys(a, b));
        assert_eq!(keys, ["", "member=2,lead=3", "member=2,lead=12", "member=10,lead=1"]);
        assert_eq!(compare_keys("i=01", "i=1"), Ordering::Less, "a total order, by text on a tie");
    }

    #[test]
    fn failures_sort_by_step_position_then_key() {
        let mut failures: Vec<F> = ["b:i=10", "a:i=10", "b:i=2", "a:i=9", "zz:i=0"]
            .iter()
            .map(|s| {
                let (step, key) = s.split_once(':').unwrap();
                F(step, key.to_string(), "e")
            })
            .collect();
        // `b` comes first in the recipe; `zz` is unknown and goes last.
        sort(&mut failures, |step| ["b", "a"].iter().position(|s| *s == step));
        let order: Vec<String> = failures.iter().map(|f| format!("{}:{}", f.0, f.1)).collect();
        assert_eq!(order, ["b:i=2", "b:i=10", "a:i=9", "a:i=10", "zz:i=0"]);
    }

    #[test]
    fn identical_errors_of_a_step_are_told_once() {
        let mut failures: Vec<F> = (0..40).rev().map(|i| F("smooth", format!("i={i}"), "out of range")).collect();
        failures.push(F("smooth", "i=40".into(), "another error"));
        failures.push(F("load", "".into(), "no such file"));
        failures.push(F("save", "i=3".into(), "out of range"));
        sort(&mut failures, |step| ["load", "smooth", "save"].iter().position(|s| *s == step));
        let lines: Vec<String> = group(&failures).iter().map(FailureGroup::line).collect();
        assert_eq!(
            lines,
            [
                "failed: load: no such file",
                "failed: smooth[i=0..39] (40 tasks): out of range",
                "failed: smooth[i=40]: another error",
                "failed: save[i=3]: out of range",
            ]
        );
    }

    #[test]
    fn keys_are_told_as_a_grid_or_listed() {
        let grid: Vec<String> =
            (0..12).flat_map(|m| [1, 2, 6].map(move |lead| format!("member={m},lead={lead}"))).collect();
        let keys: Vec<&str> = grid.iter().map(String::as_str).collect();
        assert_eq!(describe_keys(&keys), "[member=0..11,lead={1,2,6}]");
        assert_eq!(describe_keys(&["member=3,lead=1", "member=3,lead=2"]), "[member=3,lead=1..2]");
        assert_eq!(describe_keys(&["name=a", "name=b"]), "[name={a,b}]");
        // Not a full grid: one combination missing.
        assert_eq!(describe_keys(&keys[1..]), "[member=0,lead=2], [member=0,lead=6], [member=1,lead=1] and 32 more");
        // Gaps in a long run of integers.
        let sparse = ["i=0", "i=2", "i=4", "i=6", "i=8"];
        assert_eq!(describe_keys(&sparse), "[i=0], [i=2], [i=4] and 2 more");
        assert_eq!(describe_keys(&["i=0", "i=2"]), "[i={0,2}]");
        // Keys of different dims, or with commas inside values, are listed.
        assert_eq!(describe_keys(&["a=1", "b=1"]), "[a=1], [b=1]");
        assert_eq!(describe_keys(&["s=x,y", "s=z"]), "[s=x,y], [s=z]");
    }
}
