//! The feedback store, checked against the bytes in the SQLite file: schema and migrations, every
//! recorded row and its values, concurrent runs on one file, a run killed with SIGKILL, and the
//! history queries.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use runner::testing::measure::PeakSource;
use runner::testing::memory::spill::ReadBack;
use runner::testing::plan::EstimateSource;
use runner::testing::store::{
    HistoryRun, RunFilter, RunOutcome, RunRecorder, RunStart, RunStatus, SCHEMA_VERSION, Sample, StepFigures,
    StepHistory, Store, StoreError, TaskFigures, TaskRecord, TaskStatus,
};
use rusqlite::Connection;

const STEPS: [&str; 3] = ["load", "threshold", "nbhood"];
const SOURCES: [EstimateSource; 3] = [EstimateSource::History, EstimateSource::Hint, EstimateSource::Plugin];

fn start(recipe: &str, cycle: &str) -> RunStart {
    RunStart::new(recipe, cycle, 8 << 30, 4)
}

fn outcome(status: RunStatus) -> RunOutcome {
    RunOutcome {
        wall: std::time::Duration::from_millis(1234),
        peak_rss_bytes: 5 << 30,
        peak_reserved_bytes: 4 << 30,
        standing_bytes: 300 << 20,
        standing_shared_bytes: 120 << 20,
        standing_services: 3,
        most_services: 4,
        spilled_bytes: 1 << 20,
        ..RunOutcome::new(status)
    }
}

/// Task `i`'s record: every field a distinct function of `i`, some beyond 32 bits.
fn task(steps: &[Arc<str>; 3], i: u64) -> TaskRecord {
    let status = match i % 50 {
        0 => TaskStatus::Failed,
        1 => TaskStatus::Skipped,
        _ => TaskStatus::Ok,
    };
    TaskRecord {
        figures: TaskFigures {
            attempts: 1 + (i % 3) as u32,
            input_bytes: i,
            estimate_bytes: 1000 + i * 7,
            estimate_source: SOURCES[(i % 3) as usize],
            plugin_estimate_bytes: 900 + i,
            peak_bytes: (i * 7919 % 100_000) << 20,
            peak_source: if i.is_multiple_of(7) { PeakSource::Cgroup } else { PeakSource::Allocator },
            output_bytes: i * 3,
            file_bytes: if i.is_multiple_of(13) { i * 5 } else { 0 },
            wall: Duration::from_millis(i % 1000),
            waited: Duration::from_micros(if i.is_multiple_of(4) { i % 1000 * 300 } else { 0 }),
            read_back: match i.is_multiple_of(9) {
                true => ReadBack {
                    bytes: (i + 1) << 12,
                    wall: Duration::from_micros(i % 1000 * 7),
                    from_disk: (i % 3) << 12,
                    disk_wall: Duration::from_micros(i % 1000 * 5),
                },
                false => ReadBack::default(),
            },
            started: Duration::from_millis(i * 2),
        },
        task_index: Some(i),
        key: Some(format!("member={},lead={}", i % 18, i / 18)),
        worker: (i % 4) as u32,
        log_path: i.is_multiple_of(11).then(|| format!("logs/{i}.log")),
        args_hash: Some(0xfeed_0000_0000_0000 + i % 5),
        inputs_hash: i.is_multiple_of(2).then_some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        output_hash: None,
        output_path: i.is_multiple_of(13).then(|| format!("out/{i}.npy")),
        error: (status == TaskStatus::Failed).then(|| format!("task {i} failed")),
        ..TaskRecord::new(steps[(i % 3) as usize].clone(), "alloc", status)
    }
}

fn step_names() -> [Arc<str>; 3] {
    STEPS.map(Arc::from)
}

/// SQLite integers are i64; byte counts here are non-negative.
fn u64_at(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<u64> {
    row.get::<_, i64>(index).map(|v| u64::try_from(v).unwrap())
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Checks that run `run_id`'s rows are exactly tasks `0..n` with the values of [`task`].
fn assert_rows(path: &Path, run_id: i64, cycle: &str, n: u64) {
    let conn = raw(path);
    let mut stmt = conn
        .prepare(
            "SELECT t.run_id, r.cycle, step, key, plugin, t.status, attempts, input_bytes, estimate_bytes, \
             estimate_source, plugin_estimate_bytes, peak_bytes, output_bytes, t.wall_ms, error, task_index, \
             peak_source, worker, start_ms, end_ms, log_path, args_hash, inputs_hash, output_hash, output_path, \
             file_bytes, (SELECT coalesce(max(w.waited_us), 0) FROM task_details AS w WHERE w.task_id = t.task_id), \
             (SELECT coalesce(max(w.read_back_bytes), 0) FROM task_details AS w WHERE w.task_id = t.task_id), \
             (SELECT max(w.read_back_us) FROM task_details AS w WHERE w.task_id = t.task_id), \
             (SELECT coalesce(max(w.read_back_disk_bytes), 0) FROM task_details AS w WHERE w.task_id = t.task_id), \
             (SELECT max(w.read_back_disk_us) FROM task_details AS w WHERE w.task_id = t.task_id) \
             FROM tasks t JOIN runs r USING (run_id) WHERE run_id = ?1 ORDER BY input_bytes",
        )
        .unwrap();
    let mut rows = stmt.query([run_id]).unwrap();
    let steps = step_names();
    let mut i = 0u64;
    while let Some(row) = rows.next().unwrap() {
        let want = task(&steps, i);
        assert_eq!(row.get::<_, i64>(0).unwrap(), run_id);
        assert_eq!(row.get::<_, String>(1).unwrap(), cycle);
        assert_eq!(row.get::<_, String>(2).unwrap(), &*want.step, "row {i}");
        assert_eq!(row.get::<_, String>(3).unwrap(), want.key.unwrap());
        assert_eq!(row.get::<_, String>(4).unwrap(), want.plugin);
        assert_eq!(row.get::<_, String>(5).unwrap(), want.status.as_str());
        assert_eq!(row.get::<_, u32>(6).unwrap(), want.figures.attempts);
        assert_eq!(u64_at(row, 7).unwrap(), want.figures.input_bytes, "rows are missing before {i}");
        assert_eq!(u64_at(row, 8).unwrap(), want.figures.estimate_bytes);
        assert_eq!(row.get::<_, String>(9).unwrap(), want.figures.estimate_source.as_str());
        assert_eq!(u64_at(row, 10).unwrap(), want.figures.plugin_estimate_bytes);
        assert_eq!(u64_at(row, 11).unwrap(), want.figures.peak_bytes);
        assert_eq!(u64_at(row, 12).unwrap(), want.figures.output_bytes);
        assert_eq!(u64_at(row, 13).unwrap(), want.figures.wall_ms());
        assert_eq!(row.get::<_, Option<String>>(14).unwrap(), want.error);
        assert_eq!(row.get::<_, Option<i64>>(15).unwrap(), Some(i as i64));
        assert_eq!(row.get::<_, String>(16).unwrap(), want.figures.peak_source.as_str());
        assert_eq!(row.get::<_, u32>(17).unwrap(), want.worker);
        assert_eq!(u64_at(row, 18).unwrap(), want.figures.start_ms());
        assert_eq!(u64_at(row, 19).unwrap(), want.figures.start_ms() + want.figures.wall_ms());
        assert_eq!(row.get::<_, Option<String>>(20).unwrap(), want.log_path);
        let hash = |index: usize| row.get::<_, Option<i64>>(index).unwrap().map(|h| h as u64);
        assert_eq!(hash(21), want.args_hash);
        assert_eq!(hash(22), want.inputs_hash.filter(|&h| h != 0));
        assert_eq!(hash(23), want.output_hash);
        assert_eq!(row.get::<_, Option<String>>(24).unwrap(), want.output_path);
        assert_eq!(u64_at(row, 25).unwrap(), want.figures.file_bytes);
        assert_eq!(u64_at(row, 26).unwrap(), want.figures.waited.as_micros() as u64);
        let read_back = want.figures.read_back;
        assert_eq!(u64_at(row, 27).unwrap(), read_back.bytes);
        let read_back_us = (read_back.bytes > 0).then_some(read_back.wall.as_micros() as i64);
        assert_eq!(row.get::<_, Option<i64>>(28).unwrap(), read_back_us, "a read of under a µs is kept as 0");
        assert_eq!(u64_at(row, 29).unwrap(), read_back.from_disk);
        let disk_us = (read_back.from_disk > 0).then_some(read_back.disk_wall.as_micros() as i64);
        assert_eq!(row.get::<_, Option<i64>>(30).unwrap(), disk_us);
        i += 1;
    }
    assert_eq!(i, n, "run {run_id} has {i} rows, expected {n}");
}

/// Records tasks `range` from `threads` threads sharing the recorder.
fn record_range(recorder: &RunRecorder, range: std::ops::Range<u64>, threads: u64) {
    let steps = step_names();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (steps, range) = (&steps, range.clone());
            scope.spawn(move || {
                for i in range.skip(t as usize).step_by(threads as usize) {
                    recorder.record(task(steps, i));
                }
            });
        }
    });
}

#[test]
fn schema_version_tables_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 12);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    drop(store);

    let conn = raw(&path);
    let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let page: u32 = conn.pragma_query_value(None, "page_size", |r| r.get(0)).unwrap();
    assert_eq!(page, runner::testing::store::PAGE_SIZE);
    let columns = |table: &str| -> Vec<String> {
        let mut stmt = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')")).unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let runs = columns("runs");
    for column in [
        "run_id",
        "recipe",
        "cycle",
        "started_at",
        "finished_at",
        "status",
        "budget_bytes",
        "workers",
        "wall_ms",
        "peak_rss_bytes",
        "peak_reserved_bytes",
        "spilled_bytes",
        "pid",
        "proc_start",
        "boot_id",
        "pid_ns",
        "executor",
        "tasks_total",
        "oversized",
        "spill_count",
        "resumed_from",
        "recorded_ms",
        "vars",
        "wall_us_rest",
        "spill_us",
        "standing_bytes",
        "standing_shared_bytes",
        "standing_services",
        "warm_services",
        "most_services",
    ] {
        assert!(runs.iter().any(|c| c == column), "runs has no column {column}: {runs:?}");
    }
    let tasks = columns("tasks");
    for column in [
        "task_id",
        "run_id",
        "step",
        "key",
        "plugin",
        "status",
        "attempts",
        "input_bytes",
        "estimate_bytes",
        "estimate_source",
        "plugin_estimate_bytes",
        "peak_bytes",
        "output_bytes",
        "wall_ms",
        "error",
        "worker",
        "start_ms",
        "end_ms",
        "log_path",
        "peak_source",
        "task_index",
        "args_hash",
        "inputs_hash",
        "output_hash",
        "output_path",
        "file_bytes",
    ] {
        assert!(tasks.iter().any(|c| c == column), "tasks has no column {column}: {tasks:?}");
    }
    // The µs past `wall_ms`, which the view leaves out (SPEC's columns) and predictions read.
    assert!(columns("task_rows").iter().any(|c| c == "wall_us_rest"));
    // And what a task waited for its service, which a prediction takes out of its time: a
    // detail, as only a service's tasks wait.
    assert!(columns("task_details").iter().any(|c| c == "waited_us"));
    // And what a task took to read its spilled inputs back, and of that from disk, likewise.
    for column in ["read_back_bytes", "read_back_us", "read_back_disk_bytes", "read_back_disk_us"] {
        assert!(columns("task_details").iter().any(|c| c == column), "{column}");
    }
    for (table, wanted) in [
        (
            "samples",
            &[
                "run_id",
                "t_ms",
                "reserved_bytes",
                "live_bytes",
                "rss_bytes",
                "resident_bytes",
                "spilled_bytes",
                "running_tasks",
                "external_bytes",
            ][..],
        ),
        ("events", &["run_id", "t_ms", "kind", "bytes", "detail"][..]),
    ] {
        let found = columns(table);
        for column in wanted {
            assert!(found.iter().any(|c| c == column), "{table} has no column {column}: {found:?}");
        }
    }
    let id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).unwrap();
    assert_eq!(id, runner::testing::store::APPLICATION_ID);
}

#[test]
fn an_empty_file_is_migrated_and_reopening_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("r", "c1")).unwrap();
    record_range(&recorder, 0..10, 1);
    recorder.finish(outcome(RunStatus::Ok)).unwrap();
    drop(store);
    let schema = |path: &Path| -> Vec<String> {
        let conn = raw(path);
        let mut stmt = conn.prepare("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let before = schema(&path);
    for _ in 0..3 {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(store.runs(None, 10).unwrap().len(), 1);
    }
    assert_eq!(schema(&path), before);
    assert_eq!(count(&raw(&path), "SELECT count(*) FROM tasks"), 10);
}

#[test]
fn a_file_from_a_newer_runner_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    drop(Store::open(&path).unwrap());
    raw(&path).pragma_update(None, "user_version", 99).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::TooNew { found: 99, known: SCHEMA_VERSION, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("schema version 99") && message.contains("newer"), "{message}");
    // The file is left as it was.
    let version: u32 = raw(&path).pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, 99);
}

#[test]
fn files_that_are_not_runner_stores_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    raw(&other).execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    let err = Store::open(&other).unwrap_err();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert!(err.to_string().contains("other.db"), "{err}");
    assert_eq!(count(&raw(&other), "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"), 1);

    let text = dir.path().join("text.db");
    std::fs::write(&text, "this is not a database, just some text that is long enough to have a header\n".repeat(20))
        .unwrap();
    let err = Store::open(&text).unwrap_err();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert!(err.to_string().contains("text.db"), "{err}");
}

#[test]
fn a_hundred_thousand_rows_land_with_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("big", "2026-11-01T00Z")).unwrap();
    let run_id = recorder.run_id();
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!((row.status, row.finished_at.as_deref()), (RunStatus::Running, None));

    record_range(&recorder, 0..100_000, 4);
    let written = recorder.finish(outcome(RunStatus::Failed)).unwrap();
    assert_eq!(written.rows, 100_000);
    assert!(written.batches >= 10, "batches of at most 10k rows: {written:?}");

    assert_rows(&path, run_id, "2026-11-01T00Z", 100_000);
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Failed);
    assert!(row.finished_at.is_some());
    assert_eq!(
        (row.wall_ms, row.peak_rss_bytes, row.peak_reserved_bytes, row.standing_bytes, row.spilled_bytes),
        (Some(1234), Some(5 << 30), Some(4 << 30), Some(300 << 20), Some(1 << 20))
    );
    assert_eq!((row.standing_shared_bytes, row.standing_services), (Some(120 << 20), Some(3)));
    // 3 interpreters stood at its peak of the 4 it started: read as holding all 4, each the
    // others' own share (60 MiB) beside the pages they share.
    assert_eq!(row.most_services, Some(4));
    let started = row.standing_of_started();
    assert_eq!((started.bytes, started.shared, started.services), (360 << 20, 120 << 20, 4));
    assert_eq!((row.budget_bytes, row.workers, row.pid), (8 << 30, 4, std::process::id()));
    let steps = step_names();
    let tasks: Vec<_> = (0..100_000).map(|i| task(&steps, i)).collect();
    let of = |s: TaskStatus| tasks.iter().filter(|t| t.status == s).count() as u64;
    assert_eq!(row.tasks_ok, Some(of(TaskStatus::Ok)));
    assert_eq!(row.tasks_failed, Some(of(TaskStatus::Failed)));
    assert_eq!(row.tasks_skipped, Some(of(TaskStatus::Skipped)));
    let under = tasks
        .iter()
        .filter(|t| t.status != TaskStatus::Skipped && t.figures.peak_bytes > t.figures.estimate_bytes)
        .count() as u64;
    assert_eq!(row.underestimates, Some(under));
    // The same, straight from the file.
    let conn = raw(&path);
    let status: String = conn.query_row("SELECT status FROM runs WHERE run_id = ?1", [run_id], |r| r.get(0)).unwrap();
    assert_eq!(status, "failed");

    // The blocks cover every row exactly once, each with rows of its own run and step only.
    assert_eq!(count(&conn, &format!("SELECT sum(tasks) FROM task_blocks WHERE run_id = {run_id}")), 100_000);
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT count(DISTINCT t.task_id) FROM task_blocks AS b JOIN tasks AS t \
                 ON t.task_id BETWEEN b.first_task_id AND b.last_task_id \
                 WHERE b.run_id = {run_id} AND t.run_id = b.run_id AND t.step = b.step"
            )
        ),
        100_000
    );
    assert_eq!(count(&conn, "SELECT sum(last_task_id - first_task_id + 1 - tasks) FROM task_blocks"), 0);
    // Each step streams back all its rows, each task's rows in the order its thread recorded them.
    for (s, step) in STEPS.iter().enumerate() {
        let mut seen = Vec::new();
        store.task_history("big", step, 1, None, |_, t| seen.push(t.input_bytes)).unwrap();
        let mut by_thread = vec![Vec::new(); 4];
        for &i in &seen {
            by_thread[(i % 4) as usize].push(i);
        }
        assert!(by_thread.iter().all(|v| v.is_sorted()), "{step}: rows out of recording order");
        seen.sort();
        assert_eq!(seen, (0..100_000).filter(|i| i % 3 == s as u64).collect::<Vec<_>>(), "{step}");
    }
}

#[test]
fn two_runs_recording_into_one_file_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let barrier = Barrier::new(2);
    let runs: Vec<(i64, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|n| {
                let (path, barrier) = (&path, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    // Both open (and so migrate) the new file at the same moment.
                    let cycle = format!("cycle-{n}");
                    let opened = Store::open(path).and_then(|store| store.start_run(&start("shared", &cycle)));
                    // Met whatever the open gave, so that one side failing never leaves the
                    // other waiting here for ever.
                    barrier.wait();
                    let recorder = opened.unwrap();
                    let run_id = recorder.run_id();
                    record_range(&recorder, 0..50_000, 2);
                    let written = recorder.finish(outcome(RunStatus::Ok)).unwrap();
                    assert_eq!(written.rows, 50_000);
                    (run_id, cycle)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_ne!(runs[0].0, runs[1].0);
    for (run_id, cycle) in &runs {
        assert_rows(&path, *run_id, cycle, 50_000);
    }
    let conn = raw(&path);
    assert_eq!(count(&conn, "SELECT count(*) FROM tasks"), 100_000);
    assert_eq!(count(&conn, "SELECT count(*) FROM runs WHERE status = 'ok' AND finished_at IS NOT NULL"), 2);
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

/// Kills the child if the test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child of [`a_run_killed_mid_way_leaves_a_consistent_file`]: records rows as fast as it
/// can and prints how many are committed, until it is killed. Does nothing in a normal test run.
#[test]
fn sigkill_child() {
    let Some(path) = std::env::var_os("STORE_CHILD_DB") else { return };
    let store = Store::open(PathBuf::from(path)).unwrap();
    let recorder = store.start_run(&start("killed", "c-kill")).unwrap();
    println!("\nSTORE_RUN {}", recorder.run_id());
    let steps = step_names();
    let started = Instant::now();
    let mut reported = 0;
    for i in 0.. {
        recorder.record(task(&steps, i));
        if i % 1000 == 0 {
            let committed = recorder.committed();
            if committed != reported {
                println!("STORE_COMMITTED {committed}");
                reported = committed;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "the parent never killed this child");
        }
    }
}

#[test]
fn a_run_killed_mid_way_leaves_a_consistent_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["sigkill_child", "--exact", "--nocapture", "--test-threads=1"])
            .env("STORE_CHILD_DB", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut run_id = None;
    let mut committed = 0u64;
    while committed < 40_000 {
        let line = lines.next().expect("the child stopped early").unwrap();
        if let Some(id) = line.strip_prefix("STORE_RUN ") {
            run_id = Some(id.parse::<i64>().unwrap());
        } else if let Some(n) = line.strip_prefix("STORE_COMMITTED ") {
            committed = n.parse().unwrap();
        }
    }
    let run_id = run_id.unwrap();

    // A run whose process is alive is never marked killed, even by another process's open.
    let store = Store::open(&path).unwrap();
    assert!(store.killed_at_open().is_empty());
    assert_eq!(store.run(run_id).unwrap().unwrap().status, RunStatus::Running);
    drop(store);

    // SIGKILL while the writer is busy (the child records faster than it writes), at a point in
    // its batch cycle that varies from run to run.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    std::thread::sleep(Duration::from_millis(u64::from(nanos % 50)));
    child.0.kill().unwrap();
    child.0.wait().unwrap();

    let conn = raw(&path);
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let (status, finished): (String, Option<String>) = conn
        .query_row("SELECT status, finished_at FROM runs WHERE run_id = ?1", [run_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!((status.as_str(), finished), ("running", None), "unfinished until the next open notices");
    drop(conn);

    let store = Store::open(&path).unwrap();
    assert_eq!(store.killed_at_open(), [run_id]);
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!((row.status, row.wall_ms), (RunStatus::Killed, None));
    // It ended where its committed rows end: its last task's end after its start.
    let finished = chrono::DateTime::parse_from_rfc3339(row.finished_at.as_deref().unwrap()).unwrap();
    let started = chrono::DateTime::parse_from_rfc3339(&row.started_at).unwrap();
    let recorded = row.recorded_ms.unwrap();
    assert_eq!((finished - started).num_milliseconds() as u64, recorded);
    let rows_committed = row.tasks_ok.unwrap() + row.tasks_failed.unwrap() + row.tasks_skipped.unwrap();
    assert!(rows_committed >= committed, "its rows are counted: {rows_committed}");
    let last_end: u64 =
        count(&raw(&path), &format!("SELECT max(end_ms) FROM tasks WHERE run_id = {run_id} AND status != 'skipped'"))
            as u64;
    assert_eq!(recorded, last_end);
    drop(store);

    // Every row committed before the kill is there, with no gap: a prefix of what was recorded.
    let conn = raw(&path);
    let rows = count(&conn, &format!("SELECT count(*) FROM tasks WHERE run_id = {run_id}")) as u64;
    assert!(rows >= committed, "{rows} rows, but {committed} were committed before the kill");
    println!("killed after {committed} rows were committed: {rows} rows in the file");
    assert_rows(&path, run_id, "c-kill", rows);
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    // A second open finds nothing more to mark.
    assert!(Store::open(&path).unwrap().killed_at_open().is_empty());
}

#[test]
fn a_recorder_dropped_without_finish_writes_its_rows_and_marks_the_run_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("r", "c")).unwrap();
    let run_id = recorder.run_id();
    record_range(&recorder, 0..1000, 1);
    drop(recorder);
    assert_rows(&path, run_id, "c", 1000);
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!((row.status, row.wall_ms), (RunStatus::Aborted, None));
}

#[test]
fn a_write_error_is_returned_with_the_path_and_the_rows_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.db");
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("r", "c")).unwrap();
    record_range(&recorder, 0..100, 1);
    while recorder.committed() < 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    raw(&path).execute_batch("DROP TABLE task_rows").unwrap();
    // More than the channel holds: senders must not block on a writer that stopped writing.
    record_range(&recorder, 100..100_100, 2);
    let err = recorder.finish(outcome(RunStatus::Ok)).unwrap_err();
    assert!(matches!(err, StoreError::Write { lost: 100_000, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()) && message.contains("100000 task rows"), "{message}");
}

/// A hand-built task: (estimate, peak, status, source).
type HandTask = (u64, u64, TaskStatus, EstimateSource);

/// Records a run of `steps`, each a list of tasks.
fn hand_run(store: &Store, recipe: &str, cycle: &str, steps: &[(&str, &[HandTask])]) -> i64 {
    let recorder = store.start_run(&start(recipe, cycle)).unwrap();
    for (step, tasks) in steps {
        let step: Arc<str> = Arc::from(*step);
        for (i, &(estimate, peak, status, source)) in tasks.iter().enumerate() {
            recorder.record(TaskRecord {
                figures: TaskFigures {
                    input_bytes: 10 * i as u64,
                    estimate_bytes: estimate,
                    estimate_source: source,
                    plugin_estimate_bytes: estimate / 2,
                    peak_bytes: peak,
                    wall: Duration::from_millis(5),
                    attempts: u32::from(status != TaskStatus::Skipped),
                    ..TaskFigures::default()
                },
                task_index: Some(i as u64),
                key: Some(format!("i={i}")),
                ..TaskRecord::new(step.clone(), "alloc", status)
            });
        }
    }
    let run_id = recorder.run_id();
    recorder.finish(outcome(RunStatus::Ok)).unwrap();
    run_id
}

#[test]
fn history_queries_aggregate_a_hand_built_history() {
    use EstimateSource::{Hint as HINT, History as HISTORY, Plugin as PLUGIN};
    use TaskStatus::{Failed, Ok, Skipped};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("runner.db")).unwrap();
    let load: &[_] = &[(10, 10, Ok, HINT), (10, 20, Ok, HINT), (10, 30, Ok, HINT)];
    let smooth_c2: &[_] = &[(64, 32, Ok, PLUGIN), (64, 48, Ok, PLUGIN)];
    let smooth_c3: &[_] = &[
        (100, 50, Ok, HISTORY),
        (100, 150, Ok, HISTORY),
        (200, 210, Ok, HISTORY),
        (300, 100, Failed, PLUGIN),
        (400, 0, Skipped, HISTORY),
    ];
    let c1 = hand_run(&store, "precip", "c1", &[("load", load)]);
    let c2 = hand_run(&store, "precip", "c2", &[("load", load), ("smooth", smooth_c2)]);
    let other = hand_run(&store, "other", "c2", &[("smooth", smooth_c3)]);
    let c3 = hand_run(&store, "precip", "c3", &[("load", load), ("smooth", smooth_c3)]);
    // A run in progress: shown by `runner history`, not used by the estimator.
    let running = store.start_run(&start("precip", "c4")).unwrap();
    running.record(TaskRecord {
        figures: TaskFigures {
            estimate_bytes: 1,
            estimate_source: HISTORY,
            plugin_estimate_bytes: 1,
            peak_bytes: 1,
            attempts: 1,
            ..TaskFigures::default()
        },
        ..TaskRecord::new(Arc::from("smooth"), "alloc", Ok)
    });
    while running.committed() < 1 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c4 = running.run_id();

    // runner history --recipe precip --last 3
    let history = store.step_history(Some("precip"), None, 3, RunFilter::default()).unwrap();
    let shape: Vec<(i64, &str)> = history.iter().map(|h| (h.run_id, h.figures.step.as_str())).collect();
    assert_eq!(shape, [(c2, "load"), (c2, "smooth"), (c3, "load"), (c3, "smooth"), (c4, "smooth")]);
    let c3_smooth = &history[3];
    assert_eq!(
        c3_smooth,
        &StepHistory {
            run_id: c3,
            recipe: "precip".into(),
            cycle: "c3".into(),
            started_at: c3_smooth.started_at.clone(),
            run_status: RunStatus::Ok,
            figures: StepFigures {
                step: "smooth".into(),
                plugin: "alloc".into(),
                sources: vec![EstimateSource::History, EstimateSource::Plugin],
                peak_sources: vec![PeakSource::Allocator],
                tasks: 5,
                ok: 3,
                failed: 1,
                skipped: 1,
                estimate_p50: 100,
                estimate_max: 300,
                peak_p50: 100,
                peak_max: 210,
                underestimates: 2,
                slack: Some(700.0 / 510.0 - 1.0),
                wall: Duration::from_millis(25),
                ..StepFigures::default()
            },
        }
    );
    assert_eq!(c3_smooth.figures.sources_text(), "history,plugin");
    assert_eq!(c3_smooth.figures.peak_sources_text(), "allocator");
    let c3_load = &history[2].figures;
    assert_eq!(
        (c3_load.tasks, c3_load.estimate_p50, c3_load.estimate_max, c3_load.peak_p50, c3_load.peak_max),
        (3, 10, 10, 20, 30)
    );
    assert_eq!((c3_load.underestimates, c3_load.slack, c3_load.sources_text().as_str()), (2, Some(-0.5), "hint"));
    let c2_smooth = &history[1].figures;
    assert_eq!((c2_smooth.estimate_p50, c2_smooth.peak_p50, c2_smooth.peak_max), (64, 32, 48));
    assert_eq!((c2_smooth.underestimates, c2_smooth.slack), (0, Some(128.0 / 80.0 - 1.0)));
    assert_eq!(history[4].run_status, RunStatus::Running);
    assert!(chrono::DateTime::parse_from_rfc3339(&c3_smooth.started_at).is_ok(), "{}", c3_smooth.started_at);

    // runner history --step smooth: only runs that have the step; any recipe when none is given.
    let smooth = store.step_history(None, Some("smooth"), 10, RunFilter::default()).unwrap();
    let smooth: Vec<(i64, &str)> = smooth.iter().map(|h| (h.run_id, h.recipe.as_str())).collect();
    assert_eq!(smooth, [(c2, "precip"), (other, "other"), (c3, "precip"), (c4, "precip")]);
    let precip_load = store.step_history(Some("precip"), Some("load"), 10, RunFilter::default()).unwrap();
    assert_eq!(precip_load.iter().map(|h| h.run_id).collect::<Vec<_>>(), [c1, c2, c3]);

    // The estimator's view: finished runs with the step, oldest first, rows in recording order.
    let mut rows = Vec::new();
    let runs = store
        .task_history("precip", "smooth", 5, None, |run, t| {
            assert_eq!(run.run_id, t.run_id);
            rows.push((
                t.run_index,
                run.cycle.clone(),
                t.estimate_bytes,
                t.peak_bytes,
                t.status,
                t.task_index.unwrap(),
            ));
            assert_eq!(t.plugin_estimate_bytes, Some(t.estimate_bytes / 2));
            assert_eq!(t.input_bytes, 10 * t.task_index.unwrap());
        })
        .unwrap();
    assert_eq!(
        runs.iter().map(|r: &HistoryRun| (r.run_id, r.cycle.as_str())).collect::<Vec<_>>(),
        [(c2, "c2"), (c3, "c3")]
    );
    let mut expected = Vec::new();
    for (index, (cycle, tasks)) in [("c2", smooth_c2), ("c3", smooth_c3)].into_iter().enumerate() {
        for (i, &(estimate, peak, status, _)) in tasks.iter().enumerate() {
            expected.push((index, cycle.to_string(), estimate, peak, status, i as u64));
        }
    }
    assert_eq!(rows, expected);

    // The last run only, at most 2 rows of it.
    let mut limited = Vec::new();
    let runs = store.task_history("precip", "smooth", 1, Some(2), |_, t| limited.push(t.peak_bytes)).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run_id, c3);
    assert_eq!(limited, [50, 150]);
    // No history at all.
    let none = store.task_history("precip", "nothing", 5, None, |_, _| panic!("no rows")).unwrap();
    assert!(none.is_empty());

    running.finish(outcome(RunStatus::Ok)).unwrap();
    let runs = store.runs(Some("precip"), 10).unwrap();
    assert_eq!(runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), [c1, c2, c3, c4]);
}

/// Threads recording in [`timed_run`]: `STORE_PRODUCERS`, or 2.
fn producers() -> u64 {
    std::env::var("STORE_PRODUCERS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// Records `n` rows of [`task`] from [`producers`] threads into a new store in `dir`.
fn timed_run(dir: &Path, n: u64) -> (PathBuf, runner::testing::store::RunWritten, Duration, Duration) {
    let path = dir.join("runner.db");
    let store = Store::open(&path).unwrap();
    let steps = step_names();
    let tasks: Vec<_> = (0..n).map(|i| task(&steps, i)).collect();
    let recorder = store.start_run(&start("throughput", "c")).unwrap();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for chunk in tasks.chunks(n.div_ceil(producers()) as usize) {
            let recorder = &recorder;
            scope.spawn(move || {
                for t in chunk {
                    recorder.record(t.clone());
                }
            });
        }
    });
    let recorded = started.elapsed();
    let written = recorder.finish(outcome(RunStatus::Ok)).unwrap();
    assert_eq!(written.rows, n);
    (path, written, recorded, started.elapsed())
}

/// `cargo test --release --test store -- --ignored --nocapture throughput`: the time to write
/// 1.2M rows, on the writer thread and end to end. Prints; asserts nothing about time.
#[test]
#[ignore]
fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1_200_000;
    let (path, written, recorded, total) = timed_run(dir.path(), n);
    println!(
        "{n} rows: writer thread CPU {:.3} s ({:.2} M rows/s), busy writing {:.3} s wall, {} batches; \
         recorded in {:.3} s, all committed after {:.3} s; file {:.1} MiB",
        written.cpu_time.as_secs_f64(),
        n as f64 / written.cpu_time.as_secs_f64() / 1e6,
        written.write_time.as_secs_f64(),
        written.batches,
        recorded.as_secs_f64(),
        total.as_secs_f64(),
        std::fs::metadata(&path).unwrap().len() as f64 / (1 << 20) as f64,
    );
}

/// `cargo test --release --test store -- --ignored --nocapture history_over`: the history
/// queries over one run of 1.2M rows. Prints; asserts nothing about time.
#[test]
#[ignore]
fn history_over_a_large_run() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1_200_000;
    let (path, _, _, _) = timed_run(dir.path(), n);
    let store = Store::open(&path).unwrap();
    let started = Instant::now();
    let history = store.step_history(Some("throughput"), None, 1, RunFilter::default()).unwrap();
    println!("step_history over {n} rows: {:.3} s", started.elapsed().as_secs_f64());
    assert_eq!(history.iter().map(|h| h.figures.tasks).sum::<u64>(), n);
    let mut streamed = 0u64;
    let started = Instant::now();
    store.task_history("throughput", "load", 1, None, |_, _| streamed += 1).unwrap();
    println!("task_history streamed {streamed} rows: {:.3} s", started.elapsed().as_secs_f64());
    let run_id = store.runs(None, 1).unwrap()[0].run_id;
    let started = Instant::now();
    let read = store.timeline(run_id, |_| {}).unwrap();
    println!("timeline streamed {read} rows: {:.3} s", started.elapsed().as_secs_f64());
}

/// `wall_ms` is truncated; a task's time is kept to the µs for what reads it back (a
/// prediction of a cycle of sub-millisecond tasks), and rows from before read as the middle of
/// their ms.
#[test]
fn task_and_run_times_read_back_to_the_microsecond() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("quick", "c")).unwrap();
    let step: Arc<str> = Arc::from("s");
    recorder.record_all(
        [431, 2_999, 1_000_001]
            .into_iter()
            .enumerate()
            .map(|(i, us)| TaskRecord {
                figures: TaskFigures { wall: Duration::from_micros(us), attempts: 1, ..TaskFigures::default() },
                task_index: Some(i as u64),
                ..TaskRecord::new(step.clone(), "noop", TaskStatus::Ok)
            })
            .collect(),
    );
    let wall = Duration::from_micros(4_321);
    let run_id = recorder.finish(RunOutcome { wall, ..outcome(RunStatus::Ok) }).unwrap().run_id;
    let read = |store: &Store| {
        let mut walls = Vec::new();
        store.step_tasks(run_id, "s", 10, |t| walls.push((t.wall_ms, t.wall_us))).unwrap();
        let run = store.run(run_id).unwrap().unwrap();
        (walls, (run.wall_ms, run.wall_us))
    };
    assert_eq!(read(&store), (vec![(0, 431), (2, 2_999), (1000, 1_000_001)], (Some(4), Some(4_321))));
    drop(store);
    // Rows from before schema versions 6 and 7: the middle of their whole ms.
    raw(&path).execute("UPDATE task_rows SET wall_us_rest = NULL", []).unwrap();
    raw(&path).execute("UPDATE runs SET wall_us_rest = NULL", []).unwrap();
    let before = (vec![(0, 500), (2, 2_500), (1000, 1_000_500)], (Some(4), Some(4_500)));
    assert_eq!(read(&Store::open(&path).unwrap()), before);
}

/// A dataset builder's step of noop tasks over one integer dim, as `runner run` records it: keys
/// spelled from indices, figures that repeat their block's. The file must stay under 30 bytes a
/// task (SPEC users record 10⁶-task runs).
#[test]
fn a_large_step_of_quick_tasks_costs_under_30_bytes_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let n: u64 = 200_000;
    let keys = runner::testing::store::StepKeys {
        step: "cache".into(),
        dims: vec![runner::testing::store::KeyDim { name: "file".into(), value0: 0, value_step: 1, size: n }],
    };
    let recorder = store.start_run(&RunStart { keys: vec![keys], tasks_total: n, ..start("builder", "c") }).unwrap();
    let step: Arc<str> = Arc::from("cache");
    for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
        recorder.record_all(
            chunk
                .iter()
                .map(|&i| TaskRecord {
                    figures: TaskFigures {
                        estimate_bytes: 65536,
                        started: Duration::from_millis(i / 400),
                        attempts: 1,
                        ..TaskFigures::default()
                    },
                    task_index: Some(i),
                    key: None,
                    worker: (i % 2) as u32,
                    ..TaskRecord::new(step.clone(), "noop", TaskStatus::Ok)
                })
                .collect(),
        );
    }
    recorder.finish(outcome(RunStatus::Ok)).unwrap();
    drop(store);
    let conn = raw(&path);
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    let pages = count(&conn, "PRAGMA page_count") - count(&conn, "PRAGMA freelist_count");
    let bytes = pages * count(&conn, "PRAGMA page_size");
    let per_task = bytes as f64 / n as f64;
    println!("{n} tasks: {bytes} bytes, {per_task:.1} bytes a task");
    assert!(per_task <= 30.0, "{per_task:.1} bytes a task");
    // And every key reads back through the view.
    assert_eq!(count(&conn, "SELECT count(*) FROM tasks WHERE key = 'file=' || task_index"), n as i64);
    // The report's read: every task, keys spelled on demand.
    let store = Store::open_read_only(&path).unwrap().unwrap();
    let run_id = store.runs(None, 1).unwrap()[0].run_id;
    let spelling = store.step_keys(run_id).unwrap().remove("cache").unwrap();
    let started = Instant::now();
    let mut seen = 0u64;
    let read = store
        .timeline(run_id, |t| {
            assert_eq!((t.step, t.key, t.task_index), ("cache", None, Some(seen)));
            assert_eq!((t.worker, t.start_ms, t.estimate_bytes), (Some((seen % 2) as u32), Some(seen / 400), 65536));
            seen += 1;
        })
        .unwrap();
    println!("timeline of {read} tasks read in {:.3} s", started.elapsed().as_secs_f64());
    assert_eq!((read, seen), (n, n));
    assert_eq!(spelling.key(12345), "file=12345");
}

#[test]
fn an_interrupt_commits_what_was_recorded_and_a_dropped_recorder_never_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    // Interrupted from another thread: every row queued before is committed, then the run row.
    let recorder = store.start_run(&start("r", "c")).unwrap();
    let handle = recorder.interrupt_handle().unwrap();
    record_range(&recorder, 0..5000, 2);
    let interrupted =
        RunOutcome { wall: std::time::Duration::from_millis(77), ..RunOutcome::new(RunStatus::Interrupted) };
    assert!(std::thread::spawn(move || handle.interrupt(interrupted, Duration::from_secs(10))).join().unwrap());
    let run_id = recorder.run_id();
    assert_rows(&path, run_id, "c", 5000);
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!((row.status, row.wall_ms, row.tasks_ok.is_some()), (RunStatus::Interrupted, Some(77), true));
    assert!(row.finished_at.is_some());
    drop(recorder);
    assert_eq!(store.run(run_id).unwrap().unwrap().status, RunStatus::Interrupted, "and it stays so");

    // A handle still alive does not keep a dropped recorder's writer waiting.
    let recorder = store.start_run(&start("r", "c2")).unwrap();
    let _handle = recorder.interrupt_handle().unwrap();
    record_range(&recorder, 0..10, 1);
    let run_id = recorder.run_id();
    drop(recorder);
    assert_eq!(store.run(run_id).unwrap().unwrap().status, RunStatus::Aborted);
    assert_rows(&path, run_id, "c2", 10);
}

#[test]
fn resume_reads_back_each_tasks_hashes_and_output_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let keys = runner::testing::store::StepKeys {
        step: "read".into(),
        dims: vec![runner::testing::store::KeyDim { name: "i".into(), value0: 10, value_step: 5, size: 100 }],
    };
    let recorder = store.start_run(&RunStart { keys: vec![keys], ..start("resumable", "c1") }).unwrap();
    let run_id = recorder.run_id();
    record_range(&recorder, 0..300, 1);
    // A step whose keys are spelled from indices.
    let read_step: Arc<str> = Arc::from("read");
    recorder.record_all(
        (0..100)
            .map(|i| TaskRecord {
                task_index: Some(i),
                key: None,
                args_hash: Some(42),
                output_hash: Some(u64::MAX - i),
                ..TaskRecord::new(read_step.clone(), "read_npy", TaskStatus::Ok)
            })
            .collect(),
    );
    recorder.finish(outcome(RunStatus::Failed)).unwrap();
    assert_eq!(store.last_run_of("resumable", "c1").unwrap().map(|r| r.run_id), Some(run_id));
    assert_eq!(store.last_run_of("resumable", "c2").unwrap(), None);
    let steps = step_names();
    let mut read = Vec::new();
    assert_eq!(store.recorded_tasks(run_id, |t| read.push(t)).unwrap(), 400);
    for t in &read {
        let i = t.task_index.unwrap();
        if t.step == "read" {
            assert_eq!(
                (t.key.as_str(), t.args_hash, t.output_hash),
                (&*format!("i={}", 10 + 5 * i), Some(42), Some(u64::MAX - i))
            );
            continue;
        }
        let want = task(&steps, i);
        assert_eq!(t.key, want.key.unwrap());
        let inputs_hash = want.inputs_hash.filter(|&h| h != 0);
        assert_eq!((t.finished, t.args_hash, t.inputs_hash), (want.status.made_output(), want.args_hash, inputs_hash));
        assert_eq!((t.output_hash, &t.output_path), (want.output_hash, &want.output_path));
    }
    assert_eq!(read.iter().filter(|t| t.step == "read").count(), 100);
}

#[test]
fn a_run_that_ended_without_its_closing_figures_keeps_what_its_samples_say() {
    // An interrupted run exits without its closing line: the next open marks it killed, and
    // what it had spilled and reserved come from its samples rather than reading 0.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runner.db");
    let store = Store::open(&path).unwrap();
    let recorder = store.start_run(&start("r", "c1")).unwrap();
    let run_id = recorder.run_id();
    for (t_ms, spilled_bytes, reserved_bytes) in
        [(100, 0, 300 << 20), (200, 489 << 20, 900 << 20), (300, 489 << 20, 500 << 20)]
    {
        recorder.sample(Sample {
            t_ms,
            reserved_bytes,
            live_bytes: 0,
            rss_bytes: 0,
            resident_bytes: 0,
            spilled_bytes,
            running_tasks: 1,
            external_bytes: 0,
        });
    }
    drop(recorder);
    drop(store);
    // As a killed process leaves it: still running, owned by a process that is gone.
    raw(&path)
        .execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, spilled_bytes = NULL, \
             peak_reserved_bytes = NULL, pid = 2147483000 WHERE run_id = ?1",
            [run_id],
        )
        .unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.killed_at_open(), [run_id]);
    let row = store.run(run_id).unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Killed);
    assert_eq!((row.spilled_bytes, row.peak_reserved_bytes), (Some(489 << 20), Some(900 << 20)));
}
