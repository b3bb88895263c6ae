//! The claimed tasks as the executor sees them ([`executor::Unit`]): what it needs to run them,
//! and, as each attempt ends, the one retry rule — preempted (not an attempt, up to
//! [`MAX_PREEMPTIONS`] times), out of memory (with a larger reservation), any other failure
//! while `retries:` allow, never a missing input — before the task is concluded once
//! ([`super::conclude`]) and kept for the next report under the lock.

use std::time::{Duration, Instant};

use runner_plugin::{FailureKind, TaskError};

use super::worker::{Ended, Worker};
use crate::executor::attempt::{self, TaskOutcome};
use crate::executor::{self, Attempt, Next, Ran};
use crate::memory::spill::release_value_pages;
use crate::recipe::Step;

/// How often one task may be preempted; after that its commands run to the end, over the
/// budget if they must (a task that keeps growing past what it held must still finish).
pub(super) const MAX_PREEMPTIONS: u32 = 2;

impl<'r> executor::Unit<'r> for Worker<'_, 'r> {
    fn step(&self) -> &'r Step {
        let shared = self.shared;
        let recipe = shared.recipe;
        &recipe.steps[self.claimed[0].picked.task.step]
    }

    fn longest_task(&self) -> Option<Duration> {
        self.shared.plan.steps[self.claimed[0].picked.task.step].longest_task
    }

    fn tasks(&self) -> usize {
        self.claimed.len()
    }

    fn index(&self, at: usize) -> u64 {
        self.claimed[at].picked.task.index
    }

    fn reserved(&self, at: usize) -> u64 {
        self.claimed[at].picked.reserved
    }

    fn claim_outputs(&mut self, at: usize) -> bool {
        let shared = self.shared;
        let task = self.claimed[at].picked.task;
        self.describe_task(task.step, task.index);
        let lookup = |name: &str| self.index.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let args = shared.recipe.steps[task.step].args.for_task(&lookup);
        let Err(message) = shared.output_claims.claim(shared.recipe, shared.graph, task, &args) else { return true };
        // Not retried: the claim would fail again.
        let started = Instant::now();
        let outcome = TaskOutcome::failed(TaskError::msg(message), started);
        let wall = outcome.elapsed;
        let finished = self.conclude(at, outcome, 1, wall, started, Some(0));
        self.ended[at] = Ended::Finished(finished);
        false
    }

    fn attempt_here(&mut self, at: usize, started: Instant) -> Option<TaskOutcome> {
        if self.claimed[at].started.is_none() {
            let task = self.claimed[at].picked.task;
            self.describe_task(task.step, task.index);
            match self.own_estimate(at) {
                Some(plugin_estimate) if plugin_estimate > self.claimed[at].picked.plugin_estimate => {
                    self.ended[at] = Ended::HandedBack { plugin_estimate };
                    return None;
                }
                Some(plugin_estimate) => self.claimed[at].picked.plugin_estimate = plugin_estimate,
                None => {}
            }
        }
        let claimed = &self.claimed[at];
        let preemptible = claimed.preempted < MAX_PREEMPTIONS;
        Some(self.attempt(at, &claimed.picked, started, preemptible))
    }

    fn attempted(&mut self, at: usize, attempt: Attempt) -> Next {
        let Attempt { outcome, started, ran } = attempt;
        let (task, reserved) = (self.claimed[at].picked.task, self.claimed[at].picked.reserved);
        self.describe_task(task.step, task.index);
        let step = &self.shared.recipe.steps[task.step];
        let claimed = &mut self.claimed[at];
        claimed.started.get_or_insert(started);
        let first_started = *claimed.counted_from.get_or_insert(started);
        claimed.attempts += 1;
        if let Err(error) = &outcome.result {
            // A job killed at its memory peaked there, whatever it last reported.
            let peak = match ran {
                Ran::Here => outcome.peak,
                Ran::Elsewhere { .. } => outcome.peak.max(reserved),
            };
            if error.kind() == FailureKind::Preempted {
                tracing::info!("task {}[{}] preempted to keep the budget: {error}", step.name, self.key);
                // Not an attempt that counts: it runs again, its reservation grown past what it held.
                claimed.attempts -= 1;
                claimed.preempted += 1;
                claimed.counted_from = None;
                self.grow_after_oom(at, peak);
                return Next::Retry;
            }
            if attempt::may_retry(error, claimed.attempts, step.retries) {
                tracing::info!(
                    "task {}[{}] failed, attempt {} of {}: {error}",
                    step.name,
                    self.key,
                    claimed.attempts,
                    step.retries + 1
                );
                if error.kind() == FailureKind::OutOfMemory {
                    self.grow_after_oom(at, peak);
                }
                return Next::Retry;
            }
        }
        let attempts = claimed.attempts;
        let (wall, remote_output_bytes) = match ran {
            // A task retried here is recorded from its first attempt's start to its end.
            Ran::Here if attempts > 1 => (first_started.elapsed(), None),
            Ran::Here => (outcome.elapsed, None),
            // One run elsewhere is its last job's (its waits in the queue are not its time).
            Ran::Elsewhere { output_bytes } => (outcome.elapsed, Some(output_bytes)),
        };
        let finished = self.conclude(at, outcome, attempts, wall, first_started, remote_output_bytes);
        let claimed = &self.claimed[at];
        if ran == Ran::Here {
            // Spilled inputs' pages go back once this reader is done, so a gather over more than
            // the budget streams through them; then the task's inputs are no longer needed here.
            for value in &self.values[claimed.values.clone()] {
                release_value_pages(value);
            }
            let none = &self.none;
            self.values[claimed.values.clone()].iter_mut().for_each(|v| *v = none.clone());
        }
        self.ended[at] = Ended::Finished(finished);
        Next::Done { wall }
    }
}

impl Worker<'_, '_> {
    /// An attempt ran out of memory under its reservation (or was preempted past it): the
    /// step's figure learns what it reached — at least its reservation, which it outgrew — and
    /// the next attempt reserves more — twice as much, or half again the peak it reached,
    /// whichever is larger, but never more than the budget (a task that needs more fails when
    /// it runs out again with the whole budget reserved) — waiting for the room.
    fn grow_after_oom(&mut self, at: usize, peak: u64) {
        let shared = self.shared;
        let picked = &mut self.claimed[at].picked;
        let mut state = shared.lock();
        let ceiling = state.ledger.budget().max(picked.reserved);
        let reserved = picked.reserved.saturating_mul(2).max(peak.saturating_add(peak / 2)).min(ceiling);
        let estimate = picked.estimate.saturating_add(reserved - picked.reserved);
        state.note_underestimate(picked, peak.max(picked.reserved));
        // Between two attempts the task holds nothing: it lets its reservation go while it
        // waits for the larger one, so that two tasks growing at once wait for each other
        // instead of one of them taking room the budget does not have.
        state.ledger.try_resize(picked.slot(), 0);
        shared.wake.notify_all();
        while !state.ledger.try_resize(picked.slot(), reserved) {
            state.sleepers += 1;
            state = shared.wake.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            state.sleepers -= 1;
        }
        state.ledger.stop_growing(picked.slot());
        drop(state);
        (picked.reserved, picked.estimate) = (reserved, estimate);
    }
}
