//! Jobs, array elements and their states as Slurm names them.

use std::fmt;

/// A job id as `sbatch --parsable` prints it: for a job array, the array's id (`%A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A submitted job: its id and, for a job array, how many elements it has (indices
/// `0..elements`). Knowing the elements lets a poll say which of them no source knows any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Job {
    pub id: JobId,
    pub array_len: Option<u32>,
}

impl Job {
    /// Every element of the job: one without an index for a single job, `0..n` for an array.
    pub fn elements(&self) -> impl Iterator<Item = Element> + '_ {
        let single = self.array_len.is_none().then_some(Element { job: self.id, index: None });
        let array = (0..self.array_len.unwrap_or(0)).map(|i| Element { job: self.id, index: Some(i) });
        single.into_iter().chain(array)
    }
}

/// One schedulable unit: a single job (`index: None`) or one element of a job array
/// (`job_%index` in Slurm's notation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Element {
    pub job: JobId,
    pub index: Option<u32>,
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}_{i}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

/// A job's state, as `squeue %T`, `scontrol`'s `JobState`, `sacct`'s `State` and the job
/// completion log print it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobState {
    Pending,
    /// Nodes are being readied (booted, powered up) for the job.
    Configuring,
    Running,
    Suspended,
    /// Stopped by a signal (SIGSTOP); still holds its allocation.
    Stopped,
    /// Finished; the node is still cleaning up after it.
    Completing,
    /// Finished; staging out files.
    StageOut,
    /// Being sent a signal before its end.
    Signaling,
    /// Put back in the queue (REQUEUED, REQUEUE_HOLD, REQUEUE_FED) to run again.
    Requeued,
    /// Its size is being changed.
    Resizing,
    /// Held because its reservation was deleted.
    ReservationDeletedHold,
    /// Exited with status 0.
    Completed,
    /// Exited with a non-zero status.
    Failed,
    /// Killed for exceeding its memory (`--mem`) limit.
    OutOfMemory,
    /// Killed for exceeding its time (`--time`) limit.
    Timeout,
    Cancelled,
    /// Its node failed.
    NodeFail,
    Preempted,
    /// Its node failed to boot.
    BootFail,
    /// Reached its deadline before it could run.
    Deadline,
    /// Requeued and held because it exited with a special code.
    SpecialExit,
    /// Revoked (a federated job that ran on another cluster).
    Revoked,
    /// A state this client does not know (a newer Slurm's): treated as not finished, so that
    /// the caller keeps polling and relies on its result files rather than guessing.
    Unrecognised(String),
}

impl JobState {
    /// Parses a state word. `sacct` appends who cancelled (`CANCELLED by 0`) and narrow columns
    /// a `+`; both are ignored.
    pub fn parse(text: &str) -> JobState {
        let word = text.split_whitespace().next().unwrap_or("").trim_end_matches('+');
        match word {
            "PENDING" => JobState::Pending,
            "CONFIGURING" | "POWER_UP_NODE" => JobState::Configuring,
            "RUNNING" => JobState::Running,
            "SUSPENDED" => JobState::Suspended,
            "STOPPED" => JobState::Stopped,
            "COMPLETING" => JobState::Completing,
            "STAGE_OUT" => JobState::StageOut,
            "SIGNALING" => JobState::Signaling,
            "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => JobState::Requeued,
            "RESIZING" => JobState::Resizing,
            "RESV_DEL_HOLD" => JobState::ReservationDeletedHold,
            "COMPLETED" => JobState::Completed,
            "FAILED" => JobState::Failed,
            "OUT_OF_MEMORY" => JobState::OutOfMemory,
            "TIMEOUT" => JobState::Timeout,
            "CANCELLED" => JobState::Cancelled,
            "NODE_FAIL" => JobState::NodeFail,
            "PREEMPTED" => JobState::Preempted,
            "BOOT_FAIL" => JobState::BootFail,
            "DEADLINE" => JobState::Deadline,
            "SPECIAL_EXIT" => JobState::SpecialExit,
            "REVOKED" => JobState::Revoked,
            other => JobState::Unrecognised(other.to_string()),
        }
    }

    /// True when the job will not run (again) by itself: its result, if any, is final.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Failed
                | JobState::OutOfMemory
                | JobState::Timeout
                | JobState::Cancelled
                | JobState::NodeFail
                | JobState::Preempted
                | JobState::BootFail
                | JobState::Deadline
                | JobState::SpecialExit
                | JobState::Revoked
        )
    }

    /// True when the job has not started yet (including held and requeued ones).
    pub fn is_waiting(&self) -> bool {
        matches!(
            self,
            JobState::Pending | JobState::Configuring | JobState::Requeued | JobState::ReservationDeletedHold
        )
    }

    /// Slurm's name of the state.
    pub fn name(&self) -> &str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Configuring => "CONFIGURING",
            JobState::Running => "RUNNING",
            JobState::Suspended => "SUSPENDED",
            JobState::Stopped => "STOPPED",
            JobState::Completing => "COMPLETING",
            JobState::StageOut => "STAGE_OUT",
            JobState::Signaling => "SIGNALING",
            JobState::Requeued => "REQUEUED",
            JobState::Resizing => "RESIZING",
            JobState::ReservationDeletedHold => "RESV_DEL_HOLD",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Timeout => "TIMEOUT",
            JobState::Cancelled => "CANCELLED",
            JobState::NodeFail => "NODE_FAIL",
            JobState::Preempted => "PREEMPTED",
            JobState::BootFail => "BOOT_FAIL",
            JobState::Deadline => "DEADLINE",
            JobState::SpecialExit => "SPECIAL_EXIT",
            JobState::Revoked => "REVOKED",
            JobState::Unrecognised(word) => word,
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a state was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StateSource {
    /// `squeue`: the controller's memory (queued, running, and finished for `MinJobAge`), with
    /// Slurm's reason for the state (`Resources`, `JobHeldUser`, `OutOfMemory`...) when it
    /// gives one.
    Queue(Option<String>),
    /// `sacct`: the accounting database, where the cluster has one.
    Accounting,
    /// The job completion log (`JobCompType=jobcomp/filetxt`), where this machine can read it.
    CompletionLog,
}

/// What a poll knows about one element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Known {
        state: JobState,
        source: StateSource,
    },
    /// No source knows the element: it has left the queue and there is no accounting or
    /// completion log to read. The caller decides from its own result files.
    Vanished,
}

impl Observed {
    /// The state, when some source knows it.
    pub fn state(&self) -> Option<&JobState> {
        match self {
            Observed::Known { state, .. } => Some(state),
            Observed::Vanished => None,
        }
    }
}
