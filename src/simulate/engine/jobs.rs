//! Where a simulated cluster's jobs start: each worker's claimed unit is a job, sized by its
//! largest reservation, started on a node that can hold it in submission order, or failed at
//! once where no node ever could (as Slurm refuses it).

use super::super::cluster::{ClusterShape, Job};
use super::{Event, Loop};
use crate::scheduler::Failure;

impl Loop<'_> {
    /// Starts the eligible jobs that fit a node, in submission order (a later one that fits
    /// starts before an earlier one that does not); fails the tasks of a job no node could hold.
    pub(super) fn start_pending_jobs(&mut self) {
        let Some(mut cluster) = self.cluster.take() else { return };
        let mut waiting = self.pending.len();
        while waiting > 0 {
            waiting -= 1;
            let Some(worker) = self.pending.pop_front() else { break };
            let job = cluster.job(self.largest_reservation(worker));
            if !cluster.can_ever_place(job) {
                // Slurm refuses a job no node can hold: its tasks fail, at once.
                self.note_unplaceable(worker, job, cluster.shape());
                self.failed.append(&mut self.workers[worker as usize].claimed);
                self.schedule(self.now, worker, Event::Ran);
                continue;
            }
            match cluster.place(job) {
                Some(node) => {
                    self.workers[worker as usize].job = Some((job, node, self.now));
                    self.cluster = Some(cluster);
                    self.run_claimed(worker);
                    cluster = self.cluster.take().expect("put back above");
                }
                None => self.pending.push_back(worker),
            }
        }
        self.cluster = Some(cluster);
    }

    /// What the job of `worker`'s claimed unit is sized by: its largest reservation.
    pub(super) fn largest_reservation(&self, worker: u32) -> u64 {
        self.workers[worker as usize].claimed.iter().map(|(p, _)| p.reserved).max().unwrap_or(0)
    }

    /// The failures of the tasks `worker` holds, whose `job` no node of `shape` could hold.
    fn note_unplaceable(&mut self, worker: u32, job: Job, shape: &ClusterShape) {
        let (recipe, graph) = (&self.compiled.recipe, &self.compiled.graph);
        let error = shape.refusal(job);
        let (mut key, mut pairs) = (String::new(), Vec::new());
        for (picked, _) in &self.workers[worker as usize].claimed {
            let task = picked.task;
            graph.describe_task(recipe, task.step, task.index, &mut key, &mut pairs);
            self.failures.push(Failure {
                step: recipe.steps[task.step].name.clone(),
                key: key.clone(),
                error: error.clone(),
                step_id: task.step,
                index: task.index,
            });
        }
    }
}
