//! Rendering the page models as one HTML document: tables written here, chart data as one JSON
//! block (`<script type="application/json">`, never executed) that `assets/report.js` draws with
//! the vendored uPlot. Every text from the store is escaped; the JSON cannot close its script
//! element (`<` is written `\u003c`).

use std::fmt::Write as _;

use runner_plugin::size::format_size;
use serde_json::{Value, json};

use super::recipe_page::RecipePage;
use super::run_page::RunPage;
use super::timeline::Timeline;
use crate::store::{RunRow, RunStatus};

const UPLOT_JS: &str = include_str!("vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uPlot.min.css");
const REPORT_JS: &str = include_str!("assets/report.js");
const REPORT_CSS: &str = include_str!("assets/report.css");

/// Nothing may be fetched: no script, style, image, font, frame or connection from anywhere;
/// only the page's own inline scripts and styles run.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// Spill events listed in the run page's table (all those kept are marked on the chart).
const EVENT_ROWS: usize = 100;

/// Step colours, in step order (then again): distinct on white and for most colour blindness.
const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
    "#1f77b4", "#8c564b",
];

pub(super) fn step_color(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// `text` with `& < > " '` escaped, for element content and quoted attributes alike.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside a `<script>` element: no `<` (so no `</script>` or `<!--`), and no
/// `>` or `&` either, written as the JSON escapes they are equal to.
pub(super) fn script_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

/// `1,200,001`.
pub(super) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `45 ms`, `1.23 s`, `12.3 s`, `2 min 05 s`, `1 h 02 min`.
pub(super) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..10_000 => format!("{:.2} s", ms as f64 / 1e3),
        10_000..60_000 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms / 1_000 % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// `+12%`, `-3%`, `-` for none.
pub(super) fn signed_percent(fraction: Option<f64>) -> String {
    fraction.map_or("-".into(), |f| format!("{:+.0}%", f * 100.0))
}

/// `1.5%` of `whole` (`-` when there is no whole).
pub(super) fn share(part: u64, whole: u64) -> String {
    if whole == 0 { "-".into() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

fn opt_size(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), format_size)
}

fn opt_count(n: Option<u64>) -> String {
    n.map_or("-".into(), count)
}

/// The run's slack over its tasks that ran (from the run row's sums).
fn run_slack(run: &RunRow) -> Option<f64> {
    match (run.estimate_bytes_sum, run.peak_bytes_sum) {
        (Some(e), Some(p)) if p > 0 => Some(e as f64 / p as f64 - 1.0),
        _ => None,
    }
}

/// Tasks of the run that ran (ok or failed).
fn ran(run: &RunRow) -> u64 {
    run.tasks_ok.unwrap_or(0) + run.tasks_failed.unwrap_or(0)
}

/// The run's wall time, or how far its records reach when it did not finish.
fn run_wall(run: &RunRow) -> String {
    match (run.wall_ms, run.recorded_ms) {
        (Some(ms), _) => duration(ms),
        (None, Some(ms)) => format!("{} recorded (not finished)", duration(ms)),
        (None, None) => "-".into(),
    }
}

fn status_badge(status: RunStatus) -> String {
    format!("<span class=\"status status-{status}\">{status}</span>")
}

/// The whole document: head with the policy and styles, `body`, the data, the scripts.
fn document(title: &str, body: &str, data: &Value) -> String {
    let data = script_json(data);
    let mut page = String::with_capacity(body.len() + data.len() + UPLOT_JS.len() + REPORT_JS.len() + 16_384);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"runner {version}\">\n\
         <title>{title}</title>\n<style>\n{UPLOT_CSS}\n{REPORT_CSS}</style>\n</head>\n<body>\n\
         <noscript><p class=\"warn\">The charts of this page need JavaScript; its tables do not.</p></noscript>\n\
         <div id=\"report-error\" class=\"error\" hidden></div>\n{body}\n\
         <script type=\"application/json\" id=\"report-data\">{data}</script>\n\
         <script>\n{UPLOT_JS}\n</script>\n<script>\n{REPORT_JS}</script>\n</body>\n</html>\n",
        title = escape(title),
        version = env!("CARGO_PKG_VERSION"),
    );
    page
}

/// A table: a header row, then rows of cells already rendered (a cell with `class="num"` is
/// right-aligned by the style sheet).
struct Table {
    html: String,
    rows: usize,
}

impl Table {
    fn new(class: &str, headers: &[&str]) -> Table {
        Table::with_id(class, None, headers)
    }

    fn with_id(class: &str, id: Option<&str>, headers: &[&str]) -> Table {
        let id = id.map(|id| format!(" id=\"{}\"", escape(id))).unwrap_or_default();
        let mut html = format!("<table class=\"{class}\"{id}><thead><tr>");
        for h in headers {
            let _ = write!(html, "<th>{}</th>", escape(h));
        }
        html.push_str("</tr></thead><tbody>");
        Table { html, rows: 0 }
    }

    /// Adds a row of `(class, inner html)` cells.
    fn row(&mut self, cells: &[(&str, String)]) {
        self.html.push_str("<tr>");
        for (class, inner) in cells {
            if class.is_empty() {
                let _ = write!(self.html, "<td>{inner}</td>");
            } else {
                let _ = write!(self.html, "<td class=\"{class}\">{inner}</td>");
            }
        }
        self.html.push_str("</tr>");
        self.rows += 1;
    }

    /// The table, in a box that scrolls sideways on a narrow window.
    fn finish(self) -> String {
        format!("<div class=\"scroll\">{}</tbody></table></div>", self.html)
    }
}

fn swatch(index: usize) -> String {
    format!("<span class=\"swatch\" style=\"background:{}\"></span>", step_color(index))
}

/// A figure of the summary grid.
fn figure(out: &mut String, label: &str, value: &str) {
    let _ = write!(
        out,
        "<div class=\"figure\"><div class=\"label\">{}</div><div class=\"value\">{value}</div></div>",
        escape(label)
    );
}

pub(super) fn run_page(page: &RunPage) -> String {
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
        &format!("{}{}", opt_size(run.peak_reserved_bytes), of_budget(run.peak_reserved_bytes)),
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

fn legend(page: &RunPage) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for (i, step) in page.steps.iter().enumerate() {
        let _ = write!(out, "<span class=\"item\">{}{}</span>", swatch(i), escape(&step.step));
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
            "under-estimates",
            "slack",
        ],
    );
    for (i, s) in page.steps.iter().enumerate() {
        let sources: Vec<&str> = s.sources.iter().map(|s| s.as_str()).collect();
        let elapsed = match (s.first_start_ms, s.last_end_ms) {
            (Some(a), Some(b)) => format!("{} → {}", duration(a), duration(b)),
            _ => "-".into(),
        };
        let retried =
            if s.retried > 0 { format!(" <small>({} retried)</small>", count(s.retried)) } else { String::new() };
        table.row(&[
            ("", format!("{}{}", swatch(i), escape(&s.step))),
            ("", escape(&s.plugin)),
            ("", escape(&sources.join(", "))),
            ("num", count(s.tasks)),
            ("num", format!("{}{retried}", count(s.ok))),
            ("num", count(s.failed)),
            ("num", count(s.skipped)),
            ("num", duration(s.wall_ms_total)),
            ("num", elapsed),
            ("num", format_size(s.estimate_p50)),
            ("num", format_size(s.peak_p50)),
            ("num", format_size(s.peak_max)),
            ("num", format!("{} <small>{}</small>", count(s.underestimates), share(s.underestimates, s.ok + s.failed))),
            ("num", signed_percent(s.slack)),
        ]);
    }
    format!(
        "<section id=\"steps\"><h2>Steps</h2>{}<p class=\"note\">Estimates and peaks are over the tasks that ran \
         (ok or failed), p50 the lower median; task time is the sum of the step's task wall times, elapsed when \
         its first task started and its last ended.</p></section>\n",
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
        page.steps.iter().enumerate().map(|(i, s)| json!({ "name": s.step, "color": step_color(i) })).collect();
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

pub(super) fn recipe_page(page: &RecipePage) -> String {
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

/// `1 run`, `24 runs`.
pub fn runs_count(n: usize) -> String {
    format!("{n} run{}", if n == 1 { "" } else { "s" })
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
                ("", escape(&h.estimate_sources)),
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
            let figure = |f: &dyn Fn(&crate::store::StepHistory) -> Value| -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_cannot_break_out_of_their_element() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        let json = script_json(&json!({ "key": "</script><script>alert(1)</script>", "t": "&<!--" }));
        assert!(!json.contains('<') && !json.contains('>') && !json.contains('&'), "{json}");
        let back: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["key"], "</script><script>alert(1)</script>");
        assert_eq!(back["t"], "&<!--");
    }

    #[test]
    fn figures_are_spelled_for_people() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_200_001), "1,200,001");
        assert_eq!(duration(45), "45 ms");
        assert_eq!(duration(1_234), "1.23 s");
        assert_eq!(duration(12_345), "12.3 s");
        assert_eq!(duration(125_000), "2 min 05 s");
        assert_eq!(duration(3_720_000), "1 h 02 min");
        assert_eq!(signed_percent(Some(0.123)), "+12%");
        assert_eq!(signed_percent(Some(-0.03)), "-3%");
        assert_eq!(signed_percent(None), "-");
        assert_eq!(share(1, 8), "12.5%");
        assert_eq!(share(1, 0), "-");
    }

    #[test]
    fn the_policy_forbids_every_fetch() {
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'none';"));
        for allowed in ["script-src 'unsafe-inline'", "style-src 'unsafe-inline'", "img-src data:"] {
            assert!(CONTENT_SECURITY_POLICY.contains(allowed));
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("http"));
        // The vendored script fetches nothing itself.
        for call in ["fetch(", "XMLHttpRequest", "importScripts", "sendBeacon", "WebSocket"] {
            assert!(!UPLOT_JS.contains(call) && !REPORT_JS.contains(call), "{call}");
        }
    }
}
