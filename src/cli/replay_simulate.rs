//! `runner replay CYCLES --simulate`: each cycle's last recorded run predicted from the history
//! before it (with its budget and workers) and compared with what it recorded — wall, peak
//! reserved, spilled — to show how far a prediction can be trusted.

use std::path::Path;

use anyhow::Context as _;
use runner_plugin::size::format_size;
use serde::Serialize;

use super::ReplayArgs;
use super::record;
use super::simulate_cmd::{
    CriticalPathSummary, PredictedSummary, SpillBandwidth, beyond_text, predict_measuring_spills,
};
use super::summary::RunSummary;
use crate::plan::Compiled;
use crate::simulate::alike::Beyond;
use crate::simulate::growth::{Grown, NotGrown, grown_text, not_grown_text};
use crate::simulate::service_wait::Interpreters;
use crate::simulate::trend::{Carried, carried_text};
use crate::simulate::{History, Recompile, SimOptions};
use crate::store::RunRow;

/// The figures compared, predicted or recorded.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Figures {
    pub wall_s: f64,
    pub peak_reserved_bytes: u64,
    pub spilled_bytes: u64,
}

/// The prediction's error: (predicted − recorded) / recorded.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Errors {
    pub wall: Option<f64>,
    pub peak_reserved: Option<f64>,
    /// Whether spilling was predicted exactly where it happened (both spilled, or neither).
    pub spill_agrees: bool,
}

/// One cycle of the summary: the predicted run's summary, and the comparison.
#[derive(Debug, Serialize)]
struct CycleEntry {
    #[serde(flatten)]
    run: RunSummary,
    run_id: i64,
    guesses: u64,
    critical_path: CriticalPathSummary,
    predicted: Figures,
    recorded: Figures,
    error: Errors,
    vars_beyond_history: Vec<Beyond>,
    grown_past_history: Vec<Grown>,
    not_grown_past_history: Vec<NotGrown>,
    carried_past_history: Vec<Carried>,
}

/// Predicts each of `cycles` (compiled in `compiled`) against the store at `db`.
/// `recompile` compiles the recipe with a recorded run's vars; `args` give the workers, budget,
/// guessing speed and summary file.
pub fn replay(
    cycle_ids: &[&str],
    compiled: Vec<Compiled>,
    recompile: &Recompile<'_>,
    db: &Path,
    args: &ReplayArgs,
) -> anyhow::Result<u8> {
    let (workers, budget) = (args.resources.workers.map(usize::from), args.resources.budget);
    let (guess_speed, summary) = (args.guess_speed, args.summary.as_deref());
    let Some(store) = record::open_for_reading(db)? else {
        anyhow::bail!(
            "no feedback store at {}: --simulate predicts recorded cycles (replay them first, or pass --db PATH)",
            db.display()
        );
    };
    show!(
        "{:<20} {:>7} {:>9} {:>9} {:>7} {:>11} {:>11} {:>7} {:>10} {:>10}",
        "cycle",
        "run",
        "wall",
        "recorded",
        "error",
        "reserved",
        "recorded",
        "error",
        "spilled",
        "recorded"
    );
    let mut entries = Vec::new();
    let mut predicted_any = false;
    // How fast spills are written here, measured once if a prediction needs it.
    let mut probed = None;
    let recipe = compiled.first().map(|c| c.recipe.name.clone()).unwrap_or_default();
    let rows = cycle_ids.iter().map(|id| store.last_run_of(&recipe, id)).collect::<Result<Vec<_>, _>>()?;
    for (at, (id, mut compiled)) in cycle_ids.iter().zip(compiled).enumerate() {
        let Some(row) = rows[at].clone() else {
            show!("{id:<20} not recorded in {}: nothing to compare", db.display());
            continue;
        };
        let history = History::read(&store, &compiled, Some(row.run_id))?;
        let spill = SpillBandwidth::choose(None, &history);
        let options = SimOptions {
            workers: workers.unwrap_or(row.workers.max(1) as usize),
            budget: budget.unwrap_or(row.budget_bytes),
            spill: spill.rates(),
            read_every_task: false,
            cpus: Some(crate::scheduler::cpus_here()),
            // As the cycle ran: after another in one process, its interpreters were warm; and
            // it kept them for the next when that one found them so.
            interpreters: Interpreters::of_run(row.warm_services),
            keep_services: rows
                .get(at + 1)
                .and_then(Option::as_ref)
                .is_some_and(|next| Interpreters::of_run(next.warm_services) == Interpreters::Warm),
        };
        let spill_dir = args.resources.spill_dir.as_deref();
        let (prediction, spill) = predict_measuring_spills(spill, &options, spill_dir, &mut probed, |options| {
            crate::simulate::predict(&mut compiled, &history, recompile, options, guess_speed, None, false)
        });
        let summary = PredictedSummary::new(&compiled, &prediction, guess_speed, spill);
        let entry = entry(summary, &row);
        print_row(&entry);
        predicted_any = true;
        entries.push(entry);
    }
    if let Some(path) = summary {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "predicted": true, "cycles": entries }))? + "\n";
        crate::values::write_atomically(path, text.as_bytes()).context("writing the replay summary")?;
    }
    if !predicted_any {
        anyhow::bail!("none of the cycles is recorded in {}: nothing was predicted", db.display());
    }
    Ok(0)
}

fn entry(summary: PredictedSummary, row: &RunRow) -> CycleEntry {
    let run = summary.run;
    let predicted =
        Figures { wall_s: run.wall_s, peak_reserved_bytes: run.peak_reserved_bytes, spilled_bytes: run.spilled_bytes };
    let recorded = Figures {
        wall_s: row.wall_us.unwrap_or(0) as f64 / 1e6,
        peak_reserved_bytes: row.peak_reserved_bytes.unwrap_or(0),
        spilled_bytes: row.spilled_bytes.unwrap_or(0),
    };
    let relative = |p: f64, r: f64| (r > 0.0).then(|| (p - r) / r);
    let error = Errors {
        wall: relative(predicted.wall_s, recorded.wall_s),
        peak_reserved: relative(predicted.peak_reserved_bytes as f64, recorded.peak_reserved_bytes as f64),
        spill_agrees: (predicted.spilled_bytes > 0) == (recorded.spilled_bytes > 0),
    };
    CycleEntry {
        run,
        run_id: row.run_id,
        guesses: summary.guesses,
        critical_path: summary.critical_path,
        predicted,
        recorded,
        error,
        vars_beyond_history: summary.vars_beyond_history,
        grown_past_history: summary.grown_past_history,
        not_grown_past_history: summary.not_grown_past_history,
        carried_past_history: summary.carried_past_history,
    }
}

fn print_row(entry: &CycleEntry) {
    let percent = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{:+.0}%", e * 100.0));
    show!(
        "{:<20} {:>7} {:>8.2}s {:>8.2}s {:>7} {:>11} {:>11} {:>7} {:>10} {:>10}{}",
        entry.run.cycle,
        entry.run_id,
        entry.predicted.wall_s,
        entry.recorded.wall_s,
        percent(entry.error.wall),
        format_size(entry.predicted.peak_reserved_bytes),
        format_size(entry.recorded.peak_reserved_bytes),
        percent(entry.error.peak_reserved),
        format_size(entry.predicted.spilled_bytes),
        format_size(entry.recorded.spilled_bytes),
        if entry.error.spill_agrees { "" } else { "  spill mispredicted" },
    );
    for beyond in &entry.vars_beyond_history {
        show!("{:<20} {}", "", beyond_text(beyond));
    }
    for grown in &entry.grown_past_history {
        show!("{:<20} {}", "", grown_text(grown));
    }
    for not_grown in &entry.not_grown_past_history {
        show!("{:<20} {}", "", not_grown_text(not_grown));
    }
    for carried in &entry.carried_past_history {
        show!("{:<20} {}", "", carried_text(carried));
    }
}
