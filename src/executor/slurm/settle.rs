//! When a unit in flight is over: its results are all there, its job element ended without
//! some (out of memory, killed, crashed: its tasks fail saying how), or its node was lost
//! (`NODE_FAIL`: what had not succeeded there is submitted again, under the same unit, and is
//! not an attempt). Job states come from one `squeue` call for all jobs in flight; result files
//! are the truth for what ran, but a failed result counts only once its element is seen ended,
//! since a task killed with its node writes one too.

use std::path::Path;
use std::time::{Duration, Instant};

use runner_plugin::size::format_size;
use runner_plugin::{FailureKind, TaskError};

use super::{Pending, QUEUE_PATIENCE, Queue, RESULT_GRACE, Settled, SlurmExecutor, TaskResult, job_mem};
use crate::slurm::{Element, Job, JobSpec, JobState, Observed};

/// A unit's tasks that did not finish on a node that was lost.
struct LostUnit {
    unit: u64,
    step: String,
    indices: Vec<u64>,
    mem_bytes: u64,
    time_limit: Option<Duration>,
    element: Element,
    nodes: Option<String>,
}

impl SlurmExecutor {
    /// Settles the units whose results are all there and, with `ask_queue`, the ones whose job
    /// element has ended without them (after [`RESULT_GRACE`], except out of memory).
    pub(super) fn poll(&self, ask_queue: bool) {
        let report = if ask_queue {
            let jobs: Vec<Job> = self.lock().in_flight.iter().map(|f| f.job).collect();
            Some(self.slurm.poll(&jobs))
        } else {
            None
        };
        let mut queue = self.lock();
        let report = match report {
            Some(Ok(report)) => {
                queue.queue_failing = None;
                Some(report)
            }
            Some(Err(error)) => {
                let since = queue.queue_failing.as_ref().map_or_else(Instant::now, |(since, _)| *since);
                queue.queue_failing = Some((since, error.to_string()));
                None
            }
            None => None,
        };
        let gave_up =
            queue.queue_failing.as_ref().filter(|(since, _)| since.elapsed() >= QUEUE_PATIENCE).map(|(_, why)| {
                TaskError::msg(format!("asking Slurm about its job failed for {} s: {why}", QUEUE_PATIENCE.as_secs()))
            });
        let mut abandoned = Vec::new();
        let mut lost_units = Vec::new();
        let Queue { in_flight, units, settled, .. } = &mut *queue;
        for flight in in_flight.iter_mut() {
            for (element, &unit) in flight.units.iter().enumerate() {
                if flight.done[element] {
                    continue;
                }
                let Some((step, indices)) = units.get(&unit) else {
                    flight.done[element] = true;
                    continue;
                };
                let element_id = Element { job: flight.job.id, index: Some(element as u32) };
                if let Some(report) = report.as_ref() {
                    let ended = match report.get(element_id) {
                        Observed::Known { state, .. } if state.is_finished() => Some(state.clone()),
                        Observed::Vanished => Some(JobState::Unrecognised("gone from the queue".into())),
                        Observed::Known { .. } => None,
                    };
                    if let Some(state) = ended {
                        let nodes = report.nodes(element_id).map(str::to_string);
                        flight.ended.entry(element as u32).or_insert((Instant::now(), state, nodes));
                    }
                }
                // Tasks run one after another, each writing its result: the last one's is there
                // only when all are (or the job ended: then some may be missing).
                let last = *indices.last().expect("a unit has tasks");
                let ended = flight.ended.get(&(element as u32)).cloned();
                if ended.is_none() && gave_up.is_none() && !self.folder.result(step, last).exists() {
                    continue;
                }
                let results: Vec<Option<TaskResult>> =
                    indices.iter().map(|&index| self.folder.read_result(step, index)).collect();
                if let Some((_, JobState::NodeFail, nodes)) = &ended {
                    // Its node was lost: what did not succeed there (killed with the node, or
                    // never started) runs again elsewhere, as if it had not been tried.
                    let unfinished: Vec<u64> = indices
                        .iter()
                        .zip(&results)
                        .filter(|(_, result)| !result.as_ref().is_some_and(|r| r.ok))
                        .map(|(&index, _)| index)
                        .collect();
                    flight.done[element] = true;
                    if !unfinished.is_empty() {
                        let lost = LostUnit {
                            unit,
                            step: step.clone(),
                            indices: unfinished,
                            mem_bytes: flight.mem_bytes,
                            time_limit: flight.time_limit,
                            element: element_id,
                            nodes: nodes.clone(),
                        };
                        lost_units.push(lost);
                        continue;
                    }
                }
                let all_ok = results.iter().all(|r| r.as_ref().is_some_and(|r| r.ok));
                // A failed result is trusted once the element is seen ended: a task killed as
                // its node went down writes one, and only the job's state tells the two apart.
                let settles = all_ok || (ended.is_some() && results.iter().all(Option::is_some));
                if settles {
                    let results = results.into_iter().map(|r| Ok(r.expect("all present"))).collect();
                    settled.insert(unit, Settled { results });
                    flight.done[element] = true;
                    continue;
                }
                let error = match (&ended, &gave_up) {
                    // An element that ran out of memory wrote all it will; others get a grace.
                    (Some((since, state, _)), _)
                        if *state == JobState::OutOfMemory || since.elapsed() >= RESULT_GRACE =>
                    {
                        let log = crate::slurm::log_paths(&self.job_spec_for_logs(&flight.step), element_id).1;
                        lost(state, flight.mem_bytes, &log)
                    }
                    (_, Some(gave_up)) => {
                        abandoned.push(flight.job.id);
                        gave_up.clone()
                    }
                    _ => continue,
                };
                let results = results.into_iter().map(|r| r.ok_or_else(|| error.clone())).collect();
                settled.insert(unit, Settled { results });
                flight.done[element] = true;
            }
        }
        in_flight.retain(|f| f.done.iter().any(|done| !done));
        drop(queue);
        for lost in lost_units {
            self.submit_again(lost);
        }
        self.changed.notify_all();
        abandoned.dedup();
        if !abandoned.is_empty()
            && let Err(error) = self.slurm.cancel(&abandoned)
        {
            tracing::warn!("cancelling the abandoned Slurm jobs failed: {error}");
        }
    }

    /// Puts the tasks a lost node took with it back in line for submission, under their unit's
    /// id (its worker goes on waiting for it), and says so.
    fn submit_again(&self, lost: LostUnit) {
        let LostUnit { unit, step, indices, mem_bytes, time_limit, element, nodes } = lost;
        let node = nodes.as_deref().unwrap_or("its node");
        tracing::warn!(
            "node {node} was lost under Slurm job {element} (NODE_FAIL): its {} unfinished task(s) of step \
             `{step}` (indices {}) are submitted again, elsewhere, not counted as attempts",
            indices.len(),
            indices.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        );
        let mut text = String::new();
        for &index in &indices {
            // What the task wrote as it was killed is not its result.
            let _ = std::fs::remove_file(self.folder.result(&step, index));
            text.push_str(&index.to_string());
            text.push('\n');
        }
        let mut queue = self.lock();
        if let Err(error) = crate::values::write_atomically(&self.folder.unit(unit), text.as_bytes()) {
            let error = TaskError::msg(format!("cannot write the unit file to submit it again: {error}"));
            let tasks = queue.units.get(&unit).map_or(indices.len(), |(_, all)| all.len());
            queue.fail_unit(unit, tasks, &error);
            return;
        }
        queue.pending.push(Pending { unit, step, indices, mem_bytes, time_limit, since: Instant::now() });
    }

    /// The spec's fields that name its log files.
    fn job_spec_for_logs(&self, step: &str) -> JobSpec {
        JobSpec {
            name: format!("{}/{step}", self.options.recipe),
            command: String::new(),
            mem_bytes: 1,
            cpus_per_task: 1,
            time_limit: None,
            log_dir: self.folder.logs(),
            workdir: None,
            partition: None,
            account: None,
            extra_args: Vec::new(),
        }
    }
}

/// The failure of a task whose job element ended (in `state`) without its result.
fn lost(state: &JobState, mem_bytes: u64, log: &Path) -> TaskError {
    match state {
        JobState::OutOfMemory => TaskError::of_kind(
            FailureKind::OutOfMemory,
            format!(
                "its Slurm job ran out of memory (--mem {}); the job's log: {}",
                format_size(job_mem(mem_bytes)),
                log.display()
            ),
        ),
        JobState::Timeout => TaskError::of_kind(
            FailureKind::TimedOut,
            format!("its Slurm job reached its time limit; the job's log: {}", log.display()),
        ),
        JobState::Cancelled => TaskError::of_kind(
            FailureKind::Cancelled,
            format!("its Slurm job was cancelled; the job's log: {}", log.display()),
        ),
        other => TaskError::msg(format!(
            "its Slurm job ended ({}) without the task's result; the job's log: {}",
            other.name(),
            log.display()
        )),
    }
}
