//! Reading the history back, always bounded: runs are limited to the last N, task rows are
//! streamed (or limited per run), and aggregates are computed by SQLite, whose sorter spills to
//! temporary files rather than growing without bound.
//!
//! The readers work on the compact tables, not the `tasks` view: they find one run's rows of
//! one step through `task_blocks` (a few ranges of task ids, read in the order they were
//! recorded; `FROM {STEP_ROWS}` below is that join, and its `CROSS JOIN` makes SQLite loop over
//! the blocks outside and the task ids inside), take a block's value where a row has none, and
//! spell keys from task indices in Rust only for the few rows that show them.

use std::collections::HashMap;
use std::time::Duration;

use rusqlite::{Row, params};
use serde::Serialize;

use super::step_figures::StepFigures;
use super::{
    KeyDim, RunStatus, StepKeys, Store, StoreError, TaskStatus, from_sql_int, parse_estimate_source, run_owner,
    status_now, to_sql_int,
};
use crate::measure::PeakSource;
use crate::plan::EstimateSource;
use crate::resume::RecordedTask;

/// A run in a history, as the estimator and `runner history` see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryRun {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    /// As stored, except that a `running` run whose process is gone reads as `killed`.
    pub status: RunStatus,
    /// The recipe's vars as the run had them (a JSON object), when recorded.
    #[serde(skip)]
    pub vars: Option<String>,
    /// Services (warm interpreters) alive as it started (`None`: not recorded, before schema
    /// version 9).
    #[serde(skip)]
    pub warm_services: Option<u64>,
}

impl From<&super::RunRow> for HistoryRun {
    fn from(run: &super::RunRow) -> HistoryRun {
        HistoryRun {
            run_id: run.run_id,
            recipe: run.recipe.clone(),
            cycle: run.cycle.clone(),
            started_at: run.started_at.clone(),
            status: run.status,
            vars: run.vars.clone(),
            warm_services: run.warm_services,
        }
    }
}

/// Which runs a history reads besides the finished and killed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunFilter {
    /// Runs still going.
    pub running: bool,
    /// Runs stopped by Ctrl-C or SIGTERM: what they measured is real, but a run cut short is
    /// no picture of a cycle, so they are left out unless asked for.
    pub interrupted: bool,
}

impl RunFilter {
    fn keeps(self, status: RunStatus) -> bool {
        match status {
            RunStatus::Running => self.running,
            RunStatus::Interrupted => self.interrupted,
            RunStatus::Ok | RunStatus::Failed | RunStatus::Killed | RunStatus::Aborted => true,
        }
    }
}

/// One task row of a step's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryTask {
    pub run_id: i64,
    /// The position of its run in the runs [`Store::task_history`] returns: 0 is the oldest.
    pub run_index: usize,
    /// Its linear index in the step (`None` for rows recorded before schema version 3).
    pub task_index: Option<u64>,
    pub status: TaskStatus,
    pub attempts: u32,
    pub input_bytes: u64,
    pub estimate_bytes: u64,
    pub estimate_source: Option<EstimateSource>,
    pub plugin_estimate_bytes: Option<u64>,
    pub peak_bytes: u64,
    pub peak_source: Option<PeakSource>,
    pub output_bytes: u64,
    pub wall_ms: u64,
    /// Its wall time in µs: exact where recorded (schema version 6 on), else the middle of
    /// its whole ms (`wall_ms` is truncated).
    pub wall_us: u64,
    /// The size of the file a path output names (0 for an output in memory).
    pub file_bytes: u64,
    /// Of `wall_us`, what it waited for its service to be started or warmed up for it (0 in
    /// runs from before schema version 9, which did not record it: [`HistoryRun::warm_services`]
    /// is `None` for them).
    pub waited_us: u64,
    /// Of `wall_us`, reading its spilled inputs back before it ran (0 before schema version 11).
    pub read_back_us: u64,
}

impl HistoryTask {
    /// Its own time in µs: its wall without what it waited for its service or took to read its
    /// spilled inputs back (a prediction adds those where the cycle it predicts has them).
    pub fn own_us(&self) -> u64 {
        self.wall_us.saturating_sub(self.waited_us).saturating_sub(self.read_back_us)
    }
}

/// One step of one run, aggregated for `runner history`: the run, then its step's figures (the
/// JSON keeps them in one object, the run's first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepHistory {
    pub run_id: i64,
    pub recipe: String,
    pub cycle: String,
    pub started_at: String,
    pub run_status: RunStatus,
    #[serde(flatten)]
    pub figures: StepFigures,
}

/// A failed task of a run, for `runner history --failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedTask {
    pub step: String,
    pub key: String,
    pub task_index: Option<u64>,
    pub error: Option<String>,
    pub log_path: Option<String>,
}

/// One task of a run's timeline ([`Store::timeline`]): where and when it ran, what it was
/// estimated at and what it took. Its key is `StepKeys::key(task_index)` where
/// [`Store::step_keys`] has its step, else [`TimelineTask::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineTask<'a> {
    pub step: &'a str,
    pub plugin: &'a str,
    pub task_index: Option<u64>,
    /// The stored key (`None` where it is spelled from the index).
    pub key: Option<&'a str>,
    pub status: TaskStatus,
    pub attempts: u32,
    pub worker: Option<u32>,
    pub start_ms: Option<u64>,
    pub wall_ms: u64,
    pub estimate_bytes: u64,
    pub estimate_source: Option<EstimateSource>,
    pub peak_bytes: u64,
    /// How its peak was measured (`None` for rows that do not say).
    pub peak_source: Option<PeakSource>,
}

/// The tasks `t` of the blocks `b`, for a `WHERE` on `b.run_id` and `b.step`.
pub(crate) const STEP_ROWS: &str =
    "task_blocks AS b CROSS JOIN task_rows AS t ON t.task_id BETWEEN b.first_task_id AND b.last_task_id";

/// Every row of run `?1`.
pub(crate) const RUN_ROWS: &str = "task_blocks AS b CROSS JOIN task_rows AS t \
     ON t.task_id BETWEEN b.first_task_id AND b.last_task_id WHERE b.run_id = ?1";

/// A row's estimate: its own, or its block's.
const ESTIMATE: &str = "coalesce(t.estimate_bytes, b.estimate_bytes)";

const TASK_COLUMNS: &str = "b.run_id, t.task_index, t.status, t.attempts, t.input_bytes, \
     coalesce(t.estimate_bytes, b.estimate_bytes), coalesce(t.estimate_source, b.estimate_source), \
     coalesce(t.plugin_estimate_bytes, b.plugin_estimate_bytes), t.peak_bytes, \
     coalesce(t.peak_source, b.peak_source), t.output_bytes, t.wall_ms, t.file_bytes, t.wall_us_rest, coalesce(e.waited_us, 0), \
     coalesce(e.read_back_us, 0)";

fn history_task(row: &Row<'_>, run_index: usize) -> rusqlite::Result<HistoryTask> {
    let int = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map_or(0, from_sql_int));
    let text = |i: usize| row.get_ref(i).map(|v| v.as_str_or_null().ok().flatten());
    Ok(HistoryTask {
        run_id: row.get(0)?,
        run_index,
        task_index: row.get::<_, Option<i64>>(1)?.map(from_sql_int),
        status: TaskStatus::from_code(row.get(2)?),
        attempts: row.get(3)?,
        input_bytes: int(4)?,
        estimate_bytes: int(5)?,
        estimate_source: text(6)?.and_then(parse_estimate_source),
        plugin_estimate_bytes: row.get::<_, Option<i64>>(7)?.map(from_sql_int),
        peak_bytes: int(8)?,
        peak_source: text(9)?.and_then(PeakSource::parse),
        output_bytes: int(10)?,
        wall_ms: int(11)?,
        wall_us: super::micros(int(11)?, row.get::<_, Option<i64>>(13)?.map(from_sql_int)),
        file_bytes: int(12)?,
        waited_us: from_sql_int(row.get(14)?),
        read_back_us: from_sql_int(row.get(15)?),
    })
}

impl Store {
    /// The last `last` runs, oldest first, of `recipe` (or of every recipe), keeping only those
    /// with rows for `step` if one is given, and those `filter` lets through.
    pub fn history_runs(
        &self,
        recipe: Option<&str>,
        step: Option<&str>,
        last: usize,
        filter: RunFilter,
    ) -> Result<Vec<HistoryRun>, StoreError> {
        let what = "listing the runs of a history";
        // With a recipe, `recipe = ?1` walks the index runs_by_recipe backwards.
        let recipe_filter = if recipe.is_some() { "recipe = ?1" } else { "?1 IS NULL" };
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT run_id, recipe, cycle, started_at, status, pid, proc_start, boot_id, host, pid_ns, vars, \
                 warm_services FROM runs \
                 WHERE {recipe_filter} \
                 AND (?2 IS NULL OR EXISTS (SELECT 1 FROM task_blocks AS b WHERE b.run_id = runs.run_id AND b.step = ?2)) \
                 ORDER BY run_id DESC",
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query(params![recipe, step]).map_err(|e| self.err(what, e))?;
        let mut runs = Vec::new();
        while runs.len() < last {
            let Some(row) = rows.next().map_err(|e| self.err(what, e))? else { break };
            let read = || -> rusqlite::Result<HistoryRun> {
                let stored: String = row.get(4)?;
                Ok(HistoryRun {
                    run_id: row.get(0)?,
                    recipe: row.get(1)?,
                    cycle: row.get(2)?,
                    started_at: row.get(3)?,
                    status: status_now(&stored, || run_owner(row, 5)),
                    vars: row.get(10)?,
                    warm_services: row.get::<_, Option<i64>>(11)?.map(from_sql_int),
                })
            };
            let run = read().map_err(|e| self.err(what, e))?;
            if filter.keeps(run.status) {
                runs.push(run);
            }
        }
        runs.reverse();
        Ok(runs)
    }

    /// The estimator's view of a step: the last `last_runs` runs of `recipe` that have rows for
    /// `step` (finished, failed or killed: not running, not interrupted), oldest first (run
    /// order is cycle order), and each of their task rows of the step streamed to `each` in run
    /// order, then recording order — at most `max_tasks_per_run` per run, the first recorded.
    /// Returns the runs.
    pub fn task_history(
        &self,
        recipe: &str,
        step: &str,
        last_runs: usize,
        max_tasks_per_run: Option<u64>,
        mut each: impl FnMut(&HistoryRun, HistoryTask),
    ) -> Result<Vec<HistoryRun>, StoreError> {
        let runs = self.history_runs(Some(recipe), Some(step), last_runs, RunFilter::default())?;
        for (index, run) in runs.iter().enumerate() {
            let limit = max_tasks_per_run.unwrap_or(u64::MAX);
            self.step_tasks(run.run_id, step, limit, |task| each(run, HistoryTask { run_index: index, ..task }))?;
        }
        Ok(runs)
    }

    /// Up to `limit` task rows of `step` in run `run_id` (the first recorded), streamed to
    /// `each` in recording order as [`HistoryTask`]s of run index 0: what a report plots of a
    /// step's peaks against its tasks' input bytes and plugin estimates. Returns how many.
    pub fn step_tasks(
        &self,
        run_id: i64,
        step: &str,
        limit: u64,
        mut each: impl FnMut(HistoryTask),
    ) -> Result<u64, StoreError> {
        let what = "reading a step's tasks";
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM {STEP_ROWS} LEFT JOIN task_details AS e ON e.task_id = t.task_id \
                 WHERE b.run_id = ?1 AND b.step = ?2 ORDER BY b.first_task_id, t.task_id LIMIT ?3"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query(params![run_id, step, to_sql_int(limit)]).map_err(|e| self.err(what, e))?;
        let mut count = 0;
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            each(history_task(row, 0).map_err(|e| self.err(what, e))?);
            count += 1;
        }
        Ok(count)
    }

    /// Estimate against actual per step, for `runner history`: for each of the last `last_runs`
    /// runs (of `recipe`, or of any; with rows for `step` if given; running ones included,
    /// interrupted ones as `filter` says), oldest first, one entry per step (or just `step`) in
    /// the order the run first recorded them.
    pub fn step_history(
        &self,
        recipe: Option<&str>,
        step: Option<&str>,
        last_runs: usize,
        filter: RunFilter,
    ) -> Result<Vec<StepHistory>, StoreError> {
        let runs = self.history_runs(recipe, step, last_runs, RunFilter { running: true, ..filter })?;
        let mut out = Vec::new();
        for run in &runs {
            out.extend(self.run_step_history(run, step)?);
        }
        Ok(out)
    }

    /// [`Store::step_history`] of one run: an entry per step (or just `step`) in the order the
    /// run first recorded them.
    pub fn run_step_history(&self, run: &HistoryRun, step: Option<&str>) -> Result<Vec<StepHistory>, StoreError> {
        let what = "aggregating the task history";
        let mut aggregate = self
            .conn()
            .prepare_cached(&format!(
                "SELECT b.step, min(b.plugin), group_concat(DISTINCT coalesce(t.estimate_source, b.estimate_source)), \
                   count(*), sum(t.status = 0), sum(t.status = 1), sum(t.status = 2), \
                   max(CASE WHEN t.status != 2 THEN {ESTIMATE} END), \
                   max(CASE WHEN t.status != 2 THEN t.peak_bytes END), \
                   sum(t.status != 2 AND t.peak_bytes > {ESTIMATE}), \
                   total(CASE WHEN t.status != 2 THEN {ESTIMATE} END), \
                   total(CASE WHEN t.status != 2 THEN t.peak_bytes END), \
                   total(t.wall_ms), min(b.first_task_id) AS first, \
                   group_concat(DISTINCT CASE WHEN t.status != 2 THEN coalesce(t.peak_source, b.peak_source) END) \
                 FROM {STEP_ROWS} WHERE b.run_id = ?1 AND (?2 IS NULL OR b.step = ?2) GROUP BY b.step ORDER BY first",
            ))
            .map_err(|e| self.err(what, e))?;
        let steps = aggregate
            .query_map(params![run.run_id, step], |row| {
                let int = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map_or(0, from_sql_int));
                let sources: Option<String> = row.get(2)?;
                let mut sources: Vec<&str> = sources.as_deref().unwrap_or("").split(',').collect();
                sources.sort();
                let (estimate_total, peak_total): (f64, f64) = (row.get(10)?, row.get(11)?);
                let peak_sources: Option<String> = row.get(14)?;
                let mut peak_sources: Vec<PeakSource> =
                    peak_sources.as_deref().unwrap_or("").split(',').filter_map(PeakSource::parse).collect();
                peak_sources.sort_by_key(|s| s.as_str());
                Ok(StepHistory {
                    run_id: run.run_id,
                    recipe: run.recipe.clone(),
                    cycle: run.cycle.clone(),
                    started_at: run.started_at.clone(),
                    run_status: run.status,
                    figures: StepFigures {
                        step: row.get(0)?,
                        plugin: row.get(1)?,
                        sources: sources.iter().filter_map(|s| parse_estimate_source(s)).collect(),
                        peak_sources,
                        tasks: int(3)?,
                        ok: int(4)?,
                        failed: int(5)?,
                        skipped: int(6)?,
                        estimate_max: int(7)?,
                        peak_max: int(8)?,
                        underestimates: int(9)?,
                        slack: (peak_total > 0.0).then(|| estimate_total / peak_total - 1.0),
                        wall: Duration::from_millis(row.get::<_, f64>(12)? as u64),
                        // Medians below, per step that ran.
                        ..StepFigures::default()
                    },
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err(what, e))?;
        let mut out = Vec::with_capacity(steps.len());
        for mut entry in steps {
            let figures = &mut entry.figures;
            let ran = figures.ok + figures.failed;
            if ran > 0 {
                figures.estimate_p50 = self.lower_median(run.run_id, &figures.step, ESTIMATE, ran)?;
                figures.peak_p50 = self.lower_median(run.run_id, &figures.step, "t.peak_bytes", ran)?;
            }
            out.push(entry);
        }
        Ok(out)
    }

    /// The ⌈n/2⌉-th smallest `column` (an SQL expression over `t` and `b`) of the `ran` tasks
    /// of a step that ran.
    fn lower_median(&self, run_id: i64, step: &str, column: &'static str, ran: u64) -> Result<u64, StoreError> {
        let what = "computing a median of the task history";
        let sql = format!(
            "SELECT {column} FROM {STEP_ROWS} WHERE b.run_id = ?1 AND b.step = ?2 AND t.status != 2 \
             ORDER BY 1 LIMIT 1 OFFSET ?3"
        );
        let mut stmt = self.conn().prepare_cached(&sql).map_err(|e| self.err(what, e))?;
        let value: Option<i64> = stmt
            .query_row(params![run_id, step, to_sql_int((ran - 1) / 2)], |r| r.get(0))
            .map_err(|e| self.err(what, e))?;
        Ok(value.map_or(0, from_sql_int))
    }

    /// Every task of run `run_id`, streamed to `each` in recording order, read from the compact
    /// tables without spelling keys (cheaper than the `tasks` view, which spells every key in
    /// SQL). Returns how many there were.
    pub fn timeline(&self, run_id: i64, mut each: impl FnMut(TimelineTask<'_>)) -> Result<u64, StoreError> {
        let what = "reading a run's timeline";
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT b.step, t.task_index, t.key, t.status, t.worker, t.start_ms, t.wall_ms, {ESTIMATE}, t.peak_bytes, \
                 t.attempts, coalesce(t.estimate_source, b.estimate_source), b.plugin, \
                 coalesce(t.peak_source, b.peak_source) \
                 FROM {STEP_ROWS} WHERE b.run_id = ?1 ORDER BY b.first_task_id, t.task_id"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query([run_id]).map_err(|e| self.err(what, e))?;
        let mut count = 0;
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            let read = || -> rusqlite::Result<TimelineTask<'_>> {
                let opt = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(from_sql_int));
                Ok(TimelineTask {
                    step: row.get_ref(0)?.as_str()?,
                    plugin: row.get_ref(11)?.as_str()?,
                    task_index: opt(1)?,
                    key: row.get_ref(2)?.as_str_or_null()?,
                    status: TaskStatus::from_code(row.get(3)?),
                    attempts: row.get(9)?,
                    worker: row.get(4)?,
                    start_ms: opt(5)?,
                    wall_ms: opt(6)?.unwrap_or(0),
                    estimate_bytes: opt(7)?.unwrap_or(0),
                    estimate_source: row.get_ref(10)?.as_str_or_null()?.and_then(parse_estimate_source),
                    peak_bytes: opt(8)?.unwrap_or(0),
                    peak_source: row.get_ref(12)?.as_str_or_null()?.and_then(PeakSource::parse),
                })
            };
            each(read().map_err(|e| self.err(what, e))?);
            count += 1;
        }
        Ok(count)
    }

    /// The latest run of `recipe` at `cycle`, whatever its status: what `--resume` continues.
    pub fn last_run_of(&self, recipe: &str, cycle: &str) -> Result<Option<super::RunRow>, StoreError> {
        let what = "looking for the last run of a cycle";
        let run_id: Option<i64> = self
            .conn()
            .query_row("SELECT max(run_id) FROM runs WHERE recipe = ?1 AND cycle = ?2", params![recipe, cycle], |r| {
                r.get(0)
            })
            .map_err(|e| self.err(what, e))?;
        match run_id {
            Some(run_id) => self.run(run_id),
            None => Ok(None),
        }
    }

    /// Every task row of run `run_id` with its resume columns (hashes, output path), keys
    /// spelled, streamed to `each` in recording order. Returns how many there were.
    pub fn recorded_tasks(&self, run_id: i64, mut each: impl FnMut(RecordedTask)) -> Result<u64, StoreError> {
        let what = "reading a run's tasks for --resume";
        let keys = self.step_keys(run_id)?;
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT b.step, t.task_index, t.key, t.status, nullif(coalesce(e.args_hash, b.args_hash), 0), \
                   nullif(coalesce(e.inputs_hash, b.inputs_hash), 0), nullif(coalesce(e.output_hash, b.output_hash), 0), \
                   e.output_path \
                 FROM {STEP_ROWS} LEFT JOIN task_details AS e ON e.task_id = t.task_id WHERE b.run_id = ?1 \
                 ORDER BY b.first_task_id, t.task_id"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query([run_id]).map_err(|e| self.err(what, e))?;
        let mut count = 0;
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            let read = || -> rusqlite::Result<RecordedTask> {
                let step: String = row.get(0)?;
                let task_index = row.get::<_, Option<i64>>(1)?.map(from_sql_int);
                let key = match (row.get::<_, Option<String>>(2)?, task_index, keys.get(&step)) {
                    (Some(key), _, _) => key,
                    (None, Some(index), Some(spelling)) => spelling.key(index),
                    _ => String::new(),
                };
                let hash = |i: usize| row.get::<_, Option<i64>>(i).map(|h| h.map(|h| h as u64));
                Ok(RecordedTask {
                    step,
                    task_index,
                    key,
                    finished: TaskStatus::from_code(row.get(3)?).made_output(),
                    args_hash: hash(4)?,
                    inputs_hash: hash(5)?,
                    output_hash: hash(6)?,
                    output_path: row.get(7)?,
                })
            };
            each(read().map_err(|e| self.err(what, e))?);
            count += 1;
        }
        Ok(count)
    }

    /// How run `run_id` spells the keys of its steps over integer dims (`step_dims`), by step.
    pub fn step_keys(&self, run_id: i64) -> Result<HashMap<String, StepKeys>, StoreError> {
        let what = "reading how a run's keys are spelled";
        let mut stmt = self
            .conn()
            .prepare_cached(
                "SELECT step, name, value0, value_step, size FROM step_dims WHERE run_id = ?1 ORDER BY step, pos",
            )
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query([run_id]).map_err(|e| self.err(what, e))?;
        let mut keys: HashMap<String, StepKeys> = HashMap::new();
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            let read = || -> rusqlite::Result<(String, KeyDim)> {
                let dim = KeyDim {
                    name: row.get(1)?,
                    value0: row.get(2)?,
                    value_step: row.get(3)?,
                    size: from_sql_int(row.get(4)?),
                };
                Ok((row.get(0)?, dim))
            };
            let (step, dim) = read().map_err(|e| self.err(what, e))?;
            keys.entry(step.clone()).or_insert_with(|| StepKeys { step, dims: Vec::new() }).dims.push(dim);
        }
        Ok(keys)
    }

    /// The failed tasks of run `run_id`: steps in the order the run recorded them, tasks by
    /// index within a step (rows without an index after, by key).
    pub fn failed_tasks(&self, run_id: i64) -> Result<Vec<FailedTask>, StoreError> {
        let what = "listing a run's failed tasks";
        let keys = self.step_keys(run_id)?;
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT b.step, t.key, t.task_index, e.error, e.log_path, b.first_task_id FROM {STEP_ROWS} \
                 LEFT JOIN task_details AS e ON e.task_id = t.task_id WHERE b.run_id = ?1 AND t.status = 1"
            ))
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query([run_id]).map_err(|e| self.err(what, e))?;
        let mut failed = Vec::new();
        // Where each step's rows start, to order steps as the run recorded them.
        let mut step_order: HashMap<String, i64> = HashMap::new();
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            let read = || -> rusqlite::Result<(FailedTask, i64)> {
                let step: String = row.get(0)?;
                let task_index = row.get::<_, Option<i64>>(2)?.map(from_sql_int);
                let key = match (row.get::<_, Option<String>>(1)?, task_index, keys.get(&step)) {
                    (Some(key), _, _) => key,
                    (None, Some(index), Some(spelling)) => spelling.key(index),
                    _ => String::new(),
                };
                let task = FailedTask { step, key, task_index, error: row.get(3)?, log_path: row.get(4)? };
                Ok((task, row.get(5)?))
            };
            let (task, block) = read().map_err(|e| self.err(what, e))?;
            let first = step_order.entry(task.step.clone()).or_insert(block);
            *first = (*first).min(block);
            failed.push(task);
        }
        failed.sort_by(|a, b| {
            let order = |t: &FailedTask| step_order.get(&t.step).copied().unwrap_or(i64::MAX);
            (order(a), &a.step, a.task_index.is_none(), a.task_index, &a.key).cmp(&(
                order(b),
                &b.step,
                b.task_index.is_none(),
                b.task_index,
                &b.key,
            ))
        });
        Ok(failed)
    }
}
