//! `runner task` (hidden): what a job of `--executor slurm` runs. It compiles the recipe as the
//! submitting run did (same file, cycle and `--set`s), then runs its unit's tasks of one step in
//! this process, measured, their values and results written to the run folder.

use anyhow::Context as _;

use super::{TaskArgs, compile};
use crate::executor::job::{self, RunFolder};
use crate::registry::Registry;

pub fn task(registry: &Registry, args: TaskArgs) -> anyhow::Result<u8> {
    let Some(compiled) = compile(registry, &args.recipe) else { return Ok(super::EXIT_USAGE) };
    let folder = RunFolder { root: args.run_dir.clone() };
    let indices = job::read_unit(&folder, args.unit)?;
    // The job's CPUs are its nested parallel work's (the first task sets up the pool).
    let cpus = crate::scheduler::cpus_here();
    let _ = rayon::ThreadPoolBuilder::new().num_threads(cpus).build_global();
    job::run_tasks(&compiled, &folder, &args.step, &indices)
        .with_context(|| format!("unit {} of step `{}` in {}", args.unit, args.step, folder.root.display()))?;
    Ok(0)
}
