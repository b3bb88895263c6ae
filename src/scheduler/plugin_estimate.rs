//! A plugin's own estimate of one task, asked outside the lock: at dispatch for a plugin whose
//! estimate follows its data, or after the claim for a task whose args are rendered per task or
//! whose inputs are not the size the plan assumed (see [`Worker::own_estimate`]).

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use runner_plugin::{Inputs, InputsForEstimate, Value};

use super::TaskRef;
use super::worker::Worker;
use crate::recipe::StepId;

impl<'s, 'r> Worker<'s, 'r> {
    /// Asks the plugin what task `task` will need, given its inputs (at `values` and `counts` in
    /// the worker's buffers). Runs outside the lock; a panicking estimate falls back to the plan's.
    pub(super) fn estimate_at_dispatch(&mut self, task: TaskRef, values: Range<usize>, counts: Range<usize>) -> u64 {
        self.describe_task(task.step, task.index);
        let input_bytes = self.values[values.clone()].iter().map(|v| v.buffer_bytes()).sum();
        self.task_estimate(task.step, values, counts, input_bytes)
            .unwrap_or(self.shared.plan.steps[task.step].plugin_estimate)
    }

    /// The plugin's estimate of the described task of `step_id` with the inputs at `values` and
    /// `counts` (holding `input_bytes`), from its own args and, when they are not what the plan
    /// assumed, its own output's shape. `None` when the plugin panicked.
    pub(super) fn task_estimate(
        &self,
        step_id: StepId,
        values: Range<usize>,
        counts: Range<usize>,
        input_bytes: u64,
    ) -> Option<u64> {
        let step = &self.shared.recipe.steps[step_id];
        let plan = &self.shared.plan.steps[step_id];
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = step.args.for_task(&lookup);
        let as_planned = !step.args.is_per_task() && input_bytes == plan.input_bytes;
        self.with_inputs(step_id, values, counts, |inputs| {
            catch_unwind(AssertUnwindSafe(|| {
                let output =
                    if as_planned { plan.output.clone() } else { task_output(&*step.plugin, &args, inputs, plan) };
                step.plugin.estimate(&args, InputsForEstimate::Dispatch(*inputs), &output)
            }))
            .ok()
        })
    }

    /// The plugin's own estimate of claimed task `at`, asked (outside the lock) when it may
    /// differ from the plan's: its args are rendered per task, or its inputs are not the size
    /// the plan assumed. `None` when the plan's estimate stands.
    pub(super) fn own_estimate(&self, at: usize) -> Option<u64> {
        let claimed = &self.claimed[at];
        let step_id = claimed.picked.task.step;
        let step = &self.shared.recipe.steps[step_id];
        let plan = &self.shared.plan.steps[step_id];
        let follows_data = step.plugin.estimate_follows_data();
        if follows_data || (!step.args.is_per_task() && claimed.picked.input_bytes == plan.input_bytes) {
            return None;
        }
        self.task_estimate(step_id, claimed.values.clone(), claimed.counts.clone(), claimed.picked.input_bytes)
            .filter(|&e| e != claimed.picked.plugin_estimate)
    }
}

/// What the plugin says a task's output will be, given its own args and inputs (the plan's
/// output when the plugin cannot say).
fn task_output(
    plugin: &dyn runner_plugin::Plugin,
    args: &runner_plugin::Args,
    inputs: &Inputs<'_>,
    plan: &crate::plan::StepPlan,
) -> runner_plugin::ValueMeta {
    let metas: Vec<runner_plugin::InputMeta> = inputs
        .iter()
        .map(|input| runner_plugin::InputMeta {
            name: input.name().to_string(),
            gathered: input.is_gathered().then(|| input.len()),
            item: input.values().next().map(Value::meta).unwrap_or_default(),
        })
        .collect();
    match plugin.output(args, &metas) {
        Ok(runner_plugin::ValueMeta::Unknown) | Err(_) => plan.output.clone(),
        Ok(meta) => meta,
    }
}
