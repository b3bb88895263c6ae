//! `runner replay`: a recipe over a list of cycles, in order, against one store — the way CI
//! proves that estimates converge and budgets hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use runner_plugin::size::format_size;
use serde::{Deserialize, Serialize};

use super::output_guard::OutputGuard;
use super::output_lock::OutputLocks;
use super::record;
use super::report_cmd;
use super::run_cmd::{execute, plan_resume, refuse_a_second_run, run_options};
use super::summary::RunSummary;
use super::{EXIT_TASKS_FAILED, EXIT_USAGE, ReplayArgs};
use crate::plan::Compiled;
use crate::recipe::CompileOptions;
use crate::registry::Registry;
use crate::scheduler::RunOptions;
use crate::store::RunStatus;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CyclesFile {
    /// The recipe, relative to the cycles file.
    recipe: PathBuf,
    cycles: Vec<Cycle>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cycle {
    id: String,
    #[serde(default)]
    vars: BTreeMap<String, serde_json::Value>,
}

/// One cycle's row of the replay summary.
#[derive(Debug, Serialize)]
struct CycleSummary {
    #[serde(flatten)]
    run: RunSummary,
    /// Its place in the cycles file (the warm-up counts cycles a resumed replay skipped).
    #[serde(skip)]
    position: usize,
    underestimate_rate: f64,
    slack: Option<f64>,
    over_budget: bool,
}

pub fn replay(registry: &Registry, args: ReplayArgs) -> anyhow::Result<u8> {
    let Some(file) = read_cycles(&args.cycles) else { return Ok(EXIT_USAGE) };
    let thresholds = args.max_underestimate_rate.is_some() || args.max_median_slack.is_some();
    if thresholds && !args.simulate && args.warmup >= file.cycles.len() {
        return Err(super::UsageError(format!(
            "--warmup {} leaves none of the {} cycles of {} to judge against the thresholds; expected a warm-up \
             below {}",
            args.warmup,
            file.cycles.len(),
            args.cycles.display(),
            file.cycles.len()
        ))
        .into());
    }
    let recipe_path = args.cycles.parent().unwrap_or(Path::new(".")).join(&file.recipe);
    let db = args.db.clone().unwrap_or_else(record::default_db);
    let sections = args.python.sections();
    let Some(compiled) = compile_every_cycle(&file, &recipe_path, registry, &sections) else { return Ok(EXIT_USAGE) };
    let mut guard = OutputGuard::default();
    guard.protect_store(&db).protect_always(&args.cycles, "the cycles file");
    for one in &compiled {
        guard.protect_recipe(&recipe_path, one);
    }
    guard.check_summary_and_report(args.summary.as_deref(), args.report.as_deref())?;
    if !args.simulate {
        for one in &compiled {
            guard.check_tasks(one)?;
        }
    }
    if args.simulate {
        let ids: Vec<&str> = file.cycles.iter().map(|c| c.id.as_str()).collect();
        let recompile = super::simulate_cmd::recompiler(registry, &recipe_path, &sections);
        return super::replay_simulate::replay(&ids, compiled, &recompile, &db, &args);
    }
    let options = run_options(&args.resources)?;
    let store = Some(record::open_for_recording(&db)?);
    show!(
        "{:<20} {:>6} {:>8} {:>10} {:>10} {:>7} {:>7} {:>9}",
        "cycle",
        "tasks",
        "wall",
        "peak RSS",
        "budget",
        "under",
        "slack",
        "spilled"
    );
    let mut cycles = Vec::new();
    // This replay's runs, for --report: the last run of each cycle, made by this process.
    let mut run_ids = Vec::new();
    let mut recipe_name = String::new();
    // With --resume, the cycles whose last run finished ok are skipped until the first that did
    // not, which is resumed; the cycles after it run.
    let mut picking_up = args.resume;
    for (position, (cycle, mut compiled)) in file.cycles.iter().zip(compiled).enumerate() {
        let mut reuse = None;
        if picking_up && let Some(store) = &store {
            match store.last_run_of(&compiled.recipe.name, &cycle.id)? {
                Some(row) if row.status == RunStatus::Ok => {
                    show!("{:<20} done in run {}: skipped (--resume)", cycle.id, row.run_id);
                    continue;
                }
                _ => {
                    picking_up = false;
                    // A replay runs here; a Slurm run of the cycle kept its folder where it does by default.
                    reuse = plan_resume(store, &compiled, &super::run_cmd::shared_dir(None)?)?;
                }
            }
        }
        if reuse.is_none()
            && let Some(store) = &store
        {
            refuse_a_second_run(store, &compiled)?;
        }
        let locks = OutputLocks::acquire(&compiled)?;
        // Interpreters stay warm for the next cycle; only the last one lets them go early.
        let options = RunOptions { keep_services: position + 1 < file.cycles.len(), ..options.clone() };
        let run = execute(&mut compiled, &options, store.as_ref(), true, None, reuse.as_ref())?;
        drop(locks);
        if let Some(error) = run.store_error {
            return Err(error.context(format!("cycle {}", cycle.id)));
        }
        if let Some(store) = &store
            && let Some(row) = store.last_run_of(&compiled.recipe.name, &cycle.id)?
            && row.pid == std::process::id()
        {
            run_ids.push(row.run_id);
            recipe_name.clone_from(&compiled.recipe.name);
        }
        let summary = cycle_summary(run.summary, position);
        print_row(&summary);
        cycles.push(summary);
    }
    if let Some(path) = &args.summary {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "cycles": cycles }))? + "\n";
        crate::values::write_atomically(path, text.as_bytes()).context("writing the replay summary")?;
    }
    if let (Some(path), Some(store)) = (&args.report, &store) {
        report_cmd::write_recipe_report(store, &recipe_name, &run_ids, path)
            .with_context(|| format!("writing the replay's report to {}", path.display()))?;
    }
    let problems = judge(&cycles, &args);
    for problem in &problems {
        say!("replay: {problem}");
    }
    Ok(if problems.is_empty() { 0 } else { EXIT_TASKS_FAILED })
}

/// Compiles the recipe for every cycle before the first runs, so that a bad cycle (its id, its
/// vars) or a repeated id fails the replay at once, not after the cycles before it ran. Prints
/// every problem and returns `None` when there is any.
fn compile_every_cycle(
    file: &CyclesFile,
    recipe_path: &Path,
    registry: &Registry,
    sections: &[(String, String, serde_json::Value)],
) -> Option<Vec<Compiled>> {
    let mut seen = std::collections::HashSet::new();
    let mut compiled = Vec::with_capacity(file.cycles.len());
    let mut ok = true;
    for (position, cycle) in file.cycles.iter().enumerate() {
        if !seen.insert(cycle.id.as_str()) {
            say!("cycle {} (number {}): the id is listed twice; expected each cycle once", cycle.id, position + 1);
            ok = false;
            continue;
        }
        let options = CompileOptions { sections: sections.to_vec(), ..cycle.options() };
        match Compiled::from_file(recipe_path, &options, registry) {
            Ok(one) => compiled.push(one),
            Err(error) => {
                say!("cycle {}: {error}", cycle.id);
                ok = false;
            }
        }
    }
    ok.then_some(compiled)
}

/// Reads the cycles file; prints what is wrong and returns `None` when it is invalid.
fn read_cycles(path: &Path) -> Option<CyclesFile> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            say!("{}: cannot read the cycles file: {e}", path.display());
            return None;
        }
    };
    parse_cycles(&text).map_err(|problem| say!("{}{problem}", path.display())).ok()
}

/// A cycles file's text read, or what is wrong with it, to follow the file's name (`:LINE:COL: ...`).
fn parse_cycles(text: &str) -> Result<CyclesFile, String> {
    match serde_saphyr::from_str::<CyclesFile>(text) {
        Ok(file) if file.cycles.is_empty() => {
            Err(": no cycles; expected `cycles:` with at least one `{id: ..., vars: {...}}`".to_string())
        }
        Ok(file) => Ok(file),
        Err(e) => {
            let at = e.location().map(|l| format!(":{}:{}", l.line(), l.column())).unwrap_or_default();
            let message = e.without_snippet().to_string();
            let first = message.lines().next().unwrap_or("invalid YAML");
            // The place is said once, in front: the parser's own "at line 3, column 6" goes.
            let first = match e.location() {
                Some(l) => first.trim_end_matches(&format!(" at line {}, column {}", l.line(), l.column())),
                None => first,
            };
            Err(format!(
                "{at}: {first}\n  expected `recipe: PATH` and `cycles: [{{id: ID, vars: {{NAME: VALUE}}}}, ...]`"
            ))
        }
    }
}

/// The compile options of each cycle of a cycles file's text, as `runner replay` compiles the
/// recipe with them, or what is wrong with the file. For the fuzz target (`fuzz/`).
#[doc(hidden)]
pub fn cycle_options(text: &str) -> Result<Vec<CompileOptions>, String> {
    Ok(parse_cycles(text)?.cycles.iter().map(Cycle::options).collect())
}

impl Cycle {
    /// The recipe's compile options for this cycle: its id, and its vars as `--set`s.
    fn options(&self) -> CompileOptions {
        CompileOptions {
            cycle: self.id.clone(),
            set: self.vars.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
            sections: Vec::new(),
        }
    }
}

fn cycle_summary(run: RunSummary, position: usize) -> CycleSummary {
    let ran = run.tasks_ok + run.tasks_failed;
    let underestimate_rate = if ran == 0 { 0.0 } else { run.underestimates as f64 / ran as f64 };
    let slack = (run.peak_bytes_sum > 0).then(|| run.estimate_bytes_sum as f64 / run.peak_bytes_sum as f64 - 1.0);
    let allowed = run.budget_bytes + run.budget_bytes / 20 + (64 << 20);
    // The whole tree: the runner, its commands and its interpreters (the budget holds for all).
    let over_budget = run.peak_bytes > allowed;
    CycleSummary { run, position, underestimate_rate, slack, over_budget }
}

fn print_row(c: &CycleSummary) {
    show!(
        "{:<20} {:>6} {:>7.2}s {:>10} {:>10} {:>6.1}% {:>7} {:>9}{}",
        c.run.cycle,
        c.run.tasks_total,
        c.run.wall_s,
        format_size(c.run.peak_rss_bytes),
        format_size(c.run.budget_bytes),
        c.underestimate_rate * 100.0,
        c.slack.map_or("-".into(), |s| format!("{:+.0}%", s * 100.0)),
        format_size(c.run.spilled_bytes),
        if c.run.status == RunStatus::Ok { "" } else { "  FAILED" },
    );
}

/// What makes the replay fail: task failures, budget excess, crossed thresholds.
fn judge(cycles: &[CycleSummary], args: &ReplayArgs) -> Vec<String> {
    let mut problems = Vec::new();
    for c in cycles {
        if c.run.status != RunStatus::Ok {
            problems.push(format!(
                "cycle {}: {} tasks failed, {} skipped",
                c.run.cycle, c.run.tasks_failed, c.run.tasks_skipped
            ));
        }
        if c.over_budget {
            problems.push(format!(
                "cycle {}: the tree's peak {} (the runner, its commands and interpreters) exceeds the budget {} + 5% \
                 + 64 MiB",
                c.run.cycle,
                format_size(c.run.peak_bytes),
                format_size(c.run.budget_bytes)
            ));
        }
    }
    let judged: Vec<&CycleSummary> = cycles.iter().filter(|c| c.position >= args.warmup).collect();
    if let Some(max) = args.max_underestimate_rate {
        for c in judged.iter().filter(|c| c.underestimate_rate > max) {
            problems.push(format!(
                "cycle {}: {:.1}% of tasks under-estimated (at most {:.1}% allowed)",
                c.run.cycle,
                c.underestimate_rate * 100.0,
                max * 100.0
            ));
        }
    }
    if let Some(max) = args.max_median_slack {
        let mut slacks: Vec<f64> = judged.iter().filter_map(|c| c.slack).collect();
        slacks.sort_by(f64::total_cmp);
        if let Some(&median) = slacks.get(slacks.len() / 2)
            && median > max
        {
            problems.push(format!("median slack {:+.0}% exceeds {:+.0}%", median * 100.0, max * 100.0));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycles_file_reads_as_each_cycles_compile_options_or_says_where_it_is_wrong() {
        let cycles =
            cycle_options("recipe: r.yaml\ncycles:\n  - {id: C1, vars: {wet: 0.5, t: [1, 2]}}\n  - {id: C2}\n");
        let cycles = cycles.unwrap();
        assert_eq!(cycles.iter().map(|c| c.cycle.as_str()).collect::<Vec<_>>(), ["C1", "C2"]);
        assert_eq!(cycles[0].set, [("t".to_string(), "[1,2]".to_string()), ("wet".to_string(), "0.5".to_string())]);
        assert!(cycles[1].set.is_empty());
        let empty = cycle_options("recipe: r.yaml\ncycles: []\n").unwrap_err();
        assert!(empty.starts_with(": no cycles; expected `cycles:`"), "{empty}");
        let unknown = cycle_options("recipe: r.yaml\ncycles:\n  - {id: C1, when: now}\n").unwrap_err();
        assert!(unknown.starts_with(":3:") && unknown.contains("\n  expected `recipe: PATH`"), "{unknown}");
        let no_id = cycle_options("recipe: r.yaml\ncycles:\n  - {vars: {a: 1}}\n").unwrap_err();
        assert!(no_id.starts_with(":3:") && no_id.contains("missing field `id`"), "{no_id}");
        assert!(!no_id.contains(" at line "), "the place is said once: {no_id}");
    }
}
