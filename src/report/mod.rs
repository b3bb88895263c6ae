//! `runner report`: one self-contained HTML page per run or per recipe, built from the feedback
//! store.
//!
//! A page is made in two steps. First a *model* is read from the store ([`RunPage::load`],
//! [`RecipePage::load`]): plain numbers — the run's summary, a row per step, the timeline's
//! bars (or, beyond [`Limits::timeline_bars`] tasks, per-step bands), the memory samples, the
//! failures; or, per step, estimate against actual across runs and a sample of peaks against
//! what they are learned from. Then the model is rendered ([`RunPage::to_html`],
//! [`RecipePage::to_html`]): tables in HTML, and the chart data as one JSON block that the
//! inlined script draws — uPlot (vendored in `vendor/`, MIT) for the series, a small script of
//! our own for the timeline. Nothing is fetched when the page is opened: a Content-Security-
//! Policy of `default-src 'none'` forbids it, and everything the page needs is inside it.
//!
//! The models are `run_page` and `recipe_page` (with `timeline`); their renderings are `run_html`
//! and `recipe_html`, built of the pieces in `html`. A model never calls its rendering.

mod html;
mod recipe_html;
mod recipe_page;
mod run_html;
pub mod run_page;
pub mod timeline;

use std::path::{Path, PathBuf};

pub use html::runs_count;
pub use recipe_page::{RecipePage, ScatterPoint};
pub use run_page::RunPage;
pub use timeline::TimelineBar;

use crate::store::StoreError;

/// How much a page holds at most, so that a report of any run stays small and quick to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Beyond this many tasks the timeline shows per-step bands instead of one bar per task.
    pub timeline_bars: usize,
    /// Time bins of the bands.
    pub band_bins: usize,
    /// Memory samples drawn at most; more are merged (each point the maximum of its bucket).
    pub memory_points: usize,
    /// Failed tasks listed at most (the count says how many there are).
    pub failures: usize,
    /// Spill events kept at most: marked on the chart, the first of them listed.
    pub events: usize,
    /// Points of a step's scatter across all runs of a recipe page.
    pub scatter_points: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeline_bars: 50_000,
            band_bins: 2_000,
            memory_points: 20_000,
            failures: 500,
            events: 10_000,
            scatter_points: 6_000,
        }
    }
}

/// What can keep a report from being made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no run {run_id} in {}", path.display())]
    NoSuchRun { path: PathBuf, run_id: i64 },
    #[error("no runs recorded in {}", path.display())]
    NoRuns { path: PathBuf },
    /// `error` names the file (the atomic writer's message).
    #[error("cannot write the report: {error}")]
    Write { path: PathBuf, error: std::io::Error },
}

/// Writes a page to `path`, creating its folder if needed, through the atomic writer: a
/// browser (or a report being replaced) never sees half a page.
pub fn write_page(path: &Path, page: &str) -> Result<(), ReportError> {
    crate::values::write_atomically(path, page.as_bytes())
        .map_err(|error| ReportError::Write { path: path.to_path_buf(), error })
}

#[cfg(test)]
mod tests {
    //! The page models against the store's own rows: what a page shows is what was recorded.

    use std::sync::Arc;
    use std::time::Duration;

    use rusqlite::Connection;

    use super::timeline::Timeline;

    use super::*;
    use crate::measure::PeakSource;
    use crate::plan::EstimateSource;
    use crate::store::{
        EventKind, KeyDim, RunEvent, RunFilter, RunOutcome, RunStart, RunStatus, Sample, StepKeys, Store, TaskFigures,
        TaskRecord, TaskStatus,
    };

    const MIB: u64 = 1 << 20;

    /// A bar as the `tasks` view has it: key, worker, start, wall, estimate, peak, attempts, failed.
    type BarRow = (String, u32, u64, u64, u64, u64, u32, bool);

    /// Records a run of `recipe`: step `field` over `member` (spelled from indices: no stored
    /// keys) with peaks that depend on `scale`, one of them failed and one retried; step `save`
    /// with stored keys, one skipped; samples and two spill events.
    fn record_run(store: &Store, recipe: &str, cycle: &str, scale: u64) -> i64 {
        let keys = StepKeys {
            step: "field".into(),
            dims: vec![KeyDim { name: "member".into(), value0: 0, value_step: 1, size: 12 }],
        };
        let start = RunStart { keys: vec![keys], tasks_total: 16, ..RunStart::new(recipe, cycle, 512 * MIB, 2) };
        let recorder = store.start_run(&start).unwrap();
        let field: Arc<str> = Arc::from("field");
        for i in 0..12u64 {
            let status = if i == 7 { TaskStatus::Failed } else { TaskStatus::Ok };
            recorder.record(TaskRecord {
                figures: TaskFigures {
                    attempts: if i == 3 { 2 } else { 1 },
                    input_bytes: i * MIB,
                    estimate_bytes: 10 * MIB,
                    estimate_source: if i < 6 { EstimateSource::Plugin } else { EstimateSource::History },
                    plugin_estimate_bytes: 8 * MIB + i,
                    peak_bytes: (i + 1) * scale * MIB,
                    peak_source: PeakSource::Allocator,
                    wall: Duration::from_millis(20 + i),
                    started: Duration::from_millis(i * 15),
                    ..TaskFigures::default()
                },
                task_index: Some(i),
                key: None,
                worker: (i % 2) as u32,
                error: (i == 7).then(|| "boom <b>at</b> member 7".to_string()),
                log_path: (i == 7).then(|| "/tmp/logs/field-7.log".to_string()),
                ..TaskRecord::new(field.clone(), "alloc", status)
            });
        }
        let save: Arc<str> = Arc::from("save");
        for (i, lead) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let status = if i == 3 { TaskStatus::Skipped } else { TaskStatus::Ok };
            recorder.record(TaskRecord {
                figures: TaskFigures {
                    estimate_bytes: 2 * MIB,
                    peak_bytes: if status == TaskStatus::Skipped { 0 } else { MIB },
                    wall: Duration::from_millis(if status == TaskStatus::Skipped { 0 } else { 5 }),
                    started: Duration::from_millis(200 + i as u64),
                    attempts: u32::from(status != TaskStatus::Skipped),
                    ..TaskFigures::default()
                },
                task_index: Some(i as u64),
                key: Some(format!("lead={lead}")),
                worker: 1,
                ..TaskRecord::new(save.clone(), "write_npy", status)
            });
        }
        for t in 0..5u64 {
            recorder.sample(Sample {
                t_ms: t * 100,
                reserved_bytes: t * 10 * MIB,
                live_bytes: t * 9 * MIB,
                rss_bytes: 50 * MIB + t,
                running_tasks: t % 3,
                ..Sample::default()
            });
        }
        for t in [120, 340] {
            recorder.event(RunEvent {
                t_ms: t,
                kind: EventKind::Spill,
                bytes: Some(24 * MIB),
                detail: Some("1 buffers".into()),
            });
        }
        let run_id = recorder.run_id();
        recorder
            .finish(RunOutcome {
                wall: Duration::from_millis(420),
                peak_rss_bytes: 60 * MIB,
                peak_reserved_bytes: 40 * MIB,
                ..RunOutcome::new(RunStatus::Failed)
            })
            .unwrap();
        run_id
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("runner.db")).unwrap();
        (dir, store)
    }

    #[test]
    fn the_run_page_shows_the_stores_rows() {
        let (dir, store) = store();
        let run_id = record_run(&store, "r", "c1", 1);
        let page = RunPage::load(&store, run_id, &Limits::default()).unwrap();
        assert_eq!(page.run, store.run(run_id).unwrap().unwrap());

        // The per-step table equals `runner history`'s aggregates of the same rows.
        let history = store.step_history(Some("r"), None, 1, RunFilter::default()).unwrap();
        assert_eq!(page.steps.len(), history.len());
        for (row, h) in page.steps.iter().zip(&history) {
            let (row, h) = (&row.figures, &h.figures);
            assert_eq!(row.step, h.step);
            assert_eq!(row.plugin, h.plugin);
            assert_eq!((row.tasks, row.ok, row.failed, row.skipped), (h.tasks, h.ok, h.failed, h.skipped));
            assert_eq!((row.estimate_p50, row.estimate_max), (h.estimate_p50, h.estimate_max));
            assert_eq!((row.peak_p50, row.peak_max), (h.peak_p50, h.peak_max));
            assert_eq!(row.underestimates, h.underestimates);
            assert_eq!(row.wall, h.wall);
            let (a, b) = (row.slack.unwrap(), h.slack.unwrap());
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        // And the figures themselves, from the SQL view the SPEC names.
        let (field_row, field) = (&page.steps[0], &page.steps[0].figures);
        assert_eq!(
            (field.step.as_str(), field.tasks, field.ok, field.failed, field_row.retried),
            ("field", 12, 11, 1, 1)
        );
        assert_eq!((field.peak_p50, field.peak_max, field.underestimates), (6 * MIB, 12 * MIB, 2));
        assert_eq!(field.sources, [EstimateSource::Plugin, EstimateSource::History]);
        assert_eq!((field_row.first_start_ms, field_row.last_end_ms), (Some(0), Some(11 * 15 + 31)));
        let conn = Connection::open(dir.path().join("runner.db")).unwrap();
        let (estimates, peaks): (i64, i64) = conn
            .query_row(
                "SELECT sum(estimate_bytes), sum(peak_bytes) FROM tasks WHERE run_id = ?1 AND step = 'field'",
                [run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(field.slack, Some(estimates as f64 / peaks as f64 - 1.0));
        assert_eq!(page.steps[1].figures.skipped, 1);

        // One bar per task that ran, with the key the `tasks` view spells.
        let Timeline::Bars(bars) = &page.timeline else { panic!("expected bars") };
        let mut stmt = conn
            .prepare(
                "SELECT key, worker, start_ms, wall_ms, estimate_bytes, peak_bytes, attempts, status = 'failed' \
                 FROM tasks WHERE run_id = ?1 AND status != 'skipped' ORDER BY task_id",
            )
            .unwrap();
        let rows: Vec<BarRow> = stmt
            .query_map([run_id], |r| {
                let int = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
                Ok((r.get(0)?, r.get(1)?, int(2)?, int(3)?, int(4)?, int(5)?, r.get(6)?, r.get(7)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(bars.len(), 15);
        let shown: Vec<_> = bars
            .iter()
            .map(|b| {
                (b.key.clone(), b.worker, b.start_ms, b.wall_ms, b.estimate_bytes, b.peak_bytes, b.attempts, b.failed)
            })
            .collect();
        assert_eq!(shown, rows);
        assert_eq!(bars[7].key, "member=7");
        assert_eq!((page.lanes(), page.end_ms(), page.unplaced), (2, 420, 0));

        // Memory, events, failures as stored.
        assert_eq!(page.memory.samples, store.samples(run_id).unwrap());
        assert_eq!(page.memory.bucket_ms, None);
        assert_eq!((page.events.len(), page.events_total), (2, 2));
        assert_eq!(page.failures, store.failed_tasks(run_id).unwrap());
        assert_eq!(page.failures[0].log_path.as_deref(), Some("/tmp/logs/field-7.log"));

        // The page: escaped error, the step table's figures, the data for the charts.
        let html = page.to_html();
        assert!(html.contains("boom &lt;b&gt;at&lt;/b&gt; member 7"));
        assert!(!html.contains("boom <b>"));
        assert!(html.contains("<td class=\"num\">12.0 MiB</td>"), "the field step's peak max");
        // Table rows, each with its header: steps (2), failures (1), spill events (2).
        assert_eq!(html.matches("<tr>").count(), (1 + 2) + (1 + 1) + (1 + 2));
        let data = data_of(&html);
        assert_eq!(data["timeline"]["kind"], "bars");
        assert_eq!(data["timeline"]["start"].as_array().unwrap().len(), 15);
        assert_eq!(data["timeline"]["key"][7], "member=7");
        assert_eq!(data["memory"]["t"].as_array().unwrap().len(), 5);
        assert_eq!(data["memory"]["budget"], 512 * MIB);
        assert_eq!(data["events"].as_array().unwrap().len(), 2);
    }

    /// The JSON block of a page.
    fn data_of(html: &str) -> serde_json::Value {
        let start = html.find("<script type=\"application/json\" id=\"report-data\">").unwrap();
        let rest = &html[start..];
        let json = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn past_the_bar_limit_the_timeline_is_bands_counting_every_task() {
        let (_dir, store) = store();
        let run_id = record_run(&store, "r", "c1", 1);
        let limits = Limits { timeline_bars: 10, band_bins: 50, ..Limits::default() };
        let page = RunPage::load(&store, run_id, &limits).unwrap();
        let Timeline::Bands(bands) = &page.timeline else { panic!("expected bands") };
        assert_eq!(bands.tasks, 15);
        // 420 ms in bins of ⌈420 / 50⌉ = 9 ms.
        assert_eq!((bands.bin_ms, bands.bins), (9.0, 47));
        let busy: u64 = bands.steps.iter().flat_map(|s| &s.busy_ms).map(|&b| u64::from(b)).sum();
        let ran: u64 = page.steps.iter().map(|s| s.figures.wall_ms_total()).sum();
        assert_eq!(busy, ran, "every ms of task time is in some bin");
        let data = data_of(&page.to_html());
        assert_eq!(data["timeline"]["kind"], "bands");
        assert_eq!(data["timeline"]["bands"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn tasks_without_a_recorded_start_are_counted_not_placed() {
        let (dir, store) = store();
        let run_id = record_run(&store, "r", "c1", 1);
        drop(store);
        // As rows migrated from schema 2 are: no worker, no start.
        let conn = Connection::open(dir.path().join("runner.db")).unwrap();
        let changed = conn
            .execute("UPDATE task_rows SET worker = NULL, start_ms = NULL WHERE task_index < 2 AND key IS NULL", [])
            .unwrap();
        assert_eq!(changed, 2);
        let store = Store::open_read_only(dir.path().join("runner.db")).unwrap().unwrap();
        let page = RunPage::load(&store, run_id, &Limits::default()).unwrap();
        assert_eq!((page.unplaced, page.timeline.tasks()), (2, 13));
        assert_eq!(page.steps[0].figures.tasks, 12, "the step's figures still count them");
        assert!(page.to_html().contains("2 tasks that ran have no recorded worker or start time"));
    }

    #[test]
    fn the_recipe_page_shows_each_runs_steps_as_history_does() {
        let (_dir, store) = store();
        let first = record_run(&store, "r", "c1", 1);
        record_run(&store, "other", "c1", 1);
        let second = record_run(&store, "r", "c2", 2);
        let runs = RecipePage::last_runs(&store, "r", 10).unwrap();
        assert_eq!(runs, [first, second]);
        let limits = Limits { scatter_points: 20, ..Limits::default() };
        let page = RecipePage::load(&store, "r", &runs, &limits).unwrap();
        assert_eq!(page.runs.iter().map(|r| r.cycle.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
        let history = store.step_history(Some("r"), None, 10, RunFilter::default()).unwrap();
        assert_eq!(page.steps.iter().map(|s| s.step.as_str()).collect::<Vec<_>>(), ["field", "save"]);
        for step in &page.steps {
            for (run, entry) in page.runs.iter().zip(&step.per_run) {
                let expected = history.iter().find(|h| h.run_id == run.run_id && h.figures.step == step.step);
                assert_eq!(entry.as_ref(), expected.map(|h| &h.figures));
            }
        }
        assert_eq!(page.steps[0].per_run[1].as_ref().unwrap().peak_max, 24 * MIB);
        // The scatter: the first 10 rows of each run (20 points over 2 runs), skipped ones left out.
        let field = &page.steps[0].scatter;
        assert_eq!(field.len(), 20);
        for (n, point) in field.iter().enumerate() {
            let (run, i) = ((n / 10) as u32, (n % 10) as u64);
            let expected = ScatterPoint {
                run,
                input_bytes: i * MIB,
                plugin_estimate_bytes: Some(8 * MIB + i),
                estimate_bytes: 10 * MIB,
                peak_bytes: (i + 1) * (u64::from(run) + 1) * MIB,
            };
            assert_eq!(*point, expected);
        }
        assert_eq!(page.steps[1].scatter.len(), 6, "3 of the 4 save tasks ran in each run");
        let data = data_of(&page.to_html());
        assert_eq!(data["runs"]["cycle"], serde_json::json!(["c1", "c2"]));
        assert_eq!(data["steps"][0]["peak_max"], serde_json::json!([12 * MIB, 24 * MIB]));
        assert_eq!(data["steps"][0]["scatter"]["peak"].as_array().unwrap().len(), 20);
    }
}
