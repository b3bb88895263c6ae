//! The pieces both report pages are built of: the document (policy, styles, the data block,
//! the scripts), tables, figures, escaping, and figures spelled for people. Every text from the
//! store is escaped; the JSON cannot close its script element (`<` is written `\u003c`). The pages
//! themselves are rendered by `run_html` and `recipe_html`.

use std::fmt::Write as _;

use runner_plugin::size::format_size;
use serde_json::Value;

use crate::store::{RunRow, RunStatus};

const UPLOT_JS: &str = include_str!("vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uPlot.min.css");
const REPORT_JS: &str = include_str!("assets/report.js");
const REPORT_CSS: &str = include_str!("assets/report.css");

/// Nothing may be fetched: no script, style, image, font, frame or connection from anywhere;
/// only the page's own inline scripts and styles run.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

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

pub(super) fn opt_size(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), format_size)
}

pub(super) fn opt_count(n: Option<u64>) -> String {
    n.map_or("-".into(), count)
}

/// The run's slack over its tasks that ran (from the run row's sums).
pub(super) fn run_slack(run: &RunRow) -> Option<f64> {
    match (run.estimate_bytes_sum, run.peak_bytes_sum) {
        (Some(e), Some(p)) if p > 0 => Some(e as f64 / p as f64 - 1.0),
        _ => None,
    }
}

/// Tasks of the run that ran (ok or failed).
pub(super) fn ran(run: &RunRow) -> u64 {
    run.tasks_ok.unwrap_or(0) + run.tasks_failed.unwrap_or(0)
}

/// The run's wall time, or how far its records reach when it did not finish.
pub(super) fn run_wall(run: &RunRow) -> String {
    match (run.wall_ms, run.recorded_ms) {
        (Some(ms), _) => duration(ms),
        (None, Some(ms)) => format!("{} recorded (not finished)", duration(ms)),
        (None, None) => "-".into(),
    }
}

pub(super) fn status_badge(status: RunStatus) -> String {
    format!("<span class=\"status status-{status}\">{status}</span>")
}

/// The whole document: head with the policy and styles, `body`, the data, the scripts.
pub(super) fn document(title: &str, body: &str, data: &Value) -> String {
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
pub(super) struct Table {
    html: String,
    /// Rows added so far.
    pub(super) rows: usize,
}

impl Table {
    pub(super) fn new(class: &str, headers: &[&str]) -> Table {
        Table::with_id(class, None, headers)
    }

    pub(super) fn with_id(class: &str, id: Option<&str>, headers: &[&str]) -> Table {
        let id = id.map(|id| format!(" id=\"{}\"", escape(id))).unwrap_or_default();
        let mut html = format!("<table class=\"{class}\"{id}><thead><tr>");
        for h in headers {
            let _ = write!(html, "<th>{}</th>", escape(h));
        }
        html.push_str("</tr></thead><tbody>");
        Table { html, rows: 0 }
    }

    /// Adds a row of `(class, inner html)` cells.
    pub(super) fn row(&mut self, cells: &[(&str, String)]) {
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
    pub(super) fn finish(self) -> String {
        format!("<div class=\"scroll\">{}</tbody></table></div>", self.html)
    }
}

pub(super) fn swatch(index: usize) -> String {
    format!("<span class=\"swatch\" style=\"background:{}\"></span>", step_color(index))
}

/// A figure of the summary grid.
pub(super) fn figure(out: &mut String, label: &str, value: &str) {
    let _ = write!(
        out,
        "<div class=\"figure\"><div class=\"label\">{}</div><div class=\"value\">{value}</div></div>",
        escape(label)
    );
}

/// `1 run`, `24 runs`.
pub fn runs_count(n: usize) -> String {
    format!("{n} run{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
