//! `runner history`: estimate against actual per step over recent runs, each run with its status
//! and its failed and skipped tasks; `--failed` lists a run's failed tasks with their errors.
//! Reads the store without writing to it.

use std::path::Path;

use runner_plugin::size::format_size;

use super::record;
use super::{HistoryArgs, OutputFormat};
use crate::store::{FailedTask, RunFilter, RunStatus, StepFigures, StepHistory, Store};

/// Keys shown per group of identical errors in `--failed` text.
const KEYS_SHOWN: usize = 10;

pub fn history(args: HistoryArgs) -> anyhow::Result<u8> {
    let db = args.db.clone().unwrap_or_else(record::default_db);
    let Some(store) = record::open_for_reading(&db)? else {
        anyhow::bail!("no feedback store at {} (runs record there; pass --db PATH)", db.display());
    };
    check_names(&store, &db, args.recipe.as_deref(), args.step.as_deref())?;
    if args.durations {
        let json = args.format == OutputFormat::Json;
        super::history_durations::print(&store, args.recipe.as_deref(), args.step.as_deref(), json)?;
        return Ok(0);
    }
    let filter = RunFilter { running: true, interrupted: args.interrupted };
    if args.failed || args.run.is_some() {
        return failed(&store, &db, &args, filter);
    }
    let mut rows = store.step_history(args.recipe.as_deref(), args.step.as_deref(), args.last, filter)?;
    if args.step.is_none() {
        with_runs_that_recorded_nothing(&store, &mut rows, args.recipe.as_deref(), args.last, filter)?;
    }
    if args.format == OutputFormat::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no runs recorded in {}", db.display());
        return Ok(0);
    }
    let mut table = vec![
        [
            "run",
            "status",
            "recipe",
            "cycle",
            "step",
            "tasks",
            "failed",
            "skipped",
            "source",
            "estimate p50",
            "peak p50",
            "peak max",
            "measured by",
            "under",
            "slack",
        ]
        .map(String::from),
    ];
    for row in &rows {
        let step = &row.figures;
        table.push([
            row.run_id.to_string(),
            row.run_status.to_string(),
            row.recipe.clone(),
            row.cycle.clone(),
            step.step.clone(),
            step.tasks.to_string(),
            step.failed.to_string(),
            step.skipped.to_string(),
            step.sources_text(),
            format_size(step.estimate_p50),
            format_size(step.peak_p50),
            format_size(step.peak_max),
            step.peak_sources_text(),
            step.underestimates.to_string(),
            step.slack.map_or("-".into(), |s| format!("{:+.0}%", s * 100.0)),
        ]);
    }
    print!("{}", super::table(&table, &[5, 6, 7, 9, 10, 11, 13, 14]));
    Ok(0)
}

/// A run that died (or was interrupted) before recording a task still shows, with a `-` step.
fn with_runs_that_recorded_nothing(
    store: &Store,
    rows: &mut Vec<StepHistory>,
    recipe: Option<&str>,
    last: usize,
    filter: RunFilter,
) -> anyhow::Result<()> {
    let mut runs = store.history_runs(recipe, None, last, filter)?;
    runs.retain(|run| !rows.iter().any(|r| r.run_id == run.run_id));
    for run in &runs {
        let at = rows.iter().position(|r| r.run_id > run.run_id).unwrap_or(rows.len());
        rows.insert(
            at,
            StepHistory {
                run_id: run.run_id,
                recipe: run.recipe.clone(),
                cycle: run.cycle.clone(),
                started_at: run.started_at.clone(),
                run_status: run.status,
                figures: StepFigures::empty("-", ""),
            },
        );
    }
    Ok(())
}

/// An unknown `--recipe` or `--step` is an error that names the closest known one.
fn check_names(store: &Store, db: &Path, recipe: Option<&str>, step: Option<&str>) -> anyhow::Result<()> {
    if let Some(recipe) = recipe {
        let known = store.recipes()?;
        if !known.iter().any(|r| r == recipe) {
            return Err(super::UsageError(format!(
                "no runs of recipe `{recipe}` in {}{}",
                db.display(),
                suggestion(recipe, &known, "recipes")
            ))
            .into());
        }
    }
    if let Some(step) = step {
        let known = store.steps(recipe)?;
        if !known.iter().any(|s| s == step) {
            let of = recipe.map(|r| format!(" of recipe `{r}`")).unwrap_or_default();
            return Err(super::UsageError(format!(
                "no step `{step}` in the runs{of} in {}{}",
                db.display(),
                suggestion(step, &known, "steps")
            ))
            .into());
        }
    }
    Ok(())
}

/// "; did you mean `x`?" for the closest of `known` (if any is close), then what there is.
fn suggestion(name: &str, known: &[String], what: &str) -> String {
    if known.is_empty() {
        return format!(" (it has no {what})");
    }
    let closest = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let mut text = match closest {
        Some((_, k)) => format!("; did you mean `{k}`?"),
        None => String::new(),
    };
    const LISTED: usize = 12;
    let listed: Vec<&str> = known.iter().take(LISTED).map(String::as_str).collect();
    let more = if known.len() > LISTED { format!(", … ({} in all)", known.len()) } else { String::new() };
    text.push_str(&format!(" ({what}: {}{more})", listed.join(", ")));
    text
}

/// `--failed`: the failed tasks of `--run`, or of the last run (of `--recipe`) that has any.
fn failed(store: &Store, db: &Path, args: &HistoryArgs, filter: RunFilter) -> anyhow::Result<u8> {
    let run = match args.run {
        Some(run_id) => {
            store.run(run_id)?.ok_or_else(|| super::UsageError(format!("no run {run_id} in {}", db.display())))?
        }
        None => {
            let recent = store.runs(args.recipe.as_deref(), usize::MAX)?;
            let shown = |r: &crate::store::RunRow| filter.interrupted || r.status != RunStatus::Interrupted;
            let has_failures =
                |r: &crate::store::RunRow| r.tasks_failed.unwrap_or(0) > 0 || r.status == RunStatus::Failed;
            let with_failures = recent.into_iter().rev().find(|r| shown(r) && has_failures(r));
            match with_failures {
                Some(run) => run,
                None => {
                    println!("no run with failed tasks in {}", db.display());
                    return Ok(0);
                }
            }
        }
    };
    let mut tasks = store.failed_tasks(run.run_id)?;
    if let Some(step) = &args.step {
        tasks.retain(|t| &t.step == step);
    }
    if args.format == OutputFormat::Json {
        let json = serde_json::json!({ "run": run, "failed": tasks });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(0);
    }
    println!(
        "run {} ({} {}, {}): {} failed task{}",
        run.run_id,
        run.recipe,
        run.cycle,
        run.status,
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" }
    );
    print!("{}", group_failures(&tasks));
    Ok(0)
}

/// Failures grouped by step and identical error, in the order they come (steps as recorded,
/// tasks by index), each group's keys listed after its error.
fn group_failures(tasks: &[FailedTask]) -> String {
    let mut groups: Vec<(&str, Option<&str>, Vec<&FailedTask>)> = Vec::new();
    for task in tasks {
        let error = task.error.as_deref();
        match groups.iter_mut().find(|(step, e, _)| *step == task.step && *e == error) {
            Some((_, _, members)) => members.push(task),
            None => groups.push((&task.step, error, vec![task])),
        }
    }
    let mut out = String::new();
    for (step, error, members) in groups {
        let error = error.unwrap_or("(no error recorded)");
        if let [task] = members.as_slice() {
            let key = if task.key.is_empty() { String::new() } else { format!("[{}]", task.key) };
            out.push_str(&format!("  {step}{key}: {error}\n"));
        } else {
            out.push_str(&format!("  {step}, {} tasks: {error}\n", members.len()));
            let keys: Vec<&str> = members.iter().take(KEYS_SHOWN).map(|t| t.key.as_str()).collect();
            let more = members.len().saturating_sub(KEYS_SHOWN);
            let more = if more > 0 { format!(" … and {more} more") } else { String::new() };
            out.push_str(&format!("    {}{more}\n", keys.join("  ")));
        }
        if let Some(log) = members.iter().find_map(|t| t.log_path.as_deref()) {
            out.push_str(&format!("    log: {log}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(step: &str, key: &str, index: u64, error: &str) -> FailedTask {
        FailedTask {
            step: step.into(),
            key: key.into(),
            task_index: Some(index),
            error: Some(error.into()),
            log_path: None,
        }
    }

    #[test]
    fn identical_errors_are_grouped_with_their_keys() {
        let tasks: Vec<FailedTask> = (0..12)
            .map(|i| failed("load", &format!("i={i}"), i, "no such file"))
            .chain([failed("load", "i=12", 12, "permission denied"), failed("save", "", 0, "disk full")])
            .collect();
        let text = group_failures(&tasks);
        assert_eq!(
            text,
            "  load, 12 tasks: no such file\n    i=0  i=1  i=2  i=3  i=4  i=5  i=6  i=7  i=8  i=9 … and 2 more\n  \
             load[i=12]: permission denied\n  save: disk full\n"
        );
    }

    #[test]
    fn close_names_are_suggested() {
        let known = ["precip".to_string(), "smooth".to_string()];
        assert!(suggestion("smoth", &known, "steps").starts_with("; did you mean `smooth`?"));
        assert_eq!(suggestion("zzz", &known, "steps"), " (steps: precip, smooth)");
        assert_eq!(suggestion("x", &[], "recipes"), " (it has no recipes)");
    }
}
