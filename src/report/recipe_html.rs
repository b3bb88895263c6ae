//! A recipe's page rendered: its runs and, per step, estimate against actual across them, with
//! the chart data as one JSON block.

use std::fmt::Write as _;

use runner_plugin::size::format_size;
use serde_json::{Value, json};

use super::html::{
    Table, count, document, escape, opt_count, opt_size, ran, run_slack, run_wall, runs_count, share, signed_percent,
    status_badge, step_color, swatch,
};
use super::recipe_page::RecipePage;
use crate::store::RunRow;

impl RecipePage {
    /// Renders the page.
    pub fn to_html(&self) -> String {
        let page = self;
        let mut body = String::new();
        let (first, last) = (page.runs.first(), page.runs.last());
        let _ = writeln!(
            body,
            "<header><h1>{} <span class=\"cycle\">{}</span></h1><p class=\"sub\">{}</p></header>",
            escape(&page.recipe),
            runs_count(page.runs.len()),
            match (first, last) {
                (Some(a), Some(b)) if a.run_id == b.run_id => format!("cycle {} (run {})", escape(&a.cycle), a.run_id),
                (Some(a), Some(b)) =>
                    format!("cycles {} (run {}) … {} (run {})", escape(&a.cycle), a.run_id, escape(&b.cycle), b.run_id),
                _ => "no runs".into(),
            }
        );
        body.push_str(&runs_section(page));
        body.push_str(&recipe_steps_section(page));
        let title = format!("{} · {} · runner report", page.recipe, runs_count(page.runs.len()));
        document(&title, &body, &recipe_data(page))
    }
}

fn runs_section(page: &RecipePage) -> String {
    let mut table = Table::new(
        "runs",
        &[
            "run",
            "cycle",
            "status",
            "tasks",
            "failed",
            "wall",
            "peak RSS",
            "budget",
            "peak reserved",
            "under-estimates",
            "slack",
            "spilled",
        ],
    );
    for run in &page.runs {
        table.row(&[
            ("num", run.run_id.to_string()),
            ("", escape(&run.cycle)),
            ("", status_badge(run.status)),
            ("num", opt_count(run.tasks_total)),
            ("num", opt_count(run.tasks_failed)),
            ("num", escape(&run_wall(run))),
            ("num", opt_size(run.peak_rss_bytes)),
            ("num", format_size(run.budget_bytes)),
            ("num", opt_size(run.peak_reserved_bytes)),
            (
                "num",
                format!(
                    "{} <small>{}</small>",
                    opt_count(run.underestimates),
                    share(run.underestimates.unwrap_or(0), ran(run))
                ),
            ),
            ("num", signed_percent(run_slack(run))),
            ("num", opt_size(run.spilled_bytes)),
        ]);
    }
    format!(
        "<section id=\"runs\"><h2>Runs</h2><p class=\"note\">Wall time and peak RSS cycle by cycle, against the \
         budget; the under-estimate rate and slack of all tasks. Drag to zoom, double-click to zoom out.</p>\
         <div id=\"runs-chart\" class=\"chart\"></div><div id=\"runs-learning-chart\" class=\"chart\"></div>\
         <details><summary>the runs, one by one</summary>{}</details></section>\n",
        table.finish()
    )
}

fn recipe_steps_section(page: &RecipePage) -> String {
    let mut out = String::from(
        "<section id=\"steps\"><h2>Steps</h2><p class=\"note\">Per step and cycle: the estimate tasks were admitted \
         with against the peaks they reached (lower medians and maxima), then slack (Σ estimate / Σ peak − 1) and \
         the share of tasks that peaked above their estimate — learning shows as both shrinking towards 0 — \
         and a sample of tasks' peaks against what estimates are learned from: the plugin's own estimate for \
         the task, or its input bytes.</p>",
    );
    for (i, step) in page.steps.iter().enumerate() {
        let _ = write!(
            out,
            "<div class=\"step\" id=\"step-{i}\"><h3>{}{} <small>{}</small></h3><div class=\"row\">\
             <div class=\"chart\" id=\"step-{i}-bytes\"></div><div class=\"chart\" id=\"step-{i}-learning\"></div>\
             <div class=\"chart scatter\" id=\"step-{i}-scatter\"></div></div>",
            swatch(i),
            escape(&step.step),
            escape(&step.plugin)
        );
        let id = format!("step-{i}-cycles");
        let mut table = Table::with_id(
            "cycles",
            Some(&id),
            &["run", "cycle", "tasks", "source", "estimate p50", "peak p50", "peak max", "under-estimates", "slack"],
        );
        for (run, entry) in page.runs.iter().zip(&step.per_run) {
            let Some(h) = entry else { continue };
            table.row(&[
                ("num", run.run_id.to_string()),
                ("", escape(&run.cycle)),
                ("num", count(h.tasks)),
                ("", escape(&h.sources_text())),
                ("num", format_size(h.estimate_p50)),
                ("num", format_size(h.peak_p50)),
                ("num", format_size(h.peak_max)),
                (
                    "num",
                    format!("{} <small>{}</small>", count(h.underestimates), share(h.underestimates, h.ok + h.failed)),
                ),
                ("num", signed_percent(h.slack)),
            ]);
        }
        let _ = write!(
            out,
            "<details><summary>{} by cycle</summary>{}</details></div>",
            escape(&step.step),
            table.finish()
        );
    }
    out.push_str("</section>\n");
    out
}

fn recipe_data(page: &RecipePage) -> Value {
    let runs = &page.runs;
    let per_run = |f: &dyn Fn(&RunRow) -> Value| -> Value { runs.iter().map(f).collect() };
    let rate =
        |under: u64, ran: u64| -> Value { if ran == 0 { Value::Null } else { (under as f64 / ran as f64).into() } };
    let runs_data = json!({
        "run_id": per_run(&|r| r.run_id.into()),
        "cycle": per_run(&|r| r.cycle.as_str().into()),
        "wall_ms": per_run(&|r| r.wall_ms.into()),
        "peak_rss": per_run(&|r| r.peak_rss_bytes.into()),
        "peak_reserved": per_run(&|r| r.peak_reserved_bytes.into()),
        "budget": per_run(&|r| r.budget_bytes.into()),
        "under_rate": per_run(&|r| rate(r.underestimates.unwrap_or(0), ran(r))),
        "slack": per_run(&|r| run_slack(r).into()),
    });
    let last_run = runs.len().saturating_sub(1) as u32;
    let steps: Vec<Value> = page
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let figure = |f: &dyn Fn(&crate::store::StepFigures) -> Value| -> Value {
                step.per_run.iter().map(|h| h.as_ref().map_or(Value::Null, f)).collect()
            };
            let points = &step.scatter;
            let column = |f: &dyn Fn(&super::ScatterPoint) -> Value| -> Value { points.iter().map(f).collect() };
            json!({
                "name": step.step,
                "plugin": step.plugin,
                "color": step_color(i),
                "estimate_p50": figure(&|h| h.estimate_p50.into()),
                "estimate_max": figure(&|h| h.estimate_max.into()),
                "peak_p50": figure(&|h| h.peak_p50.into()),
                "peak_max": figure(&|h| h.peak_max.into()),
                "slack": figure(&|h| h.slack.into()),
                "under_rate": figure(&|h| rate(h.underestimates, h.ok + h.failed)),
                "scatter": {
                    "last_run": last_run,
                    "run": column(&|p| p.run.into()),
                    "input": column(&|p| p.input_bytes.into()),
                    "plugin": column(&|p| p.plugin_estimate_bytes.into()),
                    "estimate": column(&|p| p.estimate_bytes.into()),
                    "peak": column(&|p| p.peak_bytes.into()),
                },
            })
        })
        .collect();
    json!({ "page": "recipe", "runs": runs_data, "steps": steps })
}
