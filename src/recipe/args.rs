//! A step's arguments: the values fixed for every task and the templates over the step's dims
//! that are filled in per task, and how they are built from the recipe's `args:`.

use runner_plugin::{Args, DimValue, Plugin};
use serde_json::{Map, Value as Json};
use serde_saphyr::Spanned;

use super::compiler::Compiler;
use super::diagnostic::{Diagnostic, Loc};
use super::dims::DimId;
use super::raw::OrderedMap;
use super::suggest::{closest, suggestion};
use super::template::{Filled, Template, TemplateValue};

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

impl Compiler<'_> {
    pub(super) fn compile_args(
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
                    self.error(Diagnostic::with_expectation(
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
