//! What a simulated run did ([`super::engine::simulate`]): the run's report as `run` makes it,
//! and what only a prediction has — the tasks that were guesses, every task's place on the
//! timeline and the memory over time (for a report), the cluster's use.

use std::time::Duration;

use crate::scheduler::{RunReport, TaskRef};

use super::cluster::Cluster;

/// One task in a simulated run, for the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedTask {
    pub task: TaskRef,
    pub worker: u32,
    pub start: Duration,
    pub wall: Duration,
    pub estimate: u64,
    pub peak: u64,
}

/// The ledger's count at one moment, for the memory chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    pub at: Duration,
    pub reserved: u64,
    pub resident: u64,
    pub spilled: u64,
}

/// What a simulated run did.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub report: RunReport,
    /// Tasks whose time was the default, not learned.
    pub guesses: u64,
    /// The most the tasks (at the larger of reservation and predicted peak), the resident
    /// buffers and the services at their baseline held at once.
    pub peak_memory: u64,
    /// Each step's longest task.
    pub longest: Vec<Duration>,
    /// Every task, when asked for (`--report`); empty otherwise.
    pub tasks: Vec<SimulatedTask>,
    pub memory: Vec<MemoryPoint>,
    pub cluster: Option<Cluster>,
    /// The CPUs the workers shared, being more ([`super::cpus`]); `None`: each had its own.
    pub cpus_shared: Option<usize>,
}
