//! Runs a compiled recipe on a pool of worker threads.
//!
//! Every worker loops: take the lock, record the tasks it has just run, claim the next ready
//! task that fits the memory budget with its inputs, release the lock, hand the claimed tasks to
//! the run's [`Executor`](crate::executor::Executor). There is no coordinator thread and no lock
//! is held while a plugin runs. When a step's tasks prove quick (under 20 µs on average), a
//! worker claims up to 64 of them at once and reports them together, so the lock is taken once
//! per batch; slow tasks go one at a time, so memory admission stays per task where it matters.
//!
//! Where things are:
//! - [`options`], [`progress`], [`report`]: what a caller passes in, reads while the run goes
//!   on, and gets back (and the [`TaskSink`] finished tasks are handed to);
//! - [`run`]: setting a run up, its worker threads, and gathering their results;
//! - [`worker`]: a worker's loop and the lock protocol (report, claim, hand over);
//! - [`unit`]: the claimed tasks as an executor sees them — the one retry rule, reservations
//!   grown after running out of memory or being preempted;
//! - [`local`]: the in-process executor and the [`Site`](crate::executor::attempt::Site) its
//!   attempts run at;
//! - [`conclude`]: what follows each outcome once, wherever the task ran (`on_missing`, resume
//!   hashes, the record, the statistics);
//! - [`plugin_estimate`]: a plugin's own estimate of a task, asked outside the lock;
//! - [`state`]: the bookkeeping under the lock; [`meter`], [`output_claims`], [`stats`].

mod conclude;
mod local;
mod meter;
mod options;
pub(crate) mod output_claims;
mod plugin_estimate;
mod progress;
mod report;
mod run;
mod shared;
mod state;
pub mod stats;
mod unit;
mod worker;

pub use local::Local;
pub use meter::RunMeter;
pub use options::{RunExtras, RunOptions, cpus_here};
pub use progress::{Progress, StepProgress};
pub use report::{Failure, RunReport, SpillRecord, TaskFigures, TaskHashes, TaskReport, TaskSink};
pub use run::{run, run_with};
pub(crate) use state::{Garbage, Pick, Picked, SpillJob, State, StepTraits};
pub use state::{Outcome, SkipReason, TaskRef};
pub(crate) use worker::MAX_BATCH;
