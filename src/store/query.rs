//! Reading the history back, always bounded: runs are limited to the last N, task rows are
//! streamed (or limited per run), and aggregates are computed by SQLite, whose sorter spills to
//! temporary files rather than growing without bound.
//!
//! Both readers find one run's rows of one step through `task_blocks`: a few ranges of task ids,
//! read in the order they were recorded. `FROM {STEP_ROWS}` below is that join; the `CROSS JOIN`
//! makes SQLite loop over the blocks outside and the task ids inside.

use rusqlite::{Row, params};
use serde::Serialize;

use super::{RunStatus, Store, StoreError, TaskStatus, from_sql_int, to_sql_int};

/// A run in a history, as the estimator and `runner history` see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryRun {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    pub status: RunStatus,
}

/// One task row of a step's history, borrowing its strings from the database row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryTask<'a> {
    pub run_id: i64,
    /// The position of its run in the runs [`Store::task_history`] returns: 0 is the oldest.
    pub run_index: usize,
    pub key: &'a str,
    pub status: TaskStatus,
    pub attempts: u32,
    pub input_bytes: u64,
    pub estimate_bytes: u64,
    pub estimate_source: &'a str,
    pub plugin_estimate_bytes: Option<u64>,
    pub peak_bytes: u64,
    pub output_bytes: u64,
    pub wall_ms: u64,
}

/// One step of one run, aggregated for `runner history`. Estimates and peaks are over the tasks
/// that ran (ok or failed), not the skipped ones.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepHistory {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    pub run_status: RunStatus,
    pub step: String,
    pub plugin: String,
    /// The distinct estimate sources of its tasks, comma-separated (normally just one).
    pub estimate_sources: String,
    /// Task rows recorded, of any status.
    pub tasks: u64,
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Lower median: the ⌈n/2⌉-th smallest of the n tasks that ran.
    pub estimate_p50: u64,
    pub estimate_max: u64,
    pub peak_p50: u64,
    pub peak_max: u64,
    /// Tasks whose peak exceeded their estimate.
    pub underestimates: u64,
    /// sum(estimate) / sum(peak) − 1; `None` when nothing ran or every peak was 0.
    pub slack: Option<f64>,
    pub wall_ms_total: u64,
}

const TASK_COLUMNS: &str = "t.run_id, t.key, t.status, t.attempts, t.input_bytes, t.estimate_bytes, \
     t.estimate_source, t.plugin_estimate_bytes, t.peak_bytes, t.output_bytes, t.wall_ms";

/// The tasks `t` of the blocks `b`, for a `WHERE` on `b.run_id` and `b.step`.
const STEP_ROWS: &str =
    "task_blocks AS b CROSS JOIN tasks AS t ON t.task_id BETWEEN b.first_task_id AND b.last_task_id";

fn history_task<'a>(row: &'a Row<'_>, run_index: usize) -> rusqlite::Result<HistoryTask<'a>> {
    let int = |i: usize| row.get::<_, i64>(i).map(from_sql_int);
    let status = row.get_ref(2)?.as_str()?;
    Ok(HistoryTask {
        run_id: row.get(0)?,
        run_index,
        key: row.get_ref(1)?.as_str()?,
        status: TaskStatus::parse(status).unwrap_or(TaskStatus::Failed),
        attempts: row.get(3)?,
        input_bytes: int(4)?,
        estimate_bytes: int(5)?,
        estimate_source: row.get_ref(6)?.as_str()?,
        plugin_estimate_bytes: row.get::<_, Option<i64>>(7)?.map(from_sql_int),
        peak_bytes: int(8)?,
        output_bytes: int(9)?,
        wall_ms: int(10)?,
    })
}

fn history_run(row: &Row<'_>) -> rusqlite::Result<HistoryRun> {
    let status: String = row.get(4)?;
    Ok(HistoryRun {
        run_id: row.get(0)?,
        recipe: row.get(1)?,
        cycle: row.get(2)?,
        started_at: row.get(3)?,
        status: RunStatus::parse(&status).unwrap_or(RunStatus::Killed),
    })
}

impl Store {
    /// The last `last` runs, oldest first, of `recipe` (or of every recipe), keeping only those
    /// with rows for `step` if one is given. Runs still `running` are left out unless
    /// `include_running`.
    pub fn history_runs(
        &self,
        recipe: Option<&str>,
        step: Option<&str>,
        last: usize,
        include_running: bool,
    ) -> Result<Vec<HistoryRun>, StoreError> {
        let what = "listing the runs of a history";
        // With a recipe, `recipe = ?1` walks the index runs_by_recipe backwards.
        let recipe_filter = if recipe.is_some() { "recipe = ?1" } else { "?1 IS NULL" };
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT run_id, recipe, cycle, started_at, status FROM runs \
                 WHERE {recipe_filter} AND (?4 OR status != 'running') \
                 AND (?2 IS NULL OR EXISTS (SELECT 1 FROM task_blocks AS b WHERE b.run_id = runs.run_id AND b.step = ?2)) \
                 ORDER BY run_id DESC LIMIT ?3",
            ))
            .map_err(|e| self.err(what, e))?;
        let mut runs = stmt
            .query_map(params![recipe, step, to_sql_int(last as u64), include_running], history_run)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        runs.reverse();
        Ok(runs)
    }

    /// The estimator's view of a step: the last `last_runs` finished (or killed) runs of `recipe`
    /// that have rows for `step`, oldest first (run order is cycle order), and each of their task
    /// rows of the step streamed to `each` in run order, then recording order — at most
    /// `max_tasks_per_run` per run, the first recorded. Returns the runs.
    pub fn task_history(
        &self,
        recipe: &str,
        step: &str,
        last_runs: usize,
        max_tasks_per_run: Option<u64>,
        mut each: impl FnMut(&HistoryRun, HistoryTask<'_>),
    ) -> Result<Vec<HistoryRun>, StoreError> {
        let runs = self.history_runs(Some(recipe), Some(step), last_runs, false)?;
        let what = "reading the task history of a step";
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM {STEP_ROWS} WHERE b.run_id = ?1 AND b.step = ?2 \
                 ORDER BY b.first_task_id, t.task_id LIMIT ?3"
            ))
            .map_err(|e| self.err(what, e))?;
        let limit = max_tasks_per_run.map_or(-1, to_sql_int);
        for (index, run) in runs.iter().enumerate() {
            let mut rows = stmt.query(params![run.run_id, step, limit]).map_err(|e| self.err(what, e))?;
            while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
                each(run, history_task(row, index).map_err(|e| self.err(what, e))?);
            }
        }
        Ok(runs)
    }

    /// Estimate against actual per step, for `runner history`: for each of the last `last_runs`
    /// runs (of `recipe`, or of any; with rows for `step` if given), oldest first, one entry per
    /// step (or just `step`) in the order the run first recorded them.
    pub fn step_history(
        &self,
        recipe: Option<&str>,
        step: Option<&str>,
        last_runs: usize,
    ) -> Result<Vec<StepHistory>, StoreError> {
        let runs = self.history_runs(recipe, step, last_runs, true)?;
        let what = "aggregating the task history";
        let mut aggregate = self
            .conn()
            .prepare_cached(&format!(
                "SELECT b.step, min(t.plugin), group_concat(DISTINCT t.estimate_source), count(*), \
                   sum(t.status = 'ok'), sum(t.status = 'failed'), sum(t.status = 'skipped'), \
                   max(CASE WHEN t.status != 'skipped' THEN t.estimate_bytes END), \
                   max(CASE WHEN t.status != 'skipped' THEN t.peak_bytes END), \
                   sum(t.status != 'skipped' AND t.peak_bytes > t.estimate_bytes), \
                   total(CASE WHEN t.status != 'skipped' THEN t.estimate_bytes END), \
                   total(CASE WHEN t.status != 'skipped' THEN t.peak_bytes END), \
                   total(t.wall_ms), min(b.first_task_id) AS first \
                 FROM {STEP_ROWS} WHERE b.run_id = ?1 AND (?2 IS NULL OR b.step = ?2) GROUP BY b.step ORDER BY first",
            ))
            .map_err(|e| self.err(what, e))?;
        let mut out = Vec::new();
        for run in &runs {
            let steps = aggregate
                .query_map(params![run.run_id, step], |row| {
                    let int = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map_or(0, from_sql_int));
                    let mut sources: Vec<String> = row.get::<_, String>(2)?.split(',').map(str::to_string).collect();
                    sources.sort();
                    let (estimate_total, peak_total): (f64, f64) = (row.get(10)?, row.get(11)?);
                    Ok(StepHistory {
                        run_id: run.run_id,
                        recipe: run.recipe.clone(),
                        cycle: run.cycle.clone(),
                        started_at: run.started_at.clone(),
                        run_status: run.status,
                        step: row.get(0)?,
                        plugin: row.get(1)?,
                        estimate_sources: sources.join(","),
                        tasks: int(3)?,
                        ok: int(4)?,
                        failed: int(5)?,
                        skipped: int(6)?,
                        estimate_p50: 0,
                        estimate_max: int(7)?,
                        peak_p50: 0,
                        peak_max: int(8)?,
                        underestimates: int(9)?,
                        slack: (peak_total > 0.0).then(|| estimate_total / peak_total - 1.0),
                        wall_ms_total: row.get::<_, f64>(12)? as u64,
                    })
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| self.err(what, e))?;
            for mut entry in steps {
                let ran = entry.ok + entry.failed;
                if ran > 0 {
                    entry.estimate_p50 = self.lower_median(run.run_id, &entry.step, "estimate_bytes", ran)?;
                    entry.peak_p50 = self.lower_median(run.run_id, &entry.step, "peak_bytes", ran)?;
                }
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// The ⌈n/2⌉-th smallest `column` of the `ran` tasks of a step that ran.
    fn lower_median(&self, run_id: i64, step: &str, column: &'static str, ran: u64) -> Result<u64, StoreError> {
        let what = "computing a median of the task history";
        let sql = format!(
            "SELECT t.{column} FROM {STEP_ROWS} WHERE b.run_id = ?1 AND b.step = ?2 AND t.status != 'skipped' \
             ORDER BY t.{column} LIMIT 1 OFFSET ?3"
        );
        let mut stmt = self.conn().prepare_cached(&sql).map_err(|e| self.err(what, e))?;
        let value: i64 = stmt
            .query_row(params![run_id, step, to_sql_int((ran - 1) / 2)], |r| r.get(0))
            .map_err(|e| self.err(what, e))?;
        Ok(from_sql_int(value))
    }
}
