//! A command's process tree seen through `/proc`, for when no cgroup can be made: its
//! processes (from `/proc/<pid>/task/*/children`, recursively — not a scan of all of `/proc`),
//! their resident bytes, and killing them all.
//!
//! Every process seen is remembered with its start time, so that one the tree loses sight of
//! (its parent died and it was reparented) is still killed at the end, and a recycled pid is
//! never mistaken for it. What this cannot see is a process that leaves the tree between two
//! samples (a double fork that completes within one sampling interval): only a cgroup holds on
//! to those.

use std::fs::{self, File};
use std::io::Read as _;

/// Sends `signal` to `pid`; false if there is no such process (or it is not ours to signal).
pub(crate) fn signal(pid: i32, signal: i32) -> bool {
    // SAFETY: kill(2) takes plain integers and has no memory effects in this process.
    pid > 0 && unsafe { libc::kill(pid, signal) } == 0
}

/// Sends `signal` to every process of process group `pgid`.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: as for `signal`.
    pgid > 1 && unsafe { libc::killpg(pgid, signal) } == 0
}

/// The state letter and start time (clock ticks after boot) in `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Fields after the command name (which may hold spaces and parentheses, so the last `)`
/// ends it): state is field 3, the start time field 22.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The process's start time in clock ticks after boot.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// True while process `pid`, started at `start`, exists and has not finished (a zombie has).
pub(crate) fn is_alive(pid: i32, start: u64) -> bool {
    matches!(stat(pid), Some((state, s)) if s == start && state != 'Z' && state != 'X')
}

/// Appends the children of every thread of `pid` to `out`.
fn children(pid: i32, out: &mut Vec<i32>, buffer: &mut String) {
    let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else { return };
    for thread in threads.flatten() {
        buffer.clear();
        let path = thread.path().join("children");
        if File::open(&path).and_then(|mut f| f.read_to_string(buffer)).is_ok() {
            out.extend(buffer.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
}

/// What `/proc/<pid>/status` says of a process's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Status {
    /// Resident anonymous and shared memory now (`RssAnon` + `RssShmem`): what the cgroup path
    /// counts, without page cache or mapped files.
    pub resident: u64,
    /// The process's high-water mark less its file pages now (`VmHWM − RssFile`): its
    /// anonymous + shared peak so far, as long as its file pages did not shrink.
    pub peak: u64,
}

/// `pid`'s memory figures (zero for a process that is gone, or a zombie).
fn status(pid: i32, buffer: &mut String) -> Status {
    buffer.clear();
    if File::open(format!("/proc/{pid}/status")).and_then(|mut f| f.read_to_string(buffer)).is_err() {
        return Status::default();
    }
    status_of(buffer)
}

/// `pid`'s anonymous + shared peak so far (see [`Status::peak`]).
pub(crate) fn peak_of(pid: i32, buffer: &mut String) -> u64 {
    status(pid, buffer).peak
}

pub(crate) fn status_of(text: &str) -> Status {
    let kib = |name: &str| status_bytes(text, name).unwrap_or(0);
    let resident = kib("RssAnon") + kib("RssShmem");
    // Never below what it holds now (the figures are read at slightly different moments).
    Status { resident, peak: kib("VmHWM").saturating_sub(kib("RssFile")).max(resident) }
}

/// A `kB` field of `/proc/PID/status` text, in bytes.
pub(crate) fn status_bytes(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(':')?;
        value.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kib| kib * 1024)
    })
}

/// Most processes remembered per tree (a command forking without end must not grow this
/// process's memory without end).
const MAX_KNOWN: usize = 4096;

/// A command's process tree, walked from its root.
#[derive(Debug)]
pub(crate) struct Tree {
    root: i32,
    /// Every process seen in the tree so far, with its start time.
    known: Vec<(i32, u64)>,
    pids: Vec<i32>,
    buffer: String,
    /// The largest [`Status::peak`] of any process seen.
    largest: u64,
}

impl Tree {
    pub fn new(root: i32) -> Tree {
        Tree { root, known: Vec::new(), pids: Vec::new(), buffer: String::new(), largest: 0 }
    }

    /// Walks the tree from the root; its pids are left in `self.pids`, root first.
    fn walk(&mut self) {
        self.pids.clear();
        self.pids.push(self.root);
        let mut at = 0;
        while at < self.pids.len() && self.pids.len() < MAX_KNOWN {
            let pid = self.pids[at];
            let mut found = Vec::new();
            children(pid, &mut found, &mut self.buffer);
            self.pids.extend(found);
            at += 1;
        }
        for &pid in &self.pids[1..] {
            if self.known.len() < MAX_KNOWN
                && !self.known.iter().any(|&(p, _)| p == pid)
                && let Some(start) = start_time(pid)
            {
                self.known.push((pid, start));
            }
        }
    }

    /// The tree's resident bytes now (the sum over its processes); notes each one's peak.
    pub fn resident(&mut self) -> u64 {
        self.walk();
        let mut buffer = std::mem::take(&mut self.buffer);
        let mut total = 0;
        for &pid in &self.pids {
            let status = status(pid, &mut buffer);
            total += status.resident;
            self.largest = self.largest.max(status.peak);
        }
        self.buffer = buffer;
        total
    }

    /// The largest anonymous + shared peak of one process of the tree seen by [`Self::resident`].
    pub fn largest_peak(&self) -> u64 {
        self.largest
    }

    /// Kills the whole tree: its process group, every process it holds now, and every process
    /// it held before that is still alive. Returns how many processes were signalled.
    pub fn kill(&mut self) -> usize {
        signal_group(self.root, libc::SIGKILL);
        // Stop first, so that nothing forks while the tree is being walked; walk again until
        // no process is new; then kill.
        let mut stopped: Vec<i32> = Vec::new();
        for _ in 0..8 {
            self.walk();
            let fresh: Vec<i32> = self.pids.iter().copied().filter(|p| !stopped.contains(p)).collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                signal(pid, libc::SIGSTOP);
                stopped.push(pid);
            }
        }
        let mut signalled = stopped.iter().filter(|&&pid| signal(pid, libc::SIGKILL)).count();
        for &(pid, start) in &self.known {
            if !stopped.contains(&pid) && is_alive(pid, start) && signal(pid, libc::SIGKILL) {
                signalled += 1;
            }
        }
        signal_group(self.root, libc::SIGKILL);
        signalled
    }

    /// Processes of the tree other than the root that are alive now.
    pub fn leftovers(&mut self) -> usize {
        self.walk();
        let in_tree = self.pids.len().saturating_sub(1);
        let lost = self.known.iter().filter(|&&(pid, start)| !self.pids.contains(&pid) && is_alive(pid, start)).count();
        in_tree + lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_command_name_with_spaces_and_parentheses() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 \
                    18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn resident_counts_anonymous_and_shared_memory() {
        let status = "Name:\tpython3\nVmHWM:\t  400000 kB\nVmRSS:\t  331000 kB\nRssAnon:\t  310000 kB\nRssFile:\t   20000 kB\nRssShmem:\t    1000 kB\n";
        assert_eq!(status_of(status), Status { resident: (310000 + 1000) * 1024, peak: (400000 - 20000) * 1024 });
        // A zombie's status has no memory lines.
        assert_eq!(status_of("Name:\tx\nState:\tZ (zombie)\n"), Status::default());
    }

    #[test]
    fn this_process_is_alive_and_its_start_time_is_known() {
        let pid = std::process::id() as i32;
        let start = start_time(pid).expect("our own start time");
        assert!(is_alive(pid, start));
        assert!(!is_alive(pid, start + 1), "another start time is another process");
        let mut tree = Tree::new(pid);
        assert!(tree.resident() > 0, "this test process has resident memory");
    }
}
