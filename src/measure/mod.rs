//! Memory measurement: how many heap bytes each task holds, at most and at the end, and how much
//! memory the whole process uses.
//!
//! This module owns the process's global allocator, [`CountingAlloc`]: jemalloc with a small tag
//! header in front of every block naming the task that allocated it (the thread's
//! [`runner_plugin::task_tag`] at allocation time). That is what makes the per-task figures
//! honest under work stealing: a block is charged to the task that made it, and its free is
//! credited back to that same task, whichever thread or task frees it. jemalloc's per-thread
//! counters cannot do that, so the tagged counters are the source of truth for
//! "peak bytes" (SPEC, Execution promises → Measurement) and for the live guard.
//!
//! Using it, for the engine:
//! 1. [`begin_new_task`] (or [`begin_task`] with a tag of your own) before the task runs;
//! 2. run the task under `task_tag::with(tag, …)`; work it hands to other threads carries the tag
//!    along (the plugin API's parallel helpers do that);
//! 3. [`task_live`] / [`task_peak`] while it runs, for the live guard;
//! 4. [`end_task`] when it returns, on the thread that ran it (it publishes that thread's batch):
//!    its peak, and the bytes its output still holds. Those bytes then count as "retired"
//!    ([`retired_bytes`]) until whoever holds the output frees them. Threads that ran nested
//!    work for the task (rayon's) are not flushed: what they have not published yet — under
//!    64 KiB each — reaches the task's counts when they do, or the retired bucket after its end;
//!    [`flush_thread`] publishes a thread's batch at once where that matters (tests).
//!
//! Process-wide: [`live_bytes`] / [`peak_live_bytes`] (every block, tagged or not),
//! [`jemalloc_stats`], and the OS's view in [`process_memory`] / [`reset_peak_rss`].
//!
//! External processes a task runs (commands, see [`crate::command`]) are outside the heap: their
//! resident bytes, sampled while they run, are published per task in [`external`].
//!
//! Precision: blocks of 16 KiB and more are counted exactly, at once. Smaller ones are counted in
//! a per-thread batch published every ±64 KiB (and when the thread switches tasks), because a
//! shared atomic update per allocation would cost several times jemalloc's own fast path. So a
//! task's figures may lag by under 64 KiB per thread working for it, and its peak may miss a
//! short high of its small blocks spread over several threads by as much.
//!
//! Costs, by design: 16 bytes of header per block (one alignment unit for blocks aligned above
//! 16), and about 2–3 ns per allocation or free. The header also moves a request that exactly
//! fills a jemalloc size class into the next class: a 4 KiB block takes a 5 KiB slot (and
//! jemalloc's 5 KiB class is slower), a 64 MiB buffer an 80 MiB extent (address space only: the
//! tail is never touched), and jemalloc's `stats.allocated` counts the larger class.

mod alloc;
mod batch;
pub mod external;
pub mod preempt;
mod system;
mod tally;
mod task;
mod zero_pages;

#[cfg(test)]
mod tests;

pub use alloc::CountingAlloc;
pub use system::{page_size, process_memory, purge_free_pages, reset_peak_rss};
pub use tally::{SLOTS, TaskMemory, begin_new_task, live_bytes};
pub use task::{end_task, task_live};
// What only the tests read: the counters' history and jemalloc's own figures, to check the
// counting against.
#[cfg(test)]
use {
    batch::flush_thread,
    system::{ProcessMemory, jemalloc_stats},
    tally::{begin_task, peak_live_bytes, reset_peak, retired_bytes},
    task::task_peak,
};

/// Memory outside the heap counted as if it were a heap block (shared memory holding a value,
/// see [`crate::memory::shared`]): charged, when made, to the task this thread works for, and
/// credited back to that task when dropped, whichever thread drops it, as a block's free is.
#[derive(Debug)]
pub struct OffHeapCharge {
    tag: u32,
    bytes: u64,
}

impl OffHeapCharge {
    pub fn new(bytes: u64) -> OffHeapCharge {
        OffHeapCharge { tag: batch::charge(bytes), bytes }
    }
}

impl Drop for OffHeapCharge {
    fn drop(&mut self) {
        batch::release(self.tag, self.bytes);
    }
}

/// The allocator of every binary and test linking this crate.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

/// jemalloc's start-up options (it reads this symbol; `_RJEM_MALLOC_CONF` in the environment
/// still overrides):
/// - `oversize_threshold`: by default jemalloc gives blocks over 8 MiB back to the OS as soon as
///   they are freed, so every such output (a 970×1042 field with 8 thresholds is 31 MiB) is
///   page-faulted in afresh, which costs more than computing it. Up to 64 MiB, freed blocks are
///   kept for reuse and returned over jemalloc's decay time; larger ones still go at once.
/// - `narenas:1`: one arena for all threads, so a block freed by one worker is reused by the
///   next task on any other instead of sitting in its thread's arena until it decays (peak RSS
///   of the 8 × 24 weather benchmark: 77–125 MiB with an arena per thread, 66–71 MiB with one).
///   Small allocations still go through per-thread caches.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static JEMALLOC_OPTIONS: &[u8; 38] = b"oversize_threshold:67108864,narenas:1\0";

/// How a task's peak bytes were measured (`tasks.peak_source` in the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PeakSource {
    /// The counting allocator: the task's own heap blocks at their highest (in-process plugins).
    #[default]
    Allocator,
    /// A memory cgroup of the task's own: its process tree's resident bytes, sampled from the
    /// cgroup's `memory.stat`, and never below the largest process's high-water mark (less its
    /// file pages) nor the cgroup's peak usage less the page cache it holds at the end.
    Cgroup,
    /// No cgroup could be made: the largest process's `ru_maxrss` from `wait4`, and the tree's
    /// resident bytes sampled from `/proc`.
    Wait4Sampled,
    /// A service process lent to the task (a warm interpreter), in a memory cgroup of its own:
    /// its tree's resident bytes above its baseline, sampled, and its root's `VmHWM` above the
    /// baseline (reset at the task's start), whichever is larger.
    ServiceCgroup,
    /// The same without a cgroup: the tree's resident bytes summed over `/proc`, and `VmHWM`.
    ServiceProc,
}

impl PeakSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PeakSource::Allocator => "allocator",
            PeakSource::Cgroup => "cgroup",
            PeakSource::Wait4Sampled => "wait4+sampled",
            PeakSource::ServiceCgroup => "service+cgroup",
            PeakSource::ServiceProc => "service+proc",
        }
    }

    /// Whether the peak was sampled from processes of the task's own (a command's, a warm
    /// interpreter's), which the ledger sees grow while the task runs; the allocator's is
    /// announced as the plugin allocates.
    pub fn is_sampled(self) -> bool {
        self != PeakSource::Allocator
    }

    pub fn parse(text: &str) -> Option<PeakSource> {
        [
            PeakSource::Allocator,
            PeakSource::Cgroup,
            PeakSource::Wait4Sampled,
            PeakSource::ServiceCgroup,
            PeakSource::ServiceProc,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// What can go wrong when starting or ending a task's measurement, or reading memory statistics.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// Tag 0 is `task_tag::NO_TASK`: allocations under it belong to no task.
    #[error("tag 0 means \"no task\" and cannot be measured")]
    NoTask,
    /// Another running task's tag maps to the same counter slot (or this task is already running).
    #[error("task {tag} cannot begin: its counter slot is held by running task {holder}")]
    SlotBusy { tag: u32, holder: u32 },
    /// The task was never begun, or has already ended.
    #[error("task {tag} is not being measured (never begun, or already ended)")]
    NotRunning { tag: u32 },
    /// Every counter slot is held by a running task.
    #[error("every task counter slot is held by a running task")]
    NoFreeSlot,
    /// jemalloc refused a statistics call. (`tikv_jemalloc_ctl::Error` is no `std::error::Error`
    /// without that crate's `use_std` feature, so it is shown but not chained as a source.)
    #[error("jemalloc statistics: {0}")]
    Jemalloc(tikv_jemalloc_ctl::Error),
    /// A jemalloc control call failed (with an errno value).
    #[error("jemalloc {name}: {source}")]
    JemallocCall {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// An OS file could not be read or written (e.g. no `/proc`, as outside Linux).
    #[error("{path}: {source}")]
    Os {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// An OS file lacked a field, or it did not parse.
    #[error("{path}: no readable `{field}` line")]
    OsField { path: &'static str, field: &'static str },
}

impl From<tikv_jemalloc_ctl::Error> for MeasureError {
    fn from(error: tikv_jemalloc_ctl::Error) -> Self {
        Self::Jemalloc(error)
    }
}
