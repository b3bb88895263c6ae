//! Runs read back: run rows (a `running` run whose owner is gone reads as killed), the recipes
//! and steps that have runs, and a run's memory samples and events.

use rusqlite::{OptionalExtension, params};

use super::{EventKind, Executor, RunEvent, RunRow, RunStatus, Sample, Store, StoreError, from_sql_int, to_sql_int};
use crate::measure::PeakSource;
use crate::process_identity::ProcessIdentity;

const RUN_COLUMNS: &str = "run_id, recipe, cycle, started_at, finished_at, status, executor, budget_bytes, workers, \
     tasks_total, wall_ms, peak_rss_bytes, peak_reserved_bytes, spilled_bytes, spill_count, spill_error, tasks_ok, \
     tasks_failed, tasks_skipped, underestimates, oversized, estimate_bytes_sum, peak_bytes_sum, recorded_ms, \
     resumed_from, pid, proc_start, boot_id, host, pid_ns, vars, wall_us_rest, standing_bytes, \
     standing_shared_bytes, standing_services, warm_services, most_services";

/// The owner of a run row, from its last five [`RUN_COLUMNS`] starting at `at`.
pub(super) fn run_owner(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ProcessIdentity> {
    Ok(ProcessIdentity {
        pid: row.get(at)?,
        start_ticks: row.get::<_, Option<i64>>(at + 1)?.map(from_sql_int),
        boot_id: row.get(at + 2)?,
        host: row.get(at + 3)?,
        pid_ns: row.get(at + 4)?,
    })
}

/// A stored status, with a `running` run whose owner is gone read as killed (a reader cannot
/// mark it, and must not show it as going on).
pub(crate) fn status_now(stored: &str, owner: impl FnOnce() -> rusqlite::Result<ProcessIdentity>) -> RunStatus {
    match RunStatus::parse(stored) {
        Some(RunStatus::Running) if owner().is_ok_and(|o| o.is_gone()) => RunStatus::Killed,
        Some(status) => status,
        None => RunStatus::Killed,
    }
}

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    let opt = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(from_sql_int));
    let status: String = row.get(5)?;
    let executor: String = row.get(6)?;
    let wall_us_rest = opt(31)?;
    Ok(RunRow {
        run_id: row.get(0)?,
        recipe: row.get(1)?,
        cycle: row.get(2)?,
        started_at: row.get(3)?,
        finished_at: row.get(4)?,
        status: status_now(&status, || run_owner(row, 25)),
        executor: Executor::parse(&executor).unwrap_or_default(),
        budget_bytes: from_sql_int(row.get(7)?),
        workers: row.get(8)?,
        tasks_total: opt(9)?,
        wall_ms: opt(10)?,
        wall_us: opt(10)?.map(|ms| super::micros(ms, wall_us_rest)),
        peak_rss_bytes: opt(11)?,
        peak_reserved_bytes: opt(12)?,
        standing_bytes: opt(32)?,
        standing_shared_bytes: opt(33)?,
        standing_services: opt(34)?,
        warm_services: opt(35)?,
        most_services: opt(36)?,
        spilled_bytes: opt(13)?,
        spill_count: opt(14)?,
        spill_error: row.get(15)?,
        tasks_ok: opt(16)?,
        tasks_failed: opt(17)?,
        tasks_skipped: opt(18)?,
        underestimates: opt(19)?,
        oversized: opt(20)?,
        estimate_bytes_sum: opt(21)?,
        peak_bytes_sum: opt(22)?,
        recorded_ms: opt(23)?,
        resumed_from: row.get(24)?,
        pid: row.get(25)?,
        vars: row.get(30)?,
    })
}

/// What a recipe's recorded spills wrote (or their readers read back), and how long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillSpeed {
    pub bytes: u64,
    pub wall_us: u64,
}

impl SpillSpeed {
    /// Bytes a second (at least 1).
    pub fn bytes_per_second(&self) -> u64 {
        ((self.bytes as f64 / (self.wall_us.max(1) as f64 / 1e6)) as u64).max(1)
    }

    /// The bytes and time of `speeds` together (`None`: none).
    pub fn total(speeds: impl IntoIterator<Item = SpillSpeed>) -> Option<SpillSpeed> {
        speeds.into_iter().reduce(|a, b| SpillSpeed { bytes: a.bytes + b.bytes, wall_us: a.wall_us + b.wall_us })
    }
}

impl Store {
    /// How fast the spills of the last `last` runs of `recipe` that spilled (before
    /// `before_run` when given) were written; `None` when none of them recorded a spill's time.
    pub fn spill_speed(
        &self,
        recipe: &str,
        before_run: Option<i64>,
        last: usize,
    ) -> Result<Option<SpillSpeed>, StoreError> {
        let sql = "SELECT sum(spilled_bytes), sum(spill_us) FROM (SELECT spilled_bytes, spill_us FROM runs \
                   WHERE recipe = ?1 AND spill_us > 0 AND spilled_bytes > 0 AND (?2 IS NULL OR run_id < ?2) \
                   ORDER BY run_id DESC LIMIT ?3)";
        self.summed_speed(
            "reading how fast a recipe's spills were written",
            sql,
            params![recipe, before_run, last as i64],
        )
    }

    /// How fast the tasks of `step` in the last `last` runs of `recipe` that spilled (before
    /// `before_run` when given) read their spilled inputs back from disk (the pages not in
    /// memory still); `None` when none recorded such a read.
    pub fn read_back_speed(
        &self,
        recipe: &str,
        step: &str,
        before_run: Option<i64>,
        last: usize,
    ) -> Result<Option<SpillSpeed>, StoreError> {
        let sql = "SELECT sum(e.read_back_disk_bytes), sum(e.read_back_disk_us) FROM task_blocks AS b \
                   JOIN task_details AS e ON e.task_id BETWEEN b.first_task_id AND b.last_task_id \
                   WHERE e.read_back_disk_bytes > 0 AND b.step = ?4 \
                   AND b.run_id IN (SELECT run_id FROM runs \
                   WHERE recipe = ?1 AND spilled_bytes > 0 AND (?2 IS NULL OR run_id < ?2) \
                   ORDER BY run_id DESC LIMIT ?3)";
        let what = "reading how fast a step's spilled inputs were read back from disk";
        self.summed_speed(what, sql, params![recipe, before_run, last as i64, step])
    }

    /// The bytes and µs `sql` sums over the runs it selects with `params`; `None` when it summed
    /// no rows or no time.
    fn summed_speed(
        &self,
        what: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Option<SpillSpeed>, StoreError> {
        let (bytes, wall_us): (Option<i64>, Option<i64>) =
            self.conn().query_row(sql, params, |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(what, e))?;
        // Sums over no rows are NULL.
        Ok(bytes
            .zip(wall_us.filter(|&us| us > 0))
            .map(|(bytes, wall_us)| SpillSpeed { bytes: from_sql_int(bytes), wall_us: from_sql_int(wall_us) }))
    }

    /// Whether `recipe` has a run recorded before run `run_id`.
    pub fn has_run_before(&self, recipe: &str, run_id: i64) -> Result<bool, StoreError> {
        self.conn()
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE recipe = ?1 AND run_id < ?2)",
                params![recipe, run_id],
                |r| r.get(0),
            )
            .map_err(|e| self.err("looking for an earlier run of a recipe", e))
    }

    /// One run row.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        self.conn
            .query_row(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"), [run_id], run_row)
            .optional()
            .map_err(|e| self.err("reading a run row", e))
    }

    /// The last `last` runs (of `recipe`, or of any recipe), oldest first.
    pub fn runs(&self, recipe: Option<&str>, last: usize) -> Result<Vec<RunRow>, StoreError> {
        let what = "listing runs";
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE ?1 IS NULL OR recipe = ?1 ORDER BY run_id DESC LIMIT ?2"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt
            .query_map(params![recipe, to_sql_int(last as u64)], run_row)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        rows.reverse();
        Ok(rows)
    }

    /// The newest run of `recipe` whose peak held service processes at their baseline (warm
    /// interpreters): what the next run's services are expected to hold before they stand.
    pub fn newest_with_standing(&self, recipe: &str) -> Result<Option<RunRow>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE recipe = ?1 AND standing_bytes > 0 \
                     ORDER BY run_id DESC LIMIT 1"
                ),
                [recipe],
                run_row,
            )
            .optional()
            .map_err(|e| self.err("reading the newest run with standing memory", e))
    }

    /// The steps of run `run_id` whose tasks that ran (ok or failed) all ran outside service
    /// processes (warm interpreters), by name: a step none of whose tasks ran there, or whose
    /// tasks' measure is not recorded, is not among them.
    pub fn steps_without_services(&self, run_id: i64) -> Result<Vec<String>, StoreError> {
        let what = "reading which steps ran outside service processes";
        let sql = format!(
            "SELECT b.step FROM {} AND t.status IN (0, 1) GROUP BY b.step \
             HAVING max(coalesce(t.peak_source, b.peak_source) IN (?2, ?3)) = 0 ORDER BY b.step",
            super::query::RUN_ROWS
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(what, e))?;
        let served = [PeakSource::ServiceCgroup.as_str(), PeakSource::ServiceProc.as_str()];
        stmt.query_map(params![run_id, served[0], served[1]], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))
    }

    /// The recipes that have runs, by name.
    pub fn recipes(&self) -> Result<Vec<String>, StoreError> {
        let what = "listing recipes";
        let mut stmt =
            self.conn.prepare("SELECT DISTINCT recipe FROM runs ORDER BY recipe").map_err(|e| self.err(what, e))?;
        stmt.query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))
    }

    /// The steps that have rows in runs of `recipe` (or of any recipe), by name.
    pub fn steps(&self, recipe: Option<&str>) -> Result<Vec<String>, StoreError> {
        let what = "listing steps";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT b.step FROM task_blocks AS b JOIN runs AS r ON r.run_id = b.run_id \
                 WHERE ?1 IS NULL OR r.recipe = ?1 ORDER BY b.step",
            )
            .map_err(|e| self.err(what, e))?;
        stmt.query_map([recipe], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))
    }

    /// A run's memory samples, in time order.
    pub fn samples(&self, run_id: i64) -> Result<Vec<Sample>, StoreError> {
        let what = "reading a run's memory samples";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t_ms, reserved_bytes, live_bytes, rss_bytes, resident_bytes, spilled_bytes, running_tasks, \
                 external_bytes FROM samples WHERE run_id = ?1 ORDER BY t_ms",
            )
            .map_err(|e| self.err(what, e))?;
        stmt.query_map([run_id], |row| {
            let int = |i: usize| row.get::<_, i64>(i).map(from_sql_int);
            Ok(Sample {
                t_ms: int(0)?,
                reserved_bytes: int(1)?,
                live_bytes: int(2)?,
                rss_bytes: int(3)?,
                resident_bytes: int(4)?,
                spilled_bytes: int(5)?,
                running_tasks: int(6)?,
                external_bytes: int(7)?,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| self.err(what, e))
    }

    /// A run's events, in time order.
    pub fn events(&self, run_id: i64) -> Result<Vec<RunEvent>, StoreError> {
        let what = "reading a run's events";
        let mut stmt = self
            .conn
            .prepare("SELECT t_ms, kind, bytes, detail FROM events WHERE run_id = ?1 ORDER BY t_ms, event_id")
            .map_err(|e| self.err(what, e))?;
        let rows = stmt
            .query_map([run_id], |row| {
                let kind: String = row.get(1)?;
                Ok((
                    from_sql_int(row.get(0)?),
                    kind,
                    row.get::<_, Option<i64>>(2)?.map(from_sql_int),
                    row.get::<_, Option<String>>(3)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        // Kinds a newer runner wrote are left out rather than misread.
        Ok(rows
            .into_iter()
            .filter_map(|(t_ms, kind, bytes, detail)| {
                Some(RunEvent { t_ms, kind: EventKind::parse(&kind)?, bytes, detail })
            })
            .collect())
    }
}
