//! Which process owns a run, so that opening the store can tell a run that is still going (in
//! this or another process) from one whose process was killed.
//!
//! A run row keeps its owner's pid, the process's start time (clock ticks after boot, from
//! `/proc/<pid>/stat`, so a recycled pid is not mistaken for the owner), the boot id (so a run
//! from before a reboot is dead) and the host name (a run recorded on another host, or in another
//! container, is never judged from here).

use std::fs;
use std::path::Path;

/// The identity of a process as stored in a run row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub pid: u32,
    pub start_ticks: Option<u64>,
    pub boot_id: Option<String>,
    pub host: Option<String>,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start_ticks: read_stat(pid).map(|(_, start)| start),
            boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string()),
            host: hostname(),
        }
    }

    /// Whether the process `run` names is certainly gone, judged from this process (`self`).
    /// When in doubt (another host, no `/proc`, a stat line we cannot read) the answer is no: a
    /// live run must never be marked killed.
    pub fn is_gone(&self, run: &Owner) -> bool {
        if run.host.is_some() && self.host.is_some() && run.host != self.host {
            return false;
        }
        if let (Some(theirs), Some(ours)) = (&run.boot_id, &self.boot_id)
            && theirs != ours
        {
            return true;
        }
        match fs::read_to_string(format!("/proc/{}/stat", run.pid)) {
            Ok(stat) => match parse_stat(&stat) {
                // A zombie has finished; only its parent has not reaped it yet.
                Some((state, _)) if state == 'Z' || state == 'X' => true,
                Some((_, start)) => run.start_ticks.is_some_and(|theirs| theirs != start),
                None => false,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Path::new("/proc/self/stat").exists() => true,
            Err(_) => !pid_exists(run.pid),
        }
    }
}

fn read_stat(pid: u32) -> Option<(char, u64)> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state and start time (field 22) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may itself contain spaces and parentheses: fields are counted after the
/// last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Without `/proc`: signal 0 checks existence (EPERM means it exists but is not ours).
fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
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
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_recycled_pid_is_not_its_owner() {
        let me = Owner::current();
        assert!(me.start_ticks.is_some(), "this test needs /proc");
        assert!(!me.is_gone(&me));
        let recycled = Owner { start_ticks: me.start_ticks.map(|t| t + 1), ..me.clone() };
        assert!(me.is_gone(&recycled));
        let rebooted = Owner { boot_id: Some("another boot".into()), ..me.clone() };
        assert!(me.is_gone(&rebooted));
        let elsewhere = Owner { host: Some("another host".into()), pid: u32::MAX - 1, ..me.clone() };
        assert!(!me.is_gone(&elsewhere));
    }

    #[test]
    fn a_reaped_child_is_gone() {
        let me = Owner::current();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(me.is_gone(&Owner { pid, start_ticks: Some(1), ..me.clone() }));
    }
}
