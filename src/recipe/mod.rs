//! The recipe front end: reads a YAML recipe, checks every name, dim, template and argument, and
//! produces a validated [`Recipe`]. Every problem becomes a [`Diagnostic`] with its line and
//! column; nothing here panics on bad input.

mod args;
mod compiler;
mod diagnostic;
pub mod dims;
pub mod limits;
mod raw;
mod suggest;
pub mod template;
mod yaml_errors;

use std::path::Path;
use std::sync::Arc;

use runner_plugin::Plugin;
use serde_saphyr::Spanned;

pub use args::{ArgTemplate, StepArgs};
use compiler::Compiler;
pub use diagnostic::{Diagnostic, Loc, RecipeError, Source};
pub use dims::{Dim, DimId, DimValues};
use raw::RawRecipe;
use yaml_errors::yaml_diagnostic;

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

impl Recipe {
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
