//! The `runner` engine: a YAML recipe becomes a DAG of steps whose tasks run on a
//! memory-admission worker pool.
//!
//! The path of a task: `recipe` (YAML → validated steps) → `graph` (steps → DAG with lazy
//! index arithmetic) → `plan` (output shapes, estimates) → `scheduler` (dispatch under the
//! `budget`, measurement by `measure`) → `store` → `report`. `cli` is the command line on top;
//! `registry` holds the plugins a binary offers. See ARCHITECTURE.md for the map.
//!
//! The crate's public face is what a binary needs: [`main_with`] (the command line, with the
//! standard plugins and the binary's own) and [`plugin`] (the plugin API, to write those). Every
//! engine module is the crate's own; the integration tests and benches reach the few items they
//! drive through `testing`, and nothing else.

pub(crate) mod budget;
pub(crate) mod cli;
pub(crate) mod command;
pub(crate) mod estimate;
pub(crate) mod executor;
pub(crate) mod graph;
pub(crate) mod layout;
pub(crate) mod measure;
pub(crate) mod memory;
mod panics;
pub(crate) mod plan;
pub(crate) mod process_identity;
pub(crate) mod recipe;
pub(crate) mod registry;
pub(crate) mod report;
pub(crate) mod resume;
pub(crate) mod scheduler;
pub(crate) mod simulate;
pub(crate) mod slurm;
pub(crate) mod store;
pub(crate) mod values;

pub use cli::main_with;
pub use runner_plugin as plugin;

/// What the integration tests (`tests/`) and benches (`benches/`) drive the engine through, and
/// nothing more: each item is named, under the module it comes from, so that a test reads as
/// the engine's code does (`scheduler::run`, `store::Store`). Not an API: it changes with the
/// engine. An item a new test needs is added here by name, never a whole module.
#[doc(hidden)]
pub mod testing {
    pub mod cli {
        pub use crate::cli::cycle_options;
        pub use crate::cli::record::step_observations;
    }

    pub mod command {
        pub use crate::command::{Ending, Finished, Isolation, Request, TaskCommand, run, run_for_task, support};
    }

    pub mod estimate {
        pub use crate::estimate::{HISTORY_RUNS, HISTORY_TASKS_PER_RUN, Observation, Params};
    }

    pub mod executor {
        pub use crate::executor::slurm::JOB_BASELINE;

        pub mod job {
            pub use crate::executor::job::{RunFolder, TaskResult, failure_kind};
        }
    }

    pub mod measure {
        pub use crate::measure::{PeakSource, TaskMemory, begin_new_task, end_task, process_memory, purge_free_pages};

        pub mod external {
            pub use crate::measure::external::of;
        }
    }

    pub mod memory {
        pub use crate::memory::{Admission, Ledger, Standing, TaskSlot};

        pub mod spill {
            pub use crate::memory::spill::{
                MappedBuffer, ReadBack, SpillDir, SpillError, process_start_time, release_value_pages,
                remove_active_dirs, spill_value,
            };
        }
    }

    pub mod plan {
        pub use crate::plan::{Compiled, EstimateSource, PLUGIN_ESTIMATE_ALLOWANCE};
    }

    pub mod recipe {
        pub use crate::recipe::{CompileOptions, OnMissing};
    }

    pub mod registry {
        pub use crate::registry::Registry;
    }

    pub mod scheduler {
        pub use crate::scheduler::{Outcome, Progress, RunMeter, RunOptions, RunReport, TaskReport, TaskSink, run};
    }

    pub mod simulate {
        pub use crate::simulate::service_wait::Interpreters;
        pub use crate::simulate::{History, SimOptions, SpillRates, predict};
    }

    pub mod slurm {
        pub use crate::slurm::{
            ArraySpec, Element, Job, JobId, JobSpec, JobState, Observed, PollReport, Slurm, SlurmError, StateSource,
            TaskMapping, log_paths, write_index_file,
        };
    }

    pub mod store {
        pub use crate::store::schema::APPLICATION_ID;
        pub use crate::store::sink::{StoreSink, run_start};
        pub use crate::store::writer::MAX_BATCHES;
        pub use crate::store::{
            HistoryRun, KeyDim, PAGE_SIZE, RunFilter, RunOutcome, RunRecorder, RunStart, RunStatus, RunWritten,
            SCHEMA_VERSION, Sample, StepFigures, StepHistory, StepKeys, Store, StoreError, TaskFigures, TaskRecord,
            TaskStatus,
        };
    }
}
