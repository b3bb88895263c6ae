//! The schema, as a list of migrations. `PRAGMA user_version` is the number of migrations a file
//! has had; opening applies the missing ones in one transaction. To change the schema, append a
//! migration: never edit one that has shipped.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Written into the file header (`PRAGMA application_id`) so that a runner store is recognisable
/// and another application's SQLite file is not mistaken for one: "RNNR".
pub const APPLICATION_ID: i32 = 0x524E_4E52;

/// Migration `i` (0-based) takes a file from schema version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: runs and tasks.
    "
    CREATE TABLE runs (
        run_id              INTEGER PRIMARY KEY,
        recipe              TEXT NOT NULL,
        cycle               TEXT NOT NULL,
        started_at          TEXT NOT NULL,  -- RFC 3339 UTC, milliseconds
        finished_at         TEXT,           -- NULL while running, and for a run that was killed
        status              TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'killed', 'aborted')),
        budget_bytes        INTEGER NOT NULL,
        workers             INTEGER NOT NULL,
        wall_ms             INTEGER,
        peak_rss_bytes      INTEGER,
        peak_reserved_bytes INTEGER,
        spilled_bytes       INTEGER,
        tasks_ok            INTEGER,        -- rows the run's recorder wrote, by status
        tasks_failed        INTEGER,
        tasks_skipped       INTEGER,
        underestimates      INTEGER,        -- tasks that ran with peak_bytes > estimate_bytes
        pid                 INTEGER NOT NULL,  -- the owner process, to tell a live run from a killed one
        proc_start          INTEGER,        -- its start time, clock ticks after boot (/proc/<pid>/stat)
        boot_id             TEXT,           -- /proc/sys/kernel/random/boot_id
        host                TEXT,
        runner_version      TEXT NOT NULL
    );
    CREATE INDEX runs_by_recipe ON runs (recipe, run_id);
    CREATE INDEX runs_running ON runs (status) WHERE status = 'running';

    -- One row per task. No per-row index: keeping one up to date doubles the cost of recording.
    -- Instead each batch writes a step's rows at consecutive task_ids and one task_blocks row
    -- pointing to them, so one run's rows of one step are found as a few task_id ranges.
    CREATE TABLE tasks (
        task_id               INTEGER PRIMARY KEY,
        run_id                INTEGER NOT NULL,  -- runs.run_id (no FOREIGN KEY: a check per row)
        cycle                 TEXT NOT NULL,     -- the run's (dropped by migration 2)
        step                  TEXT NOT NULL,
        key                   TEXT NOT NULL,     -- e.g. member=3,lead=12; empty for a step without dims
        plugin                TEXT NOT NULL,
        status                TEXT NOT NULL,     -- ok, failed or skipped (no CHECK: it costs a table per row)
        attempts              INTEGER NOT NULL,
        input_bytes           INTEGER NOT NULL,
        estimate_bytes        INTEGER NOT NULL,
        estimate_source       TEXT NOT NULL,     -- history, hint or plugin
        plugin_estimate_bytes INTEGER,           -- what the plugin itself estimated for this task
        peak_bytes            INTEGER NOT NULL,
        output_bytes          INTEGER NOT NULL,
        wall_ms               INTEGER NOT NULL,
        error                 TEXT
    );

    -- Where a run's rows of a step are: tasks first_task_id..=last_task_id, all of run_id and step.
    CREATE TABLE task_blocks (
        run_id        INTEGER NOT NULL,
        step          TEXT NOT NULL,
        first_task_id INTEGER NOT NULL,
        last_task_id  INTEGER NOT NULL,
        tasks         INTEGER NOT NULL,
        PRIMARY KEY (run_id, step, first_task_id)
    ) WITHOUT ROWID;
    ",
    // 2: tasks no longer repeat their run's cycle (read from `runs`): recording a
    // million-task run writes a fifth less.
    "ALTER TABLE tasks DROP COLUMN cycle;",
    // 3: what a report and `--resume` need, in compact task rows. `tasks` becomes a view over
    // `task_rows` (the per-task figures), `task_blocks` (what a step's rows share: run, step,
    // plugin, and the first row's estimate, sources and hashes, which a row repeats only when it
    // differs: NULL there means "the block's"), `task_details` (errors, paths and hashes, only
    // for the rows that have them) and `step_dims` (how a key is spelled from a task index, for
    // steps over integer dims only, whose rows then store no key). A million-task run of noop
    // tasks costs 27 bytes per task instead of 54.
    "
    CREATE TABLE runs_v3 (
        run_id              INTEGER PRIMARY KEY,
        recipe              TEXT NOT NULL,
        cycle               TEXT NOT NULL,
        started_at          TEXT NOT NULL,  -- RFC 3339 UTC, milliseconds
        finished_at         TEXT,           -- NULL while running; estimated from recorded_ms for a killed run
        status              TEXT NOT NULL
                            CHECK (status IN ('running', 'ok', 'failed', 'killed', 'aborted', 'interrupted')),
        executor            TEXT NOT NULL DEFAULT 'local',
        budget_bytes        INTEGER NOT NULL,
        workers             INTEGER NOT NULL,
        tasks_total         INTEGER,        -- tasks of the recipe (runs before version 3: rows recorded)
        wall_ms             INTEGER,
        peak_rss_bytes      INTEGER,
        peak_reserved_bytes INTEGER,
        spilled_bytes       INTEGER,
        spill_count         INTEGER,        -- buffers spilled
        spill_error         TEXT,           -- why spilling stopped, if it did
        tasks_ok            INTEGER,        -- rows the run's recorder wrote, by status
        tasks_failed        INTEGER,
        tasks_skipped       INTEGER,
        underestimates      INTEGER,        -- tasks that ran with peak_bytes > estimate_bytes
        oversized           INTEGER,        -- tasks whose estimate alone exceeded the budget (they ran alone)
        estimate_bytes_sum  INTEGER,        -- over the tasks that ran: slack = estimate / peak - 1
        peak_bytes_sum      INTEGER,
        recorded_ms         INTEGER,        -- how far into the run (ms) the committed rows and samples reach
        resumed_from        INTEGER,        -- the run a --resume continued
        pid                 INTEGER NOT NULL,  -- the owner process, to tell a live run from a killed one
        proc_start          INTEGER,        -- its start time, clock ticks after boot (/proc/<pid>/stat)
        boot_id             TEXT,           -- /proc/sys/kernel/random/boot_id
        host                TEXT,
        pid_ns              TEXT,           -- its pid namespace (/proc/self/ns/pid), e.g. pid:[4026531836]
        runner_version      TEXT NOT NULL
    );
    INSERT INTO runs_v3 (run_id, recipe, cycle, started_at, finished_at, status, budget_bytes, workers, tasks_total,
        wall_ms, peak_rss_bytes, peak_reserved_bytes, spilled_bytes, tasks_ok, tasks_failed, tasks_skipped,
        underestimates, pid, proc_start, boot_id, host, runner_version)
    SELECT run_id, recipe, cycle, started_at, finished_at, status, budget_bytes, workers,
        tasks_ok + tasks_failed + tasks_skipped, wall_ms, peak_rss_bytes, peak_reserved_bytes, spilled_bytes,
        tasks_ok, tasks_failed, tasks_skipped, underestimates, pid, proc_start, boot_id, host, runner_version
    FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_v3 RENAME TO runs;
    CREATE INDEX runs_by_recipe ON runs (recipe, run_id);
    CREATE INDEX runs_running ON runs (status) WHERE status = 'running';

    -- Where a run's rows of a step are (task_rows first_task_id..=last_task_id), and what they share.
    CREATE TABLE task_blocks_v3 (
        run_id                INTEGER NOT NULL,
        step                  TEXT NOT NULL,
        first_task_id         INTEGER NOT NULL,
        last_task_id          INTEGER NOT NULL,
        tasks                 INTEGER NOT NULL,
        plugin                TEXT NOT NULL,
        estimate_source       TEXT,     -- history, hint or plugin
        estimate_bytes        INTEGER,
        plugin_estimate_bytes INTEGER,
        peak_source           TEXT,     -- allocator, cgroup, wait4+sampled, job
        args_hash             INTEGER,  -- 64-bit content hashes; 0 or NULL: none
        inputs_hash           INTEGER,
        output_hash           INTEGER,
        PRIMARY KEY (run_id, step, first_task_id)
    ) WITHOUT ROWID;
    -- A step's plugin is the same for every task of a run: the first row of the block tells it.
    INSERT INTO task_blocks_v3 (run_id, step, first_task_id, last_task_id, tasks, plugin, peak_source)
    SELECT b.run_id, b.step, b.first_task_id, b.last_task_id, b.tasks,
        coalesce((SELECT t.plugin FROM tasks AS t WHERE t.task_id = b.first_task_id), ''), 'allocator'
    FROM task_blocks AS b;
    DROP TABLE task_blocks;
    ALTER TABLE task_blocks_v3 RENAME TO task_blocks;

    -- One row per task, only what differs from task to task. No per-row index: keeping one up to
    -- date doubles the cost of recording; a run's rows of a step are found through task_blocks.
    CREATE TABLE task_rows (
        task_id               INTEGER PRIMARY KEY,
        task_index            INTEGER,  -- linear index in the step (NULL for rows from before version 3)
        key                   TEXT,     -- e.g. member=3,lead=12; NULL: spelled from task_index (step_dims)
        status                INTEGER NOT NULL,  -- 0 ok, 1 failed, 2 skipped, 3 reused (the view spells them)
        attempts              INTEGER NOT NULL,
        input_bytes           INTEGER NOT NULL,
        estimate_bytes        INTEGER,  -- NULL: the block's
        estimate_source       TEXT,     -- NULL: the block's
        plugin_estimate_bytes INTEGER,  -- NULL: the block's
        peak_bytes            INTEGER NOT NULL,
        peak_source           TEXT,     -- NULL: the block's
        output_bytes          INTEGER NOT NULL,
        wall_ms               INTEGER NOT NULL,
        worker                INTEGER,  -- 0-based worker number
        start_ms              INTEGER   -- since the run started
    );
    INSERT INTO task_rows (task_id, key, status, attempts, input_bytes, estimate_bytes, estimate_source,
        plugin_estimate_bytes, peak_bytes, output_bytes, wall_ms)
    SELECT task_id, key, CASE status WHEN 'ok' THEN 0 WHEN 'skipped' THEN 2 ELSE 1 END, attempts, input_bytes,
        estimate_bytes, estimate_source, plugin_estimate_bytes, peak_bytes, output_bytes, wall_ms
    FROM tasks;

    -- What few tasks have: an error, a log or output file, hashes unlike their block's.
    CREATE TABLE task_details (
        task_id     INTEGER PRIMARY KEY,
        error       TEXT,
        log_path    TEXT,
        output_path TEXT,
        args_hash   INTEGER,  -- NULL: the block's; 0: none
        inputs_hash INTEGER,
        output_hash INTEGER
    );
    INSERT INTO task_details (task_id, error) SELECT task_id, error FROM tasks WHERE error IS NOT NULL;
    DROP TABLE tasks;

    -- A step over integer dims only: value of dim `pos` of task i is
    -- value0 + value_step * ((i / divisor) % size); the key joins name=value in pos order.
    CREATE TABLE step_dims (
        run_id     INTEGER NOT NULL,
        step       TEXT NOT NULL,
        pos        INTEGER NOT NULL,
        name       TEXT NOT NULL,
        value0     INTEGER NOT NULL,
        value_step INTEGER NOT NULL,
        size       INTEGER NOT NULL,
        divisor    INTEGER NOT NULL,
        PRIMARY KEY (run_id, step, pos)
    ) WITHOUT ROWID;

    -- The SPEC's tasks table, and what a report reads. (The key is joined in a subquery ordered
    -- by pos: group_concat(... ORDER BY) would need SQLite 3.44 in every tool opening the file.)
    CREATE VIEW tasks AS
    SELECT t.task_id AS task_id,
        b.run_id AS run_id,
        b.step AS step,
        coalesce(t.key, (
            SELECT group_concat(part, ',') FROM (
                SELECT d.name || '=' || (d.value0 + d.value_step * ((t.task_index / d.divisor) % d.size)) AS part
                FROM step_dims AS d WHERE d.run_id = b.run_id AND d.step = b.step ORDER BY d.pos)
        ), '') AS key,
        t.task_index AS task_index,
        b.plugin AS plugin,
        CASE t.status WHEN 0 THEN 'ok' WHEN 1 THEN 'failed' WHEN 2 THEN 'skipped' WHEN 3 THEN 'reused' ELSE 'unknown' END AS status,
        t.attempts AS attempts,
        t.input_bytes AS input_bytes,
        coalesce(t.estimate_bytes, b.estimate_bytes) AS estimate_bytes,
        coalesce(t.estimate_source, b.estimate_source) AS estimate_source,
        coalesce(t.plugin_estimate_bytes, b.plugin_estimate_bytes) AS plugin_estimate_bytes,
        t.peak_bytes AS peak_bytes,
        coalesce(t.peak_source, b.peak_source) AS peak_source,
        t.output_bytes AS output_bytes,
        t.wall_ms AS wall_ms,
        e.error AS error,
        t.worker AS worker,
        t.start_ms AS start_ms,
        t.start_ms + t.wall_ms AS end_ms,
        e.log_path AS log_path,
        e.output_path AS output_path,
        nullif(coalesce(e.args_hash, b.args_hash), 0) AS args_hash,
        nullif(coalesce(e.inputs_hash, b.inputs_hash), 0) AS inputs_hash,
        nullif(coalesce(e.output_hash, b.output_hash), 0) AS output_hash
    FROM task_blocks AS b
    CROSS JOIN task_rows AS t ON t.task_id BETWEEN b.first_task_id AND b.last_task_id
    LEFT JOIN task_details AS e ON e.task_id = t.task_id;

    -- The run's memory over time, sampled 10 times a second; a sample is written when it would
    -- draw elsewhere on a chart against the budget, and at least once a second.
    CREATE TABLE samples (
        run_id         INTEGER NOT NULL,
        t_ms           INTEGER NOT NULL,  -- since the run started
        reserved_bytes INTEGER NOT NULL,  -- the ledger: running tasks' reservations + resident buffers
        live_bytes     INTEGER NOT NULL,  -- the process's live heap
        rss_bytes      INTEGER NOT NULL,
        resident_bytes INTEGER NOT NULL,  -- buffers kept in memory for their consumers
        spilled_bytes  INTEGER NOT NULL,  -- spilled so far
        running_tasks  INTEGER NOT NULL,
        external_bytes INTEGER NOT NULL,  -- resident bytes of external commands' processes
        PRIMARY KEY (run_id, t_ms)
    ) WITHOUT ROWID;

    -- Things that happened during a run, e.g. spills.
    CREATE TABLE events (
        event_id INTEGER PRIMARY KEY,
        run_id   INTEGER NOT NULL,
        t_ms     INTEGER NOT NULL,
        kind     TEXT NOT NULL,  -- spill
        bytes    INTEGER,
        detail   TEXT
    );
    CREATE INDEX events_by_run ON events (run_id, t_ms);
    ",
    // 4: the vars each run had (a JSON object), so that a prediction can start from the past
    // cycle most like the one it predicts.
    "ALTER TABLE runs ADD COLUMN vars TEXT;",
    // 5: the size of the file a path output names (an `exec` step's output), which its
    // consumers read as input bytes: a prediction needs it where the output held no memory.
    // The view is made again with it (as version 3 made it, plus `file_bytes`).
    "
    ALTER TABLE task_rows ADD COLUMN file_bytes INTEGER NOT NULL DEFAULT 0;
    DROP VIEW tasks;
    CREATE VIEW tasks AS
    SELECT t.task_id AS task_id,
        b.run_id AS run_id,
        b.step AS step,
        coalesce(t.key, (
            SELECT group_concat(part, ',') FROM (
                SELECT d.name || '=' || (d.value0 + d.value_step * ((t.task_index / d.divisor) % d.size)) AS part
                FROM step_dims AS d WHERE d.run_id = b.run_id AND d.step = b.step ORDER BY d.pos)
        ), '') AS key,
        t.task_index AS task_index,
        b.plugin AS plugin,
        CASE t.status WHEN 0 THEN 'ok' WHEN 1 THEN 'failed' WHEN 2 THEN 'skipped' WHEN 3 THEN 'reused' ELSE 'unknown' END AS status,
        t.attempts AS attempts,
        t.input_bytes AS input_bytes,
        coalesce(t.estimate_bytes, b.estimate_bytes) AS estimate_bytes,
        coalesce(t.estimate_source, b.estimate_source) AS estimate_source,
        coalesce(t.plugin_estimate_bytes, b.plugin_estimate_bytes) AS plugin_estimate_bytes,
        t.peak_bytes AS peak_bytes,
        coalesce(t.peak_source, b.peak_source) AS peak_source,
        t.output_bytes AS output_bytes,
        t.file_bytes AS file_bytes,
        t.wall_ms AS wall_ms,
        e.error AS error,
        t.worker AS worker,
        t.start_ms AS start_ms,
        t.start_ms + t.wall_ms AS end_ms,
        e.log_path AS log_path,
        e.output_path AS output_path,
        nullif(coalesce(e.args_hash, b.args_hash), 0) AS args_hash,
        nullif(coalesce(e.inputs_hash, b.inputs_hash), 0) AS inputs_hash,
        nullif(coalesce(e.output_hash, b.output_hash), 0) AS output_hash
    FROM task_blocks AS b
    CROSS JOIN task_rows AS t ON t.task_id BETWEEN b.first_task_id AND b.last_task_id
    LEFT JOIN task_details AS e ON e.task_id = t.task_id;
    ",
    // 6: the microseconds past `wall_ms` (0-999; NULL in rows from before): `wall_ms` is
    // truncated, and a prediction of a cycle of sub-millisecond tasks needs their times.
    "ALTER TABLE task_rows ADD COLUMN wall_us_rest INTEGER;",
    // 7: the same for a run's `wall_ms` (a prediction of a 5 ms cycle is compared with it), and
    // how long the run's spills took to write, in µs (how fast a simulation writes its spills).
    "ALTER TABLE runs ADD COLUMN wall_us_rest INTEGER; ALTER TABLE runs ADD COLUMN spill_us INTEGER;",
    // 8: of `peak_reserved_bytes`, what service processes (warm interpreters) held at their
    // baseline, counted for the run and not for any task: a simulation adds it; of that, the
    // pages forked services share (counted once) and how many services' own baselines, so that
    // a simulation on other workers counts its own interpreters.
    "ALTER TABLE runs ADD COLUMN standing_bytes INTEGER; ALTER TABLE runs ADD COLUMN standing_shared_bytes INTEGER; \
     ALTER TABLE runs ADD COLUMN standing_services INTEGER;",
    // 9: of a task's wall, the µs it waited for its service (a warm interpreter) to be started
    // or warmed up for it (a detail: only tasks of services wait, and a column of `task_rows`
    // would cost every task of a 10⁶-task run a byte), and how many services were alive when
    // the run started (NULL in runs from before, whose waits were not recorded; a run after
    // another in one process finds them warm): a prediction learns a task's own time without
    // the wait and adds the wait where its run starts cold.
    "ALTER TABLE task_details ADD COLUMN waited_us INTEGER; ALTER TABLE runs ADD COLUMN warm_services INTEGER;",
    // 10: the most services alive at once during a run: a prediction reads a run whose peak
    // caught fewer of its interpreters standing than it started (the recipe's first, its first
    // task alone) as holding all it started.
    "ALTER TABLE runs ADD COLUMN most_services INTEGER;",
    // 11: the spilled inputs a task read back from their files before it ran, and the µs that
    // took, of its wall (a detail: only readers of spilled values have them): a prediction
    // learns the task's own time without it and reads spilled bytes back as fast as they were.
    "ALTER TABLE task_details ADD COLUMN read_back_bytes INTEGER; ALTER TABLE task_details ADD COLUMN read_back_us INTEGER;",
    // 12: of those, the bytes whose pages were not in memory when read (read from disk, told by
    // `mincore`) and the µs reading them took: a spilled page read in already (by a plugin's
    // estimate, by another reader) reads at memory's speed, and a prediction reads spilled
    // bytes back from disk as fast as the disk's part of the reads was (NULL in rows from
    // before, which mixed the two and count toward no speed).
    "ALTER TABLE task_details ADD COLUMN read_back_disk_bytes INTEGER; \
     ALTER TABLE task_details ADD COLUMN read_back_disk_us INTEGER;",
];

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the file at `path` (open as `conn`) to [`SCHEMA_VERSION`], refusing a file written by
/// a newer runner or by another application. Returns the version the file had before.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<u32, StoreError> {
    let sql = |what: &'static str| move |error| StoreError::sql(path, what, error);
    let found = user_version(conn).map_err(sql("reading the schema version"))?;
    check_version(path, found)?;
    if found == SCHEMA_VERSION {
        check_application_id(conn, path)?;
        return Ok(found);
    }
    // Another process may be migrating the same file: take the write lock, then look again.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("locking the file to migrate its schema"))?;
    let found = user_version(&tx).map_err(sql("reading the schema version"))?;
    check_version(path, found)?;
    if found == 0 {
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_schema WHERE type = 'table'", [], |r| r.get(0))
            .map_err(sql("listing tables"))?;
        if tables > 0 {
            return Err(StoreError::NotAStore {
                path: path.to_path_buf(),
                reason: format!("it has {tables} tables but no runner schema version"),
            });
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(sql("writing the application id"))?;
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index as u32 + 1;
        tx.execute_batch(migration).map_err(|error| StoreError::Migrate {
            path: path.to_path_buf(),
            version,
            error,
        })?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(sql("writing the schema version"))?;
    check_application_id(&tx, path)?;
    tx.commit().map_err(sql("committing the schema migration"))?;
    Ok(found)
}

fn check_version(path: &Path, found: u32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_path_buf(), found, known: SCHEMA_VERSION });
    }
    Ok(())
}

fn check_application_id(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(|error| StoreError::sql(path, "reading the application id", error))?;
    if id != APPLICATION_ID {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: format!("its application id is {id:#x}, not runner's {APPLICATION_ID:#x}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunStatus, Store};

    /// A file at schema `version`, with one finished run of two tasks (one failed) in one block.
    fn old_store(path: &Path, version: u32) -> Connection {
        let conn = Connection::open(path).unwrap();
        for migration in &MIGRATIONS[..version as usize] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        conn.pragma_update(None, "user_version", version).unwrap();
        let cycle = if version == 1 { "cycle, " } else { "" };
        let cycle_value = if version == 1 { "'c1', " } else { "" };
        conn.execute_batch(&format!(
            "INSERT INTO runs (run_id, recipe, cycle, started_at, finished_at, status, budget_bytes, workers, pid, \
             tasks_ok, tasks_failed, tasks_skipped, runner_version) VALUES (1, 'r', 'c1', '2026-11-01T00:00:00.000Z', \
             '2026-11-01T00:00:01.000Z', 'failed', 1, 1, 1, 1, 1, 0, 'old');
             INSERT INTO tasks (task_id, run_id, {cycle}step, key, plugin, status, attempts, input_bytes, \
             estimate_bytes, estimate_source, plugin_estimate_bytes, peak_bytes, output_bytes, wall_ms, error) VALUES \
             (1, 1, {cycle_value}'s', 'i=0', 'noop', 'ok', 1, 0, 10, 'plugin', 8, 12, 0, 0, NULL), \
             (2, 1, {cycle_value}'s', 'i=1', 'noop', 'failed', 2, 5, 20, 'hint', 9, 3, 0, 7, 'boom');
             INSERT INTO task_blocks VALUES (1, 's', 1, 2, 2);"
        ))
        .unwrap();
        conn
    }

    /// step, key, plugin, attempts, estimate, source, plugin estimate, peak, error, status.
    type MigratedTask = (String, String, String, i64, i64, String, i64, i64, Option<String>, String);

    fn assert_migrated(path: &Path) {
        let store = Store::open(path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let conn = Connection::open(path).unwrap();
        let has_cycle: i64 = conn
            .query_row("SELECT count(*) FROM pragma_table_info('tasks') WHERE name = 'cycle'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(has_cycle, 0);
        let rows: Vec<MigratedTask> = conn
            .prepare(
                "SELECT step, key, plugin, attempts, estimate_bytes, estimate_source, plugin_estimate_bytes, \
                 peak_bytes, error, status FROM tasks WHERE run_id = 1 ORDER BY task_id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            rows,
            [
                ("s".into(), "i=0".into(), "noop".into(), 1, 10, "plugin".into(), 8, 12, None, "ok".into()),
                (
                    "s".into(),
                    "i=1".into(),
                    "noop".into(),
                    2,
                    20,
                    "hint".into(),
                    9,
                    3,
                    Some("boom".into()),
                    "failed".into()
                ),
            ]
        );
        let run = &store.runs(None, 10).unwrap()[0];
        assert_eq!(
            (run.cycle.as_str(), run.status, run.tasks_total, run.tasks_failed),
            ("c1", RunStatus::Failed, Some(2), Some(1))
        );
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(indexes, ["runs_by_recipe", "runs_running"]);
        // The new status is allowed, an unknown one still is not.
        conn.execute("UPDATE runs SET status = 'interrupted' WHERE run_id = 1", []).unwrap();
        assert!(conn.execute("UPDATE runs SET status = 'sleeping' WHERE run_id = 1", []).is_err());
        let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn a_version_1_store_migrates_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        drop(old_store(&path, 1));
        assert_migrated(&path);
    }

    #[test]
    fn a_version_2_store_migrates_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        drop(old_store(&path, 2));
        assert_migrated(&path);
    }
}
