//! `runner history --durations`: each step's learned task time — the model `runner simulate`
//! predicts with (basis, rate, typical time, error, tasks and runs behind it) — per recipe.

use crate::simulate::durations::DurationModel;
use crate::simulate::history::read_step;
use crate::store::Store;

/// Prints the duration model of every step of `recipe` (or of every recipe), or of `step`.
pub fn print(store: &Store, recipe: Option<&str>, step: Option<&str>) -> anyhow::Result<()> {
    let recipes = match recipe {
        Some(recipe) => vec![recipe.to_string()],
        None => store.recipes()?,
    };
    println!("{:<24} {:<20} time per task (what `runner simulate` predicts with)", "recipe", "step");
    for recipe in &recipes {
        for name in store.steps(Some(recipe))?.iter().filter(|s| step.is_none_or(|wanted| wanted == s.as_str())) {
            let records = read_step(store, recipe, name, None, None)?;
            let model = DurationModel::learn(&records.timings)
                .map_or_else(|| "no recorded times (simulated tasks are guesses)".to_string(), |m| m.to_string());
            println!("{recipe:<24} {name:<20} {model}");
        }
    }
    Ok(())
}
