//! The recipe front end: reads a YAML recipe, checks every name, dim, template and argument, and
//! produces a validated [`Recipe`]. Every problem becomes a [`Diagnostic`] with its line and
//! column, every problem of a file is reported at once where one does not hide another, and
//! nothing here panics or runs away on bad input (see [`limits`]).
//!
//! The path of a recipe: [`yaml`] (text → tree of located nodes) → [`raw`] (tree → the recipe as
//! written, shapes checked) → [`compiler`] (names, dims, steps, inputs, keys; [`args`] for
//! args and templates, [`output_paths`] for the files tasks write) → [`Recipe`].

mod args;
mod compile_dims;
mod compiler;
mod cycle;
mod diagnostic;
pub mod dims;
pub mod limits;
mod lookup;
mod output_paths;
mod plugin_check;
mod raw;
mod raw_dims;
mod sections;
mod step_keys;
mod suggest;
pub mod template;
mod template_check;
mod template_format;
#[cfg(test)]
mod tests;
mod time;
mod time_expr;
mod yaml;
mod yaml_errors;

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use runner_plugin::size::format_size;
use runner_plugin::{Args, Plugin};

pub use args::{ArgTemplate, StepArgs};
use compiler::Compiler;
pub use cycle::validate_cycle;
pub use diagnostic::{Diagnostic, Loc, RecipeError, Source};
pub use dims::{Dim, DimId, DimValues};
use limits::MAX_RECIPE_BYTES;
pub use output_paths::resolve_existing_prefix;
use raw::Reader;

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
    /// Settings of a plugin's section that win over the recipe's (`--python PATH` is the
    /// `python` section's `interpreter`): (plugin, key, value).
    pub sections: Vec<(String, String, serde_json::Value)>,
}

/// A validated recipe.
#[derive(Debug)]
pub struct Recipe {
    pub name: String,
    pub description: Option<String>,
    pub source: Arc<Source>,
    pub cycle: String,
    /// The `vars:` as this run has them (`--set` and a cycle's vars applied), in recipe order:
    /// recorded with the run, so that a prediction can look for the past cycle most like it.
    pub vars: Vec<(String, serde_json::Value)>,
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
    /// `resume:` how `--resume` tells that a file this step reads or writes has changed.
    pub resume: ResumeCheck,
}

/// How `--resume` tells that a file has changed since it was recorded (`resume:` of a step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResumeCheck {
    /// By its size and modification time: cheap, and right unless something rewrites files
    /// keeping both (`cp -p`, `rsync -t`, `tar x`, a clock set back).
    #[default]
    Metadata,
    /// By its bytes (hashed: every file read in full at the end of each task and at each
    /// `--resume`), for files whose modification time lies.
    Content,
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

impl Recipe {
    /// The vars as one JSON object, in recipe order.
    pub fn vars_map(&self) -> serde_json::Map<String, serde_json::Value> {
        self.vars.iter().cloned().collect()
    }

    /// [`Recipe::vars_map`] as text, as the store records it.
    pub fn vars_json(&self) -> String {
        serde_json::Value::Object(self.vars_map()).to_string()
    }

    pub fn step_id(&self, name: &str) -> Option<StepId> {
        self.steps.iter().position(|s| s.name == name)
    }
}

/// Args of a step's first task (every dim at its first value), for planning and for plugins' layout checks.
pub fn sample_args(recipe: &Recipe, step: StepId) -> Args {
    let first = |name: &str| recipe.dims.iter().find(|d| d.name == name).map(|d| d.value(0));
    recipe.steps[step].args.for_task(&first).into_owned()
}

/// Reads and validates the recipe at `path`.
pub fn load(path: &Path, options: &CompileOptions, registry: &Registry) -> Result<Recipe, RecipeError> {
    let cannot = |e: std::io::Error| RecipeError::whole_file(path, format!("cannot read the recipe: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_RECIPE_BYTES + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > MAX_RECIPE_BYTES {
        return Err(too_large(path));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
        RecipeError::whole_file(path, format!("the recipe is not UTF-8 text (line {line}); expected a UTF-8 text file"))
    })?;
    parse(path, text, options, registry)
}

fn too_large(path: &Path) -> RecipeError {
    RecipeError::whole_file(
        path,
        format!(
            "the recipe is larger than {}; expected a smaller file (long lists of dim values go in a list file: `dim: {{file: values.txt}}`)",
            format_size(MAX_RECIPE_BYTES)
        ),
    )
}

/// Validates recipe `text` as if read from `path` (list files are found next to `path`). The
/// cycle id of `options` is checked too ([`validate_cycle`]).
pub fn parse(path: &Path, text: String, options: &CompileOptions, registry: &Registry) -> Result<Recipe, RecipeError> {
    if text.len() as u64 > MAX_RECIPE_BYTES {
        return Err(too_large(path));
    }
    let source = Arc::new(Source::new(path, text));
    let fail = |diagnostics: Vec<Diagnostic>| RecipeError::new(source.clone(), diagnostics);
    if source.text.trim().is_empty() {
        return Err(fail(vec![
            Diagnostic::new(Loc::default(), "the recipe file is empty")
                .expected("a mapping with at least `recipe:` and `steps:`"),
        ]));
    }
    let mut diagnostics = Vec::new();
    if let Err(problem) = validate_cycle(&options.cycle) {
        diagnostics.push(Diagnostic::with_expectation(Loc::default(), problem));
    }
    let tree = match yaml::parse(&source.text) {
        Ok(tree) => tree,
        Err(diagnostic) => {
            diagnostics.push(diagnostic);
            return Err(fail(diagnostics));
        }
    };
    let raw = Reader::new(&mut diagnostics).recipe(&tree, &registry.section_names());
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut compiler = Compiler::new(registry, options, base_dir, diagnostics);
    let compiled = raw.and_then(|raw| compiler.compile(raw));
    let diagnostics = std::mem::take(&mut compiler.diagnostics);
    let Some(compiled) = compiled else { return Err(fail(diagnostics)) };
    let complete = compiled.steps.iter().all(|(step, _)| step.is_some());
    if diagnostics.is_empty() && complete {
        return Ok(compiled.into_recipe(source.clone(), options));
    }
    Err(fail(diagnostics).with_sound_part(compiled.into_sound_part(source.clone(), options)))
}
