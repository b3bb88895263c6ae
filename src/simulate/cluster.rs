//! The Slurm what-if: jobs placed on `K` identical nodes as Slurm's scheduler would place them,
//! in the simplest model that answers "how many nodes, how much memory each".
//!
//! Modelled: each unit of claimed tasks is one job (one array element) whose `--mem` is the
//! largest reservation of its tasks plus the job's baseline ([`job_mem`], the executor's own
//! rule) and which asks `--cpus-per-task` CPUs; it becomes eligible a fixed queue wait after
//! it is submitted; eligible jobs start in submission order on the first node with the memory
//! and CPUs free (a job that fits ahead of an earlier one that does not starts: backfill);
//! each job spends a start-up time (`runner task` starting, compiling the recipe) before its
//! tasks run one after another; a job no node can hold is refused as it is submitted, as
//! sbatch refuses it, and its tasks fail. Not modelled: partitions, priorities and fair share, other
//! users' jobs, time limits, preemption, node failures and requeues, network and shared-file
//! system time.

use std::time::Duration;

use runner_plugin::size::format_size;

use crate::executor::slurm::job_mem;

/// The cluster asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterShape {
    pub nodes: u32,
    pub node_memory: u64,
    pub node_cpus: u32,
    pub cpus_per_task: u32,
    /// From submission until a job may start.
    pub queue_wait: Duration,
    /// A job's own start-up before its first task.
    pub job_start: Duration,
}

impl ClusterShape {
    /// Why Slurm would refuse `job`, which no node of this shape can hold.
    pub fn refusal(&self, job: Job) -> String {
        format!(
            "its job needs --mem={} and {} CPUs, more than a node has ({} and {} CPUs): Slurm would refuse it",
            format_size(job.mem),
            job.cpus,
            format_size(self.node_memory),
            self.node_cpus
        )
    }
}

/// A job waiting for, or holding, room on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub mem: u64,
    pub cpus: u32,
}

/// What the nodes hold now, and held at most.
#[derive(Debug, Clone)]
pub struct Cluster {
    shape: ClusterShape,
    free_mem: Vec<u64>,
    free_cpus: Vec<u32>,
    peak_mem: Vec<u64>,
    /// Σ over jobs of the share of a node each held (by memory or CPUs, whichever is more)
    /// times its run time, in node-seconds.
    busy_node_seconds: f64,
    pub jobs: u64,
}

impl Cluster {
    pub fn new(shape: ClusterShape) -> Cluster {
        let nodes = shape.nodes as usize;
        Cluster {
            shape,
            free_mem: vec![shape.node_memory; nodes],
            free_cpus: vec![shape.node_cpus; nodes],
            peak_mem: vec![0; nodes],
            busy_node_seconds: 0.0,
            jobs: 0,
        }
    }

    pub fn shape(&self) -> &ClusterShape {
        &self.shape
    }

    /// The job of a unit whose largest reservation is `reserved`.
    pub fn job(&self, reserved: u64) -> Job {
        Job { mem: job_mem(reserved), cpus: self.shape.cpus_per_task }
    }

    /// Whether `job` could ever start (an empty node has room for it).
    pub fn can_ever_place(&self, job: Job) -> bool {
        job.mem <= self.shape.node_memory && job.cpus <= self.shape.node_cpus
    }

    /// Starts `job` on the first node with room; the node's number, or `None` when none has.
    pub fn place(&mut self, job: Job) -> Option<usize> {
        let node = (0..self.free_mem.len()).find(|&n| self.free_mem[n] >= job.mem && self.free_cpus[n] >= job.cpus)?;
        self.free_mem[node] -= job.mem;
        self.free_cpus[node] -= job.cpus;
        let used = self.shape.node_memory - self.free_mem[node];
        self.peak_mem[node] = self.peak_mem[node].max(used);
        self.jobs += 1;
        Some(node)
    }

    /// `job` ended on `node` after holding it for `ran`.
    pub fn release(&mut self, node: usize, job: Job, ran: Duration) {
        self.free_mem[node] += job.mem;
        self.free_cpus[node] += job.cpus;
        let share = (job.mem as f64 / self.shape.node_memory as f64)
            .max(job.cpus as f64 / self.shape.node_cpus.max(1) as f64)
            .min(1.0);
        self.busy_node_seconds += share * ran.as_secs_f64();
    }

    /// Each node's highest memory in use.
    pub fn peak_per_node(&self) -> &[u64] {
        &self.peak_mem
    }

    /// Node-hours the jobs used (their share of a node, times how long they held it).
    pub fn busy_node_hours(&self) -> f64 {
        self.busy_node_seconds / 3600.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_go_to_the_first_node_with_room_and_peaks_are_per_node() {
        let shape = ClusterShape {
            nodes: 2,
            node_memory: 10 << 30,
            node_cpus: 4,
            cpus_per_task: 1,
            queue_wait: Duration::ZERO,
            job_start: Duration::ZERO,
        };
        let mut cluster = Cluster::new(shape);
        let big = Job { mem: 6 << 30, cpus: 1 };
        assert_eq!(cluster.place(big), Some(0));
        assert_eq!(cluster.place(big), Some(1));
        assert_eq!(cluster.place(big), None);
        cluster.release(0, big, Duration::from_secs(3600));
        assert_eq!(cluster.place(Job { mem: 1 << 30, cpus: 1 }), Some(0));
        assert_eq!(cluster.peak_per_node(), &[6 << 30, 6 << 30]);
        assert!((cluster.busy_node_hours() - 0.6).abs() < 1e-9);
        assert!(!cluster.can_ever_place(Job { mem: 11 << 30, cpus: 1 }));
    }
}
