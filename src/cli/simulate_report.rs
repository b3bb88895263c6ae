//! `runner simulate --report`: the predicted run as the run page a real run gets (its timeline,
//! memory over time, per-step table), built from the simulation instead of the store, and
//! marked as a prediction at the top of the page and in its title.

use std::path::Path;

use crate::plan::Compiled;
use crate::plan::EstimateSource;
use crate::report::run_page::{Memory, RunPage, StepRow};
use crate::report::timeline::{TimelineBar, TimelineBuilder};
use crate::report::{Limits, write_page};
use crate::simulate::{CpuSharing, Prediction};
use crate::store::{Executor, RunRow, RunStatus, Sample, StepFigures};

/// Writes the predicted run's page to `path`.
pub fn write(compiled: &Compiled, prediction: &Prediction, path: &Path) -> anyhow::Result<()> {
    let page = page(compiled, prediction);
    let shared = match prediction.cpus {
        CpuSharing::Shared(cpus) => format!(
            " Its {} workers shared {cpus} CPUs: with more than {cpus} tasks running, each ran at {cpus}/n of its \
             predicted speed.",
            prediction.simulated.report.workers
        ),
        _ => String::new(),
    };
    let banner = format!(
        "<body>\n<p class=\"warn\"><strong>A prediction, not a run:</strong> <code>runner simulate</code> ran the \
         scheduler on a virtual clock, each task taking the time and peak its step's history predicts \
         ({} of {} tasks' times were guesses).{shared} Critical path: {:.2} s.</p>",
        prediction.simulated.guesses,
        compiled.graph.total_tasks(),
        prediction.critical_path.length.as_secs_f64()
    );
    let html = page.to_html().replacen("<body>", &banner, 1);
    Ok(write_page(path, &html)?)
}

fn page(compiled: &Compiled, prediction: &Prediction) -> RunPage {
    let simulated = &prediction.simulated;
    let report = &simulated.report;
    let limits = Limits::default();
    let recipe = &compiled.recipe;
    let mut timeline = TimelineBuilder::new(limits.timeline_bars, limits.band_bins);
    let (mut key, mut index) = (String::new(), Vec::new());
    let mut rows: Vec<StepRow> = recipe.steps.iter().map(|s| StepRow::empty(&s.name, s.plugin.name())).collect();
    for task in &simulated.tasks {
        let start_ms = task.start.as_millis() as u64;
        let wall_ms = task.wall.as_millis() as u64;
        if timeline.wants_bars() {
            compiled.graph.describe_task(recipe, task.task.step, task.task.index, &mut key, &mut index);
        } else {
            key.clear();
        }
        timeline.add(TimelineBar {
            step: task.task.step as u32,
            worker: task.worker,
            start_ms,
            wall_ms,
            estimate_bytes: task.estimate,
            peak_bytes: task.peak,
            attempts: 1,
            failed: false,
            key: key.clone(),
        });
        let row = &mut rows[task.task.step];
        row.first_start_ms = Some(row.first_start_ms.map_or(start_ms, |s| s.min(start_ms)));
        row.last_end_ms = Some(row.last_end_ms.map_or(start_ms + wall_ms, |e| e.max(start_ms + wall_ms)));
    }
    for ((row, step), (stats, plan)) in
        rows.iter_mut().zip(&recipe.steps).zip(report.steps.iter().zip(&compiled.plan.steps))
    {
        row.figures = StepFigures::from_stats(step, stats);
        row.figures.sources = vec![if plan.model.is_some() { EstimateSource::History } else { plan.source }];
    }
    let wall_ms = report.wall.as_millis() as u64;
    let samples = simulated
        .memory
        .iter()
        .map(|point| Sample {
            t_ms: point.at.as_millis() as u64,
            reserved_bytes: point.reserved,
            resident_bytes: point.resident,
            spilled_bytes: point.spilled,
            ..Sample::default()
        })
        .collect::<Vec<_>>();
    let recorded = samples.len();
    let failed = report.steps.iter().map(|s| s.failed).sum::<u64>();
    RunPage {
        run: RunRow {
            run_id: 0,
            recipe: format!("{} (predicted)", recipe.name),
            cycle: recipe.cycle.clone(),
            started_at: String::new(),
            finished_at: None,
            status: if failed == 0 && report.internal_error.is_none() { RunStatus::Ok } else { RunStatus::Failed },
            executor: if simulated.cluster.is_some() { Executor::Slurm } else { Executor::Local },
            budget_bytes: report.budget,
            workers: report.workers as u32,
            tasks_total: Some(compiled.graph.total_tasks()),
            wall_ms: Some(wall_ms),
            wall_us: Some(report.wall.as_micros() as u64),
            peak_rss_bytes: Some(simulated.peak_memory),
            peak_reserved_bytes: Some(report.peak_reserved),
            standing_bytes: Some(report.standing_at_peak.bytes),
            standing_shared_bytes: Some(report.standing_at_peak.shared),
            standing_services: Some(report.standing_at_peak.services),
            warm_services: None,
            most_services: None,
            spilled_bytes: Some(report.spilled_bytes),
            spill_count: Some(report.spill_count),
            spill_error: None,
            tasks_ok: Some(report.steps.iter().map(|s| s.ok).sum()),
            tasks_failed: Some(failed),
            tasks_skipped: Some(report.steps.iter().map(|s| s.skipped).sum()),
            underestimates: Some(report.steps.iter().map(|s| s.underestimates).sum()),
            oversized: Some(report.steps.iter().map(|s| s.oversized).sum()),
            estimate_bytes_sum: Some(report.steps.iter().map(|s| s.estimate_sum).sum()),
            peak_bytes_sum: Some(report.steps.iter().map(|s| s.peak_sum).sum()),
            recorded_ms: Some(wall_ms),
            resumed_from: None,
            pid: std::process::id(),
            vars: Some(recipe.vars_json()),
        },
        steps: rows,
        timeline: timeline.finish(recipe.steps.len(), wall_ms),
        unplaced: 0,
        memory: Memory { samples, bucket_ms: None, recorded },
        events: Vec::new(),
        events_total: 0,
        failures: Vec::new(),
        failures_total: 0,
    }
}
