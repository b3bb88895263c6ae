//! `runner history --durations`: each step's learned task time — the model `runner simulate`
//! predicts with (basis, rate, typical time, error, tasks and runs behind it) — per recipe.

use crate::simulate::durations::DurationModel;
use crate::simulate::step_records::{AlikeBy, read_step};
use crate::store::Store;

/// Prints the duration model of every step of `recipe` (or of every recipe), or of `step`: a
/// table, or with `json` a list of `{recipe, step, model}` (`model` null without recorded times).
pub fn print(store: &Store, recipe: Option<&str>, step: Option<&str>, json: bool) -> anyhow::Result<()> {
    let recipes = match recipe {
        Some(recipe) => vec![recipe.to_string()],
        None => store.recipes()?,
    };
    let mut rows = Vec::new();
    for recipe in &recipes {
        for name in store.steps(Some(recipe))?.iter().filter(|s| step.is_none_or(|wanted| wanted == s.as_str())) {
            let records = read_step(store, recipe, name, None, AlikeBy::Newest)?;
            rows.push((recipe.clone(), name.clone(), DurationModel::learn(&records.timings)));
        }
    }
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(recipe, step, model)| {
                serde_json::json!({"recipe": recipe, "step": step, "model": model.map(DurationModel::to_json)})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("{:<24} {:<20} time per task (what `runner simulate` predicts with)", "recipe", "step");
    for (recipe, name, model) in rows {
        let model =
            model.map_or_else(|| "no recorded times (simulated tasks are guesses)".to_string(), |m| m.to_string());
        println!("{recipe:<24} {name:<20} {model}");
    }
    Ok(())
}
