//! The command line: `runner run | plan | history | report | replay | simulate | prune | plugins`. Parses
//! arguments, loads the recipe, hands it to the engine and reports. Library errors are typed;
//! here they become messages and exit codes (0 ok, 1 task failures, 2 invalid recipe or usage,
//! 3 the store, a file or the machine failed).

/// `eprintln!` that never panics: a line for a reader who has gone is dropped, and the command
/// goes on to record, write its files and exit as it would have (`runner run … 2>&1 | head -1`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics, for the commands with work left after a line (run, replay,
/// simulate, prune): the line is dropped, the work is not. Listings stop when their reader goes
/// (see `broken_pipe`).
macro_rules! show {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;
mod broken_pipe;
mod failures;
mod history_cmd;
mod history_durations;
mod interrupt;
mod logging;
mod output_guard;
mod output_lock;
mod plan_cmd;
mod plugins_cmd;
mod progress;
mod prune_cmd;
pub mod record;
mod replay_cmd;
mod replay_simulate;
mod report_cmd;
mod run_cmd;
mod sampler;
mod scratch;
mod simulate_cmd;
mod simulate_report;
mod summary;
mod task_cmd;
mod task_files;

#[doc(hidden)]
pub use replay_cmd::cycle_options;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use args::{HistoryArgs, PruneArgs, ReplayArgs, ReportArgs, SimulateArgs};
use clap::{Args, Parser, Subcommand};
use runner_plugin::Plugin;

use crate::plan::Compiled;
use crate::recipe::CompileOptions;
use crate::registry::Registry;

/// Exit code for task failures.
pub const EXIT_TASKS_FAILED: u8 = 1;
/// Exit code for an invalid recipe or command line.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for a failure of the runner itself or its surroundings: the store, a file that
/// cannot be written, the machine.
pub const EXIT_RUNTIME: u8 = 3;

/// A command line the runner understood but cannot act on (a name that is not in the store, a
/// flag's value that does not fit): a command returning it exits [`EXIT_USAGE`], any other
/// error [`EXIT_RUNTIME`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Parser, Debug)]
#[command(
    name = "runner",
    version,
    about = "Runs recipe DAGs on one machine within a memory budget, and learns what each step needs.",
    long_about = "Runs recipe DAGs on one machine within a memory budget, and learns what each step needs.\n\n\
        A recipe (YAML) names dims, vars and steps; each step runs a plugin over some dims, one task per \
        combination of their values, reading the outputs of other steps.",
    after_help = "Examples:\n  runner run recipes/quickstart.yaml\n  runner plan recipes/quickstart.yaml --format dot | dot -Tsvg > plan.svg\n  runner plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a recipe.
    #[command(after_help = "Examples:\n  \
        runner run recipes/quickstart.yaml\n  \
        runner run recipes/quickstart.yaml --budget 2GiB --workers 2 --cycle 2026-11-01T00Z\n  \
        runner run recipes/quickstart.yaml --set wet=0.4 --summary out/summary.json\n\n\
        Exit codes: 0 every task succeeded; 1 some task failed (its dependants are skipped, \
        independent work still runs); 2 invalid recipe or command line (also an output that would \
        replace the store or the recipe, or outputs another live run is writing); 3 the feedback \
        store, a file that cannot be written or the machine failed (e.g. `--db` names a folder, or \
        a folder without write permission); 130 interrupted by Ctrl-C (143 by SIGTERM): running tasks are \
        killed, the run is recorded as interrupted and `--resume` takes it up, no --summary is written.")]
    Run(RunArgs),
    /// Validate a recipe and show its steps, task counts and estimates; runs nothing.
    #[command(after_help = "Examples:\n  \
        runner plan recipes/quickstart.yaml\n  \
        runner plan recipes/many_inputs.yaml --format json\n  \
        runner plan recipes/quickstart.yaml --format dot | dot -Tpng > plan.png")]
    Plan(PlanArgs),
    /// Show estimate against actual per step over recent runs, from the feedback store.
    #[command(after_help = "Examples:\n  \
        runner history\n  \
        runner history --recipe precip-probability --step smooth --last 24\n  \
        runner history --failed\n  \
        runner history --durations --recipe precip-probability   # the task times `runner simulate` uses\n  \
        runner history --format json > history.json")]
    History(HistoryArgs),
    /// Write one self-contained HTML page of a run (timeline, memory, steps, failures) or of a
    /// recipe's last runs (estimate against actual across cycles), from the feedback store.
    #[command(after_help = "Examples:\n  \
        runner report -o report.html                       # the last run in the store\n  \
        runner report --run 42 -o run42.html\n  \
        runner report --recipe precip-probability --last 48 -o precip.html\n  \
        runner report --db /data/runner.db --recipe many-inputs -o many.html\n\n\
        The page opens offline in any browser: its charts and data are inside it, nothing is fetched. \
        The store is only read.")]
    Report(ReportArgs),
    /// Run a recipe over a list of cycles in order against one store, a row per cycle.
    #[command(after_help = "Examples:\n  \
        runner replay recipes/cycles/weather.yaml --budget 2GiB\n  \
        runner replay recipes/cycles/weather.yaml --db /tmp/replay.db --summary replay.json\n  \
        runner replay recipes/cycles/weather.yaml --simulate --db /tmp/replay.db   # after the replay above\n\n\
        With --simulate nothing runs: each cycle's last recorded run is predicted by `runner simulate` from the \
        history before it, with its budget and workers, and the prediction is printed beside what was recorded \
        (wall, peak reserved, spilled) with the error; --summary then holds per cycle `predicted` and \
        `recorded`.\n\n\
        The cycles file names a recipe (relative to itself) and the cycles with their vars:\n  \
        recipe: ../quickstart.yaml\n  \
        cycles:\n    \
        - {id: 2026-11-01T00Z, vars: {wet: 0.05}}\n    \
        - {id: 2026-11-01T01Z, vars: {wet: 0.40}}\n\n\
        Exit codes: 0 every cycle ok and within its thresholds; 1 a task failed, a cycle exceeded \
        its budget (the tree's peak, commands and interpreters included, > budget + 5% + 64 MiB) or a threshold was crossed; 2 invalid input; \
        3 the feedback store, a file that cannot be written or the machine failed.")]
    Replay(ReplayArgs),
    /// Predict a run of a recipe from its history on a virtual clock (wall, peak reserved, spill,
    /// critical path, node-hours); runs nothing.
    #[command(after_help = "Examples:\n  \
        runner simulate recipes/quickstart.yaml --workers 4 --budget 2GiB\n  \
        runner simulate recipes/cycles/precip.yaml --cycle 2026-11-02T00Z --set wet=0.5 --workers 2 --budget 96MiB \
        --db /tmp/replay.db --summary predicted.json --report predicted.html\n  \
        runner simulate recipes/many_inputs.yaml --workers 4096 --cpus 4096 --budget 64GiB --guess-speed 100MiB\n  \
        runner simulate recipes/quickstart.yaml --executor slurm --nodes 4 --node-memory 256GiB --node-cpus 64 \
        --queue-wait 2m\n\n\
        Nothing runs: no plugin, no command, nothing is written but --summary and --report, and the store is only \
        read. The recipe compiles as for `run`, estimates are learned from the store as `run` learns them, and \
        the real scheduler (order, admission, batching, spill victims) runs on a virtual clock: each task takes \
        the output size and data-following estimate it had in the recorded run whose vars are nearest this \
        cycle's, the mean time of the recorded tasks like it, and the peak its step's history predicts (`runner \
        history --durations` shows the time models); a task of a step without recorded times runs for its memory \
        estimate at --guess-speed bytes a second, and such tasks are counted as guesses. Between two recorded \
        values of the one var a cycle differs in, the figures are interpolated; past them, the nearest run's \
        are taken, but a step whose args that var sets and whose output grew with it between two runs (a grid \
        made from `size`) grows by the same power of it, and what reads it with it; where no step grows, what \
        the data made of a step (estimates, files, peaks; not times) that moved between the runs along that var \
        is carried toward the line through them, the more the farther past the nearest run. Where the recent runs' \
        tasks did not keep their sizes from run to run (rain falling anew on each member), the recorded sizes are \
        dealt out 9 times over the members (the dims that set no size) and the dealing with the median peak \
        reserved is shown, with the range of all. The wall is then scaled by how many times longer than their \
        own simulations the alike runs and the two newest others took: what a run costs beyond its tasks, and \
        the pace the machine runs at now. A python step's tasks wait for their interpreters to start (a new \
        process's do) as long as the newest run started so waited, and learn their times without that wait. \
        More workers busy than --cpus (default: the CPUs here) share them, \
        each task at CPUs/busy of its recorded speed. \
        The critical path is the chain of steps whose longest tasks add up to the most: no schedule is shorter.\n\n\
        Exit codes: 0 predicted (whatever the prediction says); 2 invalid recipe or command line; 3 the store \
        or an output file failed.")]
    Simulate(SimulateArgs),
    /// Delete old runs from the feedback store (with their tasks and samples) and shrink it.
    #[command(after_help = "Examples:\n  \
        runner prune --keep 48\n  \
        runner prune --before 2026-11-01 --db /data/runner.db\n  \
        runner prune --keep 10 --recipe precip-probability\n\n\
        --keep counts the runs of each recipe. Runs still going are never deleted.")]
    Prune(PruneArgs),
    /// List the plugins this binary offers, with their args.
    Plugins,
    /// Run tasks of one step in this process, as a job of `--executor slurm` does (internal).
    #[command(hide = true)]
    Task(TaskArgs),
}

#[derive(Args, Debug)]
struct TaskArgs {
    #[command(flatten)]
    recipe: RecipeArgs,
    /// The run's folder in the shared dir (values, results, units).
    #[arg(long, value_name = "DIR")]
    run_dir: PathBuf,
    /// The step whose tasks to run.
    #[arg(long, value_name = "NAME")]
    step: String,
    /// The unit (a file in the run folder's units/ listing task indices) to run.
    #[arg(long, value_name = "N")]
    unit: u64,
}

/// Where the tasks of a run execute.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
enum ExecutorKind {
    /// Worker threads of this process.
    #[default]
    Local,
    /// Jobs on a Slurm cluster (`sbatch`); a run passes values between them as files in `--shared-dir`.
    Slurm,
}

/// `--executor slurm` and its options.
#[derive(Args, Debug)]
struct ExecutorArgs {
    /// Where tasks run: `local` (worker threads here) or `slurm` (each task, or chunk of quick
    /// tasks, an element of a job array with `--mem` from its learned estimate).
    #[arg(long, value_enum, default_value_t = ExecutorKind::Local)]
    executor: ExecutorKind,
    /// With `--executor slurm`: a directory every node sees, for the values passed between
    /// tasks, their results and the jobs' logs [default: runner-shared/ in the working directory].
    #[arg(long, value_name = "DIR")]
    shared_dir: Option<PathBuf>,
    /// With `--executor slurm`: the partition to submit to (sbatch --partition).
    #[arg(long, value_name = "NAME")]
    partition: Option<String>,
    /// With `--executor slurm`: the account to charge (sbatch --account).
    #[arg(long, value_name = "NAME")]
    account: Option<String>,
    /// With `--executor slurm`: CPUs each job asks for (sbatch --cpus-per-task) [default: 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    cpus_per_task: Option<u32>,
    /// With `--executor slurm`: another sbatch option, passed as it is (repeatable), e.g.
    /// `--slurm-arg=--qos=short`.
    #[arg(long = "slurm-arg", value_name = "OPTION", allow_hyphen_values = true)]
    slurm_args: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OutputFormat {
    Text,
    Json,
}

/// What `run` and `plan` share: the recipe and how to fill it in.
#[derive(Args, Debug)]
struct RecipeArgs {
    /// The recipe file (YAML).
    recipe: PathBuf,
    /// Cycle id, available to templates as `{cycle}` [default: the current UTC hour, e.g. 2026-11-30T02Z].
    #[arg(long, value_name = "ID")]
    cycle: Option<String>,
    /// Override a var of the recipe: `--set wet=0.4` (repeatable; the value is read as YAML).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    set: Vec<(String, String)>,
    #[command(flatten)]
    python: PythonArg,
}

/// The interpreter of python steps, from the command line.
#[derive(Args, Debug, Clone, Default)]
struct PythonArg {
    /// The interpreter python steps run in, e.g. a venv's `venv/bin/python` [default: the
    /// recipe's `python: {interpreter: ...}`, else $RUNNER_PYTHON, else python3 on the PATH]. A
    /// step's own `python:` arg still wins.
    #[arg(long = "python", value_name = "PATH")]
    interpreter: Option<PathBuf>,
}

impl PythonArg {
    /// As the settings of the python plugin's section that win over the recipe's.
    fn sections(&self) -> Vec<(String, String, serde_json::Value)> {
        let path = |p: &PathBuf| serde_json::Value::String(p.to_string_lossy().into_owned());
        self.interpreter.iter().map(|p| ("python".into(), "interpreter".into(), path(p))).collect()
    }
}

/// The machine a run may use.
#[derive(Args, Debug)]
struct ResourceArgs {
    /// Memory budget: bytes, a size (`4GiB`, `800MB`; KiB/MiB/GiB/TiB count ×1024, KB/MB/GB/TB
    /// ×1000; at least 1MiB) or a share of the memory available to the process (`50%`, more than 0
    /// and at most 100) [default: 80% of the memory available to the process, honouring cgroup
    /// limits].
    #[arg(long, value_name = "SIZE|N%", value_parser = crate::budget::parse_budget)]
    budget: Option<u64>,
    /// Worker threads, 1 to 1024 [default: the number of CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,
    /// Where buffers spill when the budget is short [default: a per-run folder under the
    /// system temp dir's runner-spill/]; the run's folder is removed at exit, and folders left
    /// by killed runs at the next start.
    #[arg(long, value_name = "DIR")]
    spill_dir: Option<PathBuf>,
    /// Run tasks estimated above the memory this machine can give the process (its RAM, capped
    /// by a cgroup limit) instead of refusing them [default: refuse them before they start].
    #[arg(long)]
    allow_oversized: bool,
    /// Limit each external command's process tree to its task's reservation and a quarter more
    /// (a memory cgroup limit): a runaway is killed as out of memory instead of taking the
    /// machine, and with `retries:` it runs again with a larger reservation.
    #[arg(long)]
    enforce_memory: bool,
    /// Most of each external command's output (stdout + stderr) kept in its log: the first and
    /// last halves, with a line saying how much was dropped between them [default: 64MiB].
    #[arg(long, value_name = "SIZE", value_parser = runner_plugin::size::parse_size)]
    log_limit: Option<u64>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    recipe: RecipeArgs,
    #[command(flatten)]
    resources: ResourceArgs,
    /// Write a JSON summary of the run (counts, wall time, peak memory, per-step figures).
    #[arg(long, value_name = "FILE.json")]
    summary: Option<PathBuf>,
    /// The feedback store: every task is recorded there and estimates are learned from it
    /// [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Record nothing (estimates still come from an existing store's history).
    #[arg(long)]
    no_record: bool,
    /// After a failed, killed or interrupted run of this recipe and cycle, run only what did not
    /// finish (and what depends on it): a task whose plugin, args and inputs are unchanged and
    /// whose output still exists (a path, or a value its step keeps with `cache: true`) is
    /// taken over as it is.
    #[arg(long, conflicts_with = "no_record")]
    resume: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    recipe: RecipeArgs,
    /// Output format: `text` (a row per step), `json` (for scripts) or `dot` (the DAG for
    /// Graphviz).
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    format: PlanFormat,
    /// The feedback store whose history the estimates come from (read only)
    /// [default: runner.db in the working directory; env RUNNER_DB].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PlanFormat {
    Text,
    Json,
    Dot,
}

/// A speed in bytes a second, as a size (`100MiB`): more than 0, or every task would take forever.
fn parse_speed(text: &str) -> Result<u64, String> {
    match runner_plugin::size::parse_size(text)? {
        0 => Err(format!("expected a speed above 0 bytes a second, such as `100MiB`, got `{text}`")),
        bytes => Ok(bytes),
    }
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, e.g. `wet=0.4`, got `{text}`")),
    }
}

/// Runs the `runner` command line with the standard plugins plus `extra` (an out-of-tree
/// binary's own plugins; one with a standard plugin's name replaces it).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     runner::main_with([])
/// }
/// ```
pub fn main_with(extra: impl IntoIterator<Item = Arc<dyn Plugin>>) -> ExitCode {
    // A retired forking service execs this executable as its reaper: before anything else,
    // so that the process stays small.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == crate::command::service::REAP_ARG) {
        if let Some(fd) = args.next().and_then(|fd| fd.to_str()?.parse().ok()) {
            crate::command::service::reap_children(fd);
        }
        return ExitCode::SUCCESS;
    }
    drop(args);
    if let Ok(exe) = std::env::current_exe() {
        crate::command::service::offer_reaper(exe);
    }
    let registry = Registry::new(runner_std_plugins::all().into_iter().chain(extra));
    let cli = Cli::parse();
    logging::init();
    interrupt::install();
    broken_pipe::install_hook();
    let code = broken_pipe::quiet(|| match cli.command {
        Command::Run(args) => run_cmd::run(&registry, args),
        Command::Plan(args) => plan_cmd::plan(&registry, args),
        Command::History(args) => history_cmd::history(args),
        Command::Report(args) => report_cmd::report(args),
        Command::Prune(args) => prune_cmd::prune(args),
        Command::Replay(args) => replay_cmd::replay(&registry, args),
        Command::Simulate(args) => simulate_cmd::simulate(&registry, args),
        Command::Plugins => plugins_cmd::list(&registry),
        Command::Task(args) => task_cmd::task(&registry, args),
    });
    crate::budget::release();
    // Warm interpreters and other services end with the runner, their cgroups removed.
    crate::command::service::shutdown_all();
    scratch::remove();
    match code {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            say!("error: {error:#}");
            let usage = error.chain().any(|cause| cause.is::<UsageError>());
            ExitCode::from(if usage { EXIT_USAGE } else { EXIT_RUNTIME })
        }
    }
}

/// Loads, validates and plans a recipe; on failure prints every problem and returns `None`.
fn compile(registry: &Registry, args: &RecipeArgs) -> Option<Compiled> {
    let options = CompileOptions {
        cycle: args.cycle.clone().unwrap_or_else(current_cycle),
        set: args.set.clone(),
        sections: args.python.sections(),
    };
    match Compiled::from_file(&args.recipe, &options, registry) {
        Ok(compiled) => Some(compiled),
        Err(error) => {
            let count = error.diagnostics.len();
            say!("{error}");
            if count > 1 {
                say!("{count} problems in {}", error.path().display());
            }
            None
        }
    }
}

/// Aligns rows of cells in columns (right-aligned where `right` lists the column).
fn table<const N: usize>(rows: &[[String; N]], right: &[usize]) -> String {
    let widths: Vec<usize> = (0..N).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if right.contains(&c) {
                    format!("{cell:>w$}", w = widths[c])
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The current UTC hour as `YYYY-MM-DDTHHZ`.
fn current_cycle() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%HZ").to_string()
}
