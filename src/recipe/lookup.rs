//! Lookups per dim value, `{radii[lead]}`: the entry of a var for the task's value of a dim. The
//! var is a mapping from the dim's values (`{1: 10000, 2: 20000}`) or a list with one item per
//! value, in the dim's order. The table is built once when the recipe is compiled, checked to
//! hold every value of the dim; a task then finds its entry by one hash lookup.

use std::collections::HashMap;
use std::sync::Arc;

use runner_plugin::DimValue;
use serde_json::Value as Json;

use super::diagnostic::shorten;
use super::dims::{Dim, DimValues};
use super::template_format::{Format, TemplateValue};
use super::time::{Extent, Unit, parse_instant};

/// How many keys or values a message lists before `...`.
const LISTED: usize = 8;

/// `{table[key]}`: var `table` indexed by dim `key`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub table: String,
    pub key: String,
    /// The var's entries per value of the dim; set when the recipe is compiled.
    pub entries: Option<Arc<LookupTable>>,
}

impl Lookup {
    /// `name[key]` (spaces allowed inside the brackets); `None` when `text` is not of that
    /// shape, an error when it is but a name is empty or not a name.
    pub fn parse(text: &str) -> Option<Result<Lookup, String>> {
        let (table, rest) = text.split_once('[')?;
        let key = rest.strip_suffix(']')?;
        let (table, key) = (table.trim(), key.trim());
        let is_name = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if !is_name(table) || !is_name(key) {
            return Some(Err(format!(
                "`{{{text}}}` is not a lookup; expected `{{var[dim]}}`, e.g. `{{radii[lead]}}`: a var indexed by a dim of the step"
            )));
        }
        Some(Ok(Lookup { table: table.to_string(), key: key.to_string(), entries: None }))
    }

    /// The entry for the key's value that `lookup` gives; `None` while the key is not known
    /// (or the table not bound).
    pub fn resolve<'t, 'v>(&'t self, lookup: &dyn Fn(&str) -> Option<TemplateValue<'v>>) -> Option<&'t Json> {
        let entries = self.entries.as_deref()?;
        match lookup(&self.key)? {
            TemplateValue::Dim(value) => entries.get(&value),
            _ => None,
        }
    }
}

/// A var's entry for each value of a dim, in the dim's order.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupTable {
    entries: Vec<(DimValue, Json)>,
    positions: HashMap<DimValue, usize>,
}

impl LookupTable {
    /// The table of var `var` (named `var_name`) for dim `dim`: every value of the dim must
    /// have an entry (other keys of a mapping are allowed); the error says which value lacks
    /// one and what the keys are, or why the var cannot be indexed by the dim at all.
    pub fn build(var_name: &str, var: &Json, dim: &Dim) -> Result<LookupTable, String> {
        let dim_name = &dim.name;
        let values_of_dim = || {
            let shown: Vec<String> = (0..dim.len().min(LISTED as u64)).map(|i| dim.value(i).to_string()).collect();
            let more = if dim.len() > LISTED as u64 { ", ..." } else { "" };
            format!("{}{more}", shown.join(", "))
        };
        match var {
            Json::Array(items) => {
                if items.len() as u64 != dim.len() {
                    return Err(format!(
                        "var `{var_name}` lists {} items but dim `{dim_name}` has {} values; expected one item per value of `{dim_name}`, in its order ({})",
                        items.len(),
                        dim.len(),
                        values_of_dim()
                    ));
                }
                Ok(LookupTable::new(items.iter().enumerate().map(|(i, item)| (dim.value(i as u64), item.clone()))))
            }
            Json::Object(map) => {
                let mut by_value: HashMap<DimValue, (&str, &Json)> = HashMap::with_capacity(map.len());
                for (key, entry) in map {
                    let Some(value) = key_value(key, dim) else {
                        return Err(format!(
                            "var `{var_name}` has key `{}`, which is not a value of dim `{dim_name}` ({} values); expected keys such as {}",
                            shorten(key, 40),
                            dim.kind(),
                            values_of_dim()
                        ));
                    };
                    if let Some((before, _)) = by_value.insert(value, (key, entry)) {
                        return Err(format!(
                            "var `{var_name}` has keys `{before}` and `{key}` for one value of dim `{dim_name}`; expected one key per value"
                        ));
                    }
                }
                // A dim with more values than the mapping has keys lacks one of the first
                // `keys + 1` values: this stays linear in the mapping, whatever the dim's length.
                let checked = dim.len().min(map.len() as u64 + 1);
                let mut entries = Vec::with_capacity(checked as usize);
                for i in 0..checked {
                    let value = dim.value(i);
                    match by_value.get(&value) {
                        Some((_, entry)) => entries.push((value, (*entry).clone())),
                        None => {
                            let keys: Vec<&str> = map.keys().take(LISTED).map(String::as_str).collect();
                            let more = if map.len() > LISTED { ", ..." } else { "" };
                            return Err(format!(
                                "var `{var_name}` has no entry for {dim_name} `{value}`; its keys are: {}{more}; expected a key for every value of dim `{dim_name}` ({})",
                                if keys.is_empty() { "none".to_string() } else { keys.join(", ") },
                                values_of_dim()
                            ));
                        }
                    }
                }
                Ok(LookupTable::new(entries.into_iter()))
            }
            other => Err(format!(
                "var `{var_name}` is {}, which cannot be indexed by dim `{dim_name}`; expected a mapping from its values to values (`{{{}: ...}}`) or a list with one item per value",
                kind_of(other),
                dim.value(0)
            )),
        }
    }

    fn new(entries: impl Iterator<Item = (DimValue, Json)>) -> LookupTable {
        let entries: Vec<(DimValue, Json)> = entries.collect();
        let positions = entries.iter().enumerate().map(|(at, (value, _))| (value.clone(), at)).collect();
        LookupTable { entries, positions }
    }

    pub fn get(&self, value: &DimValue) -> Option<&Json> {
        self.positions.get(value).map(|&at| &self.entries[at].1)
    }

    /// Every (dim value, entry), in the dim's order.
    pub fn entries(&self) -> impl Iterator<Item = (&DimValue, &Json)> {
        self.entries.iter().map(|(value, entry)| (value, entry))
    }
}

/// The dim value a mapping's key stands for: an integer for integer dims, a date or date-time
/// (in any written form) for date dims, the text itself for string dims.
fn key_value(key: &str, dim: &Dim) -> Option<DimValue> {
    match &dim.values {
        DimValues::Time { dates, .. } => {
            let seconds = parse_instant(key)?.seconds;
            Some(if *dates { DimValue::Date(seconds) } else { DimValue::Time(seconds) })
        }
        _ if dim.is_integer() => key.trim().parse().ok().map(DimValue::Int),
        // A list of strings and integers: a key is the text of one of them.
        _ => Some(match key.parse::<i64>() {
            Ok(i) if dim.position(&DimValue::Int(i)).is_some() => DimValue::Int(i),
            _ => DimValue::Str(Arc::from(key)),
        }),
    }
}

/// "a number", "the string \"x\"" ... of a var's value, for messages.
fn kind_of(value: &Json) -> String {
    match value {
        Json::Null => "null".to_string(),
        Json::Bool(b) => format!("the boolean `{b}`"),
        Json::Number(n) => format!("the number `{n}`"),
        Json::String(s) => format!("the string \"{}\"", shorten(s, 40)),
        Json::Array(_) => "a list".to_string(),
        Json::Object(_) => "a mapping".to_string(),
    }
}

/// A lookup table of one var by one dim, and what its uses found, so that a table used in
/// many templates is built and checked once per format.
pub(super) struct TableUse {
    pub(super) table: Arc<LookupTable>,
    /// Longest text per (format, lone reference).
    pub(super) lens: Vec<((Format, bool), Result<usize, String>)>,
    /// Least and most seconds of its entries per unit (`None`: as date-times).
    pub(super) extents: Vec<(Option<Unit>, Extent)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lead() -> Dim {
        Dim { name: "lead".into(), values: DimValues::List(vec![DimValue::Int(1), DimValue::Int(2), DimValue::Int(6)]) }
    }

    #[test]
    fn mappings_and_aligned_lists() {
        let table = LookupTable::build("radii", &json!({"1": 10000, "2": 20000, "6": 60000, "9": 0}), &lead()).unwrap();
        assert_eq!(table.get(&DimValue::Int(6)), Some(&json!(60000)));
        assert_eq!(table.entries().count(), 3, "keys beyond the dim's values are not kept");
        let table = LookupTable::build("radii", &json!([10, 20, 60]), &lead()).unwrap();
        assert_eq!(table.get(&DimValue::Int(2)), Some(&json!(20)));
        let hours =
            Dim { name: "valid".into(), values: DimValues::Time { start: 0, step: 3600, len: 2, dates: false } };
        let table = LookupTable::build("w", &json!({"1970-01-01T00Z": "a", "19700101T0100Z": "b"}), &hours).unwrap();
        assert_eq!(table.get(&DimValue::Time(3600)), Some(&json!("b")));
        let names = Dim {
            name: "model".into(),
            values: DimValues::List(vec![DimValue::Str(Arc::from("uk")), DimValue::Int(3)]),
        };
        let table = LookupTable::build("grid", &json!({"uk": 2, "3": 10}), &names).unwrap();
        assert_eq!(table.get(&DimValue::Int(3)), Some(&json!(10)));
    }

    #[test]
    fn misuse_says_which_value_and_which_keys() {
        let error = LookupTable::build("radii", &json!({"1": 10000, "2": 20000}), &lead()).unwrap_err();
        assert_eq!(
            error,
            "var `radii` has no entry for lead `6`; its keys are: 1, 2; expected a key for every value of dim `lead` (1, 2, 6)"
        );
        let error = LookupTable::build("radii", &json!([1, 2]), &lead()).unwrap_err();
        assert!(error.starts_with("var `radii` lists 2 items but dim `lead` has 3 values"), "{error}");
        let error = LookupTable::build("radii", &json!({"one": 1}), &lead()).unwrap_err();
        assert!(error.contains("has key `one`, which is not a value of dim `lead` (integer values)"), "{error}");
        let error = LookupTable::build("radii", &json!({"1": 1, "01": 2}), &lead()).unwrap_err();
        assert!(error.contains("has keys `01` and `1` for one value") || error.contains("`1` and `01`"), "{error}");
        let error = LookupTable::build("radii", &json!(5), &lead()).unwrap_err();
        assert!(error.starts_with("var `radii` is the number `5`, which cannot be indexed by dim `lead`"), "{error}");
        // A dim of 2^40 values against a mapping of two keys: found at once.
        let huge = Dim { name: "i".into(), values: DimValues::Range { start: 0, step: 1, len: 1 << 40 } };
        let error = LookupTable::build("t", &json!({"0": 1, "1": 2}), &huge).unwrap_err();
        assert!(error.contains("has no entry for i `2`"), "{error}");
    }

    #[test]
    fn lookups_parse() {
        assert_eq!(Lookup::parse("radii[ lead ]").unwrap().unwrap().key, "lead");
        assert!(Lookup::parse("radii").is_none());
        assert!(Lookup::parse("radii[]").unwrap().is_err());
        assert!(Lookup::parse("[lead]").unwrap().is_err());
    }
}
