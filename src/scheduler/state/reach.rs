//! How many tasks can still run at once ([`State::reach`]), for an executor that keeps things
//! for tasks to come — warm interpreters — and can let go of what no remaining task can use.
//!
//! The bound comes from the steps, not the tasks: a step waits for *all* of another when it
//! gathers every one of its tasks (or reads a step of one task), or reads a step that does. No
//! task of the waiting step can run while one of the other's is unfinished, so at any moment
//! the tasks running come from steps of which none waits for all of another. Cover the steps
//! that have tasks left with chains of such waits: one step of a chain at most runs at a time,
//! and the bound is the sum over the chains of the most tasks a step of the chain has left.
//! Task counts only fall, so the bound holds from now on. It is computed only near the end of
//! a run (at most [`NEAR_END`] tasks a worker left), never per task on the way.

use crate::graph::{Graph, ProducerRule};
use crate::recipe::StepId;

use super::State;

/// Tasks left per worker below which the reach is looked at.
pub const NEAR_END: u64 = 4;

/// Which steps wait for all of which: `waits[b * n + a]` when no task of `b` can start before
/// every task of `a` has finished.
pub(super) struct Waits {
    n: usize,
    waits: Vec<bool>,
}

impl Waits {
    pub(super) fn of(graph: &Graph) -> Waits {
        let n = graph.steps.len();
        let mut waits = vec![false; n * n];
        for &b in &graph.topo {
            for &edge in &graph.steps[b].inputs {
                let edge = &graph.edges[edge];
                let a = edge.producer;
                // Every task of `b` reads at least one of `a`'s, which waited for all of what
                // `a` waits for.
                for x in 0..n {
                    waits[b * n + x] |= waits[a * n + x];
                }
                let reads_all = graph.steps[a].tasks <= 1 || edge.rules.iter().all(|r| *r == ProducerRule::All);
                waits[b * n + a] |= reads_all;
            }
        }
        Waits { n, waits }
    }

    fn waits_for_all(&self, step: StepId, of: StepId) -> bool {
        self.waits[step * self.n + of]
    }
}

impl State<'_> {
    /// The most tasks that can run at the same time from now on (running ones included); see
    /// the module's doc.
    pub fn reach(&mut self) -> u64 {
        let graph = self.graph;
        let waits = self.waits.get_or_insert_with(|| Waits::of(graph));
        // (the chain's last step, the most tasks a step of it has left)
        let chains = &mut self.chains;
        chains.clear();
        for &step in &graph.topo {
            let left = graph.steps[step].tasks - self.steps[step].finished;
            if left == 0 {
                continue;
            }
            match chains.iter_mut().find(|(last, _)| waits.waits_for_all(step, *last)) {
                Some(chain) => *chain = (step, chain.1.max(left)),
                None => chains.push((step, left)),
            }
        }
        chains.iter().map(|&(_, most)| most).sum()
    }

    /// After tasks finished: near the end ([`NEAR_END`] tasks a worker left), notes
    /// [`State::reach`] if it fell below `workers` and what was said last, for a worker to pass
    /// on outside the lock ([`State::take_reach`]).
    pub fn note_reach(&mut self, workers: u64) {
        if self.unfinished() > NEAR_END * workers {
            return;
        }
        let reach = self.reach();
        if reach < workers && reach < self.told_reach {
            self.told_reach = reach;
            self.new_reach = Some(reach);
        }
    }

    /// A fall of [`State::reach`] not passed on yet.
    pub fn take_reach(&mut self) -> Option<u64> {
        self.new_reach.take()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{NoMemory, compiled};
    use crate::memory::TaskSlot;
    use crate::plan::Compiled;
    use crate::scheduler::{Outcome, Pick, State, StepTraits};

    /// Runs the recipe's tasks one at a time to the end, noting the reach before each start.
    fn reach_before_each_task(c: &Compiled) -> Vec<(String, u64)> {
        let steps = c.recipe.steps.len();
        let mut state = State::new(&c.graph, &c.plan, StepTraits::plain(steps), u64::MAX, &NoMemory, None);
        let mut seen = Vec::new();
        while !state.is_done() {
            let reach = state.reach();
            let Pick::Run(picked) = state.pick(&c.plan, TaskSlot(0)) else {
                panic!("one task at a time is always ready")
            };
            seen.push((c.recipe.steps[picked.task.step].name.clone(), reach));
            state.finish_virtual(picked, Outcome::Ok, 0, 0, Duration::ZERO);
        }
        seen
    }

    #[test]
    fn a_gather_waits_for_all_it_gathers_and_a_chain_after_it_runs_one_task_at_a_time() {
        let c = compiled(
            "  work: {plugin: noop, over: [lead]}\n  all: {plugin: noop, inputs: {x: work}}\n  save: {plugin: noop, inputs: {x: all}}\n",
        );
        let seen = reach_before_each_task(&c);
        let reaches: Vec<u64> = seen.iter().map(|(_, r)| *r).collect();
        // Four `work` tasks could run at once; the gather and the save after it, one.
        assert_eq!(reaches, [4, 3, 2, 1, 1, 1], "{seen:?}");
    }

    #[test]
    fn steps_matched_task_by_task_may_overlap_and_are_counted_apart() {
        let c = compiled(
            "  a: {plugin: noop, over: [lead]}\n  b: {plugin: noop, over: [lead], inputs: {x: a}}\n  all: {plugin: noop, inputs: {x: b}}\n",
        );
        let seen = reach_before_each_task(&c);
        // `b`'s first task may run beside `a`'s last ones: both steps count until `a` is done.
        assert_eq!(seen[0].1, 8, "{seen:?}");
        let last_b = seen.iter().rposition(|(step, _)| step == "b").unwrap();
        assert_eq!(seen[last_b].1, 1, "one `b` task left, then the gather: {seen:?}");
        assert_eq!(seen.last().unwrap().1, 1, "{seen:?}");
    }

    #[test]
    fn a_fan_out_after_a_gather_keeps_the_reach_while_the_gather_runs() {
        let c = compiled(
            "  work: {plugin: noop, over: [lead]}\n  all: {plugin: noop, inputs: {x: work}}\n  again: {plugin: noop, over: [lead], inputs: {x: all}}\n",
        );
        let seen = reach_before_each_task(&c);
        let gather = seen.iter().position(|(step, _)| step == "all").unwrap();
        // One task at a time runs the gather, but four may follow it: nothing to let go.
        assert_eq!(seen[gather].1, 4, "{seen:?}");
        assert_eq!(seen.last().unwrap().1, 1, "the last task alone: {seen:?}");
    }

    #[test]
    fn a_step_of_one_task_is_waited_for_by_every_reader() {
        let c = compiled("  one: {plugin: noop}\n  fan: {plugin: noop, over: [lead], inputs: {x: one}}\n");
        let seen = reach_before_each_task(&c);
        assert_eq!(seen[0], ("one".to_string(), 4), "`one` then up to four readers: {seen:?}");
        assert_eq!(seen[1], ("fan".to_string(), 4), "{seen:?}");
    }
}
