//! Compiling `dims:`: counts, lists (inline or from a list file), integer ranges, date and time
//! ranges, and groups. Every check is linear in the number of values (duplicates through a hash
//! map), and only listed values are ever materialised.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::Arc;

use runner_plugin::DimValue;
use runner_plugin::size::{format_size, parse_duration};

use super::compiler::Compiler;
use super::diagnostic::{Diagnostic, Loc};
use super::dims::{Dim, DimValues};
use super::limits::{MAX_LIST_FILE_BYTES, MAX_TASKS};
use super::raw::{Located, RangeEnd, RawDim, RawDimEntry, bounded, integer};
use super::suggest::suggestion;
use super::template::{Braces, Filled};
use super::time::{INSTANT_FORMS, Instant, parse_instant};
use super::yaml::{Item, Node};

const SECONDS_PER_DAY: i64 = 86_400;

impl Compiler<'_> {
    pub(super) fn compile_dims(&mut self, entries: Vec<RawDimEntry<'_>>) {
        let kinds: HashMap<&str, bool> =
            entries.iter().map(|e| (e.name.value.as_str(), matches!(e.dim, Some(RawDim::Group { .. })))).collect();
        // (group dim, the dim it groups), resolved once every dim is compiled.
        let mut groups: Vec<(String, String)> = Vec::new();
        let mut rejected = Vec::new();
        for entry in &entries {
            let name = entry.name.value.clone();
            if name == "cycle" || self.var_ids.contains_key(&name) || self.rejected_vars.contains(&name) {
                self.error(
                    Diagnostic::new(entry.name.loc, format!("dim `{name}` has the name of a var or of `cycle`"))
                        .expected("dim names distinct from var names and from `cycle`"),
                );
            }
            let values = match &entry.dim {
                None => None,
                Some(RawDim::Count(count)) => self.count_dim(&name, count),
                Some(RawDim::List(items)) => self.list_dim(&name, entry.loc, items).map(DimValues::List),
                Some(RawDim::File(file)) => self.file_dim(&name, file).map(DimValues::List),
                Some(RawDim::Range { start, end, step }) => self.range_dim(&name, entry.loc, start, *end, *step),
                Some(RawDim::Group { group, size }) => self.group_dim(&name, group, size, &kinds).map(|size| {
                    groups.push((name.clone(), group.value.clone()));
                    // The grouped dim's id and length are known once it is compiled.
                    DimValues::Group { of: 0, size, len: 0 }
                }),
            };
            match values {
                Some(values) => {
                    self.dim_ids.insert(name.clone(), self.dims.len());
                    self.dims.push(Dim { name, values });
                }
                None => rejected.push(name),
            }
        }
        self.rejected_dims.extend(rejected);
        self.resolve_groups(&groups);
    }

    fn count_dim(&mut self, name: &str, count: &Item) -> Option<DimValues> {
        let value = match count.node {
            Node::Int(n) if n < 1 => {
                let message = format!("dim `{name}` has a count of {n}");
                self.error(Diagnostic::new(count.loc, message).expected("a count of at least 1"));
                return None;
            }
            _ => bounded(count, format!("the count of dim `{name}`"), 1, MAX_TASKS),
        };
        match value {
            Ok(len) => Some(DimValues::Range { start: 0, step: 1, len }),
            Err(diagnostic) => {
                self.error(Diagnostic { expected: Some(max_values()), ..diagnostic });
                None
            }
        }
    }

    /// An inline list: integers or strings, each once.
    fn list_dim(&mut self, name: &str, loc: Loc, items: &[Item]) -> Option<Vec<DimValue>> {
        if items.is_empty() {
            self.error(Diagnostic::new(loc, format!("dim `{name}` is an empty list")).expected("at least one value"));
            return None;
        }
        let mut values = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            let value = match &item.node {
                Node::Int(i) => DimValue::Int(*i),
                Node::Str(s) => DimValue::Str(Arc::from(&**s)),
                Node::Bool(b) => DimValue::Str(Arc::from(b.to_string())),
                Node::UInt(u) => {
                    let message = format!("dim `{name}` lists {u}: out of range");
                    self.error(
                        Diagnostic::new(item.loc, message).expected(format!("integers of at most {}", i64::MAX)),
                    );
                    ok = false;
                    continue;
                }
                other => {
                    let message = format!("dim `{name}` lists {}", other.kind());
                    self.error(Diagnostic::new(item.loc, message).expected("integers or strings"));
                    ok = false;
                    continue;
                }
            };
            values.push(value);
        }
        if !ok {
            return None;
        }
        let mut first: HashMap<&DimValue, usize> = HashMap::with_capacity(values.len());
        for (at, value) in values.iter().enumerate() {
            if let Some(&before) = first.get(value) {
                let was = items[before].loc;
                let message =
                    format!("dim `{name}` lists `{value}` twice (first at line {}, column {})", was.line, was.column);
                self.error(Diagnostic::new(items[at].loc, message).expected("distinct values"));
                return None;
            }
            first.insert(value, at);
        }
        Some(values)
    }

    /// `{file: values.txt}`: one value a line (strings; blank lines skipped), the file relative
    /// to the recipe's directory.
    fn file_dim(&mut self, name: &str, file: &Located<String>) -> Option<Vec<DimValue>> {
        let path = self.base_dir.join(&file.value);
        let fail =
            |message: String| Diagnostic::new(file.loc, format!("dim `{name}`: list file `{}` {message}", file.value));
        let text = match read_bounded(&path) {
            Ok(text) => text,
            Err(message) => {
                self.error(fail(message).expected("a UTF-8 text file with one value a line"));
                return None;
            }
        };
        let lines = text.lines().count();
        let mut values = Vec::with_capacity(lines);
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(lines);
        for (number, line) in text.lines().enumerate() {
            let value = line.trim();
            if value.is_empty() {
                continue;
            }
            if let Some(before) = first.insert(value, number + 1) {
                let message = format!("lists `{value}` twice (lines {before} and {})", number + 1);
                self.error(fail(message).expected("distinct values"));
                return None;
            }
            values.push(DimValue::Str(Arc::from(value)));
        }
        if values.is_empty() {
            self.error(fail("has no values".into()).expected("at least one value (one a line)"));
            return None;
        }
        Some(values)
    }

    /// `{start, stop, step}` (or `count` instead of `stop`) of integers, or of dates and times.
    fn range_dim(
        &mut self,
        name: &str,
        loc: Loc,
        start: &Item,
        end: RangeEnd,
        step: Option<&Item>,
    ) -> Option<DimValues> {
        if let Node::Str(text) = &start.node {
            let first = self.dim_instant(name, "start", start.loc, text)?;
            return self.time_dim(name, loc, first, end, step);
        }
        let report = |this: &mut Self, d: Diagnostic| {
            this.error(d);
            None
        };
        let first = match integer(start, format!("`start` of dim `{name}`")) {
            Ok(v) => v,
            Err(d) => return report(self, d),
        };
        let step_value = match step.map(|s| integer(s, format!("`step` of dim `{name}`"))) {
            None => 1,
            Some(Ok(v)) => v,
            Some(Err(d)) => return report(self, d),
        };
        if step_value < 1 {
            let at = step.map_or(loc, |s| s.loc);
            return report(
                self,
                Diagnostic::new(at, format!("dim `{name}` has step {step_value}")).expected("a step of at least 1"),
            );
        }
        let stop = match end {
            RangeEnd::Stop(stop) => stop,
            RangeEnd::Count(count) => {
                let len = self.range_count(name, count)?;
                let last = i128::from(first) + i128::from(step_value) * (i128::from(len) - 1);
                if last > i128::from(i64::MAX) {
                    let message = format!("dim `{name}` would end at {last}: out of range");
                    return report(
                        self,
                        Diagnostic::new(count.loc, message).expected(format!("values of at most {}", i64::MAX)),
                    );
                }
                return Some(DimValues::Range { start: first, step: step_value, len });
            }
        };
        let last = match integer(stop, format!("`stop` of dim `{name}`")) {
            Ok(v) => v,
            Err(d) => return report(self, d),
        };
        if last < first {
            let message = format!("dim `{name}` stops ({last}) before it starts ({first})");
            return report(
                self,
                Diagnostic::new(stop.loc, message).expected("`stop` ≥ `start` (the range is inclusive)"),
            );
        }
        let len = (i128::from(last) - i128::from(first)) / i128::from(step_value) + 1;
        if len > i128::from(MAX_TASKS) {
            return report(self, Diagnostic::new(loc, format!("dim `{name}` has {len} values")).expected(max_values()));
        }
        Some(DimValues::Range { start: first, step: step_value, len: len as u64 })
    }

    /// `count` of a range dim: at least one value, at most [`MAX_TASKS`].
    fn range_count(&mut self, name: &str, count: &Item) -> Option<u64> {
        bounded(count, format!("`count` of dim `{name}`"), 1, MAX_TASKS)
            .map_err(|d| self.error(Diagnostic { expected: d.expected.or_else(|| Some(max_values())), ..d }))
            .ok()
    }

    /// The instant `start` or `stop` (`key`) of date dim `name` writes: a date or date-time,
    /// or a template of the cycle and vars (`"{cycle}"`, `"{cycle - 6h}"`) that gives one.
    fn dim_instant(&mut self, name: &str, key: &str, loc: Loc, text: &str) -> Option<Instant> {
        let shown = |text: &str| super::diagnostic::shorten(text, 40).into_owned();
        if !text.contains('{') {
            let instant = parse_instant(text);
            if instant.is_none() {
                let message = format!("`{key}` of dim `{name}` is \"{}\"", shown(text));
                let expected =
                    if key == "start" { format!("an integer, or {INSTANT_FORMS}") } else { INSTANT_FORMS.to_string() };
                self.error(Diagnostic::new(loc, message).expected(expected));
            }
            return instant;
        }
        let filled = match self.fixed_template(text, Braces::Plain) {
            Ok(Filled::Value(serde_json::Value::String(filled))) => filled,
            Ok(Filled::Value(other)) => other.to_string(),
            Ok(Filled::Partial(rest)) => {
                let names: Vec<String> = rest.distinct_names().iter().map(|n| format!("`{n}`")).collect();
                let message = format!("`{key}` of dim `{name}` (\"{}\") refers to {}", shown(text), names.join(", "));
                self.error(Diagnostic::new(loc, message).expected(
                    "only the cycle and vars in a dim's `start` and `stop`, e.g. \"{cycle}\" or \"{cycle - 6h}\"",
                ));
                return None;
            }
            Err(problem) => {
                let message = format!("`{key}` of dim `{name}`: {problem}");
                self.error(Diagnostic::with_expectation(loc, message));
                return None;
            }
        };
        let instant = parse_instant(&filled);
        if instant.is_none() {
            let message = format!("`{key}` of dim `{name}` is \"{}\", which is \"{}\"", shown(text), shown(&filled));
            let hint =
                if text.contains("{cycle") { " (the cycle id, `--cycle`, must then be a date-time)" } else { "" };
            self.error(Diagnostic::new(loc, message).expected(format!("{INSTANT_FORMS}{hint}")));
        }
        instant
    }

    /// `{start: 1981-09-01, stop: 2021-01-05, step: 1d}` or with times (`2026-11-01T00Z`,
    /// `step: 3h`), or `count` values from `start`. The step defaults to one unit of what
    /// `start` writes: a day or an hour.
    fn time_dim(
        &mut self,
        name: &str,
        loc: Loc,
        first: Instant,
        end: RangeEnd,
        step: Option<&Item>,
    ) -> Option<DimValues> {
        let step_seconds = match step {
            None if first.has_time => 3600,
            None => SECONDS_PER_DAY,
            Some(item) => self.time_step(name, item)?,
        };
        let (len, last_has_time) = match end {
            RangeEnd::Count(count) => {
                let len = self.range_count(name, count)?;
                let last = i128::from(first.seconds) + i128::from(step_seconds) * (i128::from(len) - 1);
                let formattable = i64::try_from(last).ok().and_then(|s| chrono::DateTime::from_timestamp(s, 0));
                if formattable.is_none() {
                    let message = format!("date dim `{name}` would end {last} seconds after 1970: out of range");
                    self.error(Diagnostic::new(count.loc, message).expected("dates within years -262143 to 262142"));
                    return None;
                }
                (len as i64, false)
            }
            RangeEnd::Stop(stop) => {
                let last = match &stop.node {
                    Node::Str(text) => self.dim_instant(name, "stop", stop.loc, text)?,
                    other => {
                        let message = format!("`stop` of date dim `{name}` is {}", other.kind());
                        self.error(Diagnostic::new(stop.loc, message).expected(INSTANT_FORMS));
                        return None;
                    }
                };
                if last.seconds < first.seconds {
                    let message = format!("date dim `{name}` stops before it starts");
                    self.error(
                        Diagnostic::new(stop.loc, message)
                            .expected("`stop` at or after `start` (the range is inclusive)"),
                    );
                    return None;
                }
                ((last.seconds - first.seconds) / step_seconds + 1, last.has_time)
            }
        };
        if len as u64 > MAX_TASKS {
            self.error(Diagnostic::new(loc, format!("date dim `{name}` has {len} values")).expected(max_values()));
            return None;
        }
        let dates = !first.has_time && !last_has_time && step_seconds % SECONDS_PER_DAY == 0;
        Some(DimValues::Time { start: first.seconds, step: step_seconds, len: len as u64, dates })
    }

    /// The step of a date dim: a duration of whole seconds, at least one.
    fn time_step(&mut self, name: &str, item: &Item) -> Option<i64> {
        let what = format!("`step` of date dim `{name}`");
        let expected = "a duration such as `1d`, `6h`, `30m` or `10s`";
        let duration = match &item.node {
            Node::Str(text) => {
                parse_duration(text).map_err(|e| Diagnostic::with_expectation(item.loc, format!("{what}: {e}")))
            }
            other => Err(Diagnostic::new(item.loc, format!("{what} is {}", other.kind())).expected(expected)),
        };
        match duration {
            Ok(d) if d.as_secs() >= 1 && d.subsec_nanos() == 0 => Some(d.as_secs() as i64),
            Ok(_) => {
                let message = format!("{what} is not a whole number of seconds of at least 1");
                self.error(Diagnostic::new(item.loc, message).expected(expected));
                None
            }
            Err(d) => {
                self.error(d);
                None
            }
        }
    }

    /// `{group: DIM, size: N}`: the size, once the grouped dim is known to be groupable.
    fn group_dim(
        &mut self,
        name: &str,
        group: &Located<String>,
        size: &Item,
        kinds: &HashMap<&str, bool>,
    ) -> Option<u64> {
        let size = match size.node {
            Node::Int(n) if n < 1 => {
                let message = format!("group dim `{name}` has size {n}");
                self.error(Diagnostic::new(size.loc, message).expected("a size of at least 1"));
                return None;
            }
            _ => match bounded(size, format!("the size of group dim `{name}`"), 1, MAX_TASKS) {
                Ok(size) => size,
                Err(diagnostic) => {
                    self.error(diagnostic);
                    return None;
                }
            },
        };
        match kinds.get(group.value.as_str()) {
            None => {
                let expected = suggestion(&group.value, kinds.keys().copied().filter(|n| *n != name));
                let message = format!("group dim `{name}` groups unknown dim `{}`", group.value);
                self.error(Diagnostic::new(group.loc, message).expected(format!("a dim, {expected}")));
                None
            }
            Some(true) => {
                let message = format!("group dim `{name}` groups `{}`, which is itself a group", group.value);
                self.error(Diagnostic::new(group.loc, message).expected("a group of a count, list, range or date dim"));
                None
            }
            Some(false) => Some(size),
        }
    }

    /// Fills in group ids and lengths once the dims they group are known (dims may be listed
    /// in any order). A group of a rejected dim is rejected too: the dim's own error says why.
    fn resolve_groups(&mut self, groups: &[(String, String)]) {
        let mut dropped = Vec::new();
        for (group, base) in groups {
            let (Some(&group_id), base_id) = (self.dim_ids.get(group), self.dim_ids.get(base).copied()) else {
                continue;
            };
            match base_id {
                Some(base_id) => {
                    let base_len = self.dims[base_id].len();
                    if let DimValues::Group { of, size, len } = &mut self.dims[group_id].values {
                        *of = base_id;
                        *len = base_len.div_ceil(*size);
                    }
                }
                None => dropped.push(group.clone()),
            }
        }
        if dropped.is_empty() {
            return;
        }
        // Removing dims shifts ids: rebuild them, and the groups' references with them.
        let old: Vec<String> = self.dims.iter().map(|d| d.name.clone()).collect();
        let dropped_names: std::collections::HashSet<&String> = dropped.iter().collect();
        self.dims.retain(|d| !dropped_names.contains(&d.name));
        self.dim_ids = self.dims.iter().enumerate().map(|(id, d)| (d.name.clone(), id)).collect();
        for id in 0..self.dims.len() {
            if let DimValues::Group { of, .. } = self.dims[id].values {
                let base = &old[of];
                if let (DimValues::Group { of, .. }, Some(&new)) = (&mut self.dims[id].values, self.dim_ids.get(base)) {
                    *of = new;
                }
            }
        }
        self.rejected_dims.extend(dropped);
    }
}

fn max_values() -> String {
    format!("at most {MAX_TASKS} values (2^48)")
}

/// Reads a list file of at most [`MAX_LIST_FILE_BYTES`], or says why it cannot.
fn read_bounded(path: &std::path::Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read ({}): {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_LIST_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read ({}): {e}", path.display()))?;
    if bytes.len() as u64 > MAX_LIST_FILE_BYTES {
        return Err(format!("is larger than {}", format_size(MAX_LIST_FILE_BYTES)));
    }
    String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        format!("is not UTF-8 text (line {line})")
    })
}
