//! The recipe front end: reads a YAML recipe, checks every name, dim, template and argument, and
//! produces a validated [`Recipe`]. Every problem becomes a [`Diagnostic`] with its line and
//! column; nothing here panics on bad input.

mod diagnostic;
pub mod dims;
mod raw;
pub mod template;

use std::path::Path;
use std::sync::Arc;

use runner_plugin::size::parse_size;
use runner_plugin::{Args, DimValue, Plugin};
use serde_json::{Map, Value as Json};
use serde_saphyr::Spanned;

pub use diagnostic::{Diagnostic, Loc, RecipeError, Source};
pub use dims::{Dim, DimId, DimValues};
use raw::{DimNames, OrderedMap, RawDim, RawInput, RawInputs, RawRecipe, RawStep, Scalar};
use template::{Filled, Template, TemplateValue};

use crate::registry::Registry;

/// Position of a step in the recipe's `steps`.
pub type StepId = usize;

/// What the command line adds to a recipe.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// The cycle id (`--cycle`), available to templates as `{cycle}`.
    pub cycle: String,
    /// `--set KEY=VALUE` overrides of `vars`.
    pub set: Vec<(String, String)>,
}

/// A validated recipe.
#[derive(Debug)]
pub struct Recipe {
    pub name: String,
    pub description: Option<String>,
    pub source: Arc<Source>,
    pub cycle: String,
    pub dims: Vec<Dim>,
    pub steps: Vec<Step>,
    pub paths: PathPolicy,
}

/// One validated step.
pub struct Step {
    pub name: String,
    pub loc: Loc,
    pub plugin: Arc<dyn Plugin>,
    pub over: Vec<DimId>,
    pub inputs: Vec<InputSpec>,
    pub args: StepArgs,
    /// Where each arg's value is written, to point at it in later errors.
    pub arg_locs: Vec<(String, Loc)>,
    pub memory_hint: Option<u64>,
    pub description: Option<String>,
    /// `retries:` more attempts after a failed one (SPEC, "Step keys for every plugin").
    pub retries: u32,
    /// `timeout:` how long one attempt may run.
    pub timeout: Option<std::time::Duration>,
    /// `on_missing:` what a missing input of a task means.
    pub on_missing: OnMissing,
    /// `cache:` keep this step's in-memory outputs so that `--resume` can reuse them.
    pub cache: bool,
}

/// What a task whose input is missing ([`runner_plugin::FailureKind::MissingInput`]) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnMissing {
    /// The task fails (and its dependants are skipped): the run fails.
    #[default]
    Error,
    /// The task and everything downstream of it are skipped; the run does not fail.
    Skip,
    /// The task is dropped from its consumers' gathers (a gather left empty is skipped).
    Ignore,
}

/// `paths:` of the recipe: where rendered output paths may point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathPolicy {
    /// Output paths may leave the working directory.
    pub allow_outside: bool,
}

impl Step {
    /// Location of arg `name`, or of the step when it has no such arg.
    pub fn arg_loc(&self, name: Option<&str>) -> Loc {
        name.and_then(|n| self.arg_locs.iter().find(|(k, _)| k == n)).map_or(self.loc, |(_, l)| *l)
    }
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("name", &self.name)
            .field("plugin", &self.plugin.name())
            .field("over", &self.over)
            .field("inputs", &self.inputs)
            .finish_non_exhaustive()
    }
}

/// One named input of a step.
#[derive(Debug, Clone)]
pub struct InputSpec {
    pub name: String,
    pub producer: StepId,
    /// Producer dims pinned to one value position.
    pub select: Vec<(DimId, u64, Loc)>,
    pub loc: Loc,
}

/// A step's arguments: fixed for every task, or with templates over the step's dims that are
/// filled in per task.
#[derive(Debug, Clone)]
pub enum StepArgs {
    Fixed(Args),
    PerTask { fixed: Map<String, Json>, templated: Vec<(String, ArgTemplate)> },
}

/// A JSON argument value in which some strings still refer to dims.
#[derive(Debug, Clone)]
pub enum ArgTemplate {
    Json(Json),
    Text(Template),
    List(Vec<ArgTemplate>),
    Object(Vec<(String, ArgTemplate)>),
}

impl ArgTemplate {
    fn render(&self, lookup: &dyn Fn(&str) -> Option<DimValue>) -> Json {
        match self {
            ArgTemplate::Json(json) => json.clone(),
            ArgTemplate::Text(template) => {
                let values: Vec<(String, DimValue)> =
                    template.names().filter_map(|(n, _)| lookup(n).map(|v| (n.to_string(), v))).collect();
                let find = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| TemplateValue::Dim(v));
                match template.fill(&find) {
                    Ok(Filled::Value(json)) => json,
                    // Names and formats were checked against every dim's kind at compile time.
                    Ok(Filled::Partial(_)) | Err(_) => Json::Null,
                }
            }
            ArgTemplate::List(items) => Json::Array(items.iter().map(|i| i.render(lookup)).collect()),
            ArgTemplate::Object(entries) => {
                Json::Object(entries.iter().map(|(k, v)| (k.clone(), v.render(lookup))).collect())
            }
        }
    }
}

impl StepArgs {
    /// The args of the task whose dim values `lookup` gives; borrowed when they are the same
    /// for every task, so such steps pay nothing per task.
    pub fn for_task(&self, lookup: &dyn Fn(&str) -> Option<DimValue>) -> std::borrow::Cow<'_, Args> {
        match self {
            StepArgs::Fixed(args) => std::borrow::Cow::Borrowed(args),
            StepArgs::PerTask { fixed, templated } => {
                let mut map = fixed.clone();
                for (name, template) in templated {
                    map.insert(name.clone(), template.render(lookup));
                }
                std::borrow::Cow::Owned(Args::new(map))
            }
        }
    }

    pub fn is_per_task(&self) -> bool {
        matches!(self, StepArgs::PerTask { .. })
    }
}

impl Recipe {
    pub fn dim_id(&self, name: &str) -> Option<DimId> {
        self.dims.iter().position(|d| d.name == name)
    }

    pub fn step_id(&self, name: &str) -> Option<StepId> {
        self.steps.iter().position(|s| s.name == name)
    }
}

/// Reads and validates the recipe at `path`.
pub fn load(path: &Path, options: &CompileOptions, registry: &Registry) -> Result<Recipe, RecipeError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RecipeError::whole_file(path, format!("cannot read the recipe: {e}")))?;
    parse(path, text, options, registry)
}

/// Validates recipe `text` as if read from `path`.
pub fn parse(path: &Path, text: String, options: &CompileOptions, registry: &Registry) -> Result<Recipe, RecipeError> {
    let source = Arc::new(Source { path: path.to_path_buf(), text });
    let fail = |diagnostics: Vec<Diagnostic>| RecipeError::new(source.clone(), diagnostics);
    if source.text.trim().is_empty() {
        return Err(fail(vec![
            Diagnostic::new(Loc::default(), "the recipe file is empty")
                .expected("a mapping with at least `recipe:` and `steps:`"),
        ]));
    }
    let raw: Spanned<RawRecipe> =
        serde_saphyr::from_str(&source.text).map_err(|e| fail(vec![yaml_diagnostic(&e, &source.text)]))?;
    let mut compiler = Compiler {
        registry,
        options,
        diagnostics: Vec::new(),
        dims: Vec::new(),
        rejected_dims: Vec::new(),
        vars: Vec::new(),
    };
    let recipe = compiler.compile(raw, source.clone());
    match (recipe, compiler.diagnostics.is_empty()) {
        (Some(recipe), true) => Ok(recipe),
        _ => Err(fail(compiler.diagnostics)),
    }
}

/// Turns a YAML or shape error into a diagnostic without the parser's own rendering: the place
/// goes to the location, ", expected ..." to the expectation, and wording meant for the
/// parser's developers is replaced by wording for recipe authors.
fn yaml_diagnostic(error: &serde_saphyr::Error, text: &str) -> Diagnostic {
    let error = error.without_snippet();
    let loc = error.location().map(Loc::from).unwrap_or_default();
    let rendered = error.to_string();
    let first_line = rendered.lines().next().unwrap_or_default();
    // The parser prefixes "error: line L column C: " or appends " at line L, column C"; our
    // renderer prints the place itself.
    let mut message = first_line
        .strip_prefix("error: ")
        .unwrap_or(first_line)
        .split_once(": ")
        .filter(|(head, _)| head.starts_with("line "))
        .map_or(first_line, |(_, rest)| rest);
    if let Some(at) = message.rfind(" at line ")
        && message[at..].contains(", column ")
    {
        message = &message[..at];
    }
    let message = message.trim();
    let (message, expected) = match message.split_once(", expected ").or_else(|| message.split_once("; expected ")) {
        Some((message, expected)) => (message, Some(expected.to_string())),
        None => (message, None),
    };
    let (message, expected) = if let Some(key) = message.strip_prefix("duplicate mapping key: ") {
        let key = key.split_once(", set ").map_or(key, |(key, _)| key);
        (format!("duplicate key `{key}`"), Some("each key at most once in a mapping".to_string()))
    } else if let Some(field) = message.strip_prefix("missing field ") {
        (format!("missing key {field}"), Some(format!("{}: ...` in this mapping", field.trim_end_matches('`'))))
    } else if let Some(field) = message.strip_prefix("unknown field ") {
        // serde lists the fields as "one of a, b, c", "`a` or `b`" or "`a`".
        let fields: Vec<String> = expected
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches("one of ")
            .split(", ")
            .flat_map(|f| f.split(" or "))
            .map(|f| f.trim().trim_matches('`').to_string())
            .filter(|f| !f.is_empty())
            .collect();
        let name = field.trim_matches('`');
        (format!("unknown key {field}"), Some(suggestion(name, fields.iter().map(String::as_str))))
    } else if message.starts_with("cannot deserialize null into string") {
        ("empty value".to_string(), Some("a string".to_string()))
    } else if message.starts_with("multiple YAML documents") {
        (
            "more than one YAML document in the file".to_string(),
            Some("one recipe per file (no `---` separator)".to_string()),
        )
    } else if let (Some(what), None) = (message.strip_prefix("expected "), &expected) {
        let wanted = match what {
            "mapping start" => "a mapping (`key: value` entries)",
            "sequence start" => "a list (`[a, b]` or `- a` lines)",
            "string scalar" => "a string",
            other => other,
        };
        ("wrong type of value".to_string(), Some(wanted.to_string()))
    } else if message == "unclosed quote" {
        (message.to_string(), Some("a closing quote for the string that starts here".to_string()))
    } else if message.starts_with("tabs disallowed") {
        (message.to_string(), Some("spaces for indentation (YAML does not allow tabs)".to_string()))
    } else if message.starts_with("mapping values are not allowed") && expected.is_none() {
        let hint = "a `key: value` entry only where a mapping may start: check this line's indentation \
                    against the lines above, and quote values that contain `: `";
        (message.to_string(), Some(hint.to_string()))
    } else {
        (message.to_string(), expected)
    };
    // A syntax error inside a `[...]` or `{...}` that was never closed is usually that.
    let syntax = matches!(error, serde_saphyr::Error::ExternalMessage { .. });
    let expected = match (syntax, unclosed_flow(text, loc)) {
        (true, Some((open, at))) if !message.starts_with("unclosed") => {
            let close = if open == '[' { ']' } else { '}' };
            let closing = format!("a closing `{close}` for the `{open}` at line {}, column {}", at.line, at.column);
            Some(expected.map_or(closing.clone(), |e| format!("{e}, or {closing}")))
        }
        _ => expected,
    };
    let diagnostic =
        if message.is_empty() { Diagnostic::new(loc, "invalid YAML") } else { Diagnostic::new(loc, message) };
    match expected {
        Some(expected) => diagnostic.expected(expected),
        None => diagnostic,
    }
}

/// The innermost flow collection (`[` or `{`) still open at `until`, if any. A heuristic: it
/// skips quoted strings and comments, and counts a bracket only where a value may start.
fn unclosed_flow(text: &str, until: Loc) -> Option<(char, Loc)> {
    let mut open: Vec<(char, Loc)> = Vec::new();
    for (l, line) in text.lines().enumerate() {
        let line_no = l as u32 + 1;
        if line_no > until.line {
            break;
        }
        let mut quote: Option<char> = None;
        let mut previous: Option<char> = None;
        let mut chars = line.chars().enumerate().peekable();
        while let Some((c, ch)) = chars.next() {
            let column = c as u32 + 1;
            if line_no == until.line && column >= until.column {
                break;
            }
            match (quote, ch) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), ch) if ch == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(ch),
                (None, '#') if previous.is_none_or(char::is_whitespace) => break,
                (None, '[' | '{') if !open.is_empty() || matches!(previous, None | Some(':' | '-' | ',')) => {
                    open.push((ch, Loc { line: line_no, column }));
                }
                (None, ']' | '}') if !open.is_empty() => {
                    open.pop();
                }
                _ => {}
            }
            if !ch.is_whitespace() {
                previous = Some(ch);
            }
        }
    }
    open.pop()
}

/// A diagnostic from text that may end in "; expected ..." or ": expected ...".
fn with_expectation(loc: impl Into<Loc>, text: String) -> Diagnostic {
    match text.split_once("; expected ").or_else(|| text.split_once(": expected ")) {
        Some((message, expected)) => Diagnostic::new(loc, message).expected(expected),
        None => Diagnostic::new(loc, text),
    }
}

/// "did you mean" for a misspelt name.
fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let list = if candidates.is_empty() { "(none)".to_string() } else { candidates.join(", ") };
    match closest(name, candidates) {
        Some(c) => format!("one of: {list} (did you mean `{c}`?)"),
        None => format!("one of: {list}"),
    }
}

/// The candidate `name` is most likely a misspelling of.
fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(distance, c)| *distance <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

struct Compiler<'a> {
    registry: &'a Registry,
    options: &'a CompileOptions,
    diagnostics: Vec<Diagnostic>,
    dims: Vec<Dim>,
    /// Dims the recipe defines but that were rejected (already reported): uses of them are not
    /// reported again as unknown.
    rejected_dims: Vec<String>,
    vars: Vec<(String, Json)>,
}

impl Compiler<'_> {
    fn error(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    fn compile(&mut self, raw: Spanned<RawRecipe>, source: Arc<Source>) -> Option<Recipe> {
        let top: Loc = raw.referenced.into();
        let raw = raw.value;
        let name = match &raw.recipe {
            Some(recipe) => recipe.value.trim().to_string(),
            None => {
                self.error(
                    Diagnostic::new(top, "the recipe has no `recipe:` name")
                        .expected("a `recipe: NAME` entry, e.g. `recipe: precip-probability` (history is keyed by it)"),
                );
                "?".to_string()
            }
        };
        if let Some(recipe) = raw.recipe.as_ref().filter(|_| name.is_empty()) {
            self.error(
                Diagnostic::new(recipe.referenced, "the recipe name is empty")
                    .expected("a name such as `precip-probability`"),
            );
        }
        if let Some(vars) = raw.vars {
            self.vars = vars.value.0.into_iter().map(|(k, v)| (k.value, v.value)).collect();
        }
        self.apply_overrides();
        if let Some(dims) = raw.dims {
            self.compile_dims(dims.value);
        }
        let Some(raw_steps) = raw.steps else {
            self.error(
                Diagnostic::new(top, "the recipe has no `steps:`")
                    .expected("a `steps:` mapping of step names to steps, each with at least `plugin:`"),
            );
            return None;
        };
        let step_names: Vec<String> = raw_steps.value.0.iter().map(|(k, _)| k.value.clone()).collect();
        if step_names.is_empty() {
            self.error(
                Diagnostic::new(raw_steps.referenced, "the recipe has no steps")
                    .expected("at least one step under `steps:`"),
            );
        }
        let mut steps = Vec::new();
        for (key, step) in raw_steps.value.0 {
            if let Some(step) = self.compile_step(key, step, &step_names) {
                steps.push(step);
            }
        }
        let dims = std::mem::take(&mut self.dims);
        Some(Recipe {
            name,
            description: raw.description,
            source,
            cycle: self.options.cycle.clone(),
            dims,
            steps,
            paths: PathPolicy::default(),
        })
    }

    fn apply_overrides(&mut self) {
        for (key, value) in &self.options.set {
            let parsed: Json = serde_saphyr::from_str(value).unwrap_or_else(|_| Json::String(value.clone()));
            let parsed = if parsed.is_null() { Json::String(value.clone()) } else { parsed };
            match self.vars.iter_mut().find(|(k, _)| k == key) {
                Some((_, slot)) => *slot = parsed,
                None => {
                    let names: Vec<&str> = self.vars.iter().map(|(k, _)| k.as_str()).collect();
                    let expected = suggestion(key, names);
                    self.diagnostics.push(
                        Diagnostic::new(Loc::default(), format!("--set {key}={value}: the recipe has no var `{key}`"))
                            .expected(format!("a var of the recipe's `vars:`, {expected}")),
                    );
                }
            }
        }
    }

    fn compile_dims(&mut self, raw: OrderedMap<Spanned<RawDim>>) {
        let names: Vec<String> = raw.0.iter().map(|(k, _)| k.value.clone()).collect();
        // (group dim, the dim it groups), resolved once every dim is compiled.
        let mut groups: Vec<(String, String)> = Vec::new();
        for (key, dim) in &raw.0 {
            let name = key.value.clone();
            if name == "cycle" || self.vars.iter().any(|(v, _)| *v == name) {
                self.error(
                    Diagnostic::new(key.referenced, format!("dim `{name}` has the name of a var or of `cycle`"))
                        .expected("dim names distinct from var names and from `cycle`"),
                );
            }
            let loc: Loc = dim.referenced.into();
            let values = match &dim.value {
                RawDim::Count(n) if *n >= 1 => DimValues::Range { start: 0, step: 1, len: *n as u64 },
                RawDim::Count(n) => {
                    self.error(
                        Diagnostic::new(loc, format!("dim `{name}` has a count of {n}"))
                            .expected("a count of at least 1"),
                    );
                    continue;
                }
                RawDim::List(values) => match self.list_dim(&name, loc, values) {
                    Some(values) => DimValues::List(values),
                    None => continue,
                },
                RawDim::Range(range) => {
                    let step = range.step.as_ref().map_or(1, |s| s.value);
                    let (start, stop) = (range.start.value, range.stop.value);
                    if step < 1 {
                        let at = range.step.as_ref().map_or(loc, |s| s.referenced.into());
                        self.error(
                            Diagnostic::new(at, format!("dim `{name}` has step {step}"))
                                .expected("a step of at least 1"),
                        );
                        continue;
                    }
                    if stop < start {
                        self.error(
                            Diagnostic::new(
                                range.stop.referenced,
                                format!("dim `{name}` stops ({stop}) before it starts ({start})"),
                            )
                            .expected("`stop` ≥ `start` (the range is inclusive)"),
                        );
                        continue;
                    }
                    let len = (i128::from(stop) - i128::from(start)) / i128::from(step) + 1;
                    let Ok(len) = u64::try_from(len) else {
                        self.error(
                            Diagnostic::new(loc, format!("dim `{name}` has {len} values"))
                                .expected(format!("at most {}", u64::MAX)),
                        );
                        continue;
                    };
                    DimValues::Range { start, step, len }
                }
                RawDim::Group(group) => {
                    let size = group.size.value;
                    if size < 1 {
                        self.error(
                            Diagnostic::new(group.size.referenced, format!("group dim `{name}` has size {size}"))
                                .expected("a size of at least 1"),
                        );
                        continue;
                    }
                    let Some(of) = names.iter().position(|n| *n == group.group.value) else {
                        let expected =
                            suggestion(&group.group.value, names.iter().map(String::as_str).filter(|n| *n != name));
                        self.error(
                            Diagnostic::new(
                                group.group.referenced,
                                format!("group dim `{name}` groups unknown dim `{}`", group.group.value),
                            )
                            .expected(format!("a dim, {expected}")),
                        );
                        continue;
                    };
                    if matches!(raw.0[of].1.value, RawDim::Group(_)) {
                        self.error(
                            Diagnostic::new(
                                group.group.referenced,
                                format!("group dim `{name}` groups `{}`, which is itself a group", group.group.value),
                            )
                            .expected("a group of a count, list or range dim"),
                        );
                        continue;
                    }
                    // The grouped dim's id and length are known once it is compiled; fixed up below.
                    groups.push((name.clone(), group.group.value.clone()));
                    DimValues::Group { of: 0, size: size as u64, len: 0 }
                }
            };
            self.dims.push(Dim { name, values });
        }
        self.resolve_groups(&groups);
        self.rejected_dims = names.into_iter().filter(|n| !self.dims.iter().any(|d| d.name == *n)).collect();
    }

    fn list_dim(&mut self, name: &str, loc: Loc, values: &[Spanned<Scalar>]) -> Option<Vec<DimValue>> {
        if values.is_empty() {
            self.error(Diagnostic::new(loc, format!("dim `{name}` is an empty list")).expected("at least one value"));
            return None;
        }
        let mut out: Vec<DimValue> = Vec::with_capacity(values.len());
        for value in values {
            let v = match &value.value {
                Scalar::Int(i) => DimValue::Int(*i),
                Scalar::Str(s) => DimValue::Str(Arc::from(s.as_str())),
            };
            if out.contains(&v) {
                self.error(
                    Diagnostic::new(value.referenced, format!("dim `{name}` lists `{v}` twice"))
                        .expected("distinct values"),
                );
                return None;
            }
            out.push(v);
        }
        Some(out)
    }

    /// Fills in group ids and lengths once the dims they group are known (dims may be listed
    /// in any order, so ids are looked up by name). A group of a rejected dim is dropped: the
    /// dim's own error says what is wrong.
    fn resolve_groups(&mut self, groups: &[(String, String)]) {
        let base_of = |name: &str| groups.iter().find(|(g, _)| g == name).map(|(_, base)| base.as_str());
        let compiled: Vec<String> = self.dims.iter().map(|d| d.name.clone()).collect();
        self.dims.retain(|d| base_of(&d.name).is_none_or(|base| compiled.iter().any(|c| c == base)));
        let found: Vec<(String, DimId, u64)> =
            self.dims.iter().enumerate().map(|(id, d)| (d.name.clone(), id, d.len())).collect();
        for Dim { name, values } in &mut self.dims {
            if let DimValues::Group { of, size, len } = values
                && let Some((_, id, base_len)) = base_of(name).and_then(|base| found.iter().find(|(n, _, _)| n == base))
            {
                *of = *id;
                *len = base_len.div_ceil(*size);
            }
        }
    }

    fn compile_step(&mut self, key: Spanned<String>, raw: Spanned<RawStep>, step_names: &[String]) -> Option<Step> {
        let name = key.value;
        let loc: Loc = key.referenced.into();
        let raw_step = raw.value;
        let plugin = match &raw_step.plugin {
            Some(wanted) => match self.registry.get(&wanted.value) {
                Some(plugin) => Some(plugin.clone()),
                None => {
                    let expected = suggestion(&wanted.value, self.registry.names());
                    self.error(
                        Diagnostic::new(
                            wanted.referenced,
                            format!("unknown plugin `{}` in step `{name}`", wanted.value),
                        )
                        .expected(format!("a plugin, {expected}")),
                    );
                    None
                }
            },
            None => {
                let names = self.registry.names().join(", ");
                self.error(
                    Diagnostic::new(loc, format!("step `{name}` has no `plugin`"))
                        .expected(format!("`plugin: NAME` with one of: {names}")),
                );
                None
            }
        };
        let over = self.compile_over(&name, raw_step.over.as_ref());
        let inputs = self.compile_inputs(&name, raw_step.inputs, step_names);
        let memory_hint = raw_step.memory.and_then(|m| self.memory_hint(&name, m));
        let plugin = plugin?;
        let (args, arg_locs) = self.compile_args(&name, loc, &*plugin, raw_step.args, &over)?;
        Some(Step {
            name,
            loc,
            plugin,
            over,
            inputs,
            args,
            arg_locs,
            memory_hint,
            description: raw_step.description,
            retries: 0,
            timeout: None,
            on_missing: OnMissing::Error,
            cache: false,
        })
    }

    fn compile_over(&mut self, step: &str, over: Option<&Spanned<DimNames>>) -> Vec<DimId> {
        let mut ids = Vec::new();
        for dim in over.map(|o| o.value.0.as_slice()).unwrap_or_default() {
            match self.dims.iter().position(|d| d.name == dim.value) {
                Some(id) if ids.contains(&id) => {
                    self.error(
                        Diagnostic::new(
                            dim.referenced,
                            format!("step `{step}` lists dim `{}` twice in `over`", dim.value),
                        )
                        .expected("each dim once"),
                    );
                }
                Some(id) => ids.push(id),
                None if self.rejected_dims.contains(&dim.value) => {}
                None => {
                    let expected = suggestion(&dim.value, self.dims.iter().map(|d| d.name.as_str()));
                    self.error(
                        Diagnostic::new(
                            dim.referenced,
                            format!("unknown dim `{}` in `over` of step `{step}`", dim.value),
                        )
                        .expected(format!("a dim of the recipe, {expected}")),
                    );
                }
            }
        }
        for &id in &ids {
            if let Some((base, _)) = self.dims[id].group_of()
                && ids.contains(&base)
            {
                let at = over.map_or(Loc::default(), |o| o.referenced.into());
                let (group, base) = (self.dims[id].name.clone(), self.dims[base].name.clone());
                self.error(
                    Diagnostic::new(
                        at,
                        format!("step `{step}` runs over both `{group}` and `{base}`, which `{group}` groups"),
                    )
                    .expected(format!("either the group `{group}` or `{base}`, not both")),
                );
            }
        }
        if ids.len() > crate::graph::MAX_DIMS {
            let at = over.map_or(Loc::default(), |o| o.referenced.into());
            self.error(
                Diagnostic::new(at, format!("step `{step}` runs over {} dims", ids.len()))
                    .expected(format!("at most {}", crate::graph::MAX_DIMS)),
            );
        }
        let tasks = ids.iter().try_fold(1u64, |n, &d| n.checked_mul(self.dims[d].len()));
        if tasks.is_none_or(|n| n > crate::graph::MAX_TASKS) {
            let at = over.map_or(Loc::default(), |o| o.referenced.into());
            let product: f64 = ids.iter().map(|&d| self.dims[d].len() as f64).product();
            self.error(
                Diagnostic::new(at, format!("step `{step}` would run {product:.3e} tasks"))
                    .expected(format!("at most {} tasks per step (2^48)", crate::graph::MAX_TASKS)),
            );
        }
        ids
    }

    fn compile_inputs(
        &mut self,
        step: &str,
        inputs: Option<Spanned<RawInputs>>,
        step_names: &[String],
    ) -> Vec<InputSpec> {
        let Some(inputs) = inputs else { return Vec::new() };
        // (name, its place, producer, its place, select)
        type Entry = (String, Loc, String, Loc, Option<Spanned<OrderedMap<Spanned<Scalar>>>>);
        let entries: Vec<Entry> = match inputs.value {
            RawInputs::List(steps) => steps
                .into_iter()
                .map(|s| (s.value.clone(), s.referenced.into(), s.value, s.referenced.into(), None))
                .collect(),
            RawInputs::Map(map) => map
                .0
                .into_iter()
                .map(|(key, input)| {
                    let at: Loc = input.referenced.into();
                    match input.value {
                        RawInput::Step(producer) => (key.value, key.referenced.into(), producer, at, None),
                        RawInput::Select { step, select } => {
                            (key.value, key.referenced.into(), step.value, step.referenced.into(), select)
                        }
                    }
                })
                .collect(),
        };
        let mut specs: Vec<InputSpec> = Vec::new();
        for (name, name_loc, producer, producer_loc, select) in entries {
            if specs.iter().any(|s| s.name == name) {
                self.error(
                    Diagnostic::new(name_loc, format!("step `{step}` has two inputs named `{name}`"))
                        .expected("distinct input names (use the map form to rename)"),
                );
                continue;
            }
            let Some(producer_id) = step_names.iter().position(|s| *s == producer) else {
                let expected = suggestion(&producer, step_names.iter().map(String::as_str));
                self.error(
                    Diagnostic::new(
                        producer_loc,
                        format!("input `{name}` of step `{step}` names unknown step `{producer}`"),
                    )
                    .expected(format!("a step of the recipe, {expected}")),
                );
                continue;
            };
            let select = select.map(|s| self.compile_select(step, &name, s)).unwrap_or_default();
            specs.push(InputSpec { name, producer: producer_id, select, loc: producer_loc });
        }
        specs
    }

    fn compile_select(
        &mut self,
        step: &str,
        input: &str,
        select: Spanned<OrderedMap<Spanned<Scalar>>>,
    ) -> Vec<(DimId, u64, Loc)> {
        let mut pins = Vec::new();
        for (dim_name, value) in select.value.0 {
            let Some(dim_id) = self.dims.iter().position(|d| d.name == dim_name.value) else {
                if self.rejected_dims.contains(&dim_name.value) {
                    continue;
                }
                let expected = suggestion(&dim_name.value, self.dims.iter().map(|d| d.name.as_str()));
                self.error(
                    Diagnostic::new(
                        dim_name.referenced,
                        format!("`select` of input `{input}` of step `{step}` names unknown dim `{}`", dim_name.value),
                    )
                    .expected(format!("a dim, {expected}")),
                );
                continue;
            };
            let wanted = match &value.value {
                Scalar::Int(i) => DimValue::Int(*i),
                Scalar::Str(s) => DimValue::Str(Arc::from(s.as_str())),
            };
            match self.dims[dim_id].position(&wanted) {
                Some(position) => pins.push((dim_id, position, Loc::from(dim_name.referenced))),
                None => {
                    let dim = &self.dims[dim_id];
                    let sample: Vec<String> = (0..dim.len().min(8)).map(|i| dim.value(i).to_string()).collect();
                    let more = if dim.len() > 8 { ", ..." } else { "" };
                    self.error(
                        Diagnostic::new(
                            value.referenced,
                            format!("`select` pins dim `{}` to `{wanted}`, which is not one of its values", dim.name),
                        )
                        .expected(format!("one of: {}{more}", sample.join(", "))),
                    );
                }
            }
        }
        pins
    }

    fn memory_hint(&mut self, step: &str, memory: Spanned<Scalar>) -> Option<u64> {
        let parsed = match &memory.value {
            Scalar::Int(i) if *i >= 0 => Ok(*i as u64),
            Scalar::Int(i) => Err(format!(
                "invalid size `{i}`: a size cannot be negative; expected a number of bytes or a size such as `600MiB`"
            )),
            Scalar::Str(s) => parse_size(s),
        };
        parsed
            .map_err(|e| self.error(with_expectation(memory.referenced, format!("`memory` of step `{step}`: {e}"))))
            .ok()
    }

    fn compile_args(
        &mut self,
        step: &str,
        step_loc: Loc,
        plugin: &dyn Plugin,
        raw: Option<Spanned<OrderedMap<Spanned<Json>>>>,
        over: &[DimId],
    ) -> Option<(StepArgs, Vec<(String, Loc)>)> {
        let specs = plugin.args();
        let entries = raw.map(|r| r.value.0).unwrap_or_default();
        let mut ok = true;
        // A misspelt required arg is reported once, as unknown, with its correct name.
        let mut misspelt: Vec<&str> = Vec::new();
        for (key, _) in &entries {
            if !specs.iter().any(|s| s.name == key.value) {
                misspelt.extend(closest(&key.value, specs.iter().map(|s| s.name)));
                let expected = if specs.is_empty() {
                    format!("no args: plugin `{}` takes none", plugin.name())
                } else {
                    format!(
                        "an arg of plugin `{}`, {}",
                        plugin.name(),
                        suggestion(&key.value, specs.iter().map(|s| s.name))
                    )
                };
                self.error(
                    Diagnostic::new(key.referenced, format!("unknown arg `{}` in step `{step}`", key.value))
                        .expected(expected),
                );
                ok = false;
            }
        }
        for spec in specs.iter().filter(|s| s.is_required() && !misspelt.contains(&s.name)) {
            if !entries.iter().any(|(k, _)| k.value == spec.name) {
                self.error(
                    Diagnostic::new(
                        step_loc,
                        format!("step `{step}` lacks required arg `{}` of plugin `{}`", spec.name, plugin.name()),
                    )
                    .expected(format!("`{}`: {}", spec.name, spec.about)),
                );
                ok = false;
            }
        }
        let mut fixed = Map::new();
        let mut templated = Vec::new();
        let mut locations = Vec::new();
        for (key, value) in entries {
            locations.push((key.value.clone(), Loc::from(value.referenced)));
            match self.arg_template(step, &value.value, over) {
                Ok(ArgTemplate::Json(json)) => {
                    fixed.insert(key.value, json);
                }
                Ok(template) => templated.push((key.value, template)),
                Err(message) => {
                    self.error(with_expectation(
                        value.referenced,
                        format!("arg `{}` of step `{step}`: {message}", key.value),
                    ));
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let args = if templated.is_empty() {
            StepArgs::Fixed(Args::new(fixed))
        } else {
            StepArgs::PerTask { fixed, templated }
        };
        // Plugins check one representative task: every dim at its first value.
        let first = |name: &str| self.dims.iter().find(|d| d.name == name).map(|d| d.value(0));
        let sample = args.for_task(&first).into_owned();
        if let Err(e) = plugin.check(&sample) {
            let at = e
                .arg
                .as_ref()
                .and_then(|a| locations.iter().find(|(k, _)| k == a).map(|(_, l)| *l))
                .unwrap_or(step_loc);
            let what = if args.is_per_task() { " (checked with each dim at its first value)" } else { "" };
            self.error(Diagnostic::new(
                at,
                format!("plugin `{}` rejects the args of step `{step}`{what}: {}", plugin.name(), e.message),
            ));
            return None;
        }
        Some((args, locations))
    }

    /// Fills vars and `{cycle}` into every string of an arg; what still refers to dims of the
    /// step stays a template. Unknown names and formats that do not suit a dim are errors.
    fn arg_template(&self, step: &str, value: &Json, over: &[DimId]) -> Result<ArgTemplate, String> {
        match value {
            Json::String(text) => {
                let template = Template::parse(text)?;
                for (name, spec) in template.names() {
                    let is_var = name == "cycle" || self.vars.iter().any(|(v, _)| v == name);
                    if is_var {
                        continue;
                    }
                    match over.iter().find(|&&d| self.dims[d].name == name) {
                        Some(&d) if spec.needs_number() && !self.dims[d].is_integer() => {
                            return Err(format!(
                                "`{{{name}}}` has a numeric format but dim `{name}` has string values; expected `{{{name}}}` or a width alone, e.g. `{{{name}:8}}`"
                            ));
                        }
                        Some(_) => {}
                        // Already reported where the dim is defined.
                        None if self.rejected_dims.iter().any(|d| d == name) => {}
                        None if self.dims.iter().any(|d| d.name == name) => {
                            let runs_over: Vec<&str> = over.iter().map(|&d| self.dims[d].name.as_str()).collect();
                            return Err(format!(
                                "`{{{name}}}` refers to dim `{name}`, but step `{step}` does not run over it; expected a dim the step runs over ({}), a var or `cycle`",
                                if runs_over.is_empty() { "nothing".to_string() } else { runs_over.join(", ") }
                            ));
                        }
                        None => {
                            let candidates = self
                                .vars
                                .iter()
                                .map(|(v, _)| v.as_str())
                                .chain(over.iter().map(|&d| self.dims[d].name.as_str()))
                                .chain(["cycle"]);
                            return Err(format!(
                                "unknown name `{{{name}}}` in a template; expected a dim of the step, a var or `cycle`: {}",
                                suggestion(name, candidates)
                            ));
                        }
                    }
                }
                let lookup = |name: &str| -> Option<TemplateValue<'_>> {
                    if name == "cycle" {
                        return Some(TemplateValue::Text(&self.options.cycle));
                    }
                    self.vars.iter().find(|(v, _)| v == name).map(|(_, j)| TemplateValue::Json(j))
                };
                match template.fill(&lookup)? {
                    Filled::Value(json) => Ok(ArgTemplate::Json(json)),
                    Filled::Partial(rest) => Ok(ArgTemplate::Text(rest)),
                }
            }
            Json::Array(items) => {
                let items = items.iter().map(|i| self.arg_template(step, i, over)).collect::<Result<Vec<_>, _>>()?;
                if items.iter().all(|i| matches!(i, ArgTemplate::Json(_))) {
                    Ok(ArgTemplate::Json(Json::Array(
                        items
                            .into_iter()
                            .map(|i| match i {
                                ArgTemplate::Json(j) => j,
                                _ => Json::Null,
                            })
                            .collect(),
                    )))
                } else {
                    Ok(ArgTemplate::List(items))
                }
            }
            Json::Object(map) => {
                let entries = map
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.arg_template(step, v, over)?)))
                    .collect::<Result<Vec<_>, String>>()?;
                if entries.iter().all(|(_, v)| matches!(v, ArgTemplate::Json(_))) {
                    Ok(ArgTemplate::Json(Json::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| {
                                (
                                    k,
                                    match v {
                                        ArgTemplate::Json(j) => j,
                                        _ => Json::Null,
                                    },
                                )
                            })
                            .collect(),
                    )))
                } else {
                    Ok(ArgTemplate::Object(entries))
                }
            }
            other => Ok(ArgTemplate::Json(other.clone())),
        }
    }
}
