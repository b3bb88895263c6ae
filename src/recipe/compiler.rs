//! The compiler: checks the recipe as written ([`super::raw`]) name by name — vars, dims,
//! steps, their `over`, inputs, hints and keys (the scalar ones in [`super::step_keys`]) — and
//! builds the validated steps.
//!
//! Every problem becomes a diagnostic and checking goes on. A check that depends on something
//! already reported as wrong (a dim that was rejected, a key that could not be read) is
//! skipped rather than reported again in other words, and the step it concerns is then not
//! *sound*: only sound steps go into the part of a rejected recipe that later checks may see.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use runner_plugin::DimValue;
use serde_json::Value as Json;

use super::diagnostic::Source;
use super::diagnostic::{Diagnostic, Loc};
use super::dims::{Dim, DimId};
use super::limits::{MAX_DIMS, MAX_TASKS};
use super::raw::{Field, Located, RawInput, RawRecipe, RawStep, to_json};
use super::suggest::suggestion;
use super::time::{INSTANT_FORMS, parse_instant};
use super::{CompileOptions, InputSpec, OnMissing, PathPolicy, Recipe, ResumeCheck, Step, StepId};
use crate::registry::Registry;

/// What the compiler made of a recipe: its parts, and each step (`None` when it could not be
/// built) with whether it is sound.
pub(super) struct Compiled {
    pub name: String,
    pub description: Option<String>,
    pub vars: Vec<(String, Json)>,
    pub dims: Vec<Dim>,
    pub steps: Vec<(Option<Step>, bool)>,
    pub paths: PathPolicy,
}

pub(super) struct Compiler<'a> {
    pub(super) registry: &'a Registry,
    pub(super) options: &'a CompileOptions,
    /// Where list files are looked for: the recipe file's directory.
    pub(super) base_dir: PathBuf,
    pub(super) diagnostics: Vec<Diagnostic>,
    pub(super) dims: Vec<Dim>,
    pub(super) dim_ids: HashMap<String, DimId>,
    /// Dims the recipe defines but that were rejected (already reported).
    pub(super) rejected_dims: HashSet<String>,
    /// `dims:` itself could not be read: no dim name can be called unknown.
    pub(super) dims_unreadable: bool,
    pub(super) vars: Vec<(String, Json)>,
    pub(super) var_ids: HashMap<String, usize>,
    /// Vars whose value was rejected (already reported).
    pub(super) rejected_vars: HashSet<String>,
    /// `vars:` itself could not be read: no template name can be called unknown.
    pub(super) vars_unreadable: bool,
    /// Set when a check of the current step was skipped because of a problem reported
    /// elsewhere: the step is then not sound.
    pub(super) tainted: bool,
    pub(super) paths: PathPolicy,
    /// Positions of the values of list dims that `select:` searches, built on first use.
    list_positions: HashMap<DimId, HashMap<DimValue, u64>>,
    /// Longest text of each dim's values, for the size bounds of templates.
    pub(super) value_lens: HashMap<DimId, usize>,
    /// Lookup tables by (var, dim), built on first use (`{radii[lead]}`).
    pub(super) lookup_tables: HashMap<(usize, DimId), Result<super::lookup::TableUse, String>>,
    /// Each plugin's section settings, the command line's laid over the recipe's.
    pub(super) sections: HashMap<&'static str, Vec<Setting>>,
}

/// One setting of a plugin's section ([`super::sections`]): the arg it sets, its value and where it was written (the step's
/// place for one from the command line).
#[derive(Debug, Clone)]
pub(super) struct Setting {
    pub arg: &'static str,
    pub value: Json,
    pub loc: Option<Loc>,
}

impl<'a> Compiler<'a> {
    pub(super) fn new(
        registry: &'a Registry,
        options: &'a CompileOptions,
        base_dir: PathBuf,
        diagnostics: Vec<Diagnostic>,
    ) -> Compiler<'a> {
        Compiler {
            registry,
            options,
            base_dir,
            diagnostics,
            dims: Vec::new(),
            dim_ids: HashMap::new(),
            rejected_dims: HashSet::new(),
            dims_unreadable: false,
            vars: Vec::new(),
            var_ids: HashMap::new(),
            rejected_vars: HashSet::new(),
            vars_unreadable: false,
            tainted: false,
            paths: PathPolicy::default(),
            list_positions: HashMap::new(),
            value_lens: HashMap::new(),
            lookup_tables: HashMap::new(),
            sections: HashMap::new(),
        }
    }
}

impl Compiler<'_> {
    pub(super) fn error(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    /// The dim called `name`, if it is one. A name the recipe defines but that was rejected, or
    /// any name when `dims:` was unreadable, is `Err(())`: reported already, the caller stays
    /// silent and the step is tainted.
    pub(super) fn dim(&mut self, name: &str) -> Result<Option<DimId>, ()> {
        match self.dim_ids.get(name) {
            Some(&id) => Ok(Some(id)),
            None if self.dims_unreadable || self.rejected_dims.contains(name) => {
                self.tainted = true;
                Err(())
            }
            None => Ok(None),
        }
    }

    pub(super) fn dim_names(&self) -> impl Iterator<Item = &str> {
        self.dims.iter().map(|d| d.name.as_str())
    }

    pub(super) fn compile(&mut self, raw: RawRecipe<'_>) -> Option<Compiled> {
        let name = match &raw.recipe {
            Field::Given(recipe) => {
                let name = recipe.value.trim().to_string();
                if name.is_empty() {
                    self.error(
                        Diagnostic::new(recipe.loc, "the recipe name is empty")
                            .expected("a name such as `precip-probability`"),
                    );
                } else if name.chars().all(|c| c == '.') {
                    // It names the folders of logs and kept values: `..` would climb out of them.
                    self.error(
                        Diagnostic::new(recipe.loc, format!("the recipe name `{name}` is only dots"))
                            .expected("a name with a letter or digit, such as `precip-probability`"),
                    );
                }
                name
            }
            Field::Broken => "?".to_string(),
            Field::Absent => {
                self.error(
                    Diagnostic::new(raw.loc, "the recipe has no `recipe:` name")
                        .expected("a `recipe: NAME` entry, e.g. `recipe: precip-probability` (history is keyed by it)"),
                );
                "?".to_string()
            }
        };
        self.paths.allow_outside = raw.allow_outside.given().is_some_and(|b| b.value);
        match raw.vars {
            Field::Given(vars) => self.compile_vars(vars),
            Field::Broken => self.vars_unreadable = true,
            Field::Absent => {}
        }
        self.apply_overrides();
        self.compile_sections(raw.sections);
        match raw.dims {
            Field::Given(dims) => self.compile_dims(dims),
            Field::Broken => self.dims_unreadable = true,
            Field::Absent => {}
        }
        let raw_steps = match raw.steps {
            Field::Given(steps) => steps,
            Field::Broken => return None,
            Field::Absent => {
                self.error(
                    Diagnostic::new(raw.loc, "the recipe has no `steps:`")
                        .expected("a `steps:` mapping of step names to steps, each with at least `plugin:`"),
                );
                return None;
            }
        };
        if raw_steps.value.is_empty() {
            self.error(
                Diagnostic::new(raw_steps.loc, "the recipe has no steps").expected("at least one step under `steps:`"),
            );
        }
        let names: Vec<String> = raw_steps.value.iter().map(|s| s.name.value.clone()).collect();
        let ids: HashMap<&str, StepId> = names.iter().enumerate().map(|(id, n)| (n.as_str(), id)).collect();
        let steps = raw_steps.value.into_iter().map(|step| self.compile_step(step, &ids, &names)).collect();
        Some(Compiled {
            name,
            description: raw.description.into_given(),
            vars: self.vars.clone(),
            dims: std::mem::take(&mut self.dims),
            steps,
            paths: self.paths,
        })
    }

    fn compile_vars(&mut self, vars: Vec<(Located<String>, &super::yaml::Item)>) {
        for (name, value) in vars {
            match to_json(value) {
                Ok(json) => {
                    self.var_ids.insert(name.value.clone(), self.vars.len());
                    self.vars.push((name.value, json));
                }
                Err(diagnostic) => {
                    self.error(Diagnostic {
                        message: format!("var `{}`: {}", name.value, diagnostic.message),
                        ..diagnostic
                    });
                    self.rejected_vars.insert(name.value);
                }
            }
        }
    }

    fn apply_overrides(&mut self) {
        for (key, value) in &self.options.set {
            let parsed: Json = serde_saphyr::from_str(value).unwrap_or_else(|_| Json::String(value.clone()));
            let parsed = if parsed.is_null() { Json::String(value.clone()) } else { parsed };
            match self.var_ids.get(key) {
                Some(&at) => self.vars[at].1 = parsed,
                None if self.vars_unreadable || self.rejected_vars.contains(key) => {}
                None => {
                    let expected = suggestion(key, self.vars.iter().map(|(k, _)| k.as_str()));
                    self.diagnostics.push(
                        Diagnostic::new(Loc::default(), format!("--set {key}={value}: the recipe has no var `{key}`"))
                            .expected(format!("a var of the recipe's `vars:`, {expected}")),
                    );
                }
            }
        }
    }

    fn compile_step(
        &mut self,
        raw: RawStep<'_>,
        ids: &HashMap<&str, StepId>,
        names: &[String],
    ) -> (Option<Step>, bool) {
        let before = self.diagnostics.len();
        self.tainted = raw.flawed;
        let name = raw.name.value;
        let loc = raw.name.loc;
        let plugin = match &raw.plugin {
            Field::Given(wanted) => match self.registry.get(&wanted.value) {
                Some(plugin) => Some(plugin.clone()),
                None => {
                    let expected = suggestion(&wanted.value, self.registry.names());
                    self.error(
                        Diagnostic::new(wanted.loc, format!("unknown plugin `{}` in step `{name}`", wanted.value))
                            .expected(format!("a plugin, {expected}")),
                    );
                    None
                }
            },
            Field::Broken => None,
            Field::Absent => {
                let names = self.registry.names().join(", ");
                self.error(
                    Diagnostic::new(loc, format!("step `{name}` has no `plugin`"))
                        .expected(format!("`plugin: NAME` with one of: {names}")),
                );
                None
            }
        };
        let (over, over_known) = match &raw.over {
            // An `over` with a dim that is not there is not known: what depends on it (the args'
            // dim references) is not checked against the dims that are left.
            Field::Given(over) => self.compile_over(&name, over),
            Field::Absent => (Vec::new(), true),
            Field::Broken => (Vec::new(), false),
        };
        let inputs = match raw.inputs {
            Field::Given(inputs) => self.compile_inputs(&name, inputs, ids, names),
            Field::Absent | Field::Broken => Vec::new(),
        };
        let memory_hint = raw.memory.given().and_then(|m| self.memory_hint(&name, m));
        let retries = raw.retries.given().map_or(Some(0), |r| self.retries(&name, r));
        let timeout = raw.timeout.given().map_or(Some(None), |t| self.timeout(&name, t).map(Some));
        let on_missing = raw.on_missing.given().map_or(Some(OnMissing::Error), |m| self.on_missing(&name, m));
        let cache = raw.cache.given().map_or(Some(false), |c| self.cache(&name, c));
        let resume = raw.resume.given().map_or(Some(ResumeCheck::Metadata), |r| self.resume(&name, r));
        let args =
            plugin.as_ref().and_then(|plugin| self.compile_args(&name, loc, &**plugin, raw.args, &over, over_known));
        let step = match (plugin, args, retries, timeout, on_missing, cache, resume) {
            (
                Some(plugin),
                Some((args, arg_locs)),
                Some(retries),
                Some(timeout),
                Some(on_missing),
                Some(cache),
                Some(resume),
            ) => Some(Step {
                name,
                loc,
                plugin,
                over,
                inputs,
                args,
                arg_locs,
                memory_hint,
                description: raw.description.into_given(),
                retries: retries as u32,
                timeout,
                on_missing,
                cache,
                resume,
            }),
            _ => None,
        };
        let sound = step.is_some() && self.diagnostics.len() == before && !self.tainted;
        (step, sound)
    }

    /// The dims of `over`, and whether every name there is a dim.
    fn compile_over(&mut self, step: &str, over: &Located<Vec<Located<String>>>) -> (Vec<DimId>, bool) {
        let mut ids = Vec::new();
        let mut seen = HashSet::new();
        let mut complete = true;
        for dim in &over.value {
            match self.dim(&dim.value) {
                Ok(Some(id)) if !seen.insert(id) => {
                    self.error(
                        Diagnostic::new(dim.loc, format!("step `{step}` lists dim `{}` twice in `over`", dim.value))
                            .expected("each dim once"),
                    );
                }
                Ok(Some(id)) => ids.push(id),
                Err(()) => complete = false,
                Ok(None) => {
                    complete = false;
                    let expected = suggestion(&dim.value, self.dim_names());
                    self.error(
                        Diagnostic::new(dim.loc, format!("unknown dim `{}` in `over` of step `{step}`", dim.value))
                            .expected(format!("a dim of the recipe, {expected}")),
                    );
                }
            }
        }
        for &id in &ids {
            if let Some((base, _)) = self.dims[id].group_of()
                && seen.contains(&base)
            {
                let (group, base) = (self.dims[id].name.clone(), self.dims[base].name.clone());
                self.error(
                    Diagnostic::new(
                        over.loc,
                        format!("step `{step}` runs over both `{group}` and `{base}`, which `{group}` groups"),
                    )
                    .expected(format!("either the group `{group}` or `{base}`, not both")),
                );
            }
        }
        if ids.len() > MAX_DIMS {
            self.error(
                Diagnostic::new(over.loc, format!("step `{step}` runs over {} dims", ids.len()))
                    .expected(format!("at most {MAX_DIMS}")),
            );
        }
        let tasks = ids.iter().try_fold(1u64, |n, &d| n.checked_mul(self.dims[d].len()));
        if tasks.is_none_or(|n| n > MAX_TASKS) {
            let product: f64 = ids.iter().map(|&d| self.dims[d].len() as f64).product();
            self.error(
                Diagnostic::new(over.loc, format!("step `{step}` would run {product:.3e} tasks"))
                    .expected(format!("at most {MAX_TASKS} tasks per step (2^48)")),
            );
        }
        (ids, complete)
    }

    fn compile_inputs(
        &mut self,
        step: &str,
        inputs: Vec<RawInput<'_>>,
        ids: &HashMap<&str, StepId>,
        names: &[String],
    ) -> Vec<InputSpec> {
        let mut specs: Vec<InputSpec> = Vec::with_capacity(inputs.len());
        let mut seen: HashSet<String> = HashSet::with_capacity(inputs.len());
        for input in inputs {
            let name = input.name.value;
            if !seen.insert(name.clone()) {
                self.error(
                    Diagnostic::new(input.name.loc, format!("step `{step}` has two inputs named `{name}`"))
                        .expected("distinct input names (use the map form to rename)"),
                );
                continue;
            }
            let Some(&producer) = ids.get(input.step.value.as_str()) else {
                let expected = suggestion(&input.step.value, names.iter().map(String::as_str));
                self.error(
                    Diagnostic::new(
                        input.step.loc,
                        format!("input `{name}` of step `{step}` names unknown step `{}`", input.step.value),
                    )
                    .expected(format!("a step of the recipe, {expected}")),
                );
                continue;
            };
            let select = self.compile_select(step, &name, input.select);
            specs.push(InputSpec { name, producer, select, loc: input.step.loc });
        }
        specs
    }

    fn compile_select(
        &mut self,
        step: &str,
        input: &str,
        select: Vec<(Located<String>, &super::yaml::Item)>,
    ) -> Vec<(DimId, u64, Loc)> {
        let mut pins = Vec::new();
        for (dim_name, value) in select {
            let dim_id = match self.dim(&dim_name.value) {
                Ok(Some(id)) => id,
                Err(()) => continue,
                Ok(None) => {
                    let expected = suggestion(&dim_name.value, self.dim_names());
                    self.error(
                        Diagnostic::new(
                            dim_name.loc,
                            format!(
                                "`select` of input `{input}` of step `{step}` names unknown dim `{}`",
                                dim_name.value
                            ),
                        )
                        .expected(format!("a dim, {expected}")),
                    );
                    continue;
                }
            };
            let Some(wanted) = self.select_value(dim_id, value) else { continue };
            match self.position(dim_id, &wanted) {
                Some(position) => pins.push((dim_id, position, dim_name.loc)),
                None => {
                    let dim = &self.dims[dim_id];
                    let sample: Vec<String> = (0..dim.len().min(8)).map(|i| dim.value(i).to_string()).collect();
                    let more = if dim.len() > 8 { ", ..." } else { "" };
                    self.error(
                        Diagnostic::new(
                            value.loc,
                            format!("`select` pins dim `{}` to `{wanted}`, which is not one of its values", dim.name),
                        )
                        .expected(format!("one of: {}{more}", sample.join(", "))),
                    );
                }
            }
        }
        pins
    }

    /// A `select:` value as a value of dim `dim_id` (dates of date dims parse).
    fn select_value(&mut self, dim_id: DimId, item: &super::yaml::Item) -> Option<DimValue> {
        use super::yaml::Node;
        let dim = &self.dims[dim_id];
        let value = match &item.node {
            Node::Int(i) => Some(DimValue::Int(*i)),
            Node::Str(s) if dim.is_time() => match parse_instant(s) {
                Some(instant) if dim.kind() == "date" => Some(DimValue::Date(instant.seconds)),
                Some(instant) => Some(DimValue::Time(instant.seconds)),
                None => {
                    let message = format!("`select` pins date dim `{}` to \"{s}\", which is not a date", dim.name);
                    self.error(Diagnostic::new(item.loc, message).expected(INSTANT_FORMS));
                    return None;
                }
            },
            Node::Str(s) => Some(DimValue::Str(Arc::from(&**s))),
            Node::Bool(b) => Some(DimValue::Str(Arc::from(b.to_string()))),
            _ => None,
        };
        if value.is_none() {
            let message = format!("`select` pins dim `{}` to {}", dim.name, item.node.kind());
            self.error(Diagnostic::new(item.loc, message).expected(format!("one of the dim's {} values", dim.kind())));
        }
        value
    }

    /// Position of `value` in dim `dim_id`; a list dim is indexed on first use, so that many
    /// `select:`s into a long list stay linear.
    fn position(&mut self, dim_id: DimId, value: &DimValue) -> Option<u64> {
        let dim = &self.dims[dim_id];
        let super::dims::DimValues::List(values) = &dim.values else { return dim.position(value) };
        let index = self
            .list_positions
            .entry(dim_id)
            .or_insert_with(|| values.iter().enumerate().map(|(i, v)| (v.clone(), i as u64)).collect());
        index.get(value).copied()
    }
}

impl Compiled {
    fn recipe(self, source: Arc<Source>, options: &CompileOptions, steps: Vec<Step>) -> Recipe {
        Recipe {
            name: self.name,
            description: self.description,
            source,
            cycle: options.cycle.clone(),
            vars: self.vars,
            dims: self.dims,
            steps,
            paths: self.paths,
        }
    }

    pub(super) fn into_recipe(mut self, source: Arc<Source>, options: &CompileOptions) -> Recipe {
        let steps = std::mem::take(&mut self.steps).into_iter().filter_map(|(step, _)| step).collect();
        self.recipe(source, options, steps)
    }

    /// The sound steps whose producers are all sound too (transitively), renumbered; `None`
    /// when there are none.
    pub(super) fn into_sound_part(mut self, source: Arc<Source>, options: &CompileOptions) -> Option<Recipe> {
        let steps = std::mem::take(&mut self.steps);
        let mut kept: HashSet<StepId> = (0..steps.len()).filter(|&s| steps[s].1).collect();
        // Drop steps that read a dropped step, until none does (linear in steps and inputs:
        // each step is dropped at most once, and only its consumers are looked at again).
        let mut consumers: HashMap<StepId, Vec<StepId>> = HashMap::new();
        for (id, (step, _)) in steps.iter().enumerate() {
            for input in step.iter().flat_map(|s| &s.inputs) {
                consumers.entry(input.producer).or_default().push(id);
            }
        }
        let mut dropped: Vec<StepId> = (0..steps.len()).filter(|s| !kept.contains(s)).collect();
        while let Some(gone) = dropped.pop() {
            for &consumer in consumers.get(&gone).into_iter().flatten() {
                if kept.remove(&consumer) {
                    dropped.push(consumer);
                }
            }
        }
        if kept.is_empty() {
            return None;
        }
        let mut new_ids = HashMap::new();
        let mut part = Vec::with_capacity(kept.len());
        for (id, (step, _)) in steps.into_iter().enumerate() {
            if let Some(step) = step.filter(|_| kept.contains(&id)) {
                new_ids.insert(id, part.len());
                part.push(step);
            }
        }
        for step in &mut part {
            for input in &mut step.inputs {
                input.producer = new_ids[&input.producer];
            }
        }
        Some(self.recipe(source, options, part))
    }
}
