//! `runner run`: compile, run under the budget with a progress bar, summarise, exit 0/1/2.

use std::path::PathBuf;

use anyhow::anyhow;

use super::summary::RunSummary;
use super::{EXIT_TASKS_FAILED, EXIT_USAGE, RunArgs, compile, progress};
use crate::measure;
use crate::registry::Registry;
use crate::scheduler::{self, Progress, RunOptions};

pub fn run(registry: &Registry, args: RunArgs) -> anyhow::Result<u8> {
    let Some(compiled) = compile(registry, &args.recipe) else { return Ok(EXIT_USAGE) };
    let budget = match args.budget {
        Some(budget) => budget,
        None => crate::budget::default_budget()
            .map_err(|e| anyhow!("cannot choose a default budget ({e}); pass --budget"))?,
    };
    let workers =
        args.workers.map(usize::from).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = RunOptions { workers, budget, work_dir: work_dir() };
    let progress = Progress::default();
    let report = std::thread::scope(|scope| {
        let bar = progress::spawn(scope, &progress);
        let report = scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &progress, None);
        if let Some(bar) = bar {
            let _ = bar.join();
        }
        report
    });
    let peak_rss = measure::process_memory().map_or(0, |m| m.peak_rss_bytes);
    let summary = RunSummary::new(&compiled.recipe, &report, peak_rss);
    summary.print();
    if let Some(path) = &args.summary {
        summary.write(path)?;
    }
    Ok(if summary.status == "ok" { 0 } else { EXIT_TASKS_FAILED })
}

/// A private directory for this run's scratch files, removed when the run ends.
fn work_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!("runner-{}-{nanos:x}", std::process::id()))
}
