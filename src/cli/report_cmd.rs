//! `runner report`: writes one self-contained HTML page — of a run (the last one by default) or
//! of a recipe's last runs — from the feedback store, which it opens read-only.

use std::path::Path;

use runner_plugin::size::format_size;

use super::ReportArgs;
use super::output_guard::{OutputGuard, OutputKind};
use super::record;
use crate::report::{Limits, RecipePage, ReportError, RunPage, write_page};
use crate::store::Store;

pub fn report(args: ReportArgs) -> anyhow::Result<u8> {
    let db = args.db.clone().unwrap_or_else(record::default_db);
    OutputGuard::default().protect_store(&db).output(&args.output, "-o", OutputKind::Html).check()?;
    let Some(store) = record::open_for_reading(&db)? else {
        anyhow::bail!("no feedback store at {} (runs record there; pass --db PATH)", db.display());
    };
    let limits = Limits::default();
    let started = std::time::Instant::now();
    let (page, what) = match &args.recipe {
        Some(recipe) => {
            check_recipe(&store, &db, recipe)?;
            let runs = RecipePage::last_runs(&store, recipe, args.last)?;
            if runs.is_empty() {
                anyhow::bail!(
                    "recipe `{recipe}` has no runs to report in {} (only interrupted ones, which reports leave out)",
                    db.display()
                );
            }
            let page = RecipePage::load(&store, recipe, &runs, &limits)?;
            let what = format!("recipe {recipe}, {}", crate::report::runs_count(page.runs.len()));
            (page.to_html(), what)
        }
        None => {
            let run_id = match args.run {
                Some(run_id) if store.run(run_id)?.is_none() => {
                    return Err(super::UsageError(format!("no run {run_id} in {}", db.display())).into());
                }
                Some(run_id) => run_id,
                None => store
                    .runs(None, 1)?
                    .last()
                    .map(|r| r.run_id)
                    .ok_or_else(|| ReportError::NoRuns { path: db.clone() })?,
            };
            let page = RunPage::load(&store, run_id, &limits)?;
            let run = &page.run;
            let tasks = run.tasks_total.unwrap_or(page.timeline.tasks() as u64);
            let what = match (run.tasks_failed.unwrap_or(0), run.tasks_skipped.unwrap_or(0)) {
                (0, 0) => format!("run {run_id}: {} {}, {tasks} tasks", run.recipe, run.cycle),
                (failed, skipped) => {
                    format!(
                        "run {run_id}: {} {}, {tasks} tasks, {failed} failed, {skipped} skipped",
                        run.recipe, run.cycle
                    )
                }
            };
            (page.to_html(), what)
        }
    };
    write_page(&args.output, &page)?;
    println!(
        "wrote {} ({what}; {} in {:.2} s)",
        args.output.display(),
        format_size(page.len() as u64),
        started.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// Writes the recipe page of the runs `run_ids` of `recipe` to `path` (`runner replay --report`).
pub fn write_recipe_report(store: &Store, recipe: &str, run_ids: &[i64], path: &Path) -> anyhow::Result<()> {
    let page = RecipePage::load(store, recipe, run_ids, &Limits::default())?;
    write_page(path, &page.to_html())?;
    Ok(())
}

/// An unknown `--recipe` is an error naming the closest known one and what there is.
fn check_recipe(store: &Store, db: &Path, recipe: &str) -> anyhow::Result<()> {
    let known = store.recipes()?;
    if known.iter().any(|r| r == recipe) {
        return Ok(());
    }
    if known.is_empty() {
        return Err(
            super::UsageError(format!("no runs of recipe `{recipe}` in {} (it has no runs)", db.display())).into()
        );
    }
    let closest = known
        .iter()
        .map(|k| (strsim::jaro_winkler(recipe, k), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!("; did you mean `{k}`?"))
        .unwrap_or_default();
    const LISTED: usize = 12;
    let listed: Vec<&str> = known.iter().take(LISTED).map(String::as_str).collect();
    let more = if known.len() > LISTED { format!(", … ({} in all)", known.len()) } else { String::new() };
    let message =
        format!("no runs of recipe `{recipe}` in {}{closest} (recipes: {}{more})", db.display(), listed.join(", "));
    Err(super::UsageError(message).into())
}
