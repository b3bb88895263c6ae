//! What the plugins said of each kind of task under the vars of the run a prediction takes its
//! measured figures from (the nearest alike run, [`super::alike`]). A plugin estimating from its
//! data at dispatch saw that cycle's weather *and* its metadata (two thresholds where this cycle
//! has six); a recorded time, too, is that of a task of that cycle's size. The weather only the
//! data shows, but what the metadata changes each plugin says itself when asked of both: the
//! recipe is compiled again with the alike run's vars, and its plugins' estimates for the same
//! kinds of task are what the recorded figures are moved from ([`super::predict`]).

use std::rc::Rc;

use serde_json::{Map, Value};

use crate::plan::Compiled;

use super::history::History;
use super::step_records::StepRecords;
use super::variants::Variants;

/// Compiles the predicted recipe with another run's cycle id and vars; `None` when it no
/// longer compiles with them.
pub type Recompile<'a> = dyn Fn(&str, &Map<String, Value>) -> Option<Compiled> + 'a;

/// The plugins' estimates for a recipe compiled with an alike run's vars.
#[derive(Debug)]
pub struct AlikePlan {
    /// Per step: the plan's sample task's estimate.
    sample_estimates: Vec<u64>,
    variants: Variants,
    /// The recipe as compiled with those vars, its plan learned from the history (what the
    /// alike run is simulated on, [`super::calibrate`]).
    pub compiled: Compiled,
}

impl AlikePlan {
    fn new(compiled: Compiled) -> AlikePlan {
        AlikePlan {
            sample_estimates: compiled.plan.steps.iter().map(|step| step.plugin_estimate).collect(),
            variants: Variants::new(&compiled),
            compiled,
        }
    }

    /// What the plugin of `step` said, under that run's vars, of the kind of task `index` is.
    pub fn estimate(&self, step: usize, index: u64) -> u64 {
        self.variants.of(step, index).map_or(self.sample_estimates[step], |variant| variant.plugin_estimate)
    }
}

/// Per step of `now`: the plan under the vars of the step's alike run, where they differ from
/// `now`'s (`None` where they are the same, unknown, or no longer compile). The recipe is
/// compiled once per distinct vars.
pub fn per_step(history: &History, now: &Compiled, recompile: &Recompile<'_>) -> Vec<Option<Rc<AlikePlan>>> {
    let vars_now = now.recipe.vars_map();
    let mut compiled: Vec<(&str, Option<Rc<AlikePlan>>)> = Vec::new();
    let same_steps = |then: &Compiled| then.plan.steps.len() == now.plan.steps.len();
    history
        .steps
        .iter()
        .map(|records| {
            let (cycle, text) = records.alike_vars.as_ref()?;
            if let Some((_, plan)) = compiled.iter().find(|(seen, _)| *seen == text.as_str()) {
                return plan.clone();
            }
            let plan = match serde_json::from_str::<Map<String, Value>>(text) {
                Ok(vars) if vars != vars_now => recompile(cycle, &vars).filter(same_steps).map(|then| {
                    // What the plugins said, then the plan learned as this cycle's has.
                    let mut plan = AlikePlan::new(then);
                    history.learn_footprints(&mut plan.compiled);
                    Rc::new(plan)
                }),
                _ => None,
            };
            compiled.push((text, plan.clone()));
            plan
        })
        .collect()
}

/// `history` with growth kept only for the steps whose args the number sets and whose output
/// the plan does not know (`None`: no step grows, nor would with a second value of the number,
/// [`super::growth::OneValue`], which is kept for the same steps): the recipe compiled with the nearest run's
/// vars for this cycle gives them other args. A step whose output grew while its args stayed
/// (a command thresholding a wetter field: the data, not the number, made its files larger) is
/// as recorded; so is every step when the recipe no longer compiles with those vars. A step
/// whose output shape the plan knows (`synth` with `ny: "{size}"`) has its plugin say what the
/// number makes of it, which the prediction already moves its figures by
/// ([`per_step`]): growing them too would count the number twice ([`super::growth`]). Where a
/// step grows, no step's figures are carried along the line ([`super::trend`]).
pub fn sized_by_args(history: &History, now: &Compiled, recompile: &Recompile<'_>) -> Option<History> {
    let along_a_number = |records: &StepRecords| records.grown.is_some() || records.one_value.is_some();
    if !history.steps.iter().any(along_a_number) {
        return None;
    }
    // Per distinct vars of the steps' nearest runs, the recipe compiled with them for this cycle.
    let mut compiled: Vec<(&str, Option<Compiled>)> = Vec::new();
    let mut sized = history.clone();
    for (at, records) in sized.steps.iter_mut().enumerate().filter(|(_, records)| along_a_number(records)) {
        let text = history.steps[at].alike_vars.as_ref().map_or("", |(_, vars)| vars.as_str());
        let then = match compiled.iter().position(|(seen, _)| *seen == text) {
            Some(found) => &compiled[found].1,
            None => {
                let then = serde_json::from_str::<Map<String, Value>>(text)
                    .ok()
                    .and_then(|vars| recompile(&now.recipe.cycle, &vars));
                compiled.push((text, then));
                &compiled[compiled.len() - 1].1
            }
        };
        let args_moved = then
            .as_ref()
            .and_then(|then| then.recipe.steps.get(at))
            .is_some_and(|step| step.args != now.recipe.steps[at].args);
        // A path's file, or a value the plugin cannot size in advance, only a run measures.
        let plan_sizes_it = now.plan.steps[at].output.bytes().is_some_and(|bytes| bytes > 0);
        if !args_moved || plan_sizes_it {
            records.grown = None;
            records.one_value = None;
        }
    }
    // A step grown by the number carries its consumers with what they read: carried along the
    // line as well, they would count it twice.
    if sized.steps.iter().any(|records| records.grown.is_some()) {
        for records in &mut sized.steps {
            records.extended = None;
        }
    }
    Some(sized)
}
