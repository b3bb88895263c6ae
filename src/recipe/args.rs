//! A step's arguments: the values fixed for every task and the templates over the step's dims
//! that are filled in per task, and how they are built from the recipe's `args:` — names
//! checked against the plugin's, templates against the step's dims and the vars, the size an
//! arg can expand to bounded before anything is expanded, and the plugin's own check.

use std::collections::{HashMap, HashSet};

use runner_plugin::size::format_size;
use runner_plugin::{ArgKind, Args, DimValue, Plugin};
use serde_json::{Map, Value as Json};

use super::compiler::Compiler;
use super::diagnostic::{Diagnostic, Loc};
use super::dims::DimId;
use super::limits::MAX_ARG_BYTES;
use super::plugin_check::check_args;
use super::raw::{Field, Located, to_json};
use super::suggest::{closest, suggestion};
use super::template::{Braces, Filled, Segment, Template, TemplateValue};
use super::template_format::json_len;
use super::yaml::Item;

/// A step's arguments: fixed for every task, or with templates over the step's dims that are
/// filled in per task.
#[derive(Debug, Clone, PartialEq)]
pub enum StepArgs {
    Fixed(Args),
    PerTask { fixed: Map<String, Json>, templated: Vec<(String, ArgTemplate)> },
}

/// A JSON argument value in which some strings still refer to dims.
#[derive(Debug, Clone, PartialEq)]
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
                // Only dims of the step are left (at most `MAX_DIMS`): a lookup of one clones a
                // number or a shared string, so each use looks its dim up again.
                let find = |name: &str| lookup(name).map(TemplateValue::Dim);
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

impl ArgTemplate {
    /// Adds the names this template's strings refer to (each once) to `names`.
    fn collect_names<'a>(&'a self, names: &mut Vec<&'a str>) {
        match self {
            ArgTemplate::Json(_) => {}
            ArgTemplate::Text(template) => {
                for name in template.names() {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
            ArgTemplate::List(items) => items.iter().for_each(|item| item.collect_names(names)),
            ArgTemplate::Object(entries) => entries.iter().for_each(|(_, value)| value.collect_names(names)),
        }
    }
}

impl StepArgs {
    /// The dims the per-task args are filled from, each once (none for fixed args).
    pub fn per_task_names(&self) -> Vec<&str> {
        let mut names = Vec::new();
        if let StepArgs::PerTask { templated, .. } = self {
            templated.iter().for_each(|(_, template)| template.collect_names(&mut names));
        }
        names
    }

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

/// What an arg expands to at most, and what each reference adds to it.
#[derive(Debug, Default)]
struct Expansion {
    bytes: usize,
    /// Per name: the most one use can add, and how many uses there are.
    uses: HashMap<String, (usize, usize)>,
}

impl Expansion {
    fn add_literal(&mut self, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes);
    }

    fn add_reference(&mut self, name: &str, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes);
        let (most, count) = self.uses.entry(name.to_string()).or_default();
        *most = (*most).max(bytes);
        *count += 1;
    }

    /// "(`{big}` can be 1.00 MiB and is used 3000 times)" for the reference that weighs most.
    fn heaviest(&self) -> String {
        match self.uses.iter().max_by_key(|(_, (bytes, count))| bytes.saturating_mul(*count)) {
            Some((name, (bytes, count))) if *count > 1 => {
                format!(" (`{{{name}}}` can be {} and is used {count} times)", format_size(*bytes as u64))
            }
            Some((name, (bytes, _))) => format!(" (`{{{name}}}` can be {})", format_size(*bytes as u64)),
            None => String::new(),
        }
    }
}

impl Compiler<'_> {
    /// Checks and builds the args of a step whose plugin is known. `over_known` is false when
    /// the step's `over` could not be read: references to dims are then not judged.
    pub(super) fn compile_args(
        &mut self,
        step: &str,
        step_loc: Loc,
        plugin: &dyn Plugin,
        raw: Field<Vec<(Located<String>, &Item)>>,
        over: &[DimId],
        over_known: bool,
    ) -> Option<(StepArgs, Vec<(String, Loc)>)> {
        let entries = match raw {
            Field::Given(entries) => entries,
            Field::Absent => Vec::new(),
            // Unreadable or misspelt `args:` (reported): nothing to check them against.
            Field::Broken => return None,
        };
        let specs = plugin.args();
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
                    Diagnostic::new(key.loc, format!("unknown arg `{}` in step `{step}`", key.value))
                        .expected(expected),
                );
                ok = false;
            }
        }
        let given: HashSet<&str> = entries.iter().map(|(k, _)| k.value.as_str()).collect();
        for spec in specs.iter().filter(|s| s.is_required() && !misspelt.contains(&s.name)) {
            if !given.contains(spec.name) {
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
        // Whether an arg refers to something already reported (a rejected dim or var, an `over`
        // that is not known): its sample value is then no value at all, which the plugin's check
        // must not be asked about.
        let tainted_before = std::mem::replace(&mut self.tainted, false);
        let mut fixed = Map::new();
        let mut templated = Vec::new();
        let mut locations = Vec::with_capacity(entries.len());
        let mut output_paths = Vec::new();
        for (key, item) in entries {
            locations.push((key.value.clone(), item.loc));
            if !specs.iter().any(|s| s.name == key.value) {
                continue;
            }
            let written = match to_json(item) {
                Ok(json) => json,
                Err(diagnostic) => {
                    let message = format!("arg `{}` of step `{step}`: {}", key.value, diagnostic.message);
                    self.error(Diagnostic { message, ..diagnostic });
                    ok = false;
                    continue;
                }
            };
            let spec = specs.iter().find(|s| s.name == key.value);
            let braces = if spec.is_some_and(|s| s.file_refs) { Braces::Doubled } else { Braces::Plain };
            match self.arg_template(step, &written, over, over_known, braces) {
                Ok(template) => {
                    if specs.iter().any(|s| s.name == key.value && s.kind == ArgKind::OutputPath) {
                        output_paths.push((key.value.clone(), item.loc, written));
                    }
                    match template {
                        ArgTemplate::Json(json) => {
                            fixed.insert(key.value, json);
                        }
                        template => templated.push((key.value, template)),
                    }
                }
                Err(message) => {
                    let message = format!("arg `{}` of step `{step}`: {message}", key.value);
                    self.error(Diagnostic::with_expectation(item.loc, message));
                    ok = false;
                }
            }
        }
        let unresolved = self.tainted;
        self.tainted |= tainted_before;
        if !ok {
            return None;
        }
        let given = |arg: &str| fixed.contains_key(arg) || templated.iter().any(|(name, _)| name == arg);
        let mut from_section = Map::new();
        self.fill_from_section(plugin.name(), given, &mut from_section, &mut locations, step_loc);
        fixed.extend(from_section);
        let args = if templated.is_empty() {
            StepArgs::Fixed(Args::new(fixed))
        } else {
            StepArgs::PerTask { fixed, templated }
        };
        let mut paths_ok = true;
        if over_known {
            for (arg, loc, written) in &output_paths {
                paths_ok &= self.check_output_path(step, arg, *loc, written, over);
            }
        }
        if unresolved {
            return None;
        }
        // Plugins check one representative task: every dim at its first value.
        let first = |name: &str| self.dim_ids.get(name).map(|&d| self.dims[d].value(0));
        let sample = args.for_task(&first).into_owned();
        let checked = check_args(plugin, &sample);
        let what = if args.is_per_task() { " (checked with each dim at its first value)" } else { "" };
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let at = e.arg.as_ref().and_then(|a| locations.iter().find(|(k, _)| k == a).map(|(_, l)| *l));
                self.error(Diagnostic::new(
                    at.unwrap_or(step_loc),
                    format!("plugin `{}` rejects the args of step `{step}`{what}: {}", plugin.name(), e.message),
                ));
                return None;
            }
            Err(panic) => {
                self.error(
                    Diagnostic::new(
                        step_loc,
                        format!("plugin `{}` panicked checking the args of step `{step}`{what}: {panic}", plugin.name()),
                    )
                    .expected("args the plugin accepts (its check should return an error, not panic: report it to the plugin's author)"),
                );
                return None;
            }
        }
        paths_ok.then_some((args, locations))
    }

    /// Fills vars and `{cycle}` into every string of an arg; what still refers to dims of the
    /// step stays a template. Unknown names, formats that do not suit a value, and args that
    /// could expand beyond [`MAX_ARG_BYTES`] are errors, found before anything is expanded.
    /// `braces` says how the arg's text braces reach the plugin.
    fn arg_template(
        &mut self,
        step: &str,
        value: &Json,
        over: &[DimId],
        over_known: bool,
        braces: Braces,
    ) -> Result<ArgTemplate, String> {
        let mut expansion = Expansion::default();
        self.check_templates(step, value, over, over_known, &mut expansion)?;
        if expansion.bytes > MAX_ARG_BYTES && expansion.uses.is_empty() {
            return Err(format!(
                "is {} long; expected at most {} per arg (large data belongs in a file)",
                format_size(expansion.bytes as u64),
                format_size(MAX_ARG_BYTES as u64)
            ));
        }
        if expansion.bytes > MAX_ARG_BYTES {
            return Err(format!(
                "would expand to up to {}{}; expected at most {} per arg once templates are filled in",
                format_size(expansion.bytes as u64),
                expansion.heaviest(),
                format_size(MAX_ARG_BYTES as u64)
            ));
        }
        self.fill_fixed(value, braces)
    }

    /// Checks the names and formats of every template in `value`, and adds what they can
    /// expand to to `expansion`.
    fn check_templates(
        &mut self,
        step: &str,
        value: &Json,
        over: &[DimId],
        over_known: bool,
        expansion: &mut Expansion,
    ) -> Result<(), String> {
        match value {
            Json::String(text) => {
                let template = self.parse_template(text)?;
                let lone = matches!(
                    template.segments.as_slice(),
                    [Segment::Ref { has_spec: false, .. } | Segment::Lookup { has_spec: false, .. }]
                );
                for segment in &template.segments {
                    let len = self.segment_len(step, segment, lone, over, over_known)?;
                    match segment {
                        Segment::Literal(_) | Segment::Rendered(_) | Segment::FileRef(_) => expansion.add_literal(len),
                        Segment::Ref { name, .. } => expansion.add_reference(name, len),
                        Segment::Lookup { lookup, .. } => {
                            expansion.add_reference(&format!("{}[{}]", lookup.table, lookup.key), len)
                        }
                        Segment::Time(expr) => expansion.add_reference(&expr.text, len),
                    }
                }
                Ok(())
            }
            Json::Array(items) => {
                items.iter().try_for_each(|i| self.check_templates(step, i, over, over_known, expansion))
            }
            Json::Object(map) => {
                for (key, item) in map {
                    expansion.add_literal(key.len());
                    self.check_templates(step, item, over, over_known, expansion)?;
                }
                Ok(())
            }
            other => {
                expansion.add_literal(json_len(other));
                Ok(())
            }
        }
    }

    /// Fills vars and the cycle into `value` (already checked); dims stay.
    fn fill_fixed(&mut self, value: &Json, braces: Braces) -> Result<ArgTemplate, String> {
        match value {
            Json::String(text) => match self.fixed_template(text, braces)? {
                Filled::Value(json) => Ok(ArgTemplate::Json(json)),
                Filled::Partial(rest) => Ok(ArgTemplate::Text(rest)),
            },
            Json::Array(items) => {
                let items = items.iter().map(|i| self.fill_fixed(i, braces)).collect::<Result<Vec<_>, _>>()?;
                if items.iter().all(|i| matches!(i, ArgTemplate::Json(_))) {
                    Ok(ArgTemplate::Json(Json::Array(items.into_iter().map(ArgTemplate::into_json).collect())))
                } else {
                    Ok(ArgTemplate::List(items))
                }
            }
            Json::Object(map) => {
                let entries =
                    map.iter()
                        .map(|(k, v)| Ok((k.clone(), self.fill_fixed(v, braces)?)))
                        .collect::<Result<Vec<_>, String>>()?;
                if entries.iter().all(|(_, v)| matches!(v, ArgTemplate::Json(_))) {
                    Ok(ArgTemplate::Json(Json::Object(entries.into_iter().map(|(k, v)| (k, v.into_json())).collect())))
                } else {
                    Ok(ArgTemplate::Object(entries))
                }
            }
            other => Ok(ArgTemplate::Json(other.clone())),
        }
    }
}

impl ArgTemplate {
    /// The JSON of a template without references left (others become `null`, never reached).
    fn into_json(self) -> Json {
        match self {
            ArgTemplate::Json(json) => json,
            _ => Json::Null,
        }
    }
}
