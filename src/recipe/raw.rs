//! The recipe as written: reads the YAML tree ([`super::yaml`]) into the recipe's parts — name,
//! dims, vars, steps and their keys — checking every mapping's keys and every value's kind.
//!
//! A problem is reported and reading goes on with the next key, so one pass finds every shape
//! problem of the file. A key that is there but could not be read, or that a misspelt key
//! probably meant, is [`Field::Broken`]: later checks then know that its absence is not the
//! author's intent and do not report its consequences.

use std::collections::HashMap;
use std::fmt::Display;

use serde_json::{Map, Value as Json};

use super::diagnostic::{Diagnostic, Loc};
use super::suggest::{closest, suggestion};
use super::yaml::{Item, Node};

/// One entry of `dims:`.
#[derive(Debug)]
pub struct RawDimEntry<'t> {
    pub name: Located<String>,
    /// Where its value is written.
    pub loc: Loc,
    /// `None` when its shape was wrong (already reported).
    pub dim: Option<RawDim<'t>>,
}

/// A dim as written. Scalars are checked by the compiler, which knows what each must be.
#[derive(Debug)]
pub enum RawDim<'t> {
    Count(&'t Item),
    List(&'t [Item]),
    Range { start: &'t Item, end: RangeEnd<'t>, step: Option<&'t Item> },
    Group { group: Located<String>, size: &'t Item },
    File(Located<String>),
}

/// Where a range dim ends: at `stop` (inclusive), or after `count` values.
#[derive(Debug, Clone, Copy)]
pub enum RangeEnd<'t> {
    Stop(&'t Item),
    Count(&'t Item),
}

/// A value and where it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    pub loc: Loc,
    pub value: T,
}

/// One key of a mapping with a fixed set of keys.
#[derive(Debug, Clone, Copy)]
pub enum Field<T> {
    /// Not written.
    Absent,
    /// Written but unreadable, or probably misspelt: already reported.
    Broken,
    Given(T),
}

impl<T> Field<T> {
    pub fn given(&self) -> Option<&T> {
        match self {
            Field::Given(value) => Some(value),
            Field::Absent | Field::Broken => None,
        }
    }

    pub fn into_given(self) -> Option<T> {
        match self {
            Field::Given(value) => Some(value),
            Field::Absent | Field::Broken => None,
        }
    }

    pub fn is_broken(&self) -> bool {
        matches!(self, Field::Broken)
    }

    /// Reads a given value with `read`; a value it rejects makes the field broken.
    fn and_then<U>(self, read: impl FnOnce(T) -> Option<U>) -> Field<U> {
        match self {
            Field::Given(value) => read(value).map_or(Field::Broken, Field::Given),
            Field::Absent => Field::Absent,
            Field::Broken => Field::Broken,
        }
    }
}

/// Keys of the top level, in the order `expected one of` lists them.
pub const RECIPE_KEYS: &[&str] = &["recipe", "description", "dims", "vars", "steps", "paths"];
/// Keys of a step.
pub const STEP_KEYS: &[&str] = &[
    "plugin",
    "description",
    "over",
    "inputs",
    "args",
    "memory",
    "retries",
    "timeout",
    "on_missing",
    "cache",
    "resume",
];
const SELECT_KEYS: &[&str] = &["step", "select"];
const PATHS_KEYS: &[&str] = &["allow_outside"];

/// The top level of a recipe.
#[derive(Debug)]
pub struct RawRecipe<'t> {
    /// Where the top-level mapping starts.
    pub loc: Loc,
    pub recipe: Field<Located<String>>,
    pub description: Field<String>,
    pub dims: Field<Vec<RawDimEntry<'t>>>,
    pub vars: Field<Vec<(Located<String>, &'t Item)>>,
    pub steps: Field<Located<Vec<RawStep<'t>>>>,
    pub allow_outside: Field<Located<bool>>,
    /// Sections named after a plugin (`python: {interpreter: ...}`): settings for every step of
    /// it, by key.
    pub sections: Vec<RawSection<'t>>,
}

/// A plugin's section as written: the plugin's name and the section's entries.
pub type RawSection<'t> = (&'static str, Vec<(Located<String>, &'t Item)>);

/// One step as written.
#[derive(Debug)]
pub struct RawStep<'t> {
    pub name: Located<String>,
    /// True when reading it found a problem (already reported).
    pub flawed: bool,
    pub plugin: Field<Located<String>>,
    pub description: Field<String>,
    pub over: Field<Located<Vec<Located<String>>>>,
    pub inputs: Field<Vec<RawInput<'t>>>,
    pub args: Field<Vec<(Located<String>, &'t Item)>>,
    pub memory: Field<&'t Item>,
    pub retries: Field<&'t Item>,
    pub timeout: Field<&'t Item>,
    pub on_missing: Field<&'t Item>,
    pub cache: Field<&'t Item>,
    pub resume: Field<&'t Item>,
}

/// One input of a step: its name, its producer, and the producer dims it pins.
#[derive(Debug)]
pub struct RawInput<'t> {
    pub name: Located<String>,
    pub step: Located<String>,
    pub select: Vec<(Located<String>, &'t Item)>,
}

/// Reads a recipe's tree, adding every problem to `diagnostics`.
pub struct Reader<'d> {
    diagnostics: &'d mut Vec<Diagnostic>,
}

/// The entries of a mapping with a fixed set of keys, each known key at most once.
pub(super) struct Keys<'t> {
    found: Vec<(&'static str, &'t Item)>,
    /// Known keys that an unknown key was probably meant to be.
    misspelt: Vec<&'static str>,
}

impl<'t> Keys<'t> {
    pub(super) fn get(&self, name: &str) -> Field<&'t Item> {
        match self.found.iter().find(|(key, _)| *key == name) {
            Some((_, item)) => Field::Given(*item),
            None if self.misspelt.contains(&name) => Field::Broken,
            None => Field::Absent,
        }
    }
}

impl<'d> Reader<'d> {
    pub fn new(diagnostics: &'d mut Vec<Diagnostic>) -> Reader<'d> {
        Reader { diagnostics }
    }

    pub(super) fn report(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    /// Reads the whole recipe; `None` when its top level is not a mapping. `sections`: the
    /// plugins' names, each a top-level key the recipe may have for that plugin's settings.
    pub fn recipe<'t>(&mut self, root: &'t Item, sections: &[&'static str]) -> Option<RawRecipe<'t>> {
        if !matches!(root.node, Node::Map(_)) {
            self.report(
                Diagnostic::new(root.loc, format!("the recipe is {}", root.node.kind()))
                    .expected("a mapping with at least `recipe:` and `steps:`"),
            );
            return None;
        }
        let known: Vec<&'static str> = RECIPE_KEYS.iter().chain(sections).copied().collect();
        let keys = self.keys(root, "at the top level of the recipe", &known)?;
        let sections = sections
            .iter()
            .filter_map(|&name| match keys.get(name) {
                Field::Given(item) => Some((name, self.entries(item, &format!("`{name}`"), "setting")?)),
                Field::Absent | Field::Broken => None,
            })
            .collect();
        Some(RawRecipe {
            loc: root.loc,
            recipe: keys.get("recipe").and_then(|i| self.name(i, "`recipe`")),
            description: keys.get("description").and_then(|i| self.text(i, "`description`")),
            dims: keys.get("dims").and_then(|i| self.dims(i)),
            vars: keys.get("vars").and_then(|i| self.entries(i, "`vars`", "var")),
            steps: keys.get("steps").and_then(|i| self.steps(i)),
            allow_outside: match keys.get("paths") {
                Field::Given(paths) => self.paths(paths).unwrap_or(Field::Broken),
                Field::Absent => Field::Absent,
                Field::Broken => Field::Broken,
            },
            sections,
        })
    }

    /// `paths: {allow_outside: BOOL}`.
    fn paths(&mut self, item: &Item) -> Option<Field<Located<bool>>> {
        let keys = self.keys(item, "in `paths`", PATHS_KEYS)?;
        Some(keys.get("allow_outside").and_then(|i| self.boolean(i, "`allow_outside` of `paths`")))
    }

    fn steps<'t>(&mut self, item: &'t Item) -> Option<Located<Vec<RawStep<'t>>>> {
        let entries = self.entries(item, "`steps`", "step")?;
        let steps = entries.into_iter().map(|(name, value)| self.step(name, value)).collect();
        Some(Located { loc: item.loc, value: steps })
    }

    /// A step; one that is not a mapping is kept with every key broken, so that its name is
    /// still known to the steps that read it.
    fn step<'t>(&mut self, name: Located<String>, item: &'t Item) -> RawStep<'t> {
        let before = self.diagnostics.len();
        let step = name.value.clone();
        let Some(keys) = self.keys(item, &format!("in step `{step}`"), STEP_KEYS) else {
            return RawStep {
                name,
                flawed: true,
                plugin: Field::Broken,
                description: Field::Broken,
                over: Field::Broken,
                inputs: Field::Broken,
                args: Field::Broken,
                memory: Field::Broken,
                retries: Field::Broken,
                timeout: Field::Broken,
                on_missing: Field::Broken,
                cache: Field::Broken,
                resume: Field::Broken,
            };
        };
        let of = |key: &str| format!("`{key}` of step `{step}`");
        let raw = RawStep {
            flawed: false,
            plugin: keys.get("plugin").and_then(|i| self.name(i, of("plugin"))),
            description: keys.get("description").and_then(|i| self.text(i, of("description"))),
            over: keys.get("over").and_then(|i| self.over(i, &step)),
            inputs: keys.get("inputs").and_then(|i| self.inputs(i, &step)),
            args: keys.get("args").and_then(|i| self.entries(i, &of("args"), "arg")),
            memory: keys.get("memory"),
            retries: keys.get("retries"),
            timeout: keys.get("timeout"),
            on_missing: keys.get("on_missing"),
            cache: keys.get("cache"),
            resume: keys.get("resume"),
            name,
        };
        RawStep { flawed: self.diagnostics.len() > before, ..raw }
    }

    fn over(&mut self, item: &Item, step: &str) -> Option<Located<Vec<Located<String>>>> {
        let Node::Seq(names) = &item.node else {
            if matches!(item.node, Node::Null) {
                return Some(Located { loc: item.loc, value: Vec::new() });
            }
            self.report(
                Diagnostic::new(item.loc, format!("`over` of step `{step}` is {}", item.node.kind()))
                    .expected("a list of dims, e.g. `[member, lead]`"),
            );
            return None;
        };
        let names: Option<Vec<_>> =
            names.iter().map(|n| self.name(n, format!("a dim in `over` of step `{step}`"))).collect();
        Some(Located { loc: item.loc, value: names? })
    }

    fn inputs<'t>(&mut self, item: &'t Item, step: &str) -> Option<Vec<RawInput<'t>>> {
        match &item.node {
            Node::Seq(steps) => {
                let mut inputs = Vec::with_capacity(steps.len());
                let mut ok = true;
                for producer in steps {
                    match self.name(producer, format!("an input of step `{step}`")) {
                        Some(producer) => {
                            inputs.push(RawInput { name: producer.clone(), step: producer, select: Vec::new() })
                        }
                        None => ok = false,
                    }
                }
                ok.then_some(inputs)
            }
            Node::Map(_) => {
                let entries = self.entries(item, &format!("`inputs` of step `{step}`"), "input")?;
                let mut inputs = Vec::with_capacity(entries.len());
                let mut ok = true;
                for (name, value) in entries {
                    match self.input(name, value, step) {
                        Some(input) => inputs.push(input),
                        None => ok = false,
                    }
                }
                ok.then_some(inputs)
            }
            Node::Null => Some(Vec::new()),
            other => {
                self.report(
                    Diagnostic::new(item.loc, format!("`inputs` of step `{step}` is {}", other.kind()))
                        .expected("inputs as a map (`{field: load}`) or a list of steps (`[load, mask]`)"),
                );
                None
            }
        }
    }

    fn input<'t>(&mut self, name: Located<String>, item: &'t Item, step: &str) -> Option<RawInput<'t>> {
        let what = format!("input `{}` of step `{step}`", name.value);
        if !matches!(item.node, Node::Map(_)) {
            let producer = self.name(item, &what)?;
            return Some(RawInput { name, step: producer, select: Vec::new() });
        }
        let keys = self.keys(item, &format!("in {what}"), SELECT_KEYS)?;
        let producer = match keys.get("step") {
            Field::Given(producer) => self.name(producer, format!("`step` of {what}"))?,
            Field::Broken => return None,
            Field::Absent => {
                self.report(
                    Diagnostic::new(item.loc, format!("{what} has no `step`"))
                        .expected("`{step: NAME, select: {DIM: VALUE}}`"),
                );
                return None;
            }
        };
        let select = match keys.get("select") {
            Field::Given(select) => self.entries(select, &format!("`select` of {what}"), "dim")?,
            Field::Broken => return None,
            Field::Absent => Vec::new(),
        };
        Some(RawInput { name, step: producer, select })
    }

    /// The entries of a mapping whose keys are names (steps, dims, vars, args): each name at
    /// most once. An empty value is an empty mapping.
    pub(super) fn entries<'t>(
        &mut self,
        item: &'t Item,
        what: &str,
        entry: &str,
    ) -> Option<Vec<(Located<String>, &'t Item)>> {
        let entries = match &item.node {
            Node::Map(entries) => entries,
            Node::Null => return Some(Vec::new()),
            other => {
                self.report(
                    Diagnostic::new(item.loc, format!("{what} is {}", other.kind()))
                        .expected(format!("a mapping of {entry} names to {entry}s (`name: value` entries)")),
                );
                return None;
            }
        };
        let mut seen: HashMap<&str, Loc> = HashMap::with_capacity(entries.len());
        let mut out = Vec::with_capacity(entries.len());
        let mut ok = true;
        for (key, value) in entries {
            let Some(name) = self.key(key) else {
                ok = false;
                continue;
            };
            if let Some(first) = seen.get(name) {
                self.report(duplicate(key.loc, name, *first));
                continue;
            }
            seen.insert(name, key.loc);
            out.push((Located { loc: key.loc, value: name.to_string() }, value));
        }
        ok.then_some(out)
    }

    /// The entries of a mapping whose keys must be among `known`; reports unknown and
    /// repeated keys. `None` when `item` is not a mapping.
    pub(super) fn keys<'t>(&mut self, item: &'t Item, context: &str, known: &[&'static str]) -> Option<Keys<'t>> {
        let entries = match &item.node {
            Node::Map(entries) => entries.as_slice(),
            Node::Null => &[],
            other => {
                self.report(
                    Diagnostic::new(item.loc, format!("{} is {}", context.trim_start_matches("in "), other.kind()))
                        .expected(format!("a mapping with keys among: {}", known.join(", "))),
                );
                return None;
            }
        };
        let mut keys = Keys { found: Vec::new(), misspelt: Vec::new() };
        let mut first: Vec<Option<Loc>> = vec![None; known.len()];
        for (key, value) in entries {
            let Some(name) = self.key(key) else { continue };
            match known.iter().position(|k| *k == name) {
                Some(at) => match first[at] {
                    Some(loc) => self.report(duplicate(key.loc, name, loc)),
                    None => {
                        first[at] = Some(key.loc);
                        keys.found.push((known[at], value));
                    }
                },
                None => {
                    keys.misspelt.extend(closest(name, known.iter().copied()));
                    self.report(
                        Diagnostic::new(key.loc, format!("unknown key `{name}` {context}"))
                            .expected(suggestion(name, known.iter().copied())),
                    );
                }
            }
        }
        // A misspelling of a key that is also written correctly meant something else.
        keys.misspelt.retain(|m| first[known.iter().position(|k| k == m).unwrap_or(0)].is_none());
        Some(keys)
    }

    /// A mapping key as a name: scalars in their text form.
    fn key<'t>(&mut self, key: &'t Item) -> Option<&'t str> {
        match &key.node {
            Node::Str(s) => Some(s),
            other => {
                self.report(
                    Diagnostic::new(key.loc, format!("a key is {}", other.kind())).expected("a name as the key"),
                );
                None
            }
        }
    }

    /// A name (of a plugin, dim, step...): a string, or a number or boolean in its text form.
    pub(super) fn name(&mut self, item: &Item, what: impl Display) -> Option<Located<String>> {
        let text = match &item.node {
            Node::Str(s) => s.to_string(),
            Node::Int(i) => i.to_string(),
            Node::UInt(u) => u.to_string(),
            Node::Bool(b) => b.to_string(),
            other => {
                self.report(Diagnostic::new(item.loc, format!("{what} is {}", other.kind())).expected("a name"));
                return None;
            }
        };
        Some(Located { loc: item.loc, value: text })
    }

    /// Free text (a description): any scalar.
    fn text(&mut self, item: &Item, what: impl Display) -> Option<String> {
        match &item.node {
            Node::Null => Some(String::new()),
            Node::Float(x) => Some(x.to_string()),
            Node::Seq(_) | Node::Map(_) => {
                self.report(Diagnostic::new(item.loc, format!("{what} is {}", item.node.kind())).expected("a string"));
                None
            }
            _ => self.name(item, what).map(|n| n.value),
        }
    }

    fn boolean(&mut self, item: &Item, what: impl Display) -> Option<Located<bool>> {
        match item.node {
            Node::Bool(b) => Some(Located { loc: item.loc, value: b }),
            _ => {
                self.report(
                    Diagnostic::new(item.loc, format!("{what} is {}", item.node.kind())).expected("`true` or `false`"),
                );
                None
            }
        }
    }
}

fn duplicate(at: Loc, name: &str, first: Loc) -> Diagnostic {
    Diagnostic::new(at, format!("duplicate key `{name}` (first at line {}, column {})", first.line, first.column))
        .expected("each key at most once in a mapping")
}

/// An integer value, or what is wrong with it: "out of range" for integers beyond `i64`.
pub fn integer(item: &Item, what: impl Display) -> Result<i64, Diagnostic> {
    let wrong = |message: String, expected: String| Err(Diagnostic::new(item.loc, message).expected(expected));
    match &item.node {
        Node::Int(i) => Ok(*i),
        Node::UInt(u) => wrong(format!("{what} is {u}: out of range"), format!("at most {}", i64::MAX)),
        Node::Float(x) if x.fract() == 0.0 && x.abs() >= 9.2e18 => {
            wrong(format!("{what} is {x:e}: out of range"), format!("at most {}", i64::MAX))
        }
        Node::Str(s) if s.parse::<i128>().is_ok() => {
            wrong(format!("{what} is {s}: out of range"), format!("at most {}", i64::MAX))
        }
        other => wrong(format!("{what} is {}", other.kind()), "an integer".to_string()),
    }
}

/// A whole number within `min..=max`, with a message saying the bounds when it is not (and
/// "out of range" for one above them, however large).
pub fn bounded(item: &Item, what: impl Display, min: u64, max: u64) -> Result<u64, Diagnostic> {
    let range = format!("a whole number from {min} to {max}");
    let out_of_range = |shown: String| {
        Err(Diagnostic::new(item.loc, format!("{what} is {shown}: out of range")).expected(format!("at most {max}")))
    };
    let value = match &item.node {
        Node::Int(i) => i128::from(*i),
        Node::UInt(u) => i128::from(*u),
        Node::Float(x) if x.fract() == 0.0 && x.abs() >= 9.2e18 => return out_of_range(format!("{x:e}")),
        Node::Str(s) if s.parse::<i128>().is_ok() => return out_of_range(s.to_string()),
        other => return Err(Diagnostic::new(item.loc, format!("{what} is {}", other.kind())).expected(range)),
    };
    if value < i128::from(min) {
        return Err(Diagnostic::new(item.loc, format!("{what} is {value}")).expected(range));
    }
    if value > i128::from(max) {
        return out_of_range(value.to_string());
    }
    Ok(value as u64)
}

/// A value as JSON (vars and args), or the first thing in it that JSON cannot hold.
pub fn to_json(item: &Item) -> Result<Json, Diagnostic> {
    Ok(match &item.node {
        Node::Null => Json::Null,
        Node::Bool(b) => Json::Bool(*b),
        Node::Int(i) => Json::from(*i),
        Node::UInt(u) => Json::from(*u),
        Node::Float(x) => match serde_json::Number::from_f64(*x) {
            Some(n) => Json::Number(n),
            None => {
                return Err(Diagnostic::new(item.loc, format!("`{x}` is not a finite number"))
                    .expected("a finite number, or a string"));
            }
        },
        Node::Str(s) => Json::String(s.to_string()),
        Node::Seq(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Node::Map(entries) => {
            let mut map = Map::with_capacity(entries.len());
            let mut seen: HashMap<&str, Loc> = HashMap::with_capacity(entries.len());
            for (key, value) in entries {
                let name: std::borrow::Cow<'_, str> = match &key.node {
                    Node::Str(s) => (&**s).into(),
                    Node::Int(i) => i.to_string().into(),
                    Node::UInt(u) => u.to_string().into(),
                    Node::Bool(b) => b.to_string().into(),
                    other => {
                        return Err(Diagnostic::new(key.loc, format!("a key is {}", other.kind()))
                            .expected("a name as the key"));
                    }
                };
                if let Node::Str(s) = &key.node {
                    if let Some(first) = seen.get(&**s) {
                        return Err(duplicate(key.loc, s, *first));
                    }
                    seen.insert(s, key.loc);
                }
                map.insert(name.into_owned(), to_json(value)?);
            }
            Json::Object(map)
        }
    })
}
