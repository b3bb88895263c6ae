//! What tasks waited for their services — warm interpreters started, or prepared for a step's
//! callable — in the recorded runs, and the wait a simulated run adds back.
//!
//! A task's recorded wall holds that wait (`waited_us`), and it is not the task's: a cold run's
//! first tasks of a python step wait for the interpreters to start and import (150–420 ms where
//! the task itself takes 23–95 ms), a run after another in one process (a replay's) finds them
//! warm and waits for nothing. Spread over a step's tasks as part of their time, the wait made
//! a cold run at a tight budget (its tasks one at a time) predicted 41% long, and a warm one
//! after a cold one 68% long. So a task's time is learned without it ([`HistoryTask::own_us`]),
//! and the simulation holds each step's services back for as long as the step's tasks waited
//! in the newest run started as the predicted one starts ([`Interpreters`]): a task of the step
//! claimed before they are ready waits until they are.
//!
//! [`HistoryTask::own_us`]: crate::store::HistoryTask::own_us

use std::time::Duration;

use serde::Serialize;

/// How a run finds its services as it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreters {
    /// None alive: a new process (every `runner run`, a replay's first cycle).
    #[default]
    Cold,
    /// Some alive: a run after another in one process (a replay's later cycles).
    Warm,
}

impl Interpreters {
    /// How a run that found `warm_services` alive started (`None`: not recorded, a cold start).
    pub fn of_run(warm_services: Option<u64>) -> Interpreters {
        if warm_services.unwrap_or(0) > 0 { Interpreters::Warm } else { Interpreters::Cold }
    }
}

/// How long a step's services took to be ready for it — the longest any of its tasks waited —
/// in the newest run of each start that recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepWaits {
    cold: Option<Duration>,
    warm: Option<Duration>,
}

impl StepWaits {
    /// Takes a run's longest wait (`None`: the run did not record waits), over what an older run
    /// of the same start gave: runs are noted oldest first.
    pub fn note(&mut self, start: Interpreters, longest: Option<Duration>) {
        let Some(longest) = longest else { return };
        match start {
            Interpreters::Cold => self.cold = Some(longest),
            Interpreters::Warm => self.warm = Some(longest),
        }
    }

    /// The wait of a run starting as `start`: as recorded, else none (a warm run's services are
    /// ready; a cold run recorded before waits were has them in its tasks' times).
    pub fn of(&self, start: Interpreters) -> Duration {
        match start {
            Interpreters::Cold => self.cold,
            Interpreters::Warm => self.warm,
        }
        .unwrap_or_default()
    }
}

/// The waits a prediction added: how its run found its interpreters, and each step whose
/// tasks wait for theirs, for how long at most.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddedWaits {
    pub interpreters: Interpreters,
    pub steps: Vec<StepWait>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepWait {
    pub step: String,
    pub wait_s: f64,
}

impl AddedWaits {
    /// What `simulate` says of them (`None`: no step waits, in a run started cold).
    pub fn text(&self) -> Option<String> {
        // Below a millisecond is taking an idle interpreter, not waiting for one.
        let waits = self.steps.iter().filter(|s| s.wait_s >= 1e-3);
        let waits = waits.map(|s| format!("{} {:.0} ms", s.step, s.wait_s * 1e3)).collect::<Vec<_>>();
        match (self.interpreters, waits.is_empty()) {
            (Interpreters::Cold, true) => None,
            (Interpreters::Cold, false) => Some(format!(
                "interpreters start with the run, as a new process's do: the first tasks of a step wait for \
                 theirs as long as in the newest run started so ({})",
                waits.join(", ")
            )),
            (Interpreters::Warm, true) => Some("interpreters found warm: no task waits for one".to_string()),
            (Interpreters::Warm, false) => Some(format!(
                "interpreters found warm: the first tasks of a step wait as long as in the newest run that \
                 found them so ({})",
                waits.join(", ")
            )),
        }
    }
}

/// When the services of each step are ready on the virtual clock (ns): set by the step's first
/// task, which asks for them.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    ready_at: Vec<Option<u64>>,
}

impl Readiness {
    pub fn new(steps: usize) -> Readiness {
        Readiness { ready_at: vec![None; steps] }
    }

    /// No service ready: a new process's (a cluster's job).
    pub fn reset(&mut self) {
        self.ready_at.fill(None);
    }

    /// What a task of `step` claimed at `now` waits for its services, which take `wait` to be
    /// ready from the step's first task on.
    pub fn wait(&mut self, step: usize, now: u64, wait: Duration) -> Duration {
        if wait.is_zero() {
            return Duration::ZERO;
        }
        let ready = *self.ready_at[step].get_or_insert(now + wait.as_nanos() as u64);
        Duration::from_nanos(ready.saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_run_is_warm_when_it_found_services_alive() {
        assert_eq!(Interpreters::of_run(None), Interpreters::Cold);
        assert_eq!(Interpreters::of_run(Some(0)), Interpreters::Cold);
        assert_eq!(Interpreters::of_run(Some(2)), Interpreters::Warm);
    }

    #[test]
    fn the_newest_run_of_each_start_gives_its_wait() {
        let mut waits = StepWaits::default();
        waits.note(Interpreters::Cold, Some(300 * MS));
        waits.note(Interpreters::Warm, Some(2 * MS));
        waits.note(Interpreters::Cold, Some(250 * MS));
        waits.note(Interpreters::Cold, None);
        assert_eq!((waits.of(Interpreters::Cold), waits.of(Interpreters::Warm)), (250 * MS, 2 * MS));
        // Without a warm run recorded, a warm start waits for nothing.
        let cold_only = StepWaits { cold: Some(MS), warm: None };
        assert_eq!(cold_only.of(Interpreters::Warm), Duration::ZERO);
    }

    #[test]
    fn a_prediction_says_which_steps_wait_and_how_its_run_found_its_interpreters() {
        let wait = |step: &str, ms: f64| StepWait { step: step.to_string(), wait_s: ms / 1e3 };
        let cold = AddedWaits { interpreters: Interpreters::Cold, steps: vec![wait("temperature", 198.6)] };
        assert_eq!(
            cold.text().unwrap(),
            "interpreters start with the run, as a new process's do: the first tasks of a step wait for theirs \
             as long as in the newest run started so (temperature 199 ms)"
        );
        assert_eq!(AddedWaits { interpreters: Interpreters::Cold, steps: vec![wait("save", 0.4)] }.text(), None);
        let warm = AddedWaits { interpreters: Interpreters::Warm, steps: Vec::new() };
        assert_eq!(warm.text().unwrap(), "interpreters found warm: no task waits for one");
        let json = serde_json::to_value(&cold).unwrap();
        assert_eq!(json["interpreters"], "cold");
        assert_eq!(json["steps"][0]["step"], "temperature");
    }

    #[test]
    fn tasks_claimed_before_their_services_are_ready_wait_for_them_and_later_ones_do_not() {
        let mut ready = Readiness::new(2);
        let at = |ms: u64| ms * 1_000_000;
        assert_eq!(ready.wait(0, at(10), 300 * MS), 300 * MS);
        assert_eq!(ready.wait(0, at(110), 300 * MS), 200 * MS);
        assert_eq!(ready.wait(0, at(400), 300 * MS), Duration::ZERO);
        // Another step's services are made ready from its own first task on.
        assert_eq!(ready.wait(1, at(400), 50 * MS), 50 * MS);
        assert_eq!(ready.wait(1, at(420), Duration::ZERO), Duration::ZERO);
    }
}
