//! What a caller asks of a run: workers, budget, folders, limits ([`RunOptions`]), and where
//! its tasks run and what `--resume` took over ([`RunExtras`]).

use std::path::PathBuf;

use crate::executor::Executor;
use crate::memory::spill::SpillDir;
use crate::resume::Reuse;

/// The CPUs this process may use (its affinity and cgroup quota), at least 1: a run's default
/// number of workers, and what a simulation's workers share.
pub fn cpus_here() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub workers: usize,
    pub budget: u64,
    /// Where tasks' scratch directories go; removed when the run ends.
    pub work_dir: PathBuf,
    /// `--spill-dir`: where spilled buffers go [default: a folder in the system temp dir].
    pub spill_dir: Option<PathBuf>,
    /// The most memory the process could ever have (`None`: no limit is enforced, as with
    /// `--allow-oversized`): a task that needs more fails without running, instead of taking
    /// the machine down with it.
    pub memory_limit: Option<u64>,
    /// `--enforce-memory`: each external command's process tree is limited to its task's
    /// reservation and a quarter more (a runaway is killed as out of memory, and retried with
    /// a larger reservation if its step has `retries`).
    pub enforce_memory: bool,
    /// A later run of this process uses the services this one warms up (a replay's next
    /// cycle): none is let go before then. Otherwise, near the end of the run, idle services
    /// beyond what the tasks left can use at once are stopped (`Executor::reach`).
    pub keep_services: bool,
    /// Where the tasks' logs go, in a folder per recipe and cycle (`runner-logs` in the current
    /// directory, as the CLI keeps them).
    pub log_dir: PathBuf,
}

impl RunOptions {
    /// `workers` under `budget`, scratch files in `work_dir`, spills in the default folder, no
    /// memory limit enforced.
    pub fn new(workers: usize, budget: u64, work_dir: PathBuf) -> RunOptions {
        RunOptions {
            workers,
            budget,
            work_dir,
            spill_dir: None,
            memory_limit: None,
            enforce_memory: false,
            keep_services: false,
            log_dir: PathBuf::from("runner-logs"),
        }
    }

    /// The folder holding every run's spill folder.
    pub fn spill_parent(&self) -> PathBuf {
        self.spill_dir.clone().unwrap_or_else(SpillDir::default_parent)
    }
}

/// What a run may do besides running every task here.
#[derive(Default, Clone, Copy)]
pub struct RunExtras<'a> {
    /// Where tasks run (e.g. as Slurm jobs); `None`: in this process ([`super::Local`]). The
    /// order, the ledger and the recording are the same.
    pub executor: Option<&'a dyn Executor>,
    /// Tasks taken over from the run being resumed (`--resume`).
    pub reuse: Option<&'a Reuse>,
}
