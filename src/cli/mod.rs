//! The command line: `runner run | plan | plugins`. Parses arguments, loads the recipe, hands
//! it to the engine and reports. Library errors are typed; here they become messages and exit
//! codes (0 ok, 1 task failures, 2 invalid recipe or usage).

mod plan_cmd;
mod plugins_cmd;
mod progress;
mod run_cmd;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use runner_plugin::Plugin;

use crate::Compiled;
use crate::recipe::CompileOptions;
use crate::registry::Registry;

/// Exit code for task failures.
pub const EXIT_TASKS_FAILED: u8 = 1;
/// Exit code for an invalid recipe or command line.
pub const EXIT_USAGE: u8 = 2;

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
        independent work still runs); 2 invalid recipe or command line.")]
    Run(RunArgs),
    /// Validate a recipe and show its steps, task counts and estimates; runs nothing.
    #[command(after_help = "Examples:\n  \
        runner plan recipes/quickstart.yaml\n  \
        runner plan recipes/many_inputs.yaml --format json\n  \
        runner plan recipes/quickstart.yaml --format dot | dot -Tpng > plan.png")]
    Plan(PlanArgs),
    /// List the plugins this binary offers, with their args.
    Plugins,
}

/// What `run` and `plan` share: the recipe and how to fill it in.
#[derive(Args, Debug)]
struct RecipeArgs {
    /// The recipe file (YAML).
    recipe: PathBuf,
    /// Cycle id, available to templates as `{cycle}` [default: the current UTC hour, e.g. 2026-11-30T02Z].
    #[arg(long)]
    cycle: Option<String>,
    /// Override a var of the recipe: `--set wet=0.4` (repeatable; the value is read as YAML).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    set: Vec<(String, String)>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    recipe: RecipeArgs,
    /// Memory budget: a size (`4GiB`, `800MB`) or a share of available memory (`50%`)
    /// [default: 80% of the memory available to the process, honouring cgroup limits].
    #[arg(long, value_parser = crate::budget::parse_budget)]
    budget: Option<u64>,
    /// Worker threads [default: the number of CPUs].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,
    /// Write a JSON summary of the run (counts, wall time, peak memory, per-step figures).
    #[arg(long, value_name = "FILE.json")]
    summary: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    recipe: RecipeArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    format: PlanFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PlanFormat {
    Text,
    Json,
    Dot,
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
    let registry = Registry::new(runner_std_plugins::all().into_iter().chain(extra));
    let cli = Cli::parse();
    init_logging();
    let code = match cli.command {
        Command::Run(args) => run_cmd::run(&registry, args),
        Command::Plan(args) => plan_cmd::plan(&registry, args),
        Command::Plugins => plugins_cmd::list(&registry),
    };
    match code {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Loads, validates and plans a recipe; on failure prints every problem and returns `None`.
fn compile(registry: &Registry, args: &RecipeArgs) -> Option<Compiled> {
    let options = CompileOptions { cycle: args.cycle.clone().unwrap_or_else(current_cycle), set: args.set.clone() };
    match Compiled::from_file(&args.recipe, &options, registry) {
        Ok(compiled) => Some(compiled),
        Err(error) => {
            let count = error.diagnostics.len();
            eprintln!("{error}");
            if count > 1 {
                eprintln!("{count} problems in {}", error.path().display());
            }
            None
        }
    }
}

/// The current UTC hour as `YYYY-MM-DDTHHZ`.
fn current_cycle() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%HZ").to_string()
}
