//! The commands a killed runner left running, found again without a cgroup: every command
//! starts with [`OWNER_VAR`] in its environment, naming the runner that started it (pid and
//! start time), and its children inherit it — also one that detached itself (`setsid`, a double
//! fork) and left the command's process tree. The next runner to start looks through `/proc`
//! for processes whose owner is gone, and kills them.
//!
//! What this cannot find: a process that cleared its environment, or one of another user
//! (its environment cannot be read). A cgroup ([`super::cgroup`]) holds on to those too.

use std::fs;

use crate::process_identity::ProcessIdentity;

/// The environment variable naming the runner that started a command:
/// `<pid>.<start ticks>@<host>` (the host, so that a process that carried it to another host —
/// a cluster job started from a command — is never judged there).
pub const OWNER_VAR: &str = "RUNNER_OWNER";

/// This process's [`OWNER_VAR`] value.
pub(crate) fn owner_value() -> String {
    let us = ProcessIdentity::current();
    format!("{}.{}@{}", us.pid, us.start_ticks.unwrap_or(0), us.host.as_deref().unwrap_or(""))
}

/// The owner a value of [`OWNER_VAR`] names.
fn parse_owner(value: &[u8]) -> Option<ProcessIdentity> {
    let text = std::str::from_utf8(value).ok()?;
    let (process, host) = text.split_once('@')?;
    let (pid, start) = process.split_once('.')?;
    let owner = ProcessIdentity::from_pid_and_start(pid.parse().ok()?, start.parse().ok()?);
    Some(ProcessIdentity { host: Some(host.to_string()), ..owner })
}

/// The owner named in a process's environment (`/proc/<pid>/environ`: NUL-separated).
fn owner_in(environ: &[u8]) -> Option<ProcessIdentity> {
    let prefix = format!("{OWNER_VAR}=");
    environ.split(|&b| b == 0).find_map(|entry| entry.strip_prefix(prefix.as_bytes())).and_then(parse_owner)
}

/// Kills every process whose owner runner is gone; returns how many were killed. Looks again
/// while it finds some, as an orphan may fork while it is being killed.
pub fn kill_orphans() -> usize {
    let ours = std::process::id();
    let mut killed = 0;
    for _ in 0..4 {
        let Ok(entries) = fs::read_dir("/proc") else { return killed };
        let mut found = 0;
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if pid == ours {
                continue;
            }
            // Another user's process (or one gone since) cannot be read: not ours to judge.
            let Ok(environ) = fs::read(entry.path().join("environ")) else { continue };
            let Some(owner) = owner_in(&environ) else { continue };
            if owner.pid != ours && owner.is_gone() && super::tree::signal(pid as i32, libc::SIGKILL) {
                tracing::info!("killed process {pid}, left running by runner {} that was killed", owner.pid);
                found += 1;
            }
        }
        killed += found;
        if found == 0 {
            break;
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_read_from_an_environment_block() {
        let environ = b"PATH=/bin\0RUNNER_OWNER=4242.987654@login1\0HOME=/root\0";
        let owner = owner_in(environ).unwrap();
        assert_eq!((owner.pid, owner.start_ticks, owner.host.as_deref()), (4242, Some(987654), Some("login1")));
        assert!(owner_in(b"PATH=/bin\0RUNNER_OWNERS=1.2@h\0").is_none());
        assert!(!owner_in(b"RUNNER_OWNER=4242.1@another-host-than-this\0").unwrap().is_gone(), "not judged here");
        assert!(owner_in(b"RUNNER_OWNER=garbage\0").is_none());
        let ours = parse_owner(owner_value().as_bytes()).unwrap();
        assert!(!ours.is_gone(), "this process is alive");
    }
}
