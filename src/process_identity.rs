//! Which process is this, and is that one gone: the one answer the store (a run row's owner),
//! the spill folders (a folder's owner) and the budget registry (a live run's reservation) share,
//! so that each can tell what a live process holds from what a killed one left behind.
//!
//! An identity is the pid, the process's start time (clock ticks after boot, field 22 of
//! `/proc/<pid>/stat`, so that a recycled pid is not mistaken for the owner), the boot id (so
//! that anything from before a reboot is stale), the pid namespace (a pid from another namespace
//! names another process here) and the host name (nothing recorded on another host, or in
//! another container sharing a file, is judged from here). Any part may be unknown.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::OnceLock;

/// The identity of a process, as stored in a run row, a spill folder's marker or a budget file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Start time in clock ticks after boot; `None` without `/proc`.
    pub start_ticks: Option<u64>,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: Option<String>,
    /// `/proc/self/ns/pid`, e.g. `pid:[4026531836]`.
    pub pid_ns: Option<String>,
    pub host: Option<String>,
}

impl ProcessIdentity {
    /// This process (read once).
    pub fn current() -> &'static ProcessIdentity {
        static CURRENT: OnceLock<ProcessIdentity> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let pid = std::process::id();
            ProcessIdentity {
                pid,
                start_ticks: read_stat(pid).ok().map(|stat| stat.start),
                boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string()),
                pid_ns: fs::read_link("/proc/self/ns/pid").ok().map(|p| p.to_string_lossy().into_owned()),
                host: hostname(),
            }
        })
    }

    /// An identity known only by pid and start time (e.g. from a spill folder's name).
    pub fn from_pid_and_start(pid: u32, start_ticks: u64) -> ProcessIdentity {
        ProcessIdentity { pid, start_ticks: Some(start_ticks), boot_id: None, pid_ns: None, host: None }
    }

    /// Whether this process is certainly gone, judged from the current process. When in doubt
    /// (another host or pid namespace, no `/proc`, a stat line that does not parse) the answer
    /// is no: what a live process holds must never be taken from it.
    pub fn is_gone(&self) -> bool {
        let us = ProcessIdentity::current();
        let differ =
            |theirs: &Option<String>, ours: &Option<String>| matches!((theirs, ours), (Some(a), Some(b)) if a != b);
        if differ(&self.host, &us.host) {
            return false;
        }
        if differ(&self.boot_id, &us.boot_id) {
            return true;
        }
        if differ(&self.pid_ns, &us.pid_ns) {
            return false;
        }
        match read_stat(self.pid) {
            // A zombie has finished; only its parent has not reaped it yet.
            Ok(stat) => stat.zombie || self.start_ticks.is_some_and(|theirs| theirs != stat.start),
            Err(e) if e.kind() == io::ErrorKind::NotFound && Path::new("/proc/self/stat").exists() => true,
            Err(_) => !pid_exists(self.pid),
        }
    }

    /// `key=value` lines (`pid`, `start`, `boot`, `pidns`, `host`; unknown parts left out), as
    /// marker files keep it.
    pub fn marker(&self) -> String {
        let mut text = format!("pid={}\n", self.pid);
        let mut line = |key: &str, value: Option<&str>| {
            if let Some(value) = value {
                text.push_str(&format!("{key}={value}\n"));
            }
        };
        line("start", self.start_ticks.map(|s| s.to_string()).as_deref());
        line("boot", self.boot_id.as_deref());
        line("pidns", self.pid_ns.as_deref());
        line("host", self.host.as_deref());
        text
    }

    /// Reads [`marker`](ProcessIdentity::marker) text back; `None` without a valid `pid` line
    /// or with a `start` line that is not a number.
    pub fn parse_marker(text: &str) -> Option<ProcessIdentity> {
        let field = |key: &str| {
            text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix('=')).map(|v| v.trim().to_string())
        };
        let start_ticks = match field("start") {
            Some(start) => Some(start.parse().ok()?),
            None => None,
        };
        Some(ProcessIdentity {
            pid: field("pid")?.parse().ok()?,
            start_ticks,
            boot_id: field("boot"),
            pid_ns: field("pidns"),
            host: field("host"),
        })
    }
}

/// Start time of process `pid` in clock ticks since boot (`/proc/<pid>/stat`, field 22), or
/// `None` when it does not exist or `/proc` cannot tell. Together with the pid it names one
/// process: a recycled pid has a different start time.
pub fn process_start_time(pid: u32) -> Option<u64> {
    read_stat(pid).ok().map(|stat| stat.start)
}

struct Stat {
    start: u64,
    zombie: bool,
}

fn read_stat(pid: u32) -> io::Result<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/<pid>/stat format"))
}

/// The state and start time (field 22) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may itself contain spaces and parentheses: fields are counted after the
/// last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some(Stat { start, zombie: matches!(state, "Z" | "X" | "x") })
}

/// Without `/proc`: signal 0 checks existence (EPERM means it exists but is not ours).
fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (we(ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    1000 100 18446744073709551615";
        let stat = parse_stat(line).unwrap();
        assert_eq!((stat.start, stat.zombie), (987654, false));
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_alive_and_a_recycled_pid_is_not_it() {
        let me = ProcessIdentity::current();
        assert!(me.start_ticks.is_some(), "this test needs /proc");
        assert!(!me.is_gone());
        let recycled = ProcessIdentity { start_ticks: me.start_ticks.map(|t| t + 1), ..me.clone() };
        assert!(recycled.is_gone());
        let rebooted = ProcessIdentity { boot_id: Some("another boot".into()), ..me.clone() };
        assert!(rebooted.is_gone());
        let elsewhere = ProcessIdentity { host: Some("another host".into()), pid: u32::MAX - 1, ..me.clone() };
        assert!(!elsewhere.is_gone(), "another host's process is never judged from here");
        let other_ns = ProcessIdentity { pid_ns: Some("pid:[1]".into()), ..recycled.clone() };
        assert!(!other_ns.is_gone(), "another namespace's pid cannot be checked: kept");
    }

    #[test]
    fn a_reaped_child_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(ProcessIdentity { pid, ..ProcessIdentity::current().clone() }.is_gone());
    }

    #[test]
    fn markers_round_trip() {
        let me = ProcessIdentity::current();
        assert_eq!(ProcessIdentity::parse_marker(&me.marker()).as_ref(), Some(me));
        let bare = ProcessIdentity::parse_marker("pid=12\nstart=34\n").unwrap();
        assert_eq!(bare, ProcessIdentity::from_pid_and_start(12, 34));
        assert_eq!(ProcessIdentity::parse_marker("start=34\n"), None);
        assert_eq!(ProcessIdentity::parse_marker("pid=12\nstart=soon\n"), None);
    }
}
