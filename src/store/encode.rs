//! How a committed batch is written in SQL: a step's rows as one `task_blocks` range holding
//! what they share, 32 rows per prepared `INSERT` binding only what changed, the rare details in
//! `task_details`, samples and events, and the run row's completion. The writer thread
//! ([`super::writer`]) decides when; this decides how.

use std::sync::{Arc, LazyLock};

use rusqlite::{Connection, Statement, ToSql, TransactionBehavior, params};

use super::{RunEvent, RunOutcome, RunStatus, Sample, TaskRecord, TaskStatus, hash_to_sql, now_text, to_sql_int};

/// Rows per `INSERT` statement: one statement per row spends most of its time starting and
/// finishing the statement rather than inserting.
const ROWS_PER_INSERT: usize = 32;
/// The columns of a `task_rows` row the writer binds, in order (see [`row_cells`]).
const ROW_COLUMNS: [&str; 16] = [
    "task_index",
    "key",
    "status",
    "attempts",
    "input_bytes",
    "estimate_bytes",
    "estimate_source",
    "plugin_estimate_bytes",
    "peak_bytes",
    "peak_source",
    "output_bytes",
    "file_bytes",
    "wall_ms",
    "worker",
    "start_ms",
    "wall_us_rest",
];
const ROW_PARAMS: usize = ROW_COLUMNS.len();

/// `INSERT INTO task_rows` of `rows` rows, [`ROW_PARAMS`] parameters each. Task ids are left to
/// SQLite, which appends (one more than the largest) faster than it places a given id.
/// The inserts of [`ROWS_PER_INSERT`] rows and of one, made once: a commit must not build
/// their text again (it took hundreds of allocations a commit).
static INSERT_MANY_ROWS: LazyLock<String> = LazyLock::new(|| insert_rows_sql(ROWS_PER_INSERT));
static INSERT_ONE_ROW: LazyLock<String> = LazyLock::new(|| insert_rows_sql(1));

fn insert_rows_sql(rows: usize) -> String {
    let mut sql = format!("INSERT INTO task_rows ({}) VALUES ", ROW_COLUMNS.join(", "));
    for row in 0..rows {
        let first = row * ROW_PARAMS + 1;
        let own: Vec<String> = (first..first + ROW_PARAMS).map(|p| format!("?{p}")).collect();
        let separator = if row > 0 { ", " } else { "" };
        sql.push_str(&format!("{separator}({})", own.join(", ")));
    }
    sql
}

const INSERT_BLOCK: &str = "INSERT INTO task_blocks (run_id, step, first_task_id, last_task_id, tasks, plugin, \
     estimate_source, estimate_bytes, plugin_estimate_bytes, peak_source, args_hash, inputs_hash, output_hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

const INSERT_DETAILS: &str = "INSERT INTO task_details (task_id, error, log_path, output_path, args_hash, \
     inputs_hash, output_hash, waited_us, read_back_bytes, read_back_us, read_back_disk_bytes, read_back_disk_us) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

const INSERT_SAMPLE: &str = "INSERT OR IGNORE INTO samples (run_id, t_ms, reserved_bytes, live_bytes, rss_bytes, \
     resident_bytes, spilled_bytes, running_tasks, external_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

const INSERT_EVENT: &str = "INSERT INTO events (run_id, t_ms, kind, bytes, detail) VALUES (?1, ?2, ?3, ?4, ?5)";

const RECORDED: &str = "UPDATE runs SET recorded_ms = max(coalesce(recorded_ms, 0), ?2) WHERE run_id = ?1";

const FINISH_RUN: &str = "UPDATE runs SET finished_at = ?2, status = ?3, wall_ms = ?4, peak_rss_bytes = ?5, \
     peak_reserved_bytes = ?6, spilled_bytes = ?7, spill_count = ?8, spill_error = ?9, oversized = ?10, \
     tasks_ok = ?11, tasks_failed = ?12, tasks_skipped = ?13, underestimates = ?14, estimate_bytes_sum = ?15, \
     peak_bytes_sum = ?16, recorded_ms = max(coalesce(recorded_ms, 0), ?17), wall_us_rest = ?18, spill_us = ?19, \
     standing_bytes = ?20, standing_shared_bytes = ?21, standing_services = ?22, most_services = ?23 WHERE run_id = ?1";

/// What the run row counts of the rows written.
#[derive(Default, Clone, Copy)]
pub(super) struct Counts {
    ok: u64,
    failed: u64,
    skipped: u64,
    underestimates: u64,
    estimate_sum: u64,
    peak_sum: u64,
    /// How far into the run the records reach, in ms.
    pub(super) recorded_ms: u64,
}

impl Counts {
    pub(super) fn add(&mut self, task: &TaskRecord) {
        match task.status {
            // A reused task's output is the run's as much as a task that ran.
            TaskStatus::Ok | TaskStatus::Reused => self.ok += 1,
            TaskStatus::Failed => self.failed += 1,
            TaskStatus::Skipped => self.skipped += 1,
        }
        if !matches!(task.status, TaskStatus::Skipped | TaskStatus::Reused) {
            if task.figures.peak_bytes > task.figures.estimate_bytes {
                self.underestimates += 1;
            }
            self.estimate_sum = self.estimate_sum.saturating_add(task.figures.estimate_bytes);
            self.peak_sum = self.peak_sum.saturating_add(task.figures.peak_bytes);
            self.recorded_ms = self.recorded_ms.max(task.figures.start_ms().saturating_add(task.figures.wall_ms()));
        }
    }
}

/// A batch's rows of one step (and plugin), by index in the batch, in recording order.
pub(super) struct Group {
    pub step: Arc<str>,
    pub plugin: &'static str,
    pub rows: Vec<u32>,
}

/// What one transaction writes.
pub(super) struct Batch<'a> {
    pub run_id: i64,
    pub tasks: &'a [TaskRecord],
    pub samples: &'a [Sample],
    pub events: &'a [RunEvent],
    /// The rows of `tasks` by step, in the order their blocks are written.
    pub groups: &'a [Group],
    pub recorded_ms: u64,
    pub finish: Option<(RunOutcome, Counts)>,
}

/// One value as bound to a statement parameter. `Unbound` is what a fresh statement holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell<'a> {
    Unbound,
    Null,
    Int(i64),
    Text(&'a str),
}

impl Cell<'_> {
    fn bind(self, stmt: &mut Statement<'_>, param: usize) -> rusqlite::Result<()> {
        match self {
            Cell::Unbound | Cell::Null => stmt.raw_bind_parameter(param, rusqlite::types::Null),
            Cell::Int(value) => stmt.raw_bind_parameter(param, value),
            Cell::Text(text) => stmt.raw_bind_parameter(param, text),
        }
    }

    fn hash(hash: Option<u64>) -> Cell<'static> {
        hash.filter(|&h| h != 0).map_or(Cell::Null, |h| Cell::Int(hash_to_sql(h)))
    }
}

/// What a block's rows share unless they say otherwise: its first row's values.
struct BlockDefaults {
    estimate_bytes: u64,
    plugin_estimate_bytes: u64,
    estimate_source: &'static str,
    peak_source: &'static str,
    args_hash: Cell<'static>,
    inputs_hash: Cell<'static>,
    output_hash: Cell<'static>,
}

impl BlockDefaults {
    fn of(first: &TaskRecord) -> BlockDefaults {
        BlockDefaults {
            estimate_bytes: first.figures.estimate_bytes,
            plugin_estimate_bytes: first.figures.plugin_estimate_bytes,
            estimate_source: first.figures.estimate_source.as_str(),
            peak_source: first.figures.peak_source.as_str(),
            args_hash: Cell::hash(first.args_hash),
            inputs_hash: Cell::hash(first.inputs_hash),
            output_hash: Cell::hash(first.output_hash),
        }
    }

    /// A row's hash as `task_details` stores it: NULL when it is the block's, 0 for none.
    fn own_hash(block: Cell<'static>, hash: Option<u64>) -> Cell<'static> {
        match Cell::hash(hash) {
            cell if cell == block => Cell::Null,
            Cell::Null => Cell::Int(0),
            cell => cell,
        }
    }

    /// `task`'s `task_details` values after its task id, if it needs a row there.
    fn details<'a>(&self, task: &'a TaskRecord) -> Option<[Cell<'a>; 11]> {
        let text = |t: &'a Option<String>| t.as_deref().map_or(Cell::Null, Cell::Text);
        let some = |v: u64| if v > 0 { Cell::Int(to_sql_int(v)) } else { Cell::Null };
        let read_back = task.figures.read_back;
        let cells = [
            text(&task.error),
            text(&task.log_path),
            text(&task.output_path),
            Self::own_hash(self.args_hash, task.args_hash),
            Self::own_hash(self.inputs_hash, task.inputs_hash),
            Self::own_hash(self.output_hash, task.output_hash),
            some(task.figures.waited.as_micros() as u64),
            some(read_back.bytes),
            // A read of a few pages may take under a µs: its bytes were still read back.
            if read_back.bytes > 0 { Cell::Int(to_sql_int(read_back.wall.as_micros() as u64)) } else { Cell::Null },
            some(read_back.from_disk),
            if read_back.from_disk > 0 {
                Cell::Int(to_sql_int(read_back.disk_wall.as_micros() as u64))
            } else {
                Cell::Null
            },
        ];
        cells.iter().any(|c| *c != Cell::Null).then_some(cells)
    }
}

/// `task`'s `task_rows` values, in [`ROW_COLUMNS`] order: what equals the block's is NULL.
fn row_cells<'a>(task: &'a TaskRecord, block: &BlockDefaults) -> [Cell<'a>; ROW_PARAMS] {
    let int = |v: u64| Cell::Int(to_sql_int(v));
    let unless_default = |v: u64, default: u64| if v == default { Cell::Null } else { int(v) };
    let text_unless = |v: &'static str, default: &str| if v == default { Cell::Null } else { Cell::Text(v) };
    [
        task.task_index.map_or(Cell::Null, int),
        task.key.as_deref().map_or(Cell::Null, Cell::Text),
        Cell::Int(task.status.code()),
        Cell::Int(i64::from(task.figures.attempts)),
        int(task.figures.input_bytes),
        unless_default(task.figures.estimate_bytes, block.estimate_bytes),
        text_unless(task.figures.estimate_source.as_str(), block.estimate_source),
        unless_default(task.figures.plugin_estimate_bytes, block.plugin_estimate_bytes),
        int(task.figures.peak_bytes),
        text_unless(task.figures.peak_source.as_str(), block.peak_source),
        int(task.figures.output_bytes),
        int(task.figures.file_bytes),
        int(task.figures.wall_ms()),
        Cell::Int(i64::from(task.worker)),
        int(task.figures.start_ms()),
        int(super::micros_past_ms(task.figures.wall)),
    ]
}

/// Binds `cells` as row `row` of an insert statement whose row holds `bound` now: only the
/// values that differ are bound.
fn bind_row<'a>(
    insert: &mut Statement<'_>,
    row: usize,
    cells: [Cell<'a>; ROW_PARAMS],
    bound: &mut [Cell<'a>; ROW_PARAMS],
) -> rusqlite::Result<()> {
    let at = row * ROW_PARAMS;
    for (column, (cell, was)) in cells.into_iter().zip(bound.iter_mut()).enumerate() {
        if cell != *was {
            cell.bind(insert, at + column + 1)?;
            *was = cell;
        }
    }
    Ok(())
}

impl Batch<'_> {
    /// One transaction: the rows, a step at a time, each step's consecutive task ids as a
    /// block; the samples and events; how far the records reach; and the run row's completion
    /// if this is the last batch.
    pub(super) fn commit(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if !self.tasks.is_empty() {
            self.insert_tasks(&tx)?;
        }
        if !self.samples.is_empty() {
            let mut insert = tx.prepare_cached(INSERT_SAMPLE)?;
            for s in self.samples {
                let values = [
                    s.t_ms,
                    s.reserved_bytes,
                    s.live_bytes,
                    s.rss_bytes,
                    s.resident_bytes,
                    s.spilled_bytes,
                    s.running_tasks,
                    s.external_bytes,
                ]
                .map(to_sql_int);
                insert.execute(params![
                    self.run_id,
                    values[0],
                    values[1],
                    values[2],
                    values[3],
                    values[4],
                    values[5],
                    values[6],
                    values[7]
                ])?;
            }
        }
        if !self.events.is_empty() {
            let mut insert = tx.prepare_cached(INSERT_EVENT)?;
            for e in self.events {
                insert.execute(params![
                    self.run_id,
                    to_sql_int(e.t_ms),
                    e.kind.as_str(),
                    e.bytes.map(to_sql_int),
                    e.detail
                ])?;
            }
        }
        match &self.finish {
            None => {
                tx.prepare_cached(RECORDED)?.execute(params![self.run_id, to_sql_int(self.recorded_ms)])?;
            }
            Some((outcome, counts)) => finish_run(&tx, self.run_id, outcome, counts)?,
        }
        tx.commit()
    }

    fn insert_tasks(&self, tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
        let tasks = &self.tasks;
        // The write lock is ours (`BEGIN IMMEDIATE`), and SQLite gives each new row one more
        // than the largest id (while that is below 2⁶³ − 1): so this batch's rows get the ids
        // from max + 1 in insertion order, and each step's rows are one block.
        let mut next_id: i64 = tx.query_row("SELECT coalesce(max(task_id), 0) + 1 FROM task_rows", [], |r| r.get(0))?;
        let mut many = tx.prepare_cached(&INSERT_MANY_ROWS)?;
        let mut one = tx.prepare_cached(&INSERT_ONE_ROW)?;
        let mut block = tx.prepare_cached(INSERT_BLOCK)?;
        let mut details = tx.prepare_cached(INSERT_DETAILS)?;
        block.raw_bind_parameter(1, self.run_id)?;
        // What each row of each statement holds now: bindings survive the reset after each
        // statement, so a value equal to what is bound already is not bound again.
        let mut bound_many = [[Cell::Unbound; ROW_PARAMS]; ROWS_PER_INSERT];
        let mut bound_one = [Cell::Unbound; ROW_PARAMS];
        for group in self.groups {
            let first = next_id;
            let defaults = BlockDefaults::of(&tasks[group.rows[0] as usize]);
            let chunks = group.rows.chunks_exact(ROWS_PER_INSERT);
            let rest = chunks.remainder();
            for chunk in chunks {
                for (row, &index) in chunk.iter().enumerate() {
                    let task = &tasks[index as usize];
                    bind_row(&mut many, row, row_cells(task, &defaults), &mut bound_many[row])?;
                }
                many.raw_execute()?;
            }
            for &index in rest {
                let task = &tasks[index as usize];
                bind_row(&mut one, 0, row_cells(task, &defaults), &mut bound_one)?;
                one.raw_execute()?;
            }
            next_id += group.rows.len() as i64;
            debug_assert_eq!(tx.last_insert_rowid(), next_id - 1, "task ids are consecutive");
            for (offset, &index) in group.rows.iter().enumerate() {
                if let Some(cells) = defaults.details(&tasks[index as usize]) {
                    details.raw_bind_parameter(1, first + offset as i64)?;
                    for (param, cell) in cells.into_iter().enumerate() {
                        cell.bind(&mut details, param + 2)?;
                    }
                    details.raw_execute()?;
                }
            }
            let step: &str = &group.step;
            let shared: [(usize, &dyn ToSql); 12] = [
                (2, &step),
                (3, &first),
                (4, &(next_id - 1)),
                (5, &(next_id - first)),
                (6, &group.plugin),
                (7, &defaults.estimate_source),
                (8, &to_sql_int(defaults.estimate_bytes)),
                (9, &to_sql_int(defaults.plugin_estimate_bytes)),
                (10, &defaults.peak_source),
                (11, &cell_value(defaults.args_hash)),
                (12, &cell_value(defaults.inputs_hash)),
                (13, &cell_value(defaults.output_hash)),
            ];
            for (param, value) in shared {
                block.raw_bind_parameter(param, value)?;
            }
            block.raw_execute()?;
        }
        Ok(())
    }
}

fn cell_value(cell: Cell<'_>) -> Option<i64> {
    match cell {
        Cell::Int(value) => Some(value),
        _ => None,
    }
}

fn finish_run(
    tx: &rusqlite::Transaction<'_>,
    run_id: i64,
    outcome: &RunOutcome,
    counts: &Counts,
) -> rusqlite::Result<()> {
    // An aborted run's figures are unknown: the recorder was dropped without them.
    let known = outcome.status != RunStatus::Aborted;
    let figure = |value: u64| known.then_some(to_sql_int(value));
    let wall_ms = outcome.wall.as_millis() as u64;
    tx.execute(
        FINISH_RUN,
        params![
            run_id,
            now_text(),
            outcome.status.as_str(),
            figure(wall_ms),
            figure(outcome.peak_rss_bytes),
            figure(outcome.peak_reserved_bytes),
            figure(outcome.spilled_bytes),
            figure(outcome.spill_count),
            outcome.spill_error,
            figure(outcome.oversized),
            to_sql_int(counts.ok),
            to_sql_int(counts.failed),
            to_sql_int(counts.skipped),
            to_sql_int(counts.underestimates),
            to_sql_int(counts.estimate_sum),
            to_sql_int(counts.peak_sum),
            to_sql_int(counts.recorded_ms.max(wall_ms)),
            figure(super::micros_past_ms(outcome.wall)),
            figure(outcome.spill_wall.as_micros() as u64),
            figure(outcome.standing_bytes),
            figure(outcome.standing_shared_bytes),
            figure(outcome.standing_services),
            figure(outcome.most_services),
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plan::EstimateSource;
    use crate::store::{TaskFigures, TaskStatus};

    #[test]
    fn multi_row_inserts_number_their_parameters_in_order() {
        let sql = insert_rows_sql(2);
        let values = sql.split("VALUES ").nth(1).unwrap();
        let first: Vec<String> = (1..=ROW_PARAMS).map(|p| format!("?{p}")).collect();
        let second: Vec<String> = (ROW_PARAMS + 1..=2 * ROW_PARAMS).map(|p| format!("?{p}")).collect();
        assert_eq!(values, format!("({}), ({})", first.join(", "), second.join(", ")));
    }

    #[test]
    fn rows_store_only_what_differs_from_their_block() {
        let step: Arc<str> = Arc::from("s");
        let first = TaskRecord {
            figures: TaskFigures {
                estimate_bytes: 100,
                plugin_estimate_bytes: 80,
                attempts: 1,
                ..TaskFigures::default()
            },
            args_hash: Some(7),
            ..TaskRecord::new(step.clone(), "noop", TaskStatus::Ok)
        };
        let block = BlockDefaults::of(&first);
        let cells = row_cells(&first, &block);
        assert_eq!(cells[5..8], [Cell::Null, Cell::Null, Cell::Null]);
        assert_eq!(block.details(&first), None, "nothing of its own beyond the block's");
        let other = TaskRecord {
            figures: TaskFigures { estimate_bytes: 200, estimate_source: EstimateSource::History, ..first.figures },
            args_hash: None,
            error: Some("boom".into()),
            ..first.clone()
        };
        let cells = row_cells(&other, &block);
        assert_eq!(cells[5..8], [Cell::Int(200), Cell::Text("history"), Cell::Null]);
        let details = block.details(&other).unwrap();
        assert_eq!(details[0], Cell::Text("boom"));
        assert_eq!(details[3], Cell::Int(0), "no args hash where the block has one");
        assert!(details[4..].iter().all(|cell| *cell == Cell::Null));
    }
}
