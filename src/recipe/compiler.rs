//! The compiler: checks a recipe as written ([`super::raw`]) name by name — dims, vars, steps,
//! their `over`, inputs and hints — and builds the validated [`Recipe`]. Every problem is
//! collected as a diagnostic; checking goes on after one where it soundly can.

use std::sync::Arc;

use runner_plugin::DimValue;
use runner_plugin::size::parse_size;
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use super::diagnostic::{Diagnostic, Loc, Source};
use super::dims::{Dim, DimId, DimValues};
use super::limits::{MAX_DIMS, MAX_TASKS};
use super::raw::{DimNames, OrderedMap, RawDim, RawInput, RawInputs, RawRecipe, RawStep, Scalar};
use super::suggest::suggestion;
use super::{CompileOptions, InputSpec, OnMissing, PathPolicy, Recipe, Step};
use crate::registry::Registry;

pub(super) struct Compiler<'a> {
    pub(super) registry: &'a Registry,
    pub(super) options: &'a CompileOptions,
    pub(super) diagnostics: Vec<Diagnostic>,
    pub(super) dims: Vec<Dim>,
    /// Dims the recipe defines but that were rejected (already reported): uses of them are not
    /// reported again as unknown.
    pub(super) rejected_dims: Vec<String>,
    pub(super) vars: Vec<(String, Json)>,
}

impl Compiler<'_> {
    pub(super) fn error(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    pub(super) fn compile(&mut self, raw: Spanned<RawRecipe>, source: Arc<Source>) -> Option<Recipe> {
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
        if ids.len() > MAX_DIMS {
            let at = over.map_or(Loc::default(), |o| o.referenced.into());
            self.error(
                Diagnostic::new(at, format!("step `{step}` runs over {} dims", ids.len()))
                    .expected(format!("at most {}", MAX_DIMS)),
            );
        }
        let tasks = ids.iter().try_fold(1u64, |n, &d| n.checked_mul(self.dims[d].len()));
        if tasks.is_none_or(|n| n > MAX_TASKS) {
            let at = over.map_or(Loc::default(), |o| o.referenced.into());
            let product: f64 = ids.iter().map(|&d| self.dims[d].len() as f64).product();
            self.error(
                Diagnostic::new(at, format!("step `{step}` would run {product:.3e} tasks"))
                    .expected(format!("at most {} tasks per step (2^48)", MAX_TASKS)),
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
            .map_err(|e| {
                self.error(Diagnostic::with_expectation(memory.referenced, format!("`memory` of step `{step}`: {e}")))
            })
            .ok()
    }
}
