//! `runner history`: estimate against actual per step over recent runs.

use runner_plugin::size::format_size;

use super::record;
use super::{HistoryArgs, OutputFormat};

pub fn history(args: HistoryArgs) -> anyhow::Result<u8> {
    let db = args.db.clone().unwrap_or_else(record::default_db);
    let Some(store) = record::open(&db, true)? else {
        anyhow::bail!("no feedback store at {} (runs record there; pass --db PATH)", db.display());
    };
    let rows = store.step_history(args.recipe.as_deref(), args.step.as_deref(), args.last)?;
    if args.format == OutputFormat::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no runs recorded in {}", db.display());
        return Ok(0);
    }
    let mut table = vec![
        ["run", "recipe", "cycle", "step", "tasks", "source", "estimate p50", "peak p50", "peak max", "under", "slack"]
            .map(String::from),
    ];
    for row in &rows {
        table.push([
            row.run_id.to_string(),
            row.recipe.clone(),
            row.cycle.clone(),
            row.step.clone(),
            row.tasks.to_string(),
            row.estimate_sources.clone(),
            format_size(row.estimate_p50),
            format_size(row.peak_p50),
            format_size(row.peak_max),
            row.underestimates.to_string(),
            row.slack.map_or("-".into(), |s| format!("{:+.0}%", s * 100.0)),
        ]);
    }
    print!("{}", super::table(&table, &[4, 6, 7, 8, 9, 10]));
    Ok(0)
}
