//! What one simulated task does: how long it runs, what it peaks at, how big its output is, and
//! (for a plugin that estimates from its inputs at dispatch) what its plugin would estimate —
//! each from the step's history, or a stated default where there is none: a task of a step
//! without recorded times runs for its memory estimate at [`Predictor::new`]'s `guess_speed`
//! (bytes a second: a task that touches its memory once at that speed), and counts as a guess.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crate::estimate::StepModel;
use crate::memory::{RanStanding, Standing};
use crate::plan::{Compiled, StepPlan};
use crate::recipe::Step;

use super::SpillRates;
use super::alike_figures::Recorded;
use super::alike_plan::AlikePlan;
use super::deal::Dealing;
use super::durations::DurationModel;
use super::growth;
use super::history::History;
use super::service_wait::{Interpreters, StepWaits};
use super::step_records::StepRecords;
use super::trend::Trend;
use super::variants::{self, Variants};

/// A step's predictions.
#[derive(Debug, Clone)]
struct StepPrediction {
    /// `None`: no history, every task takes the default time and counts as a guess.
    duration: Option<DurationModel>,
    output_bytes: u64,
    /// What the plugin is taken to estimate for a task at dispatch.
    dispatch_estimate: u64,
    /// The alike run's output bytes, by task index and their median ([`super::alike`]).
    recorded_output_bytes: Option<u64>,
    /// The alike run's median size of a path output's file (what consumers read of it).
    recorded_file_bytes: u64,
    by_index: HashMap<u64, Recorded>,
    /// Args rendered per task: the plan's figures are one sample task's, not each task's.
    per_task_args: bool,
    /// Its plugin estimates from the data at dispatch, not from metadata.
    follows_data: bool,
    /// Bytes a second its recorded tasks read their spilled inputs back from disk at.
    read_back: Option<u64>,
    /// How this cycle's plan differs from the alike run's for the same (first) task, in its
    /// plugin estimate and output bytes: a recorded figure of another task is scaled by it (a
    /// cycle with 6 thresholds instead of 2 triples each threshold task's).
    estimate_scale: f64,
    output_scale: f64,
    /// The plan's sample task's estimate.
    sample_estimate: u64,
    /// How many times the bytes the plan's sample task reads and writes this cycle's metadata
    /// makes of the alike run's, where it changes them (`None`: the same).
    planned_bytes_scale: Option<f64>,
    /// What the plugins said under the alike run's vars, where they differ from this cycle's.
    then: Option<Rc<AlikePlan>>,
    /// How long its services took to be ready for it, by how a run starts.
    waits: StepWaits,
    /// How its figures were carried along the line past the recorded range ([`super::trend`]).
    carried: Option<Trend>,
    /// Its recorded peaks were sampled from the tasks' own processes ([`StepRecords::peaks_sampled`]).
    peaks_sampled: bool,
}

impl StepPrediction {
    /// Step `index`'s predictions: `plan` its plan, `records` its history, `step` its recipe
    /// step, `then` the plan under its alike run's vars where they differ.
    fn new(
        index: usize,
        plan: &StepPlan,
        records: &StepRecords,
        duration: Option<DurationModel>,
        step: &Step,
        then: Option<Rc<AlikePlan>>,
    ) -> StepPrediction {
        let planned_bytes_scale = then.as_ref().and_then(|then| {
            let (now, then) = (planned_touched(plan), planned_touched(&then.compiled.plan.steps[index]));
            (now != then && then > 0).then(|| now as f64 / then as f64)
        });
        // Past the recorded range, the figures of a step the number sizes, grown; of a step whose
        // data moved along it, carried along the line — unless this cycle's metadata moves the
        // step's plan (what it reads or its plugin's estimate): its plan moves its figures, and
        // carried as well they would count the number twice.
        let planned_estimate_moved =
            then.as_ref().is_some_and(|then| then.compiled.plan.steps[index].plugin_estimate != plan.plugin_estimate);
        let moved_by_plan = planned_bytes_scale.is_some() || planned_estimate_moved;
        let factor = records.grown.as_ref().map_or(1.0, |grown| grown.factor);
        let grow = |bytes: u64| growth::scaled(bytes, factor);
        let measured = if moved_by_plan { Measured::recorded(records) } else { Measured::of(records) };
        let mut by_index = measured.by_index.clone();
        growth::grow(&mut by_index, factor);
        // A plugin estimating from its data at dispatch saw that cycle's weather, which the
        // plan's metadata estimate cannot scale.
        let follows_data = step.plugin.estimate_follows_data();
        let estimate_scale = match measured.by_index.get(&0).map(|r| r.plugin_estimate) {
            Some(first) if first > 0 && !follows_data => {
                estimate_scale(plan, then.as_deref().map(|then| &then.compiled.plan.steps[index]), first)
            }
            _ => 1.0,
        };
        StepPrediction {
            sample_estimate: plan.plugin_estimate,
            planned_bytes_scale,
            carried: measured.carried.cloned(),
            then,
            estimate_scale,
            output_scale: match (by_index.get(&0).map(|r| r.output_bytes), plan.output.bytes()) {
                (Some(first), Some(now)) if first > 0 => now as f64 / first as f64,
                _ => 1.0,
            },
            duration,
            // A shape the plan knows is exact; otherwise the alike run's size.
            output_bytes: plan.output.bytes().or(measured.output_bytes.map(grow)).unwrap_or(0),
            dispatch_estimate: measured.plugin_estimate.unwrap_or(plan.plugin_estimate),
            recorded_output_bytes: measured.output_bytes.map(grow),
            recorded_file_bytes: measured.file_bytes.map_or(0, grow),
            by_index,
            per_task_args: step.args.is_per_task(),
            follows_data,
            read_back: records.read_back.map(|speed| speed.bytes_per_second()),
            waits: records.waits,
            peaks_sampled: records.peaks_sampled,
        }
    }
}

/// What the alike run measured of a step's tasks, or those figures carried past the recorded
/// range along the line ([`super::trend`]).
struct Measured<'a> {
    by_index: &'a HashMap<u64, Recorded>,
    output_bytes: Option<u64>,
    plugin_estimate: Option<u64>,
    file_bytes: Option<u64>,
    /// How they were carried (`None`: as recorded).
    carried: Option<&'a Trend>,
}

impl Measured<'_> {
    /// The figures carried along the line where the history carries them, else as recorded.
    fn of(records: &StepRecords) -> Measured<'_> {
        match &records.extended {
            Some(extended) => Measured {
                by_index: &extended.by_index,
                output_bytes: extended.output_bytes,
                plugin_estimate: extended.plugin_estimate,
                file_bytes: extended.file_bytes,
                carried: Some(&extended.trend),
            },
            None => Measured::recorded(records),
        }
    }

    /// The alike run's figures as recorded (or interpolated).
    fn recorded(records: &StepRecords) -> Measured<'_> {
        Measured {
            by_index: &records.alike_by_index,
            output_bytes: records.alike_output_bytes,
            plugin_estimate: records.alike_plugin_estimate,
            file_bytes: records.alike_file_bytes,
            carried: None,
        }
    }
}

/// One task as the simulator has it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPrediction {
    pub duration: Duration,
    pub peak: u64,
    pub output_bytes: u64,
    /// The size of the file its path output names (its consumers' input bytes, no memory).
    pub file_bytes: u64,
    /// Its time is the default, not learned.
    pub guessed: bool,
    /// Its memory reaches the ledger as it grows, sampled from a process of its own (a
    /// command's, a warm interpreter's), not announced as it starts (its step's recorded
    /// `peaks_sampled`).
    pub sampled: bool,
}

/// Per-step predictions for a compiled recipe.
#[derive(Debug, Clone)]
pub struct Predictor {
    steps: Vec<StepPrediction>,
    /// What the plugins say of each kind of task where the plan's sample task may not speak for all.
    variants: Variants,
    guess_speed: u64,
    /// Which recorded task each task takes its figures (sizes, estimate, time) from
    /// ([`super::deal`]).
    dealing: Dealing,
    /// What service processes held at their baseline for the runs ([`History::standing`]),
    /// and the most workers those runs had.
    standing: Standing,
    standing_workers: usize,
    /// A step's figures were grown past the recorded range ([`super::growth`]): its
    /// consumers read more (or less) than their recorded tasks did, and grow with it.
    grown: bool,
}

impl Predictor {
    /// Predictions for `compiled` (whose plan has learned from `history` already); a task of a
    /// step without recorded times runs for its estimate at `guess_speed` bytes a second.
    /// `alike_plans`: per step, the plan under its alike run's vars where they differ
    /// ([`super::alike_plan::per_step`]).
    pub fn new(
        compiled: &Compiled,
        history: &History,
        alike_plans: Vec<Option<Rc<AlikePlan>>>,
        guess_speed: u64,
    ) -> Predictor {
        let durations = history.durations();
        let steps = compiled
            .plan
            .steps
            .iter()
            .enumerate()
            .zip(&history.steps)
            .zip(durations)
            .zip(&compiled.recipe.steps)
            .zip(alike_plans)
            .map(|(((((index, plan), records), duration), step), then)| {
                StepPrediction::new(index, plan, records, duration, step, then)
            })
            .collect();
        Predictor {
            steps,
            variants: Variants::new(compiled),
            guess_speed: guess_speed.max(1),
            dealing: Dealing::as_recorded(),
            standing: history.standing,
            standing_workers: history.standing_workers,
            grown: history.steps.iter().any(|records| records.grown.is_some()),
        }
    }

    /// What the ledger counts for a run on `workers` workers and no task: the warm
    /// interpreters' baseline the recorded runs held at their peaks (a simulated task runs no
    /// service), one interpreter's own share for each worker and kind of interpreter, and the
    /// pages forked ones share once ([`RanStanding::on_workers`]).
    pub fn standing_on(&self, workers: usize) -> Standing {
        RanStanding { standing: self.standing, workers: self.standing_workers }.on_workers(workers)
    }

    /// From now on, each task takes its figures from the recorded task `dealing` gives.
    pub fn deal(&mut self, dealing: Dealing) {
        self.dealing = dealing;
    }

    /// What the plugins say of each kind of task.
    pub(crate) fn variants(&self) -> &Variants {
        &self.variants
    }

    /// The alike run's record whose figures task `index` of `step` takes.
    fn dealt(&self, step: usize, index: u64) -> Option<&Recorded> {
        self.steps[step].by_index.get(&self.dealing.task(step, index))
    }

    /// What a plugin that estimates at dispatch from its inputs (which a simulation does not
    /// have) is taken to say for a task of `step`: its median in the recorded run of the most alike
    /// cycle — else its estimate on the plan's metadata.
    pub fn dispatch_estimate(&self, step: usize, index: u64) -> u64 {
        let prediction = &self.steps[step];
        let estimate = self.dealt(step, index).map_or(prediction.dispatch_estimate, |r| r.plugin_estimate);
        if prediction.follows_data {
            self.moved_to_now(step, index, estimate)
        } else {
            (estimate as f64 * prediction.estimate_scale) as u64
        }
    }

    /// What the plugin of `step` says of task `index`'s kind from this cycle's metadata.
    fn planned_now(&self, step: usize, index: u64) -> u64 {
        self.variants.of(step, index).map_or(self.steps[step].sample_estimate, |variant| variant.plugin_estimate)
    }

    /// What the plugin of `step` says of task `index`'s kind now and said under the alike run's
    /// metadata, where that differs.
    fn planned_now_and_then(&self, step: usize, index: u64) -> Option<(u64, u64)> {
        let then = self.steps[step].then.as_ref()?.estimate(step, index);
        let now = self.planned_now(step, index);
        (now != then && then > 0).then_some((now, then))
    }

    /// A data-following estimate the alike run recorded for task `index` of `step`, moved by
    /// what its plugin says this cycle's metadata adds or takes away (six thresholds where it
    /// had two): what followed that cycle's data is kept, what the metadata adds is added in
    /// full, and what it takes away is taken at most in proportion (the estimate was below the
    /// plan's, which assumed the worst of the data).
    fn moved_to_now(&self, step: usize, index: u64, recorded: u64) -> u64 {
        match self.planned_now_and_then(step, index) {
            Some((now, then)) if now > then => recorded + (now - then),
            Some((now, then)) => {
                let in_proportion = (recorded as f64 * now as f64 / then as f64) as u64;
                recorded.saturating_sub(then - now).max(in_proportion)
            }
            None => recorded,
        }
    }

    /// How long a task of `step` takes to read its `spilled` input bytes back, of which
    /// `at_estimate` were spilled as its plugin estimated it from its data (`None`: admitted at
    /// its estimate, or not so estimated): as long as the step's recorded tasks took to read as
    /// many from disk where they did (and `rates` take them), else at `rates`' speed.
    pub fn read_back_time(&self, step: usize, spilled: u64, at_estimate: Option<u64>, rates: &SpillRates) -> Duration {
        let prediction = &self.steps[step];
        // An estimate from the data read the task's inputs in at dispatch: only what was spilled
        // while it waited after is read from disk (the `nbhood` tasks of a wet `precip_uk.yaml`
        // cycle at 64 MiB found 99% of the pages they read back in memory, `mincore` says; the
        // estimate's own read is part of `calibrate`'s pace).
        let bytes =
            if prediction.follows_data { spilled.saturating_sub(at_estimate.unwrap_or(spilled)) } else { spilled };
        if bytes == 0 {
            return Duration::ZERO;
        }
        let recorded = prediction.read_back.filter(|_| rates.read_back_as_recorded);
        Duration::from_secs_f64(bytes as f64 / recorded.unwrap_or(rates.read_back).max(1) as f64)
    }

    /// Whether the plan's figures hold for a task of `step` reading `input_bytes` (as the
    /// worker decides whether to ask the plugin again): not when its args are rendered per task
    /// or its inputs are not the size the plan assumed.
    pub fn as_planned(&self, step: usize, plan_input_bytes: u64, input_bytes: u64) -> bool {
        !self.steps[step].per_task_args && input_bytes == plan_input_bytes
    }

    /// What the plugin says again of task `index` of `step` when the task is not as planned
    /// (the worker asks it after the claim): for a plugin estimating from metadata, what it says
    /// of this kind of task ([`Variants`]) where it was told its inputs' sizes; else, when
    /// recorded, what it estimated for the task in the alike run (the simulation has no inputs
    /// to show it).
    pub fn own_estimate(&self, step: usize, index: u64) -> Option<u64> {
        let prediction = &self.steps[step];
        if !prediction.follows_data
            && let Some(variant) = self.variants.of(step, index).filter(|variant| variant.inputs_known)
        {
            return Some(variant.plugin_estimate).filter(|&e| e > 0);
        }
        let recorded = self.dealt(step, index).map(|r| r.plugin_estimate).filter(|&e| e > 0)?;
        Some(if prediction.follows_data {
            self.moved_to_now(step, index, recorded)
        } else {
            (recorded as f64 * prediction.estimate_scale) as u64
        })
    }

    /// Task `index` of `step`, whose plugin estimates `plugin_estimate`, reading `input_bytes`:
    /// its peak is what its step's footprint `model` expects without its margin, as far off as
    /// the model was for the alike run's task ([`Predictor::peak`]; without a model, the task
    /// holds what it reserved, `reserved`). `as_planned`: the plan's output
    /// shape holds for it (else the shape its plugin gives this kind of task, else the alike
    /// run's output size of the same task, or of the step's median task). A path output's file
    /// is the alike run's size for the task.
    #[expect(clippy::too_many_arguments, reason = "one task's figures, each named")]
    pub fn task(
        &self,
        step: usize,
        index: u64,
        as_planned: bool,
        plugin_estimate: u64,
        input_bytes: u64,
        model: Option<&StepModel>,
        reserved: u64,
    ) -> TaskPrediction {
        let prediction = &self.steps[step];
        // The alike run's record whose figures this task takes, looked up once.
        let alike = self.dealt(step, index);
        // Past the recorded range, a task reading what a grown step made reads another size than
        // its recorded task did: what it makes, takes and holds grows with what it reads.
        let grew = alike
            .filter(|recorded| self.grown && recorded.input_bytes > 0 && recorded.input_bytes != input_bytes)
            .map(|recorded| input_bytes as f64 / recorded.input_bytes as f64);
        let with_input = |bytes: u64| grew.map_or(bytes, |factor| growth::scaled(bytes, factor));
        let known = || self.variants.of(step, index).and_then(|variant| variant.output.bytes());
        let output_bytes = if as_planned {
            prediction.output_bytes
        } else if let Some(bytes) = known() {
            bytes
        } else {
            let recorded = alike.map(|r| with_input(r.output_bytes)).or(prediction.recorded_output_bytes);
            recorded.map_or(prediction.output_bytes, |bytes| (bytes as f64 * prediction.output_scale) as u64)
        };
        // A file's size no plan knows: the alike run's, of the same task or the step's median.
        let file_bytes = alike.map_or(prediction.recorded_file_bytes, |r| with_input(r.file_bytes));
        // The time of the recorded tasks like the one whose figures it took (their mean, see
        // `super::like_tasks`), which followed that cycle's weather as its output did; where
        // this cycle's metadata makes the task another size (six thresholds where it had two),
        // scaled by the bytes it reads and writes (a threshold task writes three times as much,
        // and a smoothing of its output reads and writes three times as much). Else the step's
        // duration model; else a guess.
        let recorded_wall = alike.map(|r| {
            let wall = Duration::from_micros(r.wall_us);
            let touched_then = r.input_bytes + r.output_bytes + r.file_bytes;
            let touched_now = input_bytes + output_bytes + file_bytes;
            match (self.planned_now_and_then(step, index), prediction.planned_bytes_scale) {
                (Some(_), _) if touched_then > 0 && touched_now > 0 => {
                    wall.mul_f64(touched_now as f64 / touched_then as f64)
                }
                // Its plugin says the same of it, but it reads or writes another size (a writer
                // of six thresholds' probabilities where it had two): as the plan's bytes move.
                (_, Some(scale)) => wall.mul_f64(scale),
                _ => grew.map_or(wall, |factor| wall.mul_f64(factor)),
            }
        });
        let (duration, guessed) = match (recorded_wall, &prediction.duration) {
            (Some(wall), _) => (wall, false),
            (None, Some(model)) => (model.predict(plugin_estimate, input_bytes), false),
            (None, None) => (Duration::from_secs_f64(reserved as f64 / self.guess_speed as f64), true),
        };
        let peak = match (grew, alike) {
            (Some(factor), Some(recorded)) if recorded.peak_bytes > 0 => growth::scaled(recorded.peak_bytes, factor),
            _ => model.map_or(reserved, |model| Self::peak(model, alike, plugin_estimate, input_bytes)),
        };
        TaskPrediction { duration, peak, output_bytes, file_bytes, guessed, sampled: prediction.peaks_sampled }
    }

    /// What a task peaks at: its step's model's figure without the margin, scaled by how far
    /// off that figure was for the `alike` run's task, which followed that cycle's args and data
    /// (a grid of 450 where the model saw 300 to 600: a model on a constant basis has one figure
    /// for all of them, and the task of the nearest grids held what a grid of 450 holds).
    fn peak(model: &StepModel, alike: Option<&Recorded>, plugin_estimate: u64, input_bytes: u64) -> u64 {
        let now = model.predict_peak(plugin_estimate, input_bytes);
        let Some(alike) = alike.filter(|r| r.peak_bytes > 0) else { return now };
        let then = model.predict_peak(alike.plugin_estimate, alike.input_bytes);
        if then == 0 {
            return now;
        }
        (alike.peak_bytes as f64 * now as f64 / then as f64) as u64
    }

    /// How long the services of `step` take to be ready for it from its first task on, in a
    /// run that starts as `start` ([`super::service_wait`]).
    pub fn service_wait(&self, step: usize, start: Interpreters) -> Duration {
        self.steps[step].waits.of(start)
    }

    /// How the figures of `step` were carried along the line past the recorded range, if they
    /// were ([`super::trend`]).
    pub fn carried(&self, step: usize) -> Option<&Trend> {
        self.steps[step].carried.as_ref()
    }

    /// The duration model of `step`, if it has one.
    pub fn duration_model(&self, step: usize) -> Option<&DurationModel> {
        self.steps[step].duration.as_ref()
    }
}

/// How many times what a metadata plugin said of the alike run's first task (`recorded`, at
/// dispatch) it says of it now: the plan's estimate over the recorded one — unless the plan did
/// not know its inputs' sizes (a python call's value), so that the plugin said less at planning
/// than at dispatch, where it counted them: then the plan now over the plan under the alike
/// run's vars (`then`; the same vars, the same estimate).
fn estimate_scale(plan: &StepPlan, then: Option<&StepPlan>, recorded: u64) -> f64 {
    match then {
        _ if variants::sizes_known(&plan.inputs) => plan.plugin_estimate as f64 / recorded as f64,
        Some(then) if then.plugin_estimate > 0 => plan.plugin_estimate as f64 / then.plugin_estimate as f64,
        _ => 1.0,
    }
}

/// The bytes a step's sample task reads and writes, as its plan has them (a path output's file
/// is not known to the plan: its inputs speak for it).
fn planned_touched(plan: &StepPlan) -> u64 {
    plan.input_bytes + plan.output.bytes().unwrap_or(0)
}
