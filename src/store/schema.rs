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
];

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the file at `path` (open as `conn`) to [`SCHEMA_VERSION`], refusing a file written by
/// a newer runner or by another application. Returns the version the file had before.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<u32, StoreError> {
    let sql = |what: &'static str| move |source| StoreError::sql(path, what, source);
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
        tx.execute_batch(migration).map_err(|source| StoreError::Migrate {
            path: path.to_path_buf(),
            version,
            source,
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
        .map_err(|source| StoreError::sql(path, "reading the application id", source))?;
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
    use crate::store::Store;

    #[test]
    fn a_version_1_store_migrates_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            "INSERT INTO runs (run_id, recipe, cycle, started_at, finished_at, status, budget_bytes, workers, pid, \
             runner_version) VALUES (1, 'r', 'c1', '2026-11-01T00:00:00.000Z', '2026-11-01T00:00:01.000Z', 'ok', 1, 1, \
             1, 'old');
             INSERT INTO tasks (task_id, run_id, cycle, step, key, plugin, status, attempts, input_bytes, \
             estimate_bytes, estimate_source, peak_bytes, output_bytes, wall_ms) VALUES \
             (1, 1, 'c1', 's', 'i=0', 'noop', 'ok', 1, 0, 10, 'plugin', 12, 0, 0);
             INSERT INTO task_blocks VALUES (1, 's', 1, 1, 1);",
        )
        .unwrap();
        drop(conn);

        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 2);
        let conn = Connection::open(&path).unwrap();
        let has_cycle: i64 = conn
            .query_row("SELECT count(*) FROM pragma_table_info('tasks') WHERE name = 'cycle'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(has_cycle, 0);
        let peak: i64 = conn.query_row("SELECT peak_bytes FROM tasks WHERE key = 'i=0'", [], |r| r.get(0)).unwrap();
        assert_eq!(peak, 12);
        assert_eq!(store.runs(None, 10).unwrap()[0].cycle, "c1");
    }
}
