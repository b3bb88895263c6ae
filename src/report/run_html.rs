//! A run's page rendered: header, summary figures, the timeline, memory over time, the per-step
//! table and the failures, with the chart data as one JSON block.

use std::fmt::Write as _;

use runner_plugin::size::format_size;
use serde_json::{Value, json};

use super::html::{
    Table, count, document, duration, escape, figure, opt_count, opt_size, ran, run_slack, run_wall, share,
    signed_percent, status_badge, step_color, swatch,
};
use super::run_page::RunPage;
use super::timeline::Timeline;
use crate::store::RunRow;

/// Spill events listed in the run page's table (all those kept are marked on the chart).
const EVENT_ROWS: usize = 100;

impl RunPage {
    /// Renders the page.
    pub fn to_html(&self) -> String {
        let page = self;
        let run = &page.run;
        let mut body = String::new();
        let _ = writeln!(
            body,
            "<header><h1>{} <span class=\"cycle\">{}</span></h1><p class=\"sub\">run {} · {} · started {}{} · {} worker{} · {}</p></header>",
            escape(&run.recipe),
            escape(&run.cycle),
            run.run_id,
            status_badge(run.status),
            escape(&run.started_at),
            run.finished_at.as_deref().map(|f| format!(", finished {}", escape(f))).unwrap_or_default(),
            run.workers,
            if run.workers == 1 { "" } else { "s" },
            run.executor.as_str(),
        );
        body.push_str(&run_summary(page));
        body.push_str(&timeline_section(page));
        body.push_str(&memory_section(page));
        body.push_str(&steps_section(page));
        body.push_str(&failures_section(page));
        let title = format!("{} {} · run {} · runner report", run.recipe, run.cycle, run.run_id);
        document(&title, &body, &run_data(page))
    }
}

fn run_summary(page: &RunPage) -> String {
    let run = &page.run;
    let mut out = String::from("<section id=\"summary\"><h2>Summary</h2><div class=\"figures\">");
    figure(&mut out, "status", &status_badge(run.status));
    let tasks = format!(
        "{} <small>{} ok · {} failed · {} skipped</small>",
        opt_count(run.tasks_total),
        opt_count(run.tasks_ok),
        opt_count(run.tasks_failed),
        opt_count(run.tasks_skipped)
    );
    figure(&mut out, "tasks", &tasks);
    figure(&mut out, "wall", &escape(&run_wall(run)));
    figure(&mut out, "budget", &format_size(run.budget_bytes));
    let of_budget = |bytes: Option<u64>| match bytes {
        Some(b) if run.budget_bytes > 0 => format!(" <small>{} of the budget</small>", share(b, run.budget_bytes)),
        _ => String::new(),
    };
    figure(&mut out, "peak RSS", &format!("{}{}", opt_size(run.peak_rss_bytes), of_budget(run.peak_rss_bytes)));
    // The runner and its commands at the same moment, as sampled: what the budget is about.
    let tree = page.memory.samples.iter().map(|s| s.rss_bytes + s.external_bytes).max();
    if page.memory.samples.iter().any(|s| s.external_bytes > 0) {
        let tree = tree.max(run.peak_rss_bytes);
        figure(&mut out, "peak with commands", &format!("{}{}", opt_size(tree), of_budget(tree)));
    }
    figure(
        &mut out,
        "peak reserved",
        &format!(
            "{}{}{}",
            opt_size(run.peak_reserved_bytes),
            of_budget(run.peak_reserved_bytes),
            warm_interpreters(run)
        ),
    );
    let spilled = match (run.spilled_bytes, run.spill_count) {
        (Some(b), Some(n)) if n > 0 => format!("{} <small>in {} buffers</small>", format_size(b), count(n)),
        (b, _) => opt_size(b),
    };
    figure(&mut out, "spilled", &spilled);
    figure(
        &mut out,
        "under-estimates",
        &format!(
            "{} <small>{} of the tasks that ran</small>",
            opt_count(run.underestimates),
            share(run.underestimates.unwrap_or(0), ran(run))
        ),
    );
    figure(&mut out, "oversized", &opt_count(run.oversized));
    figure(&mut out, "slack", &signed_percent(run_slack(run)));
    out.push_str("</div>");
    if let Some(error) = &run.spill_error {
        let _ = write!(out, "<p class=\"warn\">Spilling stopped: {}</p>", escape(error));
    }
    if let Some(from) = run.resumed_from {
        let _ = write!(out, "<p class=\"note\">This run resumed run {from}.</p>");
    }
    out.push_str("<p class=\"note\">Slack is Σ estimate / Σ peak − 1 over the tasks that ran; an under-estimate is a task whose peak exceeded its estimate; an oversized task's estimate alone exceeded the budget (it ran alone).</p></section>\n");
    out
}

/// What of the peak reserved was service processes at their baseline between tasks (warm
/// interpreters), which no task's figures show.
fn warm_interpreters(run: &RunRow) -> String {
    let Some(bytes) = run.standing_bytes.filter(|&b| b > 0) else { return String::new() };
    let how_many = match run.standing_services {
        Some(n) if n > 0 => {
            let shared = run.standing_shared_bytes.unwrap_or(0);
            let shared = if shared > 0 { format!(", {} of it shared", format_size(shared)) } else { String::new() };
            format!(" ({} interpreter{}{shared})", count(n), if n == 1 { "" } else { "s" })
        }
        _ => String::new(),
    };
    format!("<br><small>{} of it warm interpreters between tasks{how_many}</small>", format_size(bytes))
}

fn legend(page: &RunPage) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for (i, step) in page.steps.iter().enumerate() {
        let _ = write!(out, "<span class=\"item\">{}{}</span>", swatch(i), escape(&step.figures.step));
    }
    out.push_str("<span class=\"item\"><span class=\"swatch failed\"></span>failed</span></div>");
    out
}

fn timeline_section(page: &RunPage) -> String {
    let mut out = String::from("<section id=\"timeline\"><h2>Timeline</h2>");
    match &page.timeline {
        Timeline::Bars(bars) => {
            let _ = write!(
                out,
                "<p class=\"note\">{} tasks, a bar each on the lane of the worker that ran it, coloured by step. \
                 Hover a bar for its key, wall time, estimate and peak; drag to zoom (the memory chart follows), \
                 double-click to zoom out.</p>",
                count(bars.len() as u64)
            );
        }
        Timeline::Bands(bands) => {
            let _ = write!(
                out,
                "<p class=\"note\">{} tasks: too many for a bar each, so each step has a band over the run cut \
                 into bins of {} ({} bins). Its light area is how many of the step's tasks ran in each bin, \
                 against the step's busiest bin; its dark core is the share of the workers they kept busy. \
                 Hover for the figures; drag to zoom, double-click to zoom out.</p>",
                count(bands.tasks),
                duration(bands.bin_ms as u64),
                count(bands.bins as u64)
            );
        }
    }
    if page.unplaced > 0 {
        let _ = write!(
            out,
            "<p class=\"warn\">{} tasks that ran have no recorded worker or start time (recorded by an older \
             runner) and are not on the timeline.</p>",
            count(page.unplaced)
        );
    }
    out.push_str(&legend(page));
    out.push_str("<div id=\"timeline-chart\" class=\"chart\"></div></section>\n");
    out
}

fn memory_section(page: &RunPage) -> String {
    let memory = &page.memory;
    let mut out = String::from("<section id=\"memory\"><h2>Memory over time</h2>");
    if memory.samples.is_empty() {
        out.push_str("<p class=\"warn\">No memory samples were recorded for this run.</p>");
    } else {
        let merged = match memory.bucket_ms {
            Some(ms) => format!(
                " {} samples recorded, drawn as {} points: each the maximum over {}.",
                count(memory.recorded as u64),
                count(memory.samples.len() as u64),
                duration(ms)
            ),
            None => format!(" {} samples.", count(memory.recorded as u64)),
        };
        let _ = write!(
            out,
            "<p class=\"note\">Against the budget ({}): reserved (running tasks' reservations and resident \
             buffers, as the ledger counts them), the live heap, RSS, buffers kept for consumers, bytes \
             spilled so far, external processes' resident bytes, and running tasks (right axis). Spills are \
             marked ▼. Click a legend entry to hide it; drag to zoom.{merged}</p>",
            format_size(page.run.budget_bytes)
        );
        out.push_str("<div id=\"memory-chart\" class=\"chart\"></div>");
    }
    if page.events_total > 0 {
        let mut table = Table::new("events", &["time", "spilled", "what"]);
        for event in page.events.iter().take(EVENT_ROWS) {
            table.row(&[
                ("num", duration(event.t_ms)),
                ("num", opt_size(event.bytes)),
                ("", escape(event.detail.as_deref().unwrap_or(event.kind.as_str()))),
            ]);
        }
        let shown = table.rows;
        let more = if page.events_total > shown { format!(", the first {shown} listed") } else { String::new() };
        let _ = write!(
            out,
            "<details><summary>Spill events ({}{more})</summary>{}</details>",
            count(page.events_total as u64),
            table.finish()
        );
    }
    out.push_str("</section>\n");
    out
}

fn steps_section(page: &RunPage) -> String {
    let mut table = Table::new(
        "steps",
        &[
            "step",
            "plugin",
            "source",
            "tasks",
            "ok",
            "failed",
            "skipped",
            "task time",
            "elapsed",
            "estimate p50",
            "peak p50",
            "peak max",
            "measured by",
            "under-estimates",
            "slack",
        ],
    );
    for (i, row) in page.steps.iter().enumerate() {
        let s = &row.figures;
        let sources: Vec<&str> = s.sources.iter().map(|s| s.as_str()).collect();
        let measured: Vec<&str> = s.peak_sources.iter().map(|s| s.as_str()).collect();
        let elapsed = match (row.first_start_ms, row.last_end_ms) {
            (Some(a), Some(b)) => format!("{} → {}", duration(a), duration(b)),
            _ => "-".into(),
        };
        let retried =
            if row.retried > 0 { format!(" <small>({} retried)</small>", count(row.retried)) } else { String::new() };
        table.row(&[
            ("", format!("{}{}", swatch(i), escape(&s.step))),
            ("", escape(&s.plugin)),
            ("", escape(&sources.join(", "))),
            ("num", count(s.tasks)),
            ("num", format!("{}{retried}", count(s.ok))),
            ("num", count(s.failed)),
            ("num", count(s.skipped)),
            ("num", duration(s.wall_ms_total())),
            ("num", elapsed),
            ("num", format_size(s.estimate_p50)),
            ("num", format_size(s.peak_p50)),
            ("num", format_size(s.peak_max)),
            ("", if measured.is_empty() { "-".into() } else { escape(&measured.join(", ")) }),
            ("num", format!("{} <small>{}</small>", count(s.underestimates), share(s.underestimates, s.ok + s.failed))),
            ("num", signed_percent(s.slack)),
        ]);
    }
    format!(
        "<section id=\"steps\"><h2>Steps</h2>{}<p class=\"note\">Estimates and peaks are over the tasks that ran \
         (ok or failed), p50 the lower median; task time is the sum of the step's task wall times, elapsed when \
         its first task started and its last ended; measured by is how the peaks were read (allocator: the runner's \
         heap; cgroup: a command's memory cgroup; service+…: an interpreter's tree above its baseline).</p></section>\n",
        table.finish()
    )
}

fn failures_section(page: &RunPage) -> String {
    let mut out = String::from("<section id=\"failures\"><h2>Failures</h2>");
    if page.failures_total == 0 {
        out.push_str("<p class=\"ok\">No task failed.</p></section>\n");
        return out;
    }
    let mut table = Table::new("failures", &["step", "key", "error", "log"]);
    for f in &page.failures {
        table.row(&[
            ("", escape(&f.step)),
            ("", escape(&f.key)),
            ("", format!("<pre>{}</pre>", escape(f.error.as_deref().unwrap_or("(no error recorded)")))),
            ("", f.log_path.as_deref().map(|p| format!("<code>{}</code>", escape(p))).unwrap_or_default()),
        ]);
    }
    let shown = table.rows;
    let _ = write!(out, "<p>{} failed tasks.</p>{}", count(page.failures_total as u64), table.finish());
    if page.failures_total > shown {
        let _ = write!(
            out,
            "<p class=\"note\">The first {shown} are listed; <code>runner history --failed --run {}</code> lists them all.</p>",
            page.run.run_id
        );
    }
    out.push_str("</section>\n");
    out
}

/// The run page's chart data, in columns (a JSON array per field is a third the size of an
/// object per task).
fn run_data(page: &RunPage) -> Value {
    let steps: Vec<Value> =
        page.steps.iter().enumerate().map(|(i, s)| json!({ "name": s.figures.step, "color": step_color(i) })).collect();
    let timeline = match &page.timeline {
        Timeline::Bars(bars) => {
            let column = |f: &dyn Fn(&super::TimelineBar) -> Value| -> Value { bars.iter().map(f).collect() };
            json!({
                "kind": "bars",
                "lanes": page.lanes(),
                "end_ms": page.end_ms(),
                "step": column(&|b| b.step.into()),
                "worker": column(&|b| b.worker.into()),
                "start": column(&|b| b.start_ms.into()),
                "wall": column(&|b| b.wall_ms.into()),
                "estimate": column(&|b| b.estimate_bytes.into()),
                "peak": column(&|b| b.peak_bytes.into()),
                "attempts": column(&|b| b.attempts.into()),
                "failed": column(&|b| u8::from(b.failed).into()),
                "key": column(&|b| b.key.as_str().into()),
            })
        }
        Timeline::Bands(bands) => json!({
            "kind": "bands",
            "workers": page.lanes(),
            "bin_ms": bands.bin_ms,
            "bins": bands.bins,
            "end_ms": page.end_ms(),
            "bands": bands.steps.iter().map(|b| json!({
                "step": b.step, "tasks": b.tasks, "busy_ms": b.busy_ms,
            })).collect::<Vec<_>>(),
        }),
    };
    let samples = &page.memory.samples;
    let column = |f: &dyn Fn(&crate::store::Sample) -> u64| -> Value { samples.iter().map(f).collect() };
    let memory = json!({
        "budget": page.run.budget_bytes,
        "end_ms": page.end_ms(),
        "t": column(&|s| s.t_ms),
        "reserved": column(&|s| s.reserved_bytes),
        "live": column(&|s| s.live_bytes),
        "rss": column(&|s| s.rss_bytes),
        "resident": column(&|s| s.resident_bytes),
        "spilled": column(&|s| s.spilled_bytes),
        "external": column(&|s| s.external_bytes),
        "running": column(&|s| s.running_tasks),
    });
    let events: Vec<Value> =
        page.events.iter().map(|e| json!({ "t_ms": e.t_ms, "bytes": e.bytes, "detail": e.detail })).collect();
    json!({ "page": "run", "steps": steps, "timeline": timeline, "memory": memory, "events": events })
}
