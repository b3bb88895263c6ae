//! Per-task memory cgroups: finding where this process may make them (once per process),
//! making one per command, reading its resident bytes, peak and OOM kills, killing everything
//! in it, and removing it — also those left by a runner that was killed.
//!
//! Layout: under the process's own memory cgroup `P` (from `/proc/self/cgroup`, found on disk
//! through `/proc/self/mountinfo`), a folder `runner-<pid>-<start>` of this process, created
//! when its first command starts and removed when its last one ends, holding one
//! `task-<n>` cgroup per running command. `<start>` is the process's start time in clock ticks,
//! so a folder whose owner is gone (or whose pid was recycled) is recognised as stale; stale
//! folders are emptied (their processes killed) and removed when this process first looks.
//!
//! - **v1** (a `memory` hierarchy): files `memory.stat` (`total_rss` + `total_shmem`),
//!   `memory.max_usage_in_bytes`, `memory.limit_in_bytes` (+ `memory.memsw.limit_in_bytes`),
//!   `memory.oom_control` (`oom_kill`), `cgroup.procs`.
//! - **v2** (a `cgroup2` mount whose controllers include `memory`): `memory.stat` (`anon` +
//!   `shmem`), `memory.peak`, `memory.max` (+ `memory.swap.max`, `memory.oom.group`),
//!   `memory.events` (`oom_kill`), `cgroup.kill`. The runner's folder must hold no process and
//!   enable `memory` for its children (`cgroup.subtree_control`); when `P` itself cannot (it
//!   holds processes), the runner moves itself into a leaf `runner-<pid>-<start>-self` of `P`,
//!   but only when it is the only process in `P`.
//!
//! `RUNNER_CGROUP=off` in the environment disables cgroups for the whole process (commands are
//! then measured by `wait4` and `/proc` sampling).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::tree;

/// Which cgroup interface the memory controller is used through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Where this process makes its per-command cgroups.
#[derive(Debug)]
pub struct Hierarchy {
    pub version: CgroupVersion,
    /// The process's own memory cgroup on disk (`P`).
    pub base: PathBuf,
    /// `P/runner-<pid>-<start>`: the parent of every task cgroup of this process.
    pub parent: PathBuf,
    /// Task cgroups alive now; the parent folder exists while this is above zero.
    users: Mutex<usize>,
}

static HIERARCHY: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
static NEXT_TASK: AtomicU64 = AtomicU64::new(1);

/// The process's cgroup support, detected on first use: where task cgroups go, or why there
/// are none.
pub fn hierarchy() -> Result<&'static Hierarchy, &'static str> {
    HIERARCHY
        .get_or_init(|| {
            let detected = detect();
            match &detected {
                Ok(h) => {
                    tracing::debug!("commands run in memory cgroups ({:?}) under {}", h.version, h.parent.display())
                }
                Err(why) => tracing::info!("commands are measured without a cgroup (wait4 + /proc sampling): {why}"),
            }
            detected
        })
        .as_ref()
        .map_err(String::as_str)
}

fn detect() -> Result<Hierarchy, String> {
    if std::env::var_os("RUNNER_CGROUP").is_some_and(|v| v == "off") {
        return Err("RUNNER_CGROUP=off".into());
    }
    let cgroups = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mounts = fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let me = format!("runner-{}", process_tag());
    let (version, base) = if let Some(path) = v1_memory_path(&cgroups) {
        let mount = cgroup_mount(&mounts, MountKind::V1Memory)
            .ok_or("/proc/self/cgroup names a v1 memory cgroup, but no v1 memory hierarchy is mounted")?;
        (CgroupVersion::V1, mount.dir_of(path))
    } else if let Some(path) = v2_path(&cgroups) {
        let mount = cgroup_mount(&mounts, MountKind::V2).ok_or("no cgroup2 hierarchy is mounted")?;
        let base = mount.dir_of(path);
        let controllers = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the memory controller is not available in {} (cgroup v2 controllers: `{}`)",
                base.display(),
                controllers.trim()
            ));
        }
        (CgroupVersion::V2, base)
    } else {
        return Err("/proc/self/cgroup names no memory cgroup".into());
    };
    remove_stale(&base);
    let hierarchy = Hierarchy { version, parent: base.join(&me), base, users: Mutex::new(0) };
    if version == CgroupVersion::V2 {
        delegate_v2(&hierarchy, &me)?;
    }
    // Probe: make the parent (and, on v2, check its children get the memory controller).
    hierarchy.acquire().map_err(|e| format!("cannot create a cgroup in {}: {e}", hierarchy.base.display()))?;
    hierarchy.release();
    Ok(hierarchy)
}

/// On v2, the runner's parent folder can enable `memory` for its children only if `P` enables
/// it for the parent, which `P` can do only if it holds no process (the "no internal process"
/// rule; the root is exempt).
fn delegate_v2(h: &Hierarchy, me: &str) -> Result<(), String> {
    let subtree = h.base.join("cgroup.subtree_control");
    let enabled = |path: &Path| fs::read_to_string(path).unwrap_or_default().split_whitespace().any(|c| c == "memory");
    if enabled(&subtree) || write_file(&subtree, "+memory").is_ok() {
        return Ok(());
    }
    let procs = fs::read_to_string(h.base.join("cgroup.procs")).unwrap_or_default();
    let others = procs.split_whitespace().filter(|p| p.parse() != Ok(std::process::id())).count();
    if others > 0 {
        return Err(format!(
            "cgroup v2: {} holds {others} other process(es), so it cannot delegate the memory controller to \
             per-command cgroups; start runner in a cgroup of its own (e.g. `systemd-run --user --scope -p \
             Delegate=yes runner ...`)",
            h.base.display()
        ));
    }
    let leaf = h.base.join(format!("{me}-self"));
    let moved = fs::create_dir(&leaf)
        .and_then(|()| write_file(&leaf.join("cgroup.procs"), &std::process::id().to_string()))
        .and_then(|()| write_file(&subtree, "+memory"));
    moved.map_err(|e| {
        format!("cgroup v2: cannot enable the memory controller for children of {}: {e}", h.base.display())
    })
}

impl Hierarchy {
    /// Counts one more task cgroup, creating the parent folder for the first.
    fn acquire(&self) -> io::Result<()> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        if *users == 0 {
            match fs::create_dir(&self.parent) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if self.version == CgroupVersion::V2 {
                write_file(&self.parent.join("cgroup.subtree_control"), "+memory")?;
            }
        }
        *users += 1;
        Ok(())
    }

    /// Counts one task cgroup less, removing the parent folder after the last.
    fn release(&self) {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        *users = users.saturating_sub(1);
        if *users == 0 {
            // Fails only while a task cgroup is still in it (one that could not be removed):
            // then the folder stays until this process's next command, or the next start.
            let _ = fs::remove_dir(&self.parent);
        }
    }
}

/// One command's memory cgroup.
#[derive(Debug)]
pub struct TaskCgroup {
    hierarchy: &'static Hierarchy,
    pub dir: PathBuf,
    /// `cgroup.procs`, open for the child to write itself into between fork and exec.
    procs: File,
    pub limit: Option<u64>,
}

impl TaskCgroup {
    /// Makes a fresh cgroup, with a memory limit if asked (also on swap, so that the limit
    /// means memory and not memory + swap).
    pub fn create(hierarchy: &'static Hierarchy, limit: Option<u64>) -> io::Result<TaskCgroup> {
        hierarchy.acquire()?;
        let dir = hierarchy.parent.join(format!("task-{}", NEXT_TASK.fetch_add(1, Ordering::Relaxed)));
        let made = fs::create_dir(&dir).and_then(|()| {
            let procs = OpenOptions::new().write(true).open(dir.join("cgroup.procs"))?;
            Ok(TaskCgroup { hierarchy, dir: dir.clone(), procs, limit })
        });
        let cgroup = match made {
            Ok(cgroup) => cgroup,
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                hierarchy.release();
                return Err(e);
            }
        };
        if let Some(bytes) = limit {
            cgroup.set_limit(bytes)?;
        }
        Ok(cgroup)
    }

    fn set_limit(&self, bytes: u64) -> io::Result<()> {
        let bytes = bytes.to_string();
        match self.hierarchy.version {
            CgroupVersion::V1 => {
                write_file(&self.dir.join("memory.limit_in_bytes"), &bytes)?;
                // Absent without swap accounting; then there is nothing to limit.
                let memsw = self.dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write_file(&memsw, &bytes)?;
                }
            }
            CgroupVersion::V2 => {
                write_file(&self.dir.join("memory.max"), &bytes)?;
                let _ = write_file(&self.dir.join("memory.swap.max"), "0");
                // An OOM kill takes the whole tree, not one process of it.
                let _ = write_file(&self.dir.join("memory.oom.group"), "1");
            }
        }
        Ok(())
    }

    /// Moves a running process into this cgroup (what it already holds stays charged where it
    /// was).
    pub fn adopt(&self, pid: i32) -> io::Result<()> {
        use std::io::Write as _;
        (&self.procs).write_all(pid.to_string().as_bytes())
    }

    /// The fd of `cgroup.procs`, for the child to write `0` (itself) to before it execs.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The hierarchy it was made under.
    pub fn hierarchy(&self) -> &'static Hierarchy {
        self.hierarchy
    }

    pub fn version(&self) -> CgroupVersion {
        self.hierarchy.version
    }

    /// Resident bytes of the whole tree (anonymous and shared memory, not page cache), read into
    /// `buffer` (reused between samples).
    pub fn resident(&self, buffer: &mut String) -> io::Result<u64> {
        buffer.clear();
        File::open(self.dir.join("memory.stat"))?.read_to_string(buffer)?;
        Ok(resident_of_stat(buffer, self.hierarchy.version))
    }

    /// The cgroup's own peak usage, page cache included (for diagnosis and OOM decisions).
    pub fn peak(&self) -> Option<u64> {
        let file = match self.hierarchy.version {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            CgroupVersion::V2 => "memory.peak",
        };
        fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    /// The page cache charged to the cgroup now, shared memory included (`total_cache` in v1's
    /// `memory.stat`, `file` in v2's).
    pub fn page_cache(&self) -> Option<u64> {
        let name = match self.hierarchy.version {
            CgroupVersion::V1 => "total_cache",
            CgroupVersion::V2 => "file",
        };
        field(&fs::read_to_string(self.dir.join("memory.stat")).ok()?, name)
    }

    /// Whether usage ever reached the cgroup's limit (v1 `memory.failcnt`, v2 `memory.events`'
    /// `max`): the kernel has reclaimed from it then. True when it cannot tell.
    pub fn reached_limit(&self) -> bool {
        let count = match self.hierarchy.version {
            CgroupVersion::V1 => {
                fs::read_to_string(self.dir.join("memory.failcnt")).ok().and_then(|t| t.trim().parse().ok())
            }
            CgroupVersion::V2 => field(&fs::read_to_string(self.dir.join("memory.events")).unwrap_or_default(), "max"),
        };
        count.is_none_or(|n: u64| n > 0)
    }

    /// How many times the kernel's OOM killer killed a process in this cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.hierarchy.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        field(&fs::read_to_string(self.dir.join(file)).ok()?, "oom_kill")
    }

    /// Processes in the cgroup now.
    pub fn pids(&self) -> Vec<i32> {
        pids_in(&self.dir)
    }

    /// Kills every process in the cgroup; returns how many there were.
    pub fn kill(&self) -> usize {
        kill_cgroup(&self.dir, self.hierarchy.version)
    }
}

impl Drop for TaskCgroup {
    fn drop(&mut self) {
        if !self.pids().is_empty() {
            self.kill();
        }
        remove_dir_patiently(&self.dir);
        self.hierarchy.release();
    }
}

/// Sums the resident figures of a `memory.stat`.
pub(crate) fn resident_of_stat(stat: &str, version: CgroupVersion) -> u64 {
    let names: [&str; 2] = match version {
        CgroupVersion::V1 => ["total_rss", "total_shmem"],
        CgroupVersion::V2 => ["anon", "shmem"],
    };
    names.iter().filter_map(|name| field(stat, name)).sum()
}

/// The value of line `name N` in a flat-keyed cgroup file.
pub(crate) fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

fn pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// How long a kill waits for the processes to be gone.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// Kills every process in cgroup `dir` and waits (up to [`KILL_PATIENCE`]) until none is
/// left. v2 has `cgroup.kill`; on v1 every pid in `cgroup.procs` is sent SIGKILL, again and
/// again, until the cgroup is empty (a process forked between two reads is in the next one,
/// and one that is SIGKILLed forks no more). Returns how many processes it found.
pub(crate) fn kill_cgroup(dir: &Path, version: CgroupVersion) -> usize {
    let first = pids_in(dir);
    if first.is_empty() {
        return 0;
    }
    let mut seen: Vec<i32> = first;
    let kill_file = dir.join("cgroup.kill");
    let cgroup_kill = version == CgroupVersion::V2 && write_file(&kill_file, "1").is_ok();
    let started = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        let pids = pids_in(dir);
        if pids.is_empty() || started.elapsed() > KILL_PATIENCE {
            if !pids.is_empty() {
                tracing::warn!("{} process(es) in {} did not die within {KILL_PATIENCE:?}", pids.len(), dir.display());
            }
            break;
        }
        for &pid in &pids {
            if !cgroup_kill {
                tree::signal(pid, libc::SIGKILL);
            }
            if !seen.contains(&pid) {
                seen.push(pid);
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
    seen.len()
}

/// Removes an emptied cgroup; the kernel may refuse for a moment after its last process died.
fn remove_dir_patiently(dir: &Path) {
    let started = Instant::now();
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) if started.elapsed() > Duration::from_millis(500) => {
                tracing::warn!("cannot remove the cgroup {}: {e}; the next runner start removes it", dir.display());
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Empties and removes the folders of runners that are gone (their processes killed first).
fn remove_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(parse_folder_name) else { continue };
        if tree::is_alive(pid, start) {
            continue;
        }
        let dir = entry.path();
        let version = if dir.join("memory.events").exists() { CgroupVersion::V2 } else { CgroupVersion::V1 };
        let tasks: Vec<PathBuf> = fs::read_dir(&dir)
            .map(|e| e.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
            .unwrap_or_default();
        let mut killed = 0;
        for task in &tasks {
            killed += kill_cgroup(task, version);
            remove_dir_patiently(task);
        }
        remove_dir_patiently(&dir);
        tracing::info!(
            "removed the cgroups of a runner that is gone ({}); killed {killed} process(es) left in them",
            dir.display()
        );
    }
}

/// `runner-<pid>-<start>` (or its `-self` leaf) → pid and start time.
fn parse_folder_name(name: &str) -> Option<(i32, u64)> {
    let rest = name.strip_prefix("runner-")?;
    let rest = rest.strip_suffix("-self").unwrap_or(rest);
    let (pid, start) = rest.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// `<pid>-<start ticks>` of this process.
fn process_tag() -> String {
    let pid = std::process::id() as i32;
    format!("{pid}-{}", tree::start_time(pid).unwrap_or(0))
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.write_all(text.as_bytes())
}

/// What `/proc/self/cgroup` says: the path of the v1 memory cgroup (`N:...memory...:/path`).
fn v1_memory_path(cgroups: &str) -> Option<&str> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then_some(path)
    })
}

/// The v2 path (`0::/path`).
fn v2_path(cgroups: &str) -> Option<&str> {
    cgroups.lines().find_map(|line| line.strip_prefix("0::"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MountKind {
    V1Memory,
    V2,
}

/// A cgroup hierarchy's mount: where it is and which part of the hierarchy it shows.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    root: String,
    point: PathBuf,
}

impl Mount {
    /// Where cgroup `path` (as `/proc/self/cgroup` names it) is on disk.
    fn dir_of(&self, path: &str) -> PathBuf {
        let inside = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        self.point.join(inside.trim_start_matches('/'))
    }
}

/// Finds the mount of a cgroup hierarchy in `/proc/self/mountinfo`: fields `id parent dev root
/// point options [optional...] - fstype source superoptions`.
fn cgroup_mount(mountinfo: &str, kind: MountKind) -> Option<Mount> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let mut after = after.split(' ');
        let (fstype, _source, options) = (after.next()?, after.next()?, after.next().unwrap_or(""));
        let wanted = match kind {
            MountKind::V1Memory => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
            MountKind::V2 => fstype == "cgroup2",
        };
        (wanted && fields.len() >= 5).then(|| Mount { root: unescape(fields[3]), point: unescape(fields[4]).into() })
    })
}

/// Undoes mountinfo's octal escapes (`\040` is a space).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or(""), 8)
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 25 0:31 /outer /sys/fs/cgroup/mem\\040ory rw master:3 - cgroup cgroup rw,memory
";

    #[test]
    fn finds_the_v1_memory_cgroup_on_disk() {
        let cgroups = "9:name=systemd:/\n4:memory:/outer/process_api/abc\n0::/\n";
        assert_eq!(v1_memory_path(cgroups), Some("/outer/process_api/abc"));
        let mount = cgroup_mount(MOUNTINFO, MountKind::V1Memory).unwrap();
        assert_eq!(mount, Mount { root: "/outer".into(), point: "/sys/fs/cgroup/mem ory".into() });
        assert_eq!(mount.dir_of("/outer/process_api/abc"), Path::new("/sys/fs/cgroup/mem ory/process_api/abc"));
        assert_eq!(v1_memory_path("3:cpu,cpuacct:/\n"), None);
    }

    #[test]
    fn finds_the_v2_cgroup_on_disk() {
        assert_eq!(v2_path("0::/user.slice/runner.scope\n"), Some("/user.slice/runner.scope"));
        let mount = cgroup_mount(MOUNTINFO, MountKind::V2).unwrap();
        assert_eq!(mount.dir_of("/user.slice/x"), Path::new("/sys/fs/cgroup/unified/user.slice/x"));
        assert_eq!(mount.dir_of("/"), Path::new("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn resident_is_anonymous_and_shared_memory_not_page_cache() {
        let v1 = "cache 524288000\nrss 1884160\nshmem 0\ntotal_cache 524288000\ntotal_rss 2621440\ntotal_rss_huge 0\ntotal_shmem 4096\n";
        assert_eq!(resident_of_stat(v1, CgroupVersion::V1), 2621440 + 4096);
        let v2 = "anon 300000\nfile 500000000\nkernel 1000\nshmem 20\nfile_mapped 7\n";
        assert_eq!(resident_of_stat(v2, CgroupVersion::V2), 300020);
        assert_eq!(field("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"), Some(2));
        assert_eq!(field("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n", "oom"), Some(1));
    }

    #[test]
    fn folder_names_carry_their_owner() {
        assert_eq!(parse_folder_name("runner-123-456"), Some((123, 456)));
        assert_eq!(parse_folder_name("runner-123-456-self"), Some((123, 456)));
        assert_eq!(parse_folder_name("runner-x"), None);
        assert_eq!(parse_folder_name("task-3"), None);
    }
}
