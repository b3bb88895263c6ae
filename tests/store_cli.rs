//! The feedback store as `runner` uses it, checked against the bytes in the file: what a run
//! records for a timeline and a memory chart, keys spelled from task indices, prompt commits
//! and killed or interrupted runs, `history` telling status and failures, `prune`, and the
//! store never touching what is not its own (foreign files, `--no-record`, reading commands,
//! read-only directories, a lock held by another run).

mod common;

use common::{runner, runner_command};
use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

const TIMELINE: &str = "recipe: timeline
dims:
  member: 3
  hour: {start: 6, stop: 15, step: 3}
  lead: [1, 12, 3]
steps:
  field:
    plugin: alloc
    over: [member, hour]
    args: {bytes: 1048576, hold_ms: 40, output_bytes: 1024}
  listed:
    plugin: noop
    over: [lead, member]
  total:
    plugin: noop
    inputs: {all: field}
";

#[test]
fn a_run_records_its_timeline_memory_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(dir.path(), "timeline.yaml", TIMELINE);
    let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--workers", "2", "--cycle", "c1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let conn = Connection::open(dir.path().join("runner.db")).unwrap();

    // Keys of a step over integer dims are spelled from the index, not stored.
    let keys = |step: &str| -> BTreeSet<String> {
        let mut stmt = conn.prepare("SELECT key FROM tasks WHERE step = ?1").unwrap();
        stmt.query_map([step], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let expected: BTreeSet<String> =
        (0..3).flat_map(|m| [6, 9, 12, 15].map(|h| format!("member={m},hour={h}"))).collect();
    assert_eq!(keys("field"), expected);
    let listed: BTreeSet<String> =
        [1, 12, 3].iter().flat_map(|l| (0..3).map(move |m| format!("lead={l},member={m}"))).collect();
    assert_eq!(keys("listed"), listed);
    assert_eq!(keys("total"), BTreeSet::from([String::new()]));
    let stored_keys = |step: &str| {
        count(
            &conn,
            &format!(
                "SELECT count(t.key) FROM task_blocks b JOIN task_rows t ON t.task_id BETWEEN b.first_task_id \
                 AND b.last_task_id WHERE b.step = '{step}'"
            ),
        )
    };
    assert_eq!((stored_keys("field"), stored_keys("listed")), (0, 9), "only the list dim's keys are stored");
    // Each key's index is its position in row-major order.
    let mut stmt = conn.prepare("SELECT key, task_index FROM tasks WHERE step = 'listed'").unwrap();
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).unwrap() {
        let (key, index) = row.unwrap();
        let lead = [1, 12, 3].iter().position(|l| key.starts_with(&format!("lead={l},"))).unwrap() as i64;
        let member: i64 = key.rsplit('=').next().unwrap().parse().unwrap();
        assert_eq!(index, lead * 3 + member, "{key}");
    }

    // A timeline: who ran what when, with the peak's source.
    let mut stmt = conn
        .prepare(
            "SELECT worker, start_ms, wall_ms, end_ms, peak_source, peak_bytes, status FROM tasks WHERE step = 'field'",
        )
        .unwrap();
    let mut by_worker: Vec<Vec<(i64, i64)>> = vec![Vec::new(); 2];
    for row in stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, String>(6)?,
            ))
        })
        .unwrap()
    {
        let (worker, start, wall, end, source, peak, status) = row.unwrap();
        assert_eq!((end, source.as_str(), status.as_str()), (start + wall, "allocator", "ok"));
        assert!(wall >= 40 && peak >= 1 << 20, "wall {wall} ms, peak {peak}");
        by_worker[worker as usize].push((start, end));
    }
    for spans in &mut by_worker {
        spans.sort();
        // One worker runs one task at a time (ms rounding aside).
        assert!(spans.windows(2).all(|w| w[1].0 + 1 >= w[0].1), "overlapping tasks on one worker: {spans:?}");
    }
    assert_eq!(by_worker.iter().map(Vec::len).sum::<usize>(), 12);

    // The run row, and memory over time.
    let (total, executor, recorded, status, finished): (i64, String, i64, String, Option<String>) = conn
        .query_row("SELECT tasks_total, executor, recorded_ms, status, finished_at FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    assert_eq!((total, executor.as_str(), status.as_str()), (22, "local", "ok"));
    assert!(finished.is_some());
    assert!(recorded >= count(&conn, "SELECT max(end_ms) FROM tasks"));
    let mut stmt =
        conn.prepare("SELECT t_ms, rss_bytes, live_bytes, reserved_bytes FROM samples ORDER BY t_ms").unwrap();
    let samples: Vec<(i64, i64, i64, i64)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect();
    assert!(samples.len() >= 2, "{samples:?}");
    assert!(samples.iter().all(|s| s.1 > 0 && s.2 > 0), "RSS and live heap are sampled: {samples:?}");
    assert!(samples.iter().any(|s| s.3 >= 1 << 20), "a reservation of a running task shows: {samples:?}");
}

/// Runs `runner` on a recipe of `tasks` tasks of `hold_ms` each, one worker at a time, and
/// calls `watch` with the store's connection and the child until it returns true.
fn watch_run(
    dir: &Path,
    tasks: u32,
    hold_ms: u32,
    mut watch: impl FnMut(&Connection, &mut std::process::Child) -> bool,
) {
    let recipe = write(
        dir,
        "slow.yaml",
        &format!(
            "recipe: slow\ndims:\n  i: {tasks}\nsteps:\n  wait:\n    plugin: alloc\n    over: [i]\n    args: {{bytes: 4096, hold_ms: {hold_ms}}}\n"
        ),
    );
    let mut child = runner_command(dir, &["run", recipe.to_str().unwrap(), "--workers", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let db = dir.join("runner.db");
    let started = Instant::now();
    while !db.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "the run never created its store");
        std::thread::sleep(Duration::from_millis(5));
    }
    let conn = Connection::open(&db).unwrap();
    loop {
        assert!(started.elapsed() < Duration::from_secs(60), "the run did not get there in time");
        if watch(&conn, &mut child) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn rows_now(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM task_rows", [], |r| r.get(0)).unwrap_or(0)
}

#[test]
fn rows_are_committed_as_tasks_finish_and_a_killed_run_ends_where_its_rows_end() {
    let dir = tempfile::tempdir().unwrap();
    // 150 ms tasks one after another: with rows committed as they come, each count is seen.
    let mut seen = BTreeSet::new();
    watch_run(dir.path(), 12, 150, |conn, child| {
        seen.insert(rows_now(conn));
        if seen.len() >= 6 {
            // SIGKILL, as an abort() or a stack overflow in a plugin would end it.
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        false
    });
    let committed = *seen.last().unwrap();
    assert!(seen.contains(&1) && seen.contains(&2) && seen.contains(&3), "rows came in one by one: {seen:?}");

    let conn = Connection::open(dir.path().join("runner.db")).unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM runs WHERE status = 'running'"), 1);
    // The next open (here by a run with --no-record: it must not write; then by `history`,
    // which reads) shows it killed; a recording open marks it.
    let history = runner(dir.path(), &["history"]);
    assert!(text(&history.stdout).contains("killed"), "{}", text(&history.stdout));
    assert_eq!(count(&conn, "SELECT count(*) FROM runs WHERE status = 'running'"), 1, "history wrote nothing");
    let prune = runner(dir.path(), &["prune", "--keep", "5"]);
    assert_eq!(prune.status.code(), Some(0), "{}", text(&prune.stderr));
    let (status, started, finished, recorded, ok): (String, String, Option<String>, i64, i64) = conn
        .query_row("SELECT status, started_at, finished_at, recorded_ms, tasks_ok FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    assert_eq!(status, "killed");
    let rows = rows_now(&conn);
    assert!(rows >= committed && ok == rows, "{rows} rows, {ok} counted ok, {committed} seen before the kill");
    let span = chrono::DateTime::parse_from_rfc3339(&finished.unwrap()).unwrap()
        - chrono::DateTime::parse_from_rfc3339(&started).unwrap();
    assert_eq!(span.num_milliseconds(), recorded);
    assert!(recorded >= rows * 150, "its end is its last row's: {recorded} ms for {rows} tasks of 150 ms");
}

#[test]
fn ctrl_c_marks_the_run_interrupted_and_history_and_learning_leave_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut pid = 0;
    watch_run(dir.path(), 40, 100, |conn, child| {
        pid = child.id();
        if rows_now(conn) >= 3 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(130));
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            assert!(err.contains("interrupted"), "{err}");
            return true;
        }
        false
    });
    let conn = Connection::open(dir.path().join("runner.db")).unwrap();
    let (status, finished, ok, wall): (String, Option<String>, i64, Option<i64>) = conn
        .query_row("SELECT status, finished_at, tasks_ok, wall_ms FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!(status, "interrupted");
    assert!(finished.is_some() && wall.unwrap() >= 300);
    assert_eq!(ok, rows_now(&conn), "every finished task's row was written before the exit");
    assert!(ok >= 3);

    let history = runner(dir.path(), &["history"]);
    assert!(!text(&history.stdout).contains("interrupted"), "{}", text(&history.stdout));
    let history = runner(dir.path(), &["history", "--interrupted"]);
    assert!(text(&history.stdout).contains("interrupted"), "{}", text(&history.stdout));
    // Not learned from: the estimate still comes from the plugin.
    let recipe = dir.path().join("slow.yaml");
    let plan = runner(dir.path(), &["plan", recipe.to_str().unwrap(), "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(json["steps"][0]["estimate_source"], "plugin", "{json}");
    assert!(pid > 0);
}

const FAILING: &str = r#"recipe: failing
dims:
  i: 12
steps:
  load:
    plugin: read_npy
    over: [i]
    args: {path: "in/missing.npy"}
  smooth:
    plugin: nbhood
    over: [i]
    inputs: {field: load}
    args: {radius: 1}
"#;

#[test]
fn history_tells_status_failures_and_names_it_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(dir.path(), "failing.yaml", FAILING);
    let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--cycle", "c1"]);
    assert_eq!(out.status.code(), Some(1));

    let history = runner(dir.path(), &["history"]);
    let table = text(&history.stdout);
    let header = table.lines().next().unwrap();
    assert!(header.contains("status") && header.contains("failed") && header.contains("skipped"), "{table}");
    let load = table.lines().find(|l| l.contains(" load ")).unwrap();
    let cells: Vec<&str> = load.split_whitespace().collect();
    assert_eq!(&cells[..8], ["1", "failed", "failing", "c1", "load", "12", "12", "0"], "{table}");
    let smooth = table.lines().find(|l| l.contains(" smooth ")).unwrap();
    assert_eq!(&smooth.split_whitespace().collect::<Vec<_>>()[5..8], ["12", "0", "12"], "{table}");

    let failed = runner(dir.path(), &["history", "--failed"]);
    let listing = text(&failed.stdout);
    assert!(listing.starts_with("run 1 (failing c1, failed): 12 failed tasks\n"), "{listing}");
    let keys = listing.lines().nth(2).unwrap();
    assert_eq!(
        keys.split_whitespace().take(10).collect::<Vec<_>>(),
        (0..10).map(|i| format!("i={i}")).collect::<Vec<_>>(),
        "sorted by index: {listing}"
    );
    assert!(keys.ends_with("… and 2 more"), "{listing}");
    assert_eq!(listing.matches("load, 12 tasks:").count(), 1, "identical errors grouped: {listing}");

    for (args, wanted) in [
        (&["history", "--recipe", "failnig"][..], "did you mean `failing`?"),
        (&["history", "--step", "smoth"][..], "did you mean `smooth`?"),
        (&["history", "--last", "0"][..], "0"),
    ] {
        let out = runner(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(wanted), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn prune_keeps_the_last_runs_and_shrinks_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "many.yaml",
        "recipe: many\ndims:\n  i: 20000\nsteps:\n  s:\n    plugin: noop\n    over: [i]\n",
    );
    for cycle in ["c1", "c2", "c3", "c4"] {
        let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--cycle", cycle]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let db = dir.path().join("runner.db");
    let before = std::fs::metadata(&db).unwrap().len();
    let out = runner(dir.path(), &["prune", "--keep", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("pruned 3 runs (60000 task rows)"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("reclaiming the space"), "{}", text(&out.stderr));
    let after = std::fs::metadata(&db).unwrap().len();
    assert!(after * 2 < before, "{before} → {after} bytes");
    let conn = Connection::open(&db).unwrap();
    let cycles: String = conn.query_row("SELECT group_concat(cycle) FROM runs", [], |r| r.get(0)).unwrap();
    assert_eq!(cycles, "c4");
    assert_eq!(count(&conn, "SELECT count(*) FROM tasks"), 20000);
    assert_eq!(count(&conn, "SELECT count(*) FROM task_rows"), 20000);
    for table in ["task_blocks", "step_dims", "samples"] {
        assert_eq!(
            count(&conn, &format!("SELECT count(*) FROM {table} WHERE run_id != (SELECT run_id FROM runs)")),
            0,
            "{table}"
        );
    }
    let out = runner(dir.path(), &["prune", "--before", "2000-01-01"]);
    assert!(text(&out.stdout).starts_with("nothing to prune"), "{}", text(&out.stdout));
    let out = runner(dir.path(), &["prune"]);
    assert_eq!(out.status.code(), Some(2), "--keep or --before is required");
    let out = runner(dir.path(), &["prune", "--keep", "0"]);
    assert_eq!(out.status.code(), Some(2), "--keep 0 would delete every run");
    // An empty file is no store to prune, and is not made into one.
    std::fs::write(dir.path().join("empty.db"), "").unwrap();
    let out = runner(dir.path(), &["prune", "--keep", "1", "--db", "empty.db"]);
    assert!(text(&out.stderr).contains("no feedback store at empty.db"), "{}", text(&out.stderr));
    assert_eq!(std::fs::metadata(dir.path().join("empty.db")).unwrap().len(), 0);
    let out = runner(dir.path(), &["prune", "--before", "yesterday"]);
    assert_eq!(out.status.code(), Some(2), "a bad date is a usage error: {}", text(&out.stderr));
    // Both: only runs older than the date go, and at least the last N stay.
    let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--cycle", "c5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = runner(dir.path(), &["prune", "--keep", "2", "--before", "2999-01-01"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("nothing to prune"), "the last 2 stay: {}", text(&out.stdout));
    let out = runner(dir.path(), &["prune", "--keep", "1", "--before", "2999-01-01"]);
    assert!(text(&out.stdout).starts_with("pruned 1 run "), "{}", text(&out.stdout));
    let cycles: String = conn.query_row("SELECT group_concat(cycle) FROM runs", [], |r| r.get(0)).unwrap();
    assert_eq!(cycles, "c5");
}

#[test]
fn a_foreign_sqlite_file_is_refused_with_its_bytes_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("notes.db");
    {
        let conn = Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    }
    let recipe = write(dir.path(), "r.yaml", "recipe: r\nsteps:\n  s:\n    plugin: noop\n");
    let before = snapshot(dir.path());
    for args in [
        &["plan", recipe.to_str().unwrap(), "--db", "notes.db"][..],
        &["run", recipe.to_str().unwrap(), "--db", "notes.db"][..],
        &["run", recipe.to_str().unwrap(), "--db", "notes.db", "--no-record"][..],
        &["history", "--db", "notes.db"][..],
        &["prune", "--keep", "1", "--db", "notes.db"][..],
    ] {
        let out = runner(dir.path(), args);
        let err = text(&out.stderr);
        // Not the command line's fault: the store's (a runtime error).
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("notes.db is not a runner feedback store"), "{args:?}: {err}");
        assert_eq!(snapshot(dir.path()), before, "{args:?} changed a file or left one beside it");
    }
}

#[test]
fn reading_commands_and_no_record_write_nothing_even_in_a_read_only_directory() {
    let dir = tempfile::tempdir().unwrap();
    let recipe =
        write(dir.path(), "r.yaml", "recipe: r\ndims:\n  i: 3\nsteps:\n  s:\n    plugin: noop\n    over: [i]\n");
    assert_eq!(runner(dir.path(), &["run", recipe.to_str().unwrap()]).status.code(), Some(0));
    // A run left `running` by a process that is gone: a recording open would mark it killed.
    let conn = Connection::open(dir.path().join("runner.db")).unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    conn.execute(
        "INSERT INTO runs (recipe, cycle, started_at, status, budget_bytes, workers, pid, runner_version) \
         VALUES ('r', 'dead', '2026-11-01T00:00:00.000Z', 'running', 1, 1, ?1, 'test')",
        [dead],
    )
    .unwrap();
    drop(conn);
    assert!(!dir.path().join("runner.db-wal").exists(), "the store was closed cleanly");
    let before = snapshot(dir.path());
    let mode = |m: u32| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(m)).unwrap();
    };
    // (As root, permissions are not enforced; the snapshot still proves nothing was written.)
    mode(0o555);
    let outs = [
        runner(dir.path(), &["plan", recipe.to_str().unwrap()]),
        runner(dir.path(), &["history"]),
        runner(dir.path(), &["run", recipe.to_str().unwrap(), "--no-record"]),
    ];
    let after = snapshot(dir.path());
    mode(0o755);
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    assert!(text(&outs[1].stdout).contains("killed"), "a dead run reads as killed: {}", text(&outs[1].stdout));
    assert!(text(&outs[0].stdout).contains("history"), "plan learned from the store: {}", text(&outs[0].stdout));
    assert_eq!(after, before, "a reading command changed a file or left one beside the store");
}

#[test]
fn a_run_waits_for_another_runs_write_lock_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(dir.path(), "r.yaml", "recipe: r\nsteps:\n  s:\n    plugin: noop\n");
    assert_eq!(runner(dir.path(), &["run", recipe.to_str().unwrap()]).status.code(), Some(0));
    let conn = Connection::open(dir.path().join("runner.db")).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let child = runner_command(dir.path(), &["run", recipe.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Longer than the 10 s busy timeout a store used to give up after.
    std::thread::sleep(Duration::from_secs(11));
    conn.execute_batch("COMMIT").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("waiting for another run's write lock on runner.db…").count(), 1, "{err}");
    assert_eq!(count(&conn, "SELECT count(*) FROM runs WHERE status = 'ok'"), 2);
}

#[test]
fn store_errors_say_sqlites_reason_once() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(dir.path(), "r.yaml", "recipe: r\nsteps:\n  s:\n    plugin: noop\n");
    assert_eq!(runner(dir.path(), &["run", recipe.to_str().unwrap()]).status.code(), Some(0));
    Connection::open(dir.path().join("runner.db")).unwrap().execute_batch("DROP TABLE step_dims").unwrap();
    let out = runner(dir.path(), &["history", "--failed", "--run", "1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(err.matches("no such table: step_dims").count(), 1, "{err}");
    assert!(err.contains("runner.db"), "{err}");

    let garbage = write(dir.path(), "garbage.db", &"not a database at all, only text\n".repeat(200));
    let out = runner(dir.path(), &["history", "--db", garbage.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("garbage.db is not a runner feedback store: it is not an SQLite database"), "{err}");
}
