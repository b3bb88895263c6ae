//! Deleting old runs with everything recorded of them, then giving the space back to the file
//! system (`runner prune`). Runs still going are never deleted. With a folder to clean
//! ([`Prune::files_in`], the working directory runs wrote in), the files of a recipe and cycle
//! none of whose runs is left go too: its commands' logs (`runner-logs/<recipe>/<cycle>/`) and
//! its kept values (`runner-cache/<recipe>/<cycle>/`).

use std::path::{Path, PathBuf};

use rusqlite::params;

use super::{RunStatus, Store, StoreError, status_now};

/// Which runs to delete. Both limits may be given: a run then goes when it is older than
/// `before` and not among the last `keep` (at least `keep` runs of each recipe stay).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prune {
    /// Keep only the last N runs of each recipe.
    pub keep: Option<usize>,
    /// Delete runs started before this time (RFC 3339 UTC, as `runs.started_at` is written).
    pub before: Option<String>,
    /// Only runs of this recipe.
    pub recipe: Option<String>,
    /// Where runs wrote their logs and kept values: those of a recipe and cycle whose last run
    /// is deleted are removed from here. `None` leaves files alone.
    pub files_in: Option<PathBuf>,
}

/// What [`Store::prune`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub runs: u64,
    pub tasks: u64,
    /// The file's size before and after (after the space was reclaimed).
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Folders of logs and kept values removed, and the bytes they held.
    pub folders: u64,
    pub folder_bytes: u64,
}

impl Store {
    /// The runs `prune` would delete, oldest first.
    pub fn runs_to_prune(&self, prune: &Prune) -> Result<Vec<i64>, StoreError> {
        let what = "choosing the runs to prune";
        let mut stmt = self
            .conn()
            .prepare(
                "SELECT run_id, status, started_at, \
                   row_number() OVER (PARTITION BY recipe ORDER BY run_id DESC) AS newer, \
                   pid, proc_start, boot_id, host, pid_ns \
                 FROM runs WHERE ?1 IS NULL OR recipe = ?1 ORDER BY run_id",
            )
            .map_err(|e| self.err(what, e))?;
        let mut rows = stmt.query(params![prune.recipe]).map_err(|e| self.err(what, e))?;
        let mut chosen = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(what, e))? {
            let read = || -> rusqlite::Result<(i64, RunStatus, String, i64)> {
                let stored: String = row.get(1)?;
                Ok((row.get(0)?, status_now(&stored, || super::run_owner(row, 4)), row.get(2)?, row.get(3)?))
            };
            let (run_id, status, started_at, newer) = read().map_err(|e| self.err(what, e))?;
            if status == RunStatus::Running {
                continue;
            }
            let too_many = prune.keep.is_some_and(|keep| newer as u64 > keep as u64);
            let too_old = prune.before.as_deref().is_some_and(|before| started_at.as_str() < before);
            let goes = match (prune.keep, &prune.before) {
                (Some(_), Some(_)) => too_many && too_old,
                _ => too_many || too_old,
            };
            if goes {
                chosen.push(run_id);
            }
        }
        Ok(chosen)
    }

    /// Deletes the runs `prune` chooses, with their tasks, samples and events, in one
    /// transaction; then, if anything went, rebuilds the file (`VACUUM`) so that it shrinks.
    /// `on_vacuum` is called (with the file's size) before the rebuild, which can take a while.
    pub fn prune(&self, prune: &Prune, on_vacuum: impl FnOnce(u64)) -> Result<Pruned, StoreError> {
        self.writable("pruning")?;
        let bytes_before = self.file_bytes();
        let runs = self.runs_to_prune(prune)?;
        let cycles = self.cycles_of(&runs)?;
        let mut tasks = 0;
        let delete = |tx: &rusqlite::Transaction<'_>, tasks: &mut u64| -> rusqlite::Result<()> {
            let mut blocks = tx.prepare("SELECT first_task_id, last_task_id FROM task_blocks WHERE run_id = ?1")?;
            let mut rows = tx.prepare("DELETE FROM task_rows WHERE task_id BETWEEN ?1 AND ?2")?;
            let mut details = tx.prepare("DELETE FROM task_details WHERE task_id BETWEEN ?1 AND ?2")?;
            for &run_id in &runs {
                let ranges = blocks
                    .query_map([run_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for (first, last) in ranges {
                    *tasks += rows.execute([first, last])? as u64;
                    details.execute([first, last])?;
                }
                for table in ["task_blocks", "step_dims", "samples", "events", "runs"] {
                    tx.execute(&format!("DELETE FROM {table} WHERE run_id = ?1"), [run_id])?;
                }
            }
            Ok(())
        };
        let tx = self.conn().unchecked_transaction().map_err(|e| self.err("pruning runs", e))?;
        delete(&tx, &mut tasks).map_err(|e| self.err("pruning runs", e))?;
        tx.commit().map_err(|e| self.err("committing the pruning", e))?;
        if !runs.is_empty() {
            on_vacuum(bytes_before);
            self.conn().execute_batch("VACUUM").map_err(|e| self.err("reclaiming the space (VACUUM)", e))?;
            // The rebuilt pages went through the WAL: fold it back and empty it.
            self.conn()
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(|e| self.err("checkpointing after VACUUM", e))?;
        }
        let (mut folders, mut folder_bytes) = (0, 0);
        if let Some(root) = &prune.files_in {
            for (recipe, cycle) in self.cycles_without_runs(cycles)? {
                for folder in files_of(root, &recipe, &cycle) {
                    let bytes = bytes_under(&folder);
                    if std::fs::remove_dir_all(&folder).is_ok() {
                        folders += 1;
                        folder_bytes += bytes;
                    }
                }
            }
        }
        Ok(Pruned {
            runs: runs.len() as u64,
            tasks,
            bytes_before,
            bytes_after: self.file_bytes(),
            folders,
            folder_bytes,
        })
    }

    /// The distinct (recipe, cycle) of `runs`.
    fn cycles_of(&self, runs: &[i64]) -> Result<Vec<(String, String)>, StoreError> {
        let what = "reading the cycles of the runs to prune";
        let mut stmt =
            self.conn().prepare("SELECT recipe, cycle FROM runs WHERE run_id = ?1").map_err(|e| self.err(what, e))?;
        let mut cycles = Vec::new();
        for &run in runs {
            let pair = stmt.query_row([run], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(what, e))?;
            if !cycles.contains(&pair) {
                cycles.push(pair);
            }
        }
        Ok(cycles)
    }

    /// Those of `cycles` no run is left of.
    fn cycles_without_runs(&self, cycles: Vec<(String, String)>) -> Result<Vec<(String, String)>, StoreError> {
        let what = "checking which cycles have runs left";
        let mut stmt = self
            .conn()
            .prepare("SELECT count(*) FROM runs WHERE recipe = ?1 AND cycle = ?2")
            .map_err(|e| self.err(what, e))?;
        let mut gone = Vec::new();
        for (recipe, cycle) in cycles {
            let left: i64 = stmt.query_row([&recipe, &cycle], |r| r.get(0)).map_err(|e| self.err(what, e))?;
            if left == 0 {
                gone.push((recipe, cycle));
            }
        }
        Ok(gone)
    }

    /// The size of the file (without its `-wal`).
    pub fn file_bytes(&self) -> u64 {
        std::fs::metadata(self.path()).map_or(0, |m| m.len())
    }
}

/// The folders of a recipe and cycle's logs and kept values under `root`, as runs name them.
fn files_of(root: &Path, recipe: &str, cycle: &str) -> Vec<PathBuf> {
    let logs = crate::command::task_log_path(recipe, cycle, "x", "x");
    let cache = crate::values::cache_dir(recipe, cycle, "x");
    [logs.parent().and_then(Path::parent), cache.parent()]
        .into_iter()
        .flatten()
        .map(|folder| root.join(folder))
        .filter(|folder| folder.is_dir())
        .collect()
}

/// The bytes of the files under `dir` (not following links).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
