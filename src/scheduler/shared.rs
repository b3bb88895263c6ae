//! What a run's workers share ([`Shared`]: the recipe, plan and options, the state behind its
//! lock, the executor, the sinks and claims) and what each hands back when it stops
//! ([`WorkerResult`]).

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::output_claims;
use super::stats::StepStats;
use super::{Failure, Progress, RunMeter, RunOptions, SpillRecord, State, TaskSink};
use crate::executor::Executor;
use crate::graph::Graph;
use crate::memory::spill::SpillDir;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::resume::{Fingerprints, Reuse};

/// Everything workers share.
pub(super) struct Shared<'r> {
    pub(super) recipe: &'r Recipe,
    pub(super) graph: &'r Graph,
    pub(super) plan: &'r Plan,
    pub(super) options: &'r RunOptions,
    pub(super) state: Mutex<State<'r>>,
    pub(super) wake: Condvar,
    pub(super) progress: &'r Progress,
    pub(super) sink: Option<&'r dyn TaskSink>,
    pub(super) meter: &'r RunMeter,
    pub(super) spill: &'r SpillDir,
    /// When the run started: task start times are offsets from it.
    pub(super) started: Instant,
    /// Where the claimed tasks run.
    pub(super) executor: &'r dyn Executor,
    /// The executor is [`super::Local`]: the worker runs its units itself, not through the
    /// trait object, so that each task's attempt is not a dynamic call (the same code).
    pub(super) local: bool,
    /// Tasks taken over from the resumed run.
    pub(super) reuse: Option<&'r Reuse>,
    /// What each step is asked, when the run is recorded (for a later `--resume`).
    pub(super) fingerprints: Option<Fingerprints>,
    /// The output paths tasks have claimed: two tasks never write one file.
    pub(super) output_claims: output_claims::OutputClaims,
    /// Where tasks' scratch folders go (removed with the work dir) and their commands' logs
    /// (kept: `runner-logs/<recipe>/<cycle>`).
    pub(super) scratch_root: PathBuf,
    pub(super) log_root: PathBuf,
}

impl<'r> Shared<'r> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<'r>> {
        // A worker that panicked while holding the lock is handled where it panicked; the state
        // it left is still the best there is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one worker hands back when it stops.
#[derive(Default)]
pub(super) struct WorkerResult {
    pub(super) steps: Vec<StepStats>,
    pub(super) failures: Vec<Failure>,
    pub(super) missing: Vec<Failure>,
    pub(super) internal_error: Option<String>,
    pub(super) spills: Vec<SpillRecord>,
}
