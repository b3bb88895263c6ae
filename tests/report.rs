//! `runner report` pages of real runs, rendered in headless Chromium after their scripts ran:
//! the timeline has a bar per task that ran (or a band per step past 50k tasks), the memory
//! chart its series, the tables a row per step, failure, spill event, run and cycle; the pages
//! draw without a script error, make no network request, and a screenshot of each is saved in
//! `target/report-screenshots/` (a CI artifact).
//!
//! Chromium is required: `.ci/install-chromium` installs Debian's (CI runs it). `CHROMIUM`
//! names another binary.

mod common;

use common::runner;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::Value as Json;

/// How long one Chromium render may take before the test gives up on it.
const RENDER_TIMEOUT: Duration = Duration::from_secs(120);

fn ok(output: &std::process::Output) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        output.status.success(),
        "exit {:?}\n{}\n{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The Chromium binary: `CHROMIUM`, or `chromium` / `chromium-browser` on PATH.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "these tests render report pages in headless Chromium, and no `chromium` is on PATH: install it with \
         `.ci/install-chromium` (Debian's package: `apt-get install -y chromium`), or set CHROMIUM to a Chromium binary"
    );
}

/// What Chromium made of a page.
struct Rendered {
    /// The DOM after the page's scripts ran.
    dom: String,
    /// Requests the page itself started (not the browser's own), from Chromium's net log.
    page_requests: Vec<String>,
}

/// Renders `page` headless: its DOM after scripts ran (with its net log) and a screenshot.
fn render(page: &Path, screenshot: &Path) -> Rendered {
    let rendered = render_dom(page);
    let work = tempfile::tempdir().unwrap();
    chromium_run(work.path(), page, &[format!("--screenshot={}", screenshot.display()), "--hide-scrollbars".into()]);
    let size = std::fs::metadata(screenshot).map_or(0, |m| m.len());
    assert!(size > 10_000, "no screenshot at {}", screenshot.display());
    rendered
}

/// Renders `page` headless: its DOM after scripts ran, and the requests it made.
fn render_dom(page: &Path) -> Rendered {
    let work = tempfile::tempdir().unwrap();
    let netlog = work.path().join("netlog.json");
    let dom = chromium_run(
        work.path(),
        page,
        &[
            "--dump-dom".to_string(),
            format!("--log-net-log={}", netlog.display()),
            "--net-log-capture-mode=Everything".into(),
        ],
    );
    let log: Json = serde_json::from_str(&std::fs::read_to_string(&netlog).unwrap()).expect("Chromium's net log");
    Rendered { dom, page_requests: page_requests(&log) }
}

/// Runs Chromium headless on `page` in a fresh profile under `work`, returning its stdout.
/// Nothing leaves the machine whatever Chromium tries: every host name resolves to nothing and
/// any connection goes to a proxy on a closed local port (Chromium itself calls home at start;
/// the net log check below tells those calls from the page's).
fn chromium_run(work: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir_in(work).unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--window-size=1280,1600",
            "--virtual-time-budget=15000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting chromium");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > RENDER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish rendering {} in {RENDER_TIMEOUT:?}", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium failed on {}: {status}\n{err}", page.display());
    out
}

/// The URLs of requests a page started: in Chromium's net log a request the browser makes
/// for itself has the initiator "not an origin"; one a page makes has the page's origin (a
/// file page's is "null") and its network isolation key names it.
fn page_requests(log: &Json) -> Vec<String> {
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_i64().expect("net log constants");
    let mut urls = Vec::new();
    for event in log["events"].as_array().expect("net log events") {
        if event["type"].as_i64() != Some(start_job) {
            continue;
        }
        let params = &event["params"];
        let initiator = params["initiator"].as_str();
        let isolation = params["network_isolation_key"].as_str().unwrap_or("");
        let by_browser = initiator == Some("not an origin") && !isolation.contains("file://");
        if let Some(url) = params["url"].as_str()
            && !by_browser
        {
            urls.push(url.to_string());
        }
    }
    urls
}

/// Where screenshots go: `target/report-screenshots/`.
fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The part of `dom` from the element whose start tag contains `marker` to the end of the
/// element (`</tag>`), for the tags these pages use (no nesting of the same tag).
fn element<'a>(dom: &'a str, marker: &str, tag: &str) -> &'a str {
    let start = dom.find(marker).unwrap_or_else(|| panic!("no {marker} in the page"));
    let start = dom[..start].rfind(&format!("<{tag}")).unwrap();
    let end = dom[start..].find(&format!("</{tag}>")).unwrap_or_else(|| panic!("{marker} is not closed"));
    &dom[start..start + end]
}

/// Body rows of the table whose start tag contains `marker`.
fn table_rows(dom: &str, marker: &str) -> usize {
    let table = element(dom, marker, "table");
    let body = &table[table.find("<tbody>").expect("a tbody")..];
    body.matches("<tr>").count()
}

/// What every page must be: drawn without a script error, under a policy that forbids
/// fetching, with no request of its own and no attribute pointing anywhere outside it.
fn assert_self_contained(rendered: &Rendered) {
    let dom = &rendered.dom;
    assert!(
        dom.contains("<body data-rendered=\"yes\">"),
        "the scripts did not finish drawing: {}",
        element(dom, "report-error", "div")
    );
    assert!(dom.contains("http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"));
    assert_eq!(rendered.page_requests, Vec::<String>::new(), "the page made requests");
    for attribute in [" src=\"", " href=\"", " action=\"", "url("] {
        for (at, _) in dom.match_indices(attribute) {
            let value = &dom[at + attribute.len()..];
            assert!(
                value.starts_with('#') || value.starts_with("data:"),
                "an attribute points outside the page: {}",
                &dom[at..at + 80]
            );
        }
    }
}

/// A copy of `page` with `script` run after the page's own (the page's policy allows inline
/// scripts), which drives the charts as a person would and writes what it saw into the DOM.
fn with_script(page: &Path, script: &str) -> PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let at = html.rfind("</body>").unwrap();
    let copy = page.with_extension("driven.html");
    std::fs::write(&copy, format!("{}<script>{script}</script>{}", &html[..at], &html[at..])).unwrap();
    copy
}

/// The value of attribute `name` of the body.
fn body_attribute(dom: &str, name: &str) -> String {
    let body = &dom[dom.find("<body").unwrap()..];
    let body = &body[..body.find('>').unwrap()];
    let at = body.find(&format!("{name}=\"")).unwrap_or_else(|| panic!("no {name} on the body: {body}"));
    let value = &body[at + name.len() + 2..];
    value[..value.find('"').unwrap()].to_string()
}

/// Drags across the timeline from 25% to 50% of its width and reads both charts' ranges, hovers
/// the first bar and reads the tooltip, then double-clicks and reads the ranges again.
const DRIVE_RUN_PAGE: &str = "setTimeout(function () {
  var report = window.runnerReport;
  var plot = document.querySelector('svg.timeline svg.plot');
  var box = plot.getBoundingClientRect();
  var at = function (f) { return { clientX: box.left + box.width * f, clientY: box.top + 5, button: 0, bubbles: true }; };
  var ranges = function () {
    var t = report.timeline.range(), x = report.memory.scales.x;
    return [t[0], t[1], x.min * 1000, x.max * 1000].map(function (v) { return v.toFixed(1); }).join(' ');
  };
  document.body.setAttribute('data-before', ranges());
  plot.dispatchEvent(new MouseEvent('mousedown', at(0.25)));
  window.dispatchEvent(new MouseEvent('mousemove', at(0.4)));
  window.dispatchEvent(new MouseEvent('mouseup', at(0.5)));
  // uPlot applies a new scale when it next draws.
  setTimeout(function () {
    document.body.setAttribute('data-zoomed', ranges());
    var bar = document.querySelector('rect.bar');
    bar.dispatchEvent(new MouseEvent('mousemove', { clientX: box.left + 20, clientY: box.top + 5, bubbles: true }));
    document.body.setAttribute('data-tip', document.querySelector('#timeline-chart .tip').textContent);
    plot.dispatchEvent(new MouseEvent('dblclick', at(0.3)));
    setTimeout(function () { document.body.setAttribute('data-reset', ranges()); }, 100);
  }, 100);
}, 300);";

fn ranges(text: &str) -> Vec<f64> {
    text.split(' ').map(|v| v.parse().unwrap()).collect()
}

const RECIPE: &str = "recipe: report-test
dims:
  member: 4
  lead: [1, 3, 6]
steps:
  field:
    plugin: alloc
    over: [member, lead]
    args: {bytes: 4MiB, hold_ms: 20, output_bytes: 12MiB}
  load:
    plugin: read_npy
    over: [member]
    args: {path: \"missing/m{member}.npy\"}
  gather:
    plugin: noop
    inputs: {fields: field}
";

#[test]
fn the_run_page_of_a_real_run_draws_every_task_and_series_and_fetches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), RECIPE).unwrap();
    // 12 fields of 12 MiB gathered under 64 MiB: buffers spill. 4 loads fail.
    let run = runner(
        dir.path(),
        &[
            "run",
            "r.yaml",
            "--db",
            "r.db",
            "--budget",
            "64MiB",
            "--workers",
            "2",
            "--spill-dir",
            "spill",
            "--summary",
            "s.json",
        ],
    );
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_failed"].as_u64()), (Some(13), Some(4)));
    let printed = ok(&runner(dir.path(), &["report", "--db", "r.db", "-o", "out/run.html"]));
    assert!(printed.starts_with("wrote out/run.html (run 1: report-test "), "{printed}");
    let total = summary["tasks_total"].as_u64().unwrap();
    let skipped = summary["tasks_skipped"].as_u64().unwrap();
    assert!(
        printed.contains(&format!(", {total} tasks, 4 failed, {skipped} skipped;")),
        "as the summary counts: {printed}"
    );

    let conn = Connection::open(dir.path().join("r.db")).unwrap();
    let spills: i64 = conn.query_row("SELECT count(*) FROM events WHERE kind = 'spill'", [], |r| r.get(0)).unwrap();
    let spills = spills as usize;
    assert!(spills > 0, "the run was meant to spill");
    let page = dir.path().join("out/run.html");
    let rendered = render(&page, &screenshot_dir().join("run.png"));
    assert_self_contained(&rendered);
    let dom = &rendered.dom;

    // A bar per task that ran, the failed ones marked; a lane per worker.
    assert_eq!(dom.matches("<rect class=\"bar\"").count() + dom.matches("<rect class=\"bar failed\"").count(), 17);
    assert_eq!(dom.matches("<rect class=\"bar failed\"").count(), 4);
    assert_eq!(dom.matches("class=\"lane-label\"").count(), 2);
    // The memory chart: time and its eight series in the legend, drawn on a canvas.
    let memory = element(dom, "id=\"memory-chart\"", "section");
    assert_eq!(memory.matches("class=\"u-series").count(), 9, "time + 8 series");
    for label in ["budget", "reserved", "live heap", "RSS", "resident buffers", "spilled", "external", "running tasks"]
    {
        assert!(memory.contains(&format!(">{label}</div>")), "no {label} in the legend");
    }
    assert!(memory.contains("<canvas"));
    // Tables: a row per step, per failed task, per spill event.
    assert_eq!(table_rows(dom, "class=\"steps\""), 3);
    let steps = element(dom, "class=\"steps\"", "table");
    assert!(steps.contains("<th>measured by</th>") && steps.contains("<td>allocator</td>"), "{steps}");
    assert_eq!(table_rows(dom, "class=\"failures\""), 4);
    assert_eq!(table_rows(dom, "class=\"events\""), spills);
    assert!(dom.contains("reading missing/m0.npy"));
    // The figures are the store's: the field step's peak max, the run's budget.
    let peak_max: i64 =
        conn.query_row("SELECT max(peak_bytes) FROM tasks WHERE step = 'field'", [], |r| r.get(0)).unwrap();
    let steps = element(dom, "class=\"steps\"", "table");
    assert!(steps.contains(&runner::plugin::size::format_size(peak_max as u64)), "{steps}");
    assert!(dom.contains("64.0 MiB"));

    // Zoom and hover as a person would: the memory chart follows the timeline's zoom.
    let driven = render_dom(&with_script(&page, DRIVE_RUN_PAGE)).dom;
    let before = ranges(&body_attribute(&driven, "data-before"));
    let end = before[1];
    assert!(end >= 100.0, "the run took a while: {before:?}");
    assert_eq!(before, [0.0, end, 0.0, end], "both charts start on the whole run");
    let zoomed = ranges(&body_attribute(&driven, "data-zoomed"));
    let close = |a: f64, b: f64| (a - b).abs() <= end * 0.01;
    assert!(close(zoomed[0], end * 0.25) && close(zoomed[1], end * 0.5), "{zoomed:?} of {end}");
    assert!(close(zoomed[2], zoomed[0]) && close(zoomed[3], zoomed[1]), "the memory chart follows: {zoomed:?}");
    assert_eq!(ranges(&body_attribute(&driven, "data-reset")), before, "a double-click zooms out");
    let tip = body_attribute(&driven, "data-tip");
    let first: String = conn
        .query_row("SELECT step || ' ' || key FROM tasks WHERE status != 'skipped' ORDER BY task_id LIMIT 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(tip.starts_with(&first), "{tip} (expected {first})");
    for part in ["worker ", "start ", "wall ", "estimate ", "peak "] {
        assert!(tip.contains(part), "no {part} in the tooltip: {tip}");
    }

    // `--run ID` reports the same run.
    ok(&runner(dir.path(), &["report", "--db", "r.db", "--run", "1", "-o", "again.html"]));
    let again = std::fs::read_to_string(dir.path().join("again.html")).unwrap();
    assert_eq!(again, std::fs::read_to_string(&page).unwrap());
}

#[test]
fn a_replay_writes_the_recipe_page_of_its_cycles() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.yaml"),
        "recipe: weather-test
dims:
  member: 3
  lead: [1, 2]
vars:
  wet: 0.2
steps:
  field:
    plugin: synth
    over: [member, lead]
    args: {ny: 120, nx: 160, wet_fraction: \"{wet}\", seed: \"{cycle}/{member}/{lead}\"}
  smooth:
    plugin: nbhood
    over: [member, lead]
    inputs: {field: field}
    args: {radius: 3, shape: square}
  mean:
    plugin: mean
    over: [lead]
    inputs: {members: smooth}
",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cycles.yaml"),
        "recipe: w.yaml
cycles:
  - {id: c0, vars: {wet: 0.05}}
  - {id: c1, vars: {wet: 0.4}}
  - {id: c2, vars: {wet: 0.2}}
  - {id: c3, vars: {wet: 0.1}}
",
    )
    .unwrap();
    // A run of the same recipe before the replay is not one of its cycles.
    ok(&runner(dir.path(), &["run", "w.yaml", "--db", "w.db", "--cycle", "before", "--budget", "1GiB"]));
    ok(&runner(dir.path(), &["replay", "cycles.yaml", "--db", "w.db", "--budget", "1GiB", "--report", "replay.html"]));
    let page = dir.path().join("replay.html");
    let rendered = render(&page, &screenshot_dir().join("recipe.png"));
    assert_self_contained(&rendered);
    let dom = &rendered.dom;
    assert_eq!(table_rows(dom, "class=\"runs\""), 4, "the four replayed cycles");
    for cycle in ["c0", "c1", "c2", "c3"] {
        assert!(element(dom, "class=\"runs\"", "table").contains(&format!("<td>{cycle}</td>")));
    }
    assert!(!element(dom, "class=\"runs\"", "table").contains("<td>before</td>"));
    // Two charts of the runs, three per step, each with its legend.
    assert_eq!(dom.matches("class=\"uplot").count(), 2 + 3 * 3);
    for (step, name) in ["field", "smooth", "mean"].into_iter().enumerate() {
        assert!(element(dom, &format!("id=\"step-{step}\""), "div").contains(&format!("</span>{name} <small>")));
        assert_eq!(table_rows(dom, &format!("id=\"step-{step}-cycles\"")), 4);
    }
    // The smooth step's scatter: a choice of what peaks are plotted against, its series in the legend.
    let smooth = &dom[dom.find("id=\"step-1-scatter\"").unwrap()..dom.find("id=\"step-2\"").unwrap()];
    assert!(smooth.contains("<select class=\"basis\"><option value=\"plugin\">x: the plugin's estimate</option>"));
    for label in ["peak, earlier runs", "peak, last run", "estimate, last run"] {
        assert!(smooth.contains(&format!(">{label}</div>")), "no {label} in the scatter's legend");
    }

    // The scatter's x can be switched to input bytes.
    let driven = render_dom(&with_script(
        &page,
        "setTimeout(function () {
           var pick = document.querySelector('#step-1-scatter select.basis');
           pick.value = 'input';
           pick.dispatchEvent(new Event('change'));
           setTimeout(function () {
             var title = document.querySelector('#step-1-scatter .u-title').textContent;
             document.body.setAttribute('data-title', title);
           }, 100);
         }, 300);",
    ))
    .dom;
    assert_eq!(body_attribute(&driven, "data-title"), "peak against input bytes (24 tasks)");
    assert!(dom.contains("<div class=\"u-title\">peak against the plugin's estimate (24 tasks)</div>"));

    // `runner report --recipe` shows the last N runs, the one before the replay included.
    ok(&runner(
        dir.path(),
        &["report", "--db", "w.db", "--recipe", "weather-test", "--last", "5", "-o", "recipe.html"],
    ));
    let rendered = render(&dir.path().join("recipe.html"), &screenshot_dir().join("recipe-last5.png"));
    assert_self_contained(&rendered);
    assert_eq!(table_rows(&rendered.dom, "class=\"runs\""), 5);
}

#[test]
fn past_fifty_thousand_tasks_the_timeline_is_a_band_per_step() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "recipe: many
dims:
  file: 60000
  chunk: {group: file, size: 5}
steps:
  cache:
    plugin: noop
    over: [file]
  write_chunk:
    plugin: noop
    over: [chunk]
    inputs: {files: cache}
  finalise:
    plugin: noop
    inputs: {chunks: write_chunk}
",
    )
    .unwrap();
    ok(&runner(dir.path(), &["run", "m.yaml", "--db", "m.db", "--workers", "2"]));
    let printed = ok(&runner(dir.path(), &["report", "--db", "m.db", "-o", "m.html"]));
    assert!(printed.contains("72001 tasks"), "{printed}");
    let page = dir.path().join("m.html");
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 1 << 20, "a band per step is small: {size} bytes");
    let rendered = render(&page, &screenshot_dir().join("bands.png"));
    assert_self_contained(&rendered);
    let dom = &rendered.dom;
    assert_eq!(dom.matches("<path class=\"band\"").count(), 3);
    assert_eq!(dom.matches("<rect class=\"bar").count(), 0);
    assert!(dom.contains("72,001 tasks: too many for a bar each"));
    assert_eq!(table_rows(dom, "class=\"steps\""), 3);
}

#[test]
fn the_network_check_sees_a_page_that_fetches() {
    // The check of the tests above can fail: a page without the policy that loads an image
    // and fetches is caught (its requests go nowhere: host names resolve to nothing).
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("fetching.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><img src=\"https://example.invalid/x.png\">\
         <script>fetch('http://example.invalid/y.json').catch(() => {});</script></body></html>",
    )
    .unwrap();
    let rendered = render(&page, &dir.path().join("fetching.png"));
    let mut requests = rendered.page_requests.clone();
    requests.sort();
    assert_eq!(requests, ["http://example.invalid/y.json", "https://example.invalid/x.png"]);
}

#[test]
fn report_errors_name_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = runner(dir.path(), &["report", "--db", "none.db", "-o", "x.html"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no feedback store at none.db"));
    std::fs::write(dir.path().join("n.yaml"), "recipe: tiny\nsteps:\n  x:\n    plugin: noop\n").unwrap();
    ok(&runner(dir.path(), &["run", "n.yaml", "--db", "n.db"]));
    let out = runner(dir.path(), &["report", "--db", "n.db", "--run", "7", "-o", "x.html"]);
    assert_eq!(out.status.code(), Some(2), "a run the store does not have is a wrong argument");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no run 7 in n.db"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = runner(dir.path(), &["report", "--db", "n.db", "--recipe", "tiy", "-o", "x.html"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no runs of recipe `tiy` in n.db; did you mean `tiny`? (recipes: tiny)"), "{stderr}");
    assert_eq!(out.status.code(), Some(2));
    let out = runner(dir.path(), &["history", "--db", "n.db", "--failed", "--run", "7"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let out = runner(dir.path(), &["report", "--db", "n.db", "--last", "3", "-o", "x.html"]);
    assert_eq!(out.status.code(), Some(2), "--last needs --recipe");
    let out = runner(dir.path(), &["report", "--db", "n.db", "--run", "1", "--recipe", "tiny", "-o", "x.html"]);
    assert_eq!(out.status.code(), Some(2), "--run and --recipe conflict");
    assert!(!dir.path().join("x.html").exists());
    // The store is only read: nothing is written beside it.
    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    ok(&runner(dir.path(), &["report", "--db", "n.db", "-o", "sub/n.html"]));
    let after: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n != "sub").collect();
    assert_eq!(before.len(), after.len());
}
