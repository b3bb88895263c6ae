//! What follows a task's end under the lock: its reservation and inputs released (the last
//! consumer's value to the garbage), its output kept with a consumer count, its consumers'
//! counters decremented and those reaching 0 made ready — or skipped, dropped from gathers, or
//! taken over from the resumed run —, and emptied output `Arc`s recycled.

use std::sync::Arc;
use std::time::Duration;

use runner_plugin::Value;

use super::{Garbage, LiveOutput, Picked, State, TaskRef, UNTOUCHED};

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    /// Not run because an input failed or is missing, or run and found its own input missing
    /// under `on_missing: skip`: it and everything downstream are skipped, and that is no failure.
    Skipped,
    /// Found its input missing under `on_missing: ignore`: it is left out of its consumers'
    /// gathers (a gather left empty is skipped; a consumer reading it alone is skipped).
    Dropped,
    /// Not run: `--resume` took its output over from the run it resumes.
    Reused,
}

/// What a finished task hands its consumers: its value, or in a simulation only its size (a
/// virtual value holds no buffer, yet the ledger, the victim choice and the consumers' input
/// bytes see it as a buffer of that many bytes).
#[derive(Debug)]
pub enum Produced {
    Value(Value),
    Virtual { bytes: u64 },
}

impl Produced {
    fn buffer_bytes(&self) -> u64 {
        match self {
            Produced::Value(value) => value.buffer_bytes(),
            Produced::Virtual { bytes } => *bytes,
        }
    }
}

/// A task to count as finished, in [`State::complete`].
pub(super) struct Completion {
    task: TaskRef,
    outcome: Outcome,
    output: Produced,
    /// The size of the file a path output names.
    file_bytes: u64,
    /// Its output's content hash (for its consumers' inputs hash), 0 when unknown.
    hash: u64,
    /// Its consumers are skipped, for this reason.
    poison: Option<SkipReason>,
}

/// A task finished by another's completion, in [`State::complete`]'s work list: small, and
/// its completion made only when it is taken, since one failed task can skip a million
/// consumers at once (a list of full completions held 100 bytes each of them).
#[derive(Clone, Copy)]
pub(super) enum Cascade {
    /// Skipped (or dropped) because of its inputs; its consumers poisoned for `poison`.
    Skip { task: TaskRef, outcome: Outcome, poison: Option<SkipReason> },
    /// Taken over from the resumed run, its output had again.
    Reuse(TaskRef),
}

/// The reason a task is skipped for, of two: a failure upstream outweighs a missing input.
fn worse(a: Option<SkipReason>, b: Option<SkipReason>) -> Option<SkipReason> {
    match (a, b) {
        (Some(SkipReason::InputFailed), _) | (_, Some(SkipReason::InputFailed)) => Some(SkipReason::InputFailed),
        (a, b) => a.or(b),
    }
}

/// Why a task was skipped without running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// An input failed: the run fails because of that input.
    InputFailed,
    /// An input is missing (`on_missing: skip` or `ignore` upstream): not a failure.
    InputMissing,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::InputFailed => "an input failed",
            SkipReason::InputMissing => "an input is missing",
        }
    }
}

impl<'g> State<'g> {
    /// Records the end of a running task that took `wall`: frees its reservation (`picked`, the
    /// guard, is consumed) and inputs,
    /// keeps its output for its consumers, and makes ready the consumers whose last input this was.
    /// `file_bytes`: the size of the file a path output names (0 otherwise), which its consumers
    /// count as input bytes.
    /// `hash`: its output's content hash (0 when not hashed), for its consumers' inputs hash.
    pub fn finish(
        &mut self,
        picked: Picked,
        outcome: Outcome,
        output: Value,
        file_bytes: u64,
        hash: u64,
        wall: Duration,
    ) {
        self.finish_produced(picked, outcome, Produced::Value(output), file_bytes, hash, wall);
    }

    /// [`State::finish`] for a simulated task, whose output is `output_bytes` of virtual buffer
    /// (see [`Produced::Virtual`]), or names a file of `file_bytes` that its consumers read.
    pub fn finish_virtual(
        &mut self,
        picked: Picked,
        outcome: Outcome,
        output_bytes: u64,
        file_bytes: u64,
        wall: Duration,
    ) {
        self.finish_produced(picked, outcome, Produced::Virtual { bytes: output_bytes }, file_bytes, 0, wall);
    }

    pub(super) fn finish_produced(
        &mut self,
        picked: Picked,
        outcome: Outcome,
        output: Produced,
        file_bytes: u64,
        hash: u64,
        wall: Duration,
    ) {
        let task = picked.task;
        self.ledger.release(picked.reservation);
        let step = &mut self.steps[task.step];
        step.running -= 1;
        step.on_probation = false;
        step.timed += 1;
        step.wall_nanos = step.wall_nanos.saturating_add(wall.as_nanos().try_into().unwrap_or(u64::MAX));
        self.complete(task, outcome, output, file_bytes, hash);
    }

    pub(super) fn complete(&mut self, task: TaskRef, outcome: Outcome, output: Produced, file_bytes: u64, hash: u64) {
        let mut work = std::mem::take(&mut self.work);
        let mut ready = std::mem::take(&mut self.newly_ready);
        let poison = match outcome {
            Outcome::Failed => Some(SkipReason::InputFailed),
            Outcome::Skipped => Some(SkipReason::InputMissing),
            Outcome::Ok | Outcome::Dropped | Outcome::Reused => None,
        };
        let mut first = Some(Completion { task, outcome, output, file_bytes, hash, poison });
        while let Some(Completion { task, outcome, output, file_bytes, hash, poison }) =
            first.take().or_else(|| work.pop().map(|next| self.cascaded(next)))
        {
            self.finished += 1;
            self.steps[task.step].finished += 1;
            self.release_inputs(task);
            match outcome {
                Outcome::Ok | Outcome::Reused => self.keep_output(task, output, file_bytes, hash),
                Outcome::Dropped => {
                    self.dropped.insert(task);
                    self.discard(output);
                }
                Outcome::Failed | Outcome::Skipped => self.discard(output),
            }
            self.notify_consumers(task, poison, outcome == Outcome::Dropped, &mut ready);
            for (newly_ready, poisoned) in ready.drain(..) {
                let skip = |outcome, poison| Cascade::Skip { task: newly_ready, outcome, poison };
                if let Some(reason) = poisoned {
                    self.skipped.push((newly_ready, reason));
                    work.push(skip(Outcome::Skipped, Some(reason)));
                } else if let Some(reason) = self.gathers_nothing(newly_ready) {
                    // A gather that `ignore` left empty is skipped, and dropped in turn from
                    // the gathers downstream (a store's finalize still runs without the chunk).
                    self.skipped.push((newly_ready, reason));
                    work.push(skip(Outcome::Dropped, None));
                } else if self.reuse.is_some_and(|r| r.get(newly_ready.step, newly_ready.index).is_some()) {
                    // Taken over from the resumed run: finished at once, its output had again.
                    self.reused.push(newly_ready);
                    work.push(Cascade::Reuse(newly_ready));
                } else {
                    self.steps[newly_ready.step].ready.push_back(newly_ready.index);
                }
            }
        }
        self.work = work;
        self.newly_ready = ready;
    }

    /// The completion of a task `complete` finished in turn.
    fn cascaded(&self, next: Cascade) -> Completion {
        match next {
            Cascade::Skip { task, outcome, poison } => {
                Completion { task, outcome, output: Produced::Value(Value::None), file_bytes: 0, hash: 0, poison }
            }
            Cascade::Reuse(task) => {
                let reused = self.reuse.and_then(|r| r.get(task.step, task.index)).expect("listed when it was pushed");
                reused_completion(task, reused)
            }
        }
    }

    /// Completes the reused tasks of source steps (the others follow as their producers are
    /// completed), before any task runs.
    pub fn take_over_reused(&mut self) {
        let Some(reuse) = self.reuse else { return };
        for step in self.sources.clone() {
            let mut indices: Vec<u64> = reuse.of_step(step).collect();
            indices.sort_unstable();
            for index in indices {
                let task = TaskRef { step, index };
                let reused = reuse.get(step, index).expect("listed");
                self.reused.push(task);
                let Completion { outcome, output, file_bytes, hash, .. } = reused_completion(task, reused);
                self.complete(task, outcome, output, file_bytes, hash);
            }
            self.skip_reused_sources(step);
        }
    }

    /// `InputMissing` when every producer of one of `task`'s gathered inputs was dropped (a
    /// gather left empty is skipped).
    pub(super) fn gathers_nothing(&self, task: TaskRef) -> Option<SkipReason> {
        if self.dropped.is_empty() {
            return None;
        }
        let graph = self.graph;
        let empty = graph.steps[task.step].inputs.iter().any(|&edge| {
            let producer = graph.edges[edge].producer;
            let mut any_left = false;
            graph.for_each_producer(edge, task.index, |index| {
                any_left |= !self.dropped.contains(&TaskRef { step: producer, index });
            });
            graph.edges[edge].gathered && !any_left
        });
        empty.then_some(SkipReason::InputMissing)
    }

    /// A value nobody will read: freed outside the lock when it holds a buffer.
    pub(super) fn discard(&mut self, output: Produced) {
        if let Produced::Value(value) = output
            && value.buffer_bytes() > 0
        {
            self.garbage.push(Garbage::Value(Arc::new(value)));
        }
    }

    pub(super) fn keep_output(&mut self, task: TaskRef, output: Produced, file_bytes: u64, hash: u64) {
        let nothing = match &output {
            Produced::Value(value) => matches!(value, Value::None),
            Produced::Virtual { bytes } => *bytes == 0 && file_bytes == 0,
        };
        if nothing {
            return; // consumers get the shared `None`; nothing to store or free.
        }
        let consumers: u64 =
            self.graph.steps[task.step].outputs.iter().map(|&e| self.graph.consumer_count(e, task.index)).sum();
        if consumers == 0 {
            self.discard(output);
            return;
        }
        let bytes = output.buffer_bytes();
        let (output, resident) = match output {
            Produced::Value(value) => {
                let resident = is_resident(&value);
                (value, resident)
            }
            // A virtual buffer is resident until it is (virtually) spilled; its `Arc` holds
            // nothing, but counts its readers as a real one does, for the victim choice.
            Produced::Virtual { .. } => (Value::None, true),
        };
        let resident_bytes = if resident { bytes } else { 0 };
        self.ledger.add_resident(resident_bytes);
        let value = match self.spare.pop() {
            Some(mut shell) => match Arc::get_mut(&mut shell) {
                Some(slot) => {
                    *slot = output;
                    shell
                }
                None => Arc::new(output),
            },
            None => Arc::new(output),
        };
        self.outputs.insert(
            task,
            LiveOutput {
                value,
                remaining_consumers: consumers,
                bytes,
                file_bytes,
                resident_bytes,
                spilling: false,
                hash,
            },
        );
    }

    /// Takes emptied output `Arc`s back for reuse (a bounded number; the rest are freed with
    /// `shells` by the caller, outside the lock).
    pub fn recycle(&mut self, shells: &mut Vec<Arc<Value>>) {
        const KEPT: usize = 4096;
        let room = KEPT.saturating_sub(self.spare.len());
        let from = shells.len().saturating_sub(room);
        self.spare.extend(shells.drain(from..));
    }

    /// Counts `task` as finished for each consumer; appends consumers now free to go. With
    /// `poison`, its consumers will be skipped for that reason; a `dropped` task leaves its
    /// consumers' gathers, and skips a consumer that reads it alone.
    pub(super) fn notify_consumers(
        &mut self,
        task: TaskRef,
        poison: Option<SkipReason>,
        dropped: bool,
        ready: &mut Vec<(TaskRef, Option<SkipReason>)>,
    ) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].outputs {
            let consumer = graph.edges[edge].consumer;
            let tasks = graph.steps[consumer].tasks as usize;
            let pending = &mut self.steps[consumer].pending;
            if pending.is_empty() {
                pending.resize(tasks, UNTOUCHED);
            }
            let poison = match (poison, dropped && !graph.edges[edge].gathered) {
                (Some(reason), _) => Some(reason),
                (None, true) => Some(SkipReason::InputMissing),
                (None, false) => None,
            };
            graph.for_each_consumer(edge, task.index, |index| {
                let counter = &mut self.steps[consumer].pending[index as usize];
                if *counter == UNTOUCHED {
                    let inputs: u64 =
                        graph.steps[consumer].inputs.iter().map(|&e| graph.producer_count(e, index)).sum();
                    *counter = u32::try_from(inputs).unwrap_or(u32::MAX - 1);
                }
                *counter -= 1;
                let consumer_task = TaskRef { step: consumer, index };
                if *counter == 0 {
                    // Ready: its reason goes with it, so that a million consumers of one
                    // failed task never fill the map of those still waiting.
                    let earlier = if self.poisoned.is_empty() { None } else { self.poisoned.remove(&consumer_task) };
                    ready.push((consumer_task, worse(earlier, poison)));
                } else if let Some(reason) = poison {
                    let entry = self.poisoned.entry(consumer_task).or_insert(reason);
                    *entry = worse(Some(*entry), Some(reason)).expect("both are reasons");
                }
            });
        }
    }

    /// Each input value of `task` has one consumer fewer; the last consumer's value goes to the
    /// garbage, to be freed outside the lock.
    pub(super) fn release_inputs(&mut self, task: TaskRef) {
        let graph = self.graph;
        for &edge in &graph.steps[task.step].inputs {
            let producer = graph.edges[edge].producer;
            graph.for_each_producer(edge, task.index, |index| {
                let key = TaskRef { step: producer, index };
                if let Some(live) = self.outputs.get_mut(&key) {
                    live.remaining_consumers -= 1;
                    if live.remaining_consumers == 0 {
                        let live = self.outputs.remove(&key).expect("present");
                        self.ledger.remove_resident(live.resident_bytes);
                        self.garbage.push(Garbage::Value(live.value));
                    }
                }
            });
        }
    }
}

/// How a task taken over by `--resume` counts as finished.
fn reused_completion(task: TaskRef, reused: &crate::resume::ReusedTask) -> Completion {
    let output = reused.value();
    let file_bytes = match &output {
        Value::Path(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
        _ => 0,
    };
    Completion {
        task,
        outcome: Outcome::Reused,
        output: Produced::Value(output),
        file_bytes,
        hash: reused.output_hash,
        poison: None,
    }
}

/// Whether a value's buffer is on the heap (an output can already be a mapped file).
fn is_resident(value: &Value) -> bool {
    match value {
        Value::Array(array) => array.storage().is_resident(),
        Value::Bytes(storage) => storage.is_resident(),
        _ => true,
    }
}
