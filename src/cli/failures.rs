//! Failure lists as people read them: ordered by step (in recipe order) and then by the task's
//! index values, compared as numbers where they are numbers (`i=2` before `i=10`); and the tasks
//! of one step that failed with the same error told once, with the keys they cover
//! (`smooth[member=0..39] (40 tasks): ...`). Errors that differ only in their numbers (the
//! file each task read, its lead, a line number in the traceback) are the same error: the group
//! tells it once with the numbers that vary merged (`t_T00{1..8}.nc`), the stderr tail once,
//! and the other tasks' logs listed after the first.

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
    /// The error, the numbers that vary between the tasks merged, without its `(log: ...)`.
    pub error: String,
    /// In the order of the list they came from.
    pub keys: Vec<&'a str>,
    /// The tasks' log paths (from their errors' `(log: PATH)`), in the same order, once each.
    pub logs: Vec<&'a str>,
}

/// How many log paths a group's line lists.
const LOGS_LISTED: usize = 3;

impl FailureGroup<'_> {
    /// `  failed: step[key]: error` for one task, `  failed: step[i=0..39] (40 tasks): error`
    /// for many.
    pub fn line(&self) -> String {
        self.line_as("failed")
    }

    /// The group's line, saying what happened to the tasks with `what` ("failed", "missing").
    pub fn line_as(&self, what: &str) -> String {
        let logs = match self.logs.as_slice() {
            [] => String::new(),
            [one] => format!("\n(log: {one})"),
            logs => {
                let listed = logs[..logs.len().min(LOGS_LISTED)].join(", ");
                let more = logs.len().saturating_sub(LOGS_LISTED);
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                format!("\n(logs: {listed}{more})")
            }
        };
        // A one-line error keeps its log on the same line, as the plugin wrote it.
        let logs = if self.error.contains('\n') { logs } else { logs.replacen('\n', " ", 1) };
        match self.keys.as_slice() {
            [key] => format!("{what}: {}{}: {}{logs}", self.step, bracketed(key), self.error),
            keys => {
                format!("{what}: {}{} ({} tasks): {}{logs}", self.step, describe_keys(keys), keys.len(), self.error)
            }
        }
    }
}

/// An error split into its text and the log path it ends with (`(log: PATH)`, as command
/// failures end).
fn split_log(error: &str) -> (&str, Option<&str>) {
    let trimmed = error.trim_end();
    if let Some(open) = trimmed.rfind("(log: ")
        && trimmed.ends_with(')')
        && !trimmed[open..].contains('\n')
    {
        let path = &trimmed[open + "(log: ".len()..trimmed.len() - 1];
        return (trimmed[..open].trim_end(), Some(path));
    }
    (error, None)
}

/// The error with every run of digits as `#`: errors alike but for their numbers share it.
fn skeleton(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// A text as its runs of digits and what lies between them.
fn number_runs(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 1..=bytes.len() {
        if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[i - 1].is_ascii_digit() {
            parts.push(&text[start..i]);
            start = i;
        }
    }
    parts
}

/// Texts with one skeleton told as one: each run of digits that differs between them as its
/// common leading digits and then `{a..b}` (consecutive integers), `{a,b,c}` (a few values) or
/// `{…}`.
fn merge_numbers(texts: &[&str]) -> String {
    let runs: Vec<Vec<&str>> = texts.iter().map(|t| number_runs(t)).collect();
    let Some(first) = runs.first() else { return String::new() };
    let mut out = String::new();
    for (at, part) in first.iter().enumerate() {
        let values: BTreeSet<&str> = runs.iter().filter_map(|r| r.get(at).copied()).collect();
        if values.len() <= 1 || !part.starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(part);
            continue;
        }
        out.push_str(&describe_numbers(&values));
    }
    out
}

/// Differing runs of digits: `00{1..8}` for `001`..`008`.
fn describe_numbers(values: &BTreeSet<&str>) -> String {
    const FEW: usize = 4;
    let same_width = values.iter().map(|v| v.len()).collect::<BTreeSet<_>>().len() == 1;
    let first = values.first().copied().unwrap_or_default();
    let mut common = 0;
    if same_width {
        while common + 1 < first.len() && values.iter().all(|v| v.as_bytes()[common] == first.as_bytes()[common]) {
            common += 1;
        }
    }
    let rest: Vec<&str> = values.iter().map(|v| &v[common..]).collect();
    let mut numbers: Vec<(u128, &str)> = rest.iter().filter_map(|r| Some((r.parse().ok()?, *r))).collect();
    numbers.sort();
    let consecutive = numbers.len() == rest.len() && numbers.windows(2).all(|w| w[1].0 == w[0].0 + 1);
    let varying = match (consecutive, numbers.first(), numbers.last()) {
        (true, Some(low), Some(high)) => format!("{{{}..{}}}", low.1, high.1),
        _ if numbers.len() <= FEW && numbers.len() == rest.len() => {
            format!("{{{}}}", numbers.iter().map(|n| n.1).collect::<Vec<_>>().join(","))
        }
        _ => "{…}".to_string(),
    };
    format!("{}{varying}", &first[..common])
}

/// Groups a (sorted) failure list by step and error alike but for its numbers and log path, in
/// the order each group first appears.
pub fn group<F: Failure>(failures: &[F]) -> Vec<FailureGroup<'_>> {
    let mut groups: Vec<(FailureGroup<'_>, Vec<&str>)> = Vec::new();
    let mut index: HashMap<(&str, String), usize> = HashMap::new();
    for failure in failures {
        let (text, log) = split_log(failure.error());
        let slot = *index.entry((failure.step(), skeleton(text))).or_insert_with(|| {
            let group = FailureGroup { step: failure.step(), error: String::new(), keys: Vec::new(), logs: Vec::new() };
            groups.push((group, Vec::new()));
            groups.len() - 1
        });
        let (group, texts) = &mut groups[slot];
        group.keys.push(failure.key());
        if let Some(log) = log
            && !group.logs.contains(&log)
        {
            group.logs.push(log);
        }
        texts.push(text);
    }
    groups
        .into_iter()
        .map(|(mut group, texts)| {
            group.error = merge_numbers(&texts);
            group
        })
        .collect()
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
    fn errors_that_differ_in_numbers_are_one_group_with_their_stderr_once() {
        let failures: Vec<F> = (1..=8)
            .map(|lead| {
                let error = format!(
                    "command `python3 t.py in/2026-12-01T09Z/t_T00{lead}.nc` exited with code 1; the end of its \
                     stderr:\n  | Traceback (most recent call last):\n  |   File \"t.py\", line 12\n  | \
                     FileNotFoundError: in/2026-12-01T09Z/t_T00{lead}.nc did not exist\n\
                     (log: runner-logs/r/C/threshold/lead={lead}.log)"
                );
                F("threshold", format!("lead={lead}"), Box::leak(error.into_boxed_str()))
            })
            .collect();
        let groups = group(&failures);
        assert_eq!(groups.len(), 1);
        let line = groups[0].line();
        assert!(
            line.starts_with(
                "failed: threshold[lead=1..8] (8 tasks): command `python3 t.py in/2026-12-01T09Z/t_T00{1..8}.nc`"
            ),
            "{line}"
        );
        assert!(line.contains("FileNotFoundError: in/2026-12-01T09Z/t_T00{1..8}.nc did not exist"), "{line}");
        assert_eq!(line.matches("Traceback").count(), 1, "{line}");
        assert!(line.contains("line 12"), "a number all share stays: {line}");
        assert!(
            line.ends_with(
                "(logs: runner-logs/r/C/threshold/lead=1.log, runner-logs/r/C/threshold/lead=2.log, \
                 runner-logs/r/C/threshold/lead=3.log and 5 more)"
            ),
            "{line}"
        );
        // Errors alike but for a word are not merged.
        let other = [F("a", "i=1".into(), "no file x.nc"), F("a", "i=2".into(), "no file y.nc")];
        assert_eq!(group(&other).len(), 2);
        assert_eq!(merge_numbers(&["v09", "v10", "v11"]), "v{09..11}");
        assert_eq!(merge_numbers(&["a 3 b", "a 7 b"]), "a {3,7} b");
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
