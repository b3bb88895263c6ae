//! `dims:` as written: each entry's shape — a count, a list, a range (`start` with `stop` or
//! `count`, and `step`), a group or a list file — with its keys checked; the values themselves
//! are checked by the compiler ([`super::compile_dims`]), which knows what each must be. The
//! types it reads them into are the raw recipe's (`raw`).

use super::diagnostic::Diagnostic;
use super::raw::{Field, RangeEnd, RawDim, RawDimEntry, Reader};
use super::yaml::{Item, Node};

const RANGE_KEYS: &[&str] = &["start", "stop", "step", "count"];
const GROUP_KEYS: &[&str] = &["group", "size"];
const FILE_KEYS: &[&str] = &["file"];

impl Reader<'_> {
    pub(super) fn dims<'t>(&mut self, item: &'t Item) -> Option<Vec<RawDimEntry<'t>>> {
        let entries = self.entries(item, "`dims`", "dim")?;
        Some(
            entries
                .into_iter()
                .map(|(name, value)| {
                    let dim = self.dim(&name.value, value);
                    RawDimEntry { name, loc: value.loc, dim }
                })
                .collect(),
        )
    }

    fn dim<'t>(&mut self, name: &str, item: &'t Item) -> Option<RawDim<'t>> {
        match &item.node {
            // An integral number beyond the integers is a count out of range, said so later.
            Node::Int(_) | Node::UInt(_) => Some(RawDim::Count(item)),
            Node::Float(x) if x.fract() == 0.0 && x.abs() >= 9.2e18 => Some(RawDim::Count(item)),
            Node::Seq(values) => Some(RawDim::List(values)),
            Node::Map(entries) => {
                let has = |key: &str| entries.iter().any(|(k, _)| matches!(&k.node, Node::Str(s) if &**s == key));
                let context = format!("in dim `{name}`");
                if has("group") {
                    let keys = self.keys(item, &context, GROUP_KEYS)?;
                    let group = self.name(keys.get("group").given().copied()?, format!("`group` of dim `{name}`"));
                    let Some(size) = keys.get("size").given().copied() else {
                        self.report(
                            Diagnostic::new(item.loc, format!("group dim `{name}` has no `size`"))
                                .expected("`{group: DIM, size: N}`, e.g. `{group: hour, size: 6}`"),
                        );
                        return None;
                    };
                    Some(RawDim::Group { group: group?, size })
                } else if has("file") {
                    let keys = self.keys(item, &context, FILE_KEYS)?;
                    let file = self.name(keys.get("file").given().copied()?, format!("`file` of dim `{name}`"))?;
                    Some(RawDim::File(file))
                } else {
                    let keys = self.keys(item, &context, RANGE_KEYS)?;
                    let example = "`{start: N, stop: M}`, e.g. `{start: 0, stop: 23}`, `{start: 1981-09-01, stop: 2021-01-05, step: 1d}` or `{start: \"{cycle}\", step: 1h, count: 8}`";
                    let missing = |this: &mut Self, what: &str| {
                        this.report(
                            Diagnostic::new(item.loc, format!("range dim `{name}` has no `{what}`")).expected(example),
                        );
                        None
                    };
                    let start = match keys.get("start") {
                        Field::Given(start) => start,
                        Field::Broken => return None,
                        Field::Absent => return missing(self, "start"),
                    };
                    let end = match (keys.get("stop"), keys.get("count")) {
                        (Field::Broken, _) | (_, Field::Broken) => return None,
                        (Field::Given(stop), Field::Absent) => RangeEnd::Stop(stop),
                        (Field::Absent, Field::Given(count)) => RangeEnd::Count(count),
                        (Field::Given(_), Field::Given(count)) => {
                            self.report(
                                Diagnostic::new(count.loc, format!("range dim `{name}` has both `stop` and `count`"))
                                    .expected("one of them: `stop` (the last value) or `count` (how many values)"),
                            );
                            return None;
                        }
                        (Field::Absent, Field::Absent) => return missing(self, "stop` or `count"),
                    };
                    if keys.get("step").is_broken() {
                        return None;
                    }
                    Some(RawDim::Range { start, end, step: keys.get("step").given().copied() })
                }
            }
            other => {
                self.report(Diagnostic::new(item.loc, format!("dim `{name}` is {}", other.kind())).expected(
                    "a dim: a count (`12`), a list (`[1, 2, 3]`), a range (`{start: 0, stop: 23}`), \
                     a date range (`{start: 1981-09-01, stop: 2021-01-05, step: 1d}`), a group \
                     (`{group: hour, size: 6}`) or a list file (`{file: values.txt}`)",
                ));
                None
            }
        }
    }
}
