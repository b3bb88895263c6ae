//! The arguments of the commands that read and predict from the store (`history`, `report`,
//! `replay`, `simulate`, `prune`), as clap parses them.

use std::path::PathBuf;

use clap::Args;

use super::{ExecutorKind, OutputFormat, PythonArg, RecipeArgs, ResourceArgs, parse_speed};

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["keep", "before"])))]
pub(super) struct PruneArgs {
    /// The feedback store [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    pub(super) db: Option<PathBuf>,
    /// Keep the last N runs of each recipe (at least 1), delete the older ones; with --before,
    /// delete only runs older than DATE, keeping at least the last N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) keep: Option<u32>,
    /// Delete the runs started before this date (`2026-11-01`, UTC) or time (RFC 3339).
    #[arg(long, value_name = "DATE")]
    pub(super) before: Option<String>,
    /// Only runs of this recipe.
    #[arg(long)]
    pub(super) recipe: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct HistoryArgs {
    /// The feedback store [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    pub(super) db: Option<PathBuf>,
    /// Only runs of this recipe (its `recipe:` name, not the file name).
    #[arg(long, value_name = "NAME")]
    pub(super) recipe: Option<String>,
    /// Only this step (its name under `steps:`).
    #[arg(long, value_name = "NAME")]
    pub(super) step: Option<String>,
    /// How many of the most recent runs to show (a count of runs, not of rows; at least 1).
    #[arg(long, value_name = "N", default_value_t = 10, conflicts_with_all = ["failed", "durations"], value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(super) last: usize,
    /// List the failed tasks of a run (the last one with failures, or --run), errors grouped.
    #[arg(long)]
    pub(super) failed: bool,
    /// Show each step's learned task time instead (what `runner simulate` predicts with).
    #[arg(long, conflicts_with_all = ["failed", "run"])]
    pub(super) durations: bool,
    /// The run whose failed tasks --failed lists (its id, as the table shows it).
    #[arg(long, value_name = "ID", requires = "failed")]
    pub(super) run: Option<i64>,
    /// Also show runs stopped by Ctrl-C or SIGTERM (left out by default, as they are left out of
    /// learning).
    #[arg(long, conflicts_with = "durations")]
    pub(super) interrupted: bool,
    /// Output format: `text` (a table) or `json` (the rows, for scripts).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub(super) format: OutputFormat,
}

#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// The feedback store (read only) [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    pub(super) db: Option<PathBuf>,
    /// The run to report (its id, as `runner history` shows it) [default: the last run in the store].
    #[arg(long, value_name = "ID", conflicts_with = "recipe")]
    pub(super) run: Option<i64>,
    /// Report a recipe's recent runs instead of one run (its `recipe:` name, not the file name).
    #[arg(long, value_name = "NAME")]
    pub(super) recipe: Option<String>,
    /// How many of the recipe's most recent runs the recipe page shows (with --recipe; at least 1).
    #[arg(long, value_name = "N", default_value_t = 24, requires = "recipe",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(super) last: usize,
    /// The HTML file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    pub(super) output: PathBuf,
}

#[derive(Args, Debug)]
pub(super) struct ReplayArgs {
    /// The cycles file (YAML): `recipe:` and `cycles:` with `id` and `vars` each.
    pub(super) cycles: PathBuf,
    /// The feedback store all cycles share [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    pub(super) db: Option<PathBuf>,
    #[command(flatten)]
    pub(super) resources: ResourceArgs,
    #[command(flatten)]
    pub(super) python: PythonArg,
    /// Write `{cycles: [...]}`: each cycle's run summary plus underestimate_rate and slack.
    #[arg(long, value_name = "FILE.json")]
    pub(super) summary: Option<PathBuf>,
    /// Fail when a cycle after the warm-up has a larger share of its tasks under-estimated (peak
    /// above estimate): a fraction, `0.02` for 2% [default: no limit].
    #[arg(long, value_name = "FRACTION", value_parser = parse_rate)]
    pub(super) max_underestimate_rate: Option<f64>,
    /// Fail when the median slack (Σ estimate / Σ peak − 1) of the cycles after the warm-up is
    /// larger: a fraction, `0.25` for estimates 25% above the peaks [default: no limit].
    #[arg(long, value_name = "FRACTION", value_parser = parse_slack)]
    pub(super) max_median_slack: Option<f64>,
    /// How many cycles at the start the thresholds ignore while the store learns (a count of
    /// cycles; 0 judges every cycle).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub(super) warmup: usize,
    /// Write the recipe page of `runner report` for the replayed cycles (HTML).
    #[arg(long, value_name = "FILE.html")]
    pub(super) report: Option<PathBuf>,
    /// Pick up where an interrupted replay stopped: the cycles whose last run finished ok are
    /// skipped, the first that did not is resumed as `run --resume` would, the rest run.
    #[arg(long)]
    pub(super) resume: bool,
    /// Predict each recorded cycle from the history before it instead of running it, and print
    /// the error against what was recorded.
    #[arg(long, conflicts_with_all = ["resume", "report"])]
    pub(super) simulate: bool,
    /// With --simulate: a task of a step without recorded times runs for its memory estimate at
    /// this many bytes a second (a guess).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_speed, requires = "simulate")]
    pub(super) guess_speed: u64,
}

/// Predicts a run without running anything.
#[derive(Args, Debug)]
pub(super) struct SimulateArgs {
    #[command(flatten)]
    pub(super) recipe: RecipeArgs,
    /// Virtual workers (with --executor slurm: jobs in flight) [default: the CPUs here; 64 jobs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub(super) workers: Option<u32>,
    /// CPUs the virtual workers share [default: the CPUs here]: with more workers busy than
    /// CPUs, each task runs at CPUs/busy of its recorded speed. As many as --workers gives each
    /// worker a CPU of its own (a larger machine). Not with --executor slurm (--node-cpus)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub(super) cpus: Option<u32>,
    /// The memory budget simulated [default: as `run`'s; none with --executor slurm].
    #[arg(long, value_name = "SIZE|N%", value_parser = crate::budget::parse_budget)]
    pub(super) budget: Option<u64>,
    /// The feedback store whose history predicts the tasks [default: runner.db or RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    pub(super) db: Option<PathBuf>,
    /// Writes the predicted run's summary JSON (a real run's fields and `"predicted": true`).
    #[arg(long, value_name = "FILE.json")]
    pub(super) summary: Option<PathBuf>,
    /// Writes the predicted run's page (timeline, memory over time), marked as a prediction.
    #[arg(long, value_name = "FILE.html")]
    pub(super) report: Option<PathBuf>,
    /// A task of a step without recorded times runs for its memory estimate at this many bytes
    /// a second (a guess: a task touching its memory once).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_speed)]
    pub(super) guess_speed: u64,
    /// How fast a spill is taken to be written, and read back by the tasks reading it, per
    /// second, every step alike [default: as fast as the recipe's recorded spills were written,
    /// and each step's recorded tasks read theirs back from disk; else, when the prediction
    /// spills, as fast as the spill folder's disk takes a few spills now; else 1GiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_speed)]
    pub(super) spill_bandwidth: Option<u64>,
    /// Have the ledger read every running task at each admission, as a local run's does: the
    /// same prediction, slower; for measuring what that costs as workers grow.
    #[arg(long, hide = true)]
    pub(super) read_every_task: bool,
    /// `slurm`: each unit of tasks is a job placed on a simulated cluster (--nodes, --node-memory).
    #[arg(long, value_enum, default_value_t = ExecutorKind::Local)]
    pub(super) executor: ExecutorKind,
    /// Nodes of the simulated cluster.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(super) nodes: Option<u32>,
    /// Memory of each node.
    #[arg(long, value_name = "SIZE", value_parser = runner_plugin::size::parse_size)]
    pub(super) node_memory: Option<u64>,
    /// CPUs of each node [default: 1].
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) node_cpus: Option<u32>,
    /// CPUs each job asks for (as `run --cpus-per-task`) [default: 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) cpus_per_task: Option<u32>,
    /// How long a submitted job waits in the queue before it may start [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = runner_plugin::size::parse_duration)]
    pub(super) queue_wait: Option<std::time::Duration>,
    /// A job's own start-up before its first task (`runner task` starting, the recipe compiled)
    /// [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = runner_plugin::size::parse_duration)]
    pub(super) job_start: Option<std::time::Duration>,
}

/// A share of tasks, `0.02` for 2%: in 0..=1 (a rate above 1 could never be exceeded).
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!("expected a share of tasks from 0 to 1, such as `0.02` for 2%, got `{text}`")),
    }
}

/// A slack, `0.25` for estimates 25% above the peaks: finite and at least 0.
fn parse_slack(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(slack) if slack.is_finite() && slack >= 0.0 => Ok(slack),
        _ => Err(format!("expected a fraction of at least 0, such as `0.25` for 25% above the peaks, got `{text}`")),
    }
}
