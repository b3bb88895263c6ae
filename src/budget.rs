//! How much memory a run may use: `--budget` parsing, the memory available to this process
//! (honouring a cgroup limit, v2 `memory.max` or v1 `memory.limit_in_bytes`, as containers and
//! batch schedulers set them), and the runs on this machine sharing it.
//!
//! Concurrent runs see each other through a small registry ([`Registry`]): one file per live
//! run, holding its budget and its [`ProcessIdentity`] (so that a killed run's file is dropped
//! by the next run that looks), under `/dev/shm/runner-budgets/` (or the temp dir's
//! `runner-budgets/`; `RUNNER_BUDGETS_DIR` overrides), updated under an exclusive `flock`. What
//! another run may still take is its budget less what it already uses (its RSS, which
//! `MemAvailable` has already taken off), so the default budget is 80% of what is available
//! once the other live runs have taken theirs, and a `--budget` above what is available, or
//! above what the other runs leave, comes with a warning.

use std::fs;
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use runner_plugin::size::{format_size, parse_size};

use crate::process_identity::ProcessIdentity;

/// Share of the available memory used when `--budget` is not given.
pub const DEFAULT_SHARE: f64 = 0.8;

/// The smallest budget `--budget` takes.
const MIN_BUDGET: u64 = 1 << 20;

/// Parses `--budget`: a size (`1GiB`, `800MB`, bytes) or a percentage of available memory.
pub fn parse_budget(text: &str) -> Result<u64, String> {
    if let Some(percent) = text.trim().strip_suffix('%') {
        let percent: f64 = percent
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
            .ok_or_else(|| format!("invalid budget `{text}`: a percentage must be in (0, 100], e.g. `50%`"))?;
        let available =
            available_memory().map_err(|e| format!("cannot read the available memory for `{text}`: {e}"))?;
        return Ok((available as f64 * percent / 100.0) as u64);
    }
    let bytes = parse_size(text)?;
    // Below a MiB no task fits: such a budget is a unit left out (`--budget 4` for 4GiB).
    if bytes < MIN_BUDGET {
        return Err(format!(
            "invalid budget `{text}`: {bytes} bytes is below the least budget of 1MiB; a size without a unit \
             is bytes, e.g. `4GiB` or `800MB`"
        ));
    }
    Ok(bytes)
}

/// A run's budget as [`choose`] settled it, and what the user should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    pub warnings: Vec<String>,
}

/// The budget of a run starting now in this process: `requested` (`--budget`) or the default
/// share of what is available once the other live runs on this machine have taken theirs;
/// registered so that runs starting later see it (until this process ends or chooses again).
pub fn choose(requested: Option<u64>) -> Result<Budget, String> {
    let available = match (available_memory(), requested) {
        (Ok(available), _) => available,
        // Nothing to compare an explicit budget with: take it as it is.
        (Err(e), Some(bytes)) => {
            return Ok(Budget { bytes, warnings: vec![format!("cannot check the budget against the memory: {e}")] });
        }
        (Err(e), None) => return Err(e),
    };
    let decide = |others| requested.unwrap_or_else(|| default_for(available, others));
    let registry = Registry::default_location();
    let (bytes, others, mut notes) = match registry.claim(decide) {
        Ok((bytes, others)) => (bytes, others, Vec::new()),
        Err(e) => {
            let note = format!(
                "cannot see other runs' budgets ({}: {e}): this run's budget ignores them",
                registry.dir.display()
            );
            (decide(0), 0, vec![note])
        }
    };
    notes.extend(warnings(requested, bytes, available, others));
    Ok(Budget { bytes, warnings: notes })
}

/// [`DEFAULT_SHARE`] of what `others` leave of `available`.
fn default_for(available: u64, others: u64) -> u64 {
    (available.saturating_sub(others) as f64 * DEFAULT_SHARE) as u64
}

fn warnings(requested: Option<u64>, bytes: u64, available: u64, others: u64) -> Vec<String> {
    let mut warnings = Vec::new();
    let (size, left) = (format_size(bytes), format_size(available.saturating_sub(others)));
    let others_text = format!("other runs on this machine may still take {}", format_size(others));
    match requested {
        Some(_) if bytes > available => warnings.push(format!(
            "the budget {size} is more than the {} of memory available: it no longer protects this machine \
             (tasks may be killed by the kernel when memory runs out)",
            format_size(available)
        )),
        Some(_) if bytes > available.saturating_sub(others) => warnings.push(format!(
            "the budget {size} is more than the {left} left of the memory available ({others_text}): \
             together they may run the machine out of memory"
        )),
        None if others > 0 && others >= available / 2 => {
            warnings.push(format!("{others_text}: the default budget is only {size} (80% of the {left} left)"))
        }
        _ => {}
    }
    warnings
}

/// The live runs' budgets on this machine: a file per run (see the [module](self) docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    dir: PathBuf,
}

/// This process's registration, replaced when it chooses a budget again (a replay's cycles).
static REGISTERED: Mutex<Option<PathBuf>> = Mutex::new(None);

impl Registry {
    /// `RUNNER_BUDGETS_DIR`, else `/dev/shm/runner-budgets` where `/dev/shm` is a directory,
    /// else `runner-budgets` in the temp dir.
    pub fn default_location() -> Registry {
        let dir = match std::env::var_os("RUNNER_BUDGETS_DIR") {
            Some(dir) => PathBuf::from(dir),
            None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm/runner-budgets"),
            None => std::env::temp_dir().join("runner-budgets"),
        };
        Registry { dir }
    }

    #[cfg(test)]
    pub fn at(dir: impl Into<PathBuf>) -> Registry {
        Registry { dir: dir.into() }
    }

    /// Under the registry's lock: drops the files of runs that are gone, sums what the other
    /// live runs may still take, lets `decide` choose this run's budget from that sum, and
    /// records it. Returns the budget and the sum.
    pub fn claim(&self, decide: impl FnOnce(u64) -> u64) -> io::Result<(u64, u64)> {
        create_shared_dir(&self.dir)?;
        let lock = open_lock(&self.dir.join(".lock"))?;
        // SAFETY: flock on a file descriptor we own; the lock goes when `lock` is closed.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let me = ProcessIdentity::current();
        let mine = self.dir.join(format!("{}-{}.budget", me.pid, me.start_ticks.unwrap_or(0)));
        let others = self.others_may_take(&mine);
        let bytes = decide(others);
        let text = format!("{}budget={bytes}\n", me.marker());
        // Through the atomic writer: another run reading the folder never sees half an entry (its
        // temporary name does not end in `.budget`, so no reader takes it for one).
        crate::values::write_atomically(&mine, text.as_bytes())?;
        *REGISTERED.lock().unwrap_or_else(|p| p.into_inner()) = Some(mine);
        Ok((bytes, others))
    }

    /// What the live runs other than `mine` may still take: each one's budget less its RSS.
    fn others_may_take(&self, mine: &Path) -> u64 {
        let Ok(entries) = fs::read_dir(&self.dir) else { return 0 };
        let mut total: u64 = 0;
        for path in entries.flatten().map(|e| e.path()) {
            if path == mine || path.extension().is_none_or(|e| e != "budget") {
                continue;
            }
            let Some((owner, budget)) = fs::read_to_string(&path).ok().as_deref().and_then(parse_entry) else {
                continue;
            };
            if owner.is_gone() {
                // Another user's stale file may not be ours to remove: then it is only skipped.
                let _ = fs::remove_file(&path);
                continue;
            }
            total = total.saturating_add(budget.saturating_sub(rss_of(owner.pid)));
        }
        total
    }

    /// This process's registration, if it has one here (for tests).
    #[cfg(test)]
    pub fn registered() -> Option<PathBuf> {
        REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Withdraws this process's budget from the registry (its runs are over). A process that dies
/// without it leaves a file the next run drops.
pub fn release() {
    if let Some(mine) = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = fs::remove_file(mine);
    }
}

fn parse_entry(text: &str) -> Option<(ProcessIdentity, u64)> {
    let owner = ProcessIdentity::parse_marker(text)?;
    let budget = text.lines().find_map(|l| l.strip_prefix("budget="))?.trim().parse().ok()?;
    Some((owner, budget))
}

/// Resident bytes of process `pid` (0 where they cannot be read, e.g. another pid namespace).
fn rss_of(pid: u32) -> u64 {
    let Ok(statm) = fs::read_to_string(format!("/proc/{pid}/statm")) else { return 0 };
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.saturating_mul(u64::try_from(page).unwrap_or(4096))
}

/// The registry's lock file, shared by every user's runs: made writable by all (a lock taken by
/// the first user's run must not keep out the next user's), and opened read-only when another
/// user's file is not writable here (`flock` needs no write access).
fn open_lock(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    match fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o666).open(path) {
        Ok(file) => {
            // The umask took bits off the mode: give them back (only the owner may).
            let _ = file.set_permissions(fs::Permissions::from_mode(0o666));
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => fs::File::open(path),
        Err(e) => Err(e),
    }
}

/// The registry directory, writable by every user (sticky, as /tmp), so that runs of several
/// users see each other.
fn create_shared_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(0o1777).create(dir) {
        // The umask took bits off; put them back.
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o1777)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Memory this process can still use: the system's `MemAvailable`, capped by the room left
/// under the process's cgroup limit, if any.
pub fn available_memory() -> Result<u64, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    let available = meminfo_field(&meminfo, "MemAvailable:").ok_or("/proc/meminfo has no MemAvailable")?;
    Ok(match cgroup_room() {
        Some(room) => available.min(room),
        None => available,
    })
}

fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The most memory this process could ever have: the machine's `MemTotal`, capped by its memory
/// cgroup's limit. A task estimated above it cannot run here, whatever else is running.
pub fn memory_limit() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total = meminfo_field(&meminfo, "MemTotal:")?;
    Some(match cgroup_limit_and_usage() {
        Some((limit, _)) => total.min(limit),
        None => total,
    })
}

/// Limit minus usage of the process's memory cgroup, if it has a limit.
fn cgroup_room() -> Option<u64> {
    cgroup_limit_and_usage().map(|(limit, usage)| limit.saturating_sub(usage))
}

/// The limit and usage of the process's memory cgroup, if it has a limit.
fn cgroup_limit_and_usage() -> Option<(u64, u64)> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (limit_file, usage_file) = match controllers {
            "" => (format!("/sys/fs/cgroup{path}/memory.max"), format!("/sys/fs/cgroup{path}/memory.current")),
            c if c.split(',').any(|c| c == "memory") => (
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
                format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"),
            ),
            _ => continue,
        };
        let limit = read_number(&limit_file)?;
        let usage = read_number(&usage_file).unwrap_or(0);
        // cgroup v1 reports "no limit" as a huge number.
        if limit >= 1 << 60 {
            return None;
        }
        return Some((limit, usage));
    }
    None
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_percentages() {
        assert_eq!(parse_budget("1GiB").unwrap(), 1 << 30);
        let half = parse_budget("50%").unwrap();
        let all = available_memory().unwrap();
        assert!(half > 0 && half <= all);
        assert!(parse_budget("0").unwrap_err().contains("below the least budget of 1MiB"));
        assert!(parse_budget("1048575").unwrap_err().contains("1048575 bytes is below"));
        assert_eq!(parse_budget("1MiB").unwrap(), 1 << 20);
        assert!(parse_budget("150%").unwrap_err().contains("(0, 100]"));
        assert!(parse_budget("lots").unwrap_err().contains("invalid size"));
    }

    #[test]
    fn warnings_say_when_a_budget_protects_nothing_or_crowds_others() {
        let gib = 1u64 << 30;
        let too_big = warnings(Some(10 << 40), 10 << 40, 23 * gib, 0);
        assert_eq!(too_big.len(), 1);
        assert!(too_big[0].contains("10.0 TiB") && too_big[0].contains("no longer protects"), "{too_big:?}");
        let crowded = warnings(Some(12 * gib), 12 * gib, 20 * gib, 10 * gib);
        assert!(crowded[0].contains("other runs on this machine may still take 10.0 GiB"), "{crowded:?}");
        assert!(warnings(Some(8 * gib), 8 * gib, 20 * gib, 10 * gib).is_empty());
        assert!(warnings(None, default_for(20 * gib, 0), 20 * gib, 0).is_empty());
        assert_eq!(default_for(20 * gib, 10 * gib), 8 * gib);
        assert!(warnings(None, default_for(20 * gib, 15 * gib), 20 * gib, 15 * gib)[0].contains("only"));
    }

    #[test]
    fn the_registry_counts_live_runs_and_drops_the_files_of_dead_ones() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::at(dir.path().join("budgets"));
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let live = ProcessIdentity {
            pid: child.id(),
            start_ticks: crate::process_identity::process_start_time(child.id()),
            ..ProcessIdentity::current().clone()
        };
        create_shared_dir(&registry.dir).unwrap();
        let entry = registry.dir.join("other.budget");
        fs::write(&entry, format!("{}budget={}\n", live.marker(), 5u64 << 30)).unwrap();
        let (bytes, others) = registry.claim(|others| others / 2).unwrap();
        // Its budget less what it already uses (a few MiB, changing while `sleep` starts).
        assert!(others < 5 << 30 && others > (5 << 30) - (64 << 20), "{others}");
        assert_eq!(bytes, others / 2);
        let mine = Registry::registered().unwrap();
        assert_eq!(parse_entry(&fs::read_to_string(&mine).unwrap()).unwrap().1, bytes);
        child.kill().unwrap();
        child.wait().unwrap();
        let (_, others) = registry.claim(|_| 1).unwrap();
        assert_eq!(others, 0, "a dead run's budget no longer counts");
        assert!(!entry.exists(), "and its file is gone");
    }

    #[test]
    fn reads_meminfo() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(12_000_000 * 1024));
    }
}
