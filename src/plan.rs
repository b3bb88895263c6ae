//! What a run will do before it does it: each step's task count, output shape, inputs and
//! estimated peak bytes per task with the estimate's source. `runner plan` prints it; the
//! scheduler admits tasks by it. [`Compiled`] is a recipe taken through the graph to its plan.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use runner_plugin::{InputMeta, InputsForEstimate, ValueMeta};

use crate::estimate::{Observation, Params, StepModel};
use crate::graph::Graph;
use crate::memory::RanStanding;
use crate::recipe::{self, CompileOptions, Diagnostic, Recipe, RecipeError, StepId, sample_args};
use crate::registry::Registry;

/// Where an estimate comes from, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimateSource {
    /// Learned from earlier runs of the step.
    History,
    /// The recipe's `memory:` hint.
    Hint,
    /// The plugin's own `estimate`.
    Plugin,
}

impl EstimateSource {
    pub fn as_str(self) -> &'static str {
        match self {
            EstimateSource::History => "history",
            EstimateSource::Hint => "hint",
            EstimateSource::Plugin => "plugin",
        }
    }
}

impl fmt::Display for EstimateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The plan of one step.
#[derive(Debug, Clone)]
pub struct StepPlan {
    pub tasks: u64,
    pub inputs: Vec<InputMeta>,
    pub output: ValueMeta,
    /// What the plugin estimates for one task from metadata alone.
    pub plugin_estimate: u64,
    /// Buffer bytes of one task's inputs, from their metadata.
    pub input_bytes: u64,
    /// The recipe's `memory:` hint.
    pub hint: Option<u64>,
    /// The footprint learned from history, if there is any.
    pub model: Option<StepModel>,
    /// The estimate admission uses for a typical task, and its source.
    pub estimate: u64,
    pub source: EstimateSource,
    /// The longest wall time of the step's recorded tasks (their recent runs), if any.
    pub longest_task: Option<Duration>,
}

impl StepPlan {
    /// The estimate of one task whose plugin estimates `plugin_estimate` and whose inputs hold
    /// `input_bytes`: from history when there is some, else the hint, else the plugin's own.
    pub fn estimate_for(
        &self,
        model: Option<&StepModel>,
        plugin_estimate: u64,
        input_bytes: u64,
    ) -> (u64, EstimateSource) {
        match (model, self.hint) {
            (Some(model), _) => (model.predict(plugin_estimate, input_bytes), EstimateSource::History),
            (None, Some(hint)) => (hint, EstimateSource::Hint),
            (None, None) => (plugin_estimate.saturating_add(PLUGIN_ESTIMATE_ALLOWANCE), EstimateSource::Plugin),
        }
    }
}

/// Added to a plugin's own estimate when nothing better is known: plugins count their arrays,
/// while each block's allocator header, a task's bookkeeping and small buffers come on top
/// (a few KiB), which would otherwise make nearly every first-run task an under-estimate.
pub const PLUGIN_ESTIMATE_ALLOWANCE: u64 = 64 << 10;

/// The plan of a whole recipe.
#[derive(Debug, Clone)]
pub struct Plan {
    pub steps: Vec<StepPlan>,
    /// What the recipe's newest run with service processes (warm interpreters) held of them at
    /// its peak: a local run's ledger counts as much for its own services until they stand
    /// ([`crate::memory::Standing::awaiting`]). Learned from the store; `None` without.
    pub services_before: Option<ServicesBefore>,
}

/// The recipe's newest run with service processes: what they held, and which steps ran
/// without them.
#[derive(Debug, Clone, PartialEq)]
pub struct ServicesBefore {
    pub held: RanStanding,
    /// The steps whose tasks that ran all ran outside service processes; any other step
    /// (served, or not run there) may start one.
    pub ran_without: Vec<StepId>,
}

impl ServicesBefore {
    /// Whether a run with `left[step]` tasks to run of each step (the rest taken over, on a
    /// resume) starts no service: every step with tasks left ran without them.
    pub fn none_started_by(&self, left: &[u64]) -> bool {
        left.iter().enumerate().all(|(step, &tasks)| tasks == 0 || self.ran_without.contains(&step))
    }
}

impl Plan {
    /// Propagates output metadata through the DAG in topological order, asking each plugin for
    /// its output and estimate. A plugin that rejects its inputs fails the plan.
    pub fn build(recipe: &Recipe, graph: &Graph) -> Result<Plan, Vec<Diagnostic>> {
        let mut outputs: Vec<Option<ValueMeta>> = vec![None; recipe.steps.len()];
        let mut steps: Vec<Option<StepPlan>> = vec![None; recipe.steps.len()];
        let mut diagnostics = Vec::new();
        for &id in &graph.topo {
            let step = &recipe.steps[id];
            let inputs: Vec<InputMeta> = graph.steps[id]
                .inputs
                .iter()
                .map(|&e| {
                    let edge = &graph.edges[e];
                    InputMeta {
                        name: step.inputs[edge.input].name.clone(),
                        gathered: edge.gathered.then(|| graph.largest_gather(e) as usize),
                        item: outputs[edge.producer].clone().unwrap_or_default(),
                    }
                })
                .collect();
            let args = sample_args(recipe, id);
            // The plugin's check of the step's index layout (e.g. no two tasks writing one chunk).
            if let Err(e) = step.plugin.check_layout(&args, &crate::layout::step_layout(recipe, graph, id)) {
                diagnostics.push(Diagnostic::new(
                    step.arg_loc(e.arg.as_deref()),
                    format!(
                        "plugin `{}` rejects the layout of step `{}`: {}",
                        step.plugin.name(),
                        step.name,
                        e.message
                    ),
                ));
            }
            let output = match crate::panics::catch(|| step.plugin.output(&args, &inputs)) {
                Err(panic) => {
                    diagnostics.push(panicked(step, "describing the output of", &panic));
                    ValueMeta::Unknown
                }
                Ok(Ok(meta)) => meta,
                Ok(Err(e)) => {
                    // Point at the arg at fault, else at the one input the message names, else
                    // at the step.
                    let named: Vec<_> =
                        step.inputs.iter().filter(|i| e.message.contains(&format!("input `{}`", i.name))).collect();
                    let at = match (e.arg.as_deref(), named.as_slice()) {
                        (None, [input]) => input.loc,
                        (arg, _) => step.arg_loc(arg),
                    };
                    diagnostics.push(Diagnostic::new(
                        at,
                        format!("plugin `{}` rejects step `{}`: {}", step.plugin.name(), step.name, e.message),
                    ));
                    ValueMeta::Unknown
                }
            };
            let plugin_estimate =
                match crate::panics::catch(|| step.plugin.estimate(&args, InputsForEstimate::Plan(&inputs), &output)) {
                    Ok(estimate) => estimate,
                    Err(panic) => {
                        diagnostics.push(panicked(step, "estimating a task of", &panic));
                        0
                    }
                };
            let input_bytes = inputs.iter().filter_map(InputMeta::bytes).sum();
            let mut plan = StepPlan {
                tasks: graph.steps[id].tasks,
                inputs,
                output: output.clone(),
                plugin_estimate,
                input_bytes,
                hint: step.memory_hint,
                model: None,
                estimate: 0,
                source: EstimateSource::Plugin,
                longest_task: None,
            };
            (plan.estimate, plan.source) = plan.estimate_for(None, plugin_estimate, input_bytes);
            outputs[id] = Some(output);
            steps[id] = Some(plan);
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        Ok(Plan {
            steps: steps.into_iter().map(|s| s.expect("topological order covers every step")).collect(),
            services_before: None,
        })
    }

    /// Learns each step's footprint from `history` (the step's past tasks, by step name) and
    /// makes it the estimate's source where there is any.
    pub fn learn(&mut self, recipe: &Recipe, history: &dyn Fn(&str) -> Vec<Observation>, params: Params) {
        for (plan, step) in self.steps.iter_mut().zip(&recipe.steps) {
            plan.model = StepModel::learn(&history(&step.name), params, step.plugin.estimate_follows_data());
            (plan.estimate, plan.source) =
                plan.estimate_for(plan.model.as_ref(), plan.plugin_estimate, plan.input_bytes);
        }
    }

    /// The step whose single task is estimated largest.
    pub fn largest_task(&self) -> Option<(StepId, u64)> {
        self.steps.iter().enumerate().map(|(id, s)| (id, s.estimate)).max_by_key(|&(_, e)| e)
    }
}

/// The diagnostic of a plugin that panicked `doing` something of `step`.
fn panicked(step: &crate::recipe::Step, doing: &str, panic: &dyn fmt::Display) -> Diagnostic {
    Diagnostic::new(step.loc, format!("plugin `{}` panicked {doing} step `{}`: {panic}", step.plugin.name(), step.name))
}

/// A recipe compiled to its graph and plan, ready to run.
#[derive(Debug)]
pub struct Compiled {
    pub recipe: Recipe,
    pub graph: Graph,
    pub plan: Plan,
}

impl Compiled {
    /// Reads, validates and plans the recipe at `path`.
    pub fn from_file(path: &Path, options: &CompileOptions, registry: &Registry) -> Result<Compiled, RecipeError> {
        Self::finish(recipe::load(path, options, registry).map_err(Self::check_the_sound_part)?)
    }

    /// Validates and plans recipe `text`, reporting errors as if it were read from `path`.
    pub fn from_text(
        path: &Path,
        text: &str,
        options: &CompileOptions,
        registry: &Registry,
    ) -> Result<Compiled, RecipeError> {
        Self::finish(recipe::parse(path, text.to_string(), options, registry).map_err(Self::check_the_sound_part)?)
    }

    /// A rejected recipe's sound part (the steps that compiled cleanly, with their producers)
    /// still goes through the graph and plan checks, so that one report holds every problem of
    /// the file, not the front end's first and the others after they are fixed.
    fn check_the_sound_part(mut error: RecipeError) -> RecipeError {
        let later = match error.sound_part() {
            Some(part) => match Graph::build(part) {
                Err(diagnostics) => diagnostics,
                Ok(graph) => Plan::build(part, &graph).err().unwrap_or_default(),
            },
            None => Vec::new(),
        };
        error.extend(later);
        error
    }

    fn finish(recipe: Recipe) -> Result<Compiled, RecipeError> {
        let graph = Graph::build(&recipe).map_err(|d| RecipeError::new(recipe.source.clone(), d))?;
        let plan = Plan::build(&recipe, &graph).map_err(|d| RecipeError::new(recipe.source.clone(), d))?;
        Ok(Compiled { recipe, graph, plan })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_starts_no_service_only_when_every_step_with_tasks_left_ran_without_one() {
        // Steps 0 and 2 ran without services; step 1 ran in them, step 3 did not run at all.
        let before = ServicesBefore { held: RanStanding::default(), ran_without: vec![0, 2] };
        assert!(before.none_started_by(&[4, 0, 1, 0]), "the served step and the unrun one are taken over");
        assert!(!before.none_started_by(&[0, 1, 0, 0]), "a served step's task runs again");
        assert!(!before.none_started_by(&[0, 0, 0, 2]), "a step that did not run there may start one");
        assert!(before.none_started_by(&[0, 0, 0, 0]));
    }
}
