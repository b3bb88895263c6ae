//! Helpers shared by the integration tests that run the `runner` binary and read what the
//! kernel says of it.

#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value as Json;

pub const MIB: u64 = 1 << 20;

/// Tests of one file that must run with no other test of that file beside it (each test binary
/// has its own): one whose figures the machine's load moves holds [`alone`], and the others
/// [`beside_others`], which run together.
static ALONE: RwLock<()> = RwLock::new(());

pub fn alone() -> RwLockWriteGuard<'static, ()> {
    ALONE.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn beside_others() -> RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Budget plus the tolerance the SPEC allows: 5% and 64 MiB.
pub fn allowed(budget: u64) -> u64 {
    budget + budget / 20 + 64 * MIB
}

/// What a run of the binary gave.
pub struct Measured {
    pub status: ExitStatus,
    /// The child's peak RSS as the kernel reports it (`wait4`'s `ru_maxrss`).
    pub peak_rss: u64,
    pub summary: Json,
    pub stderr: String,
}

/// Runs `runner run RECIPE ARGS...` on recipe text in a fresh directory and reaps it with
/// `wait4` for its peak RSS.
pub fn run_measured(recipe: &str, args: &[&str]) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), recipe).unwrap();
    run_measured_in(dir.path(), "r.yaml", args)
}

/// Runs `runner run RECIPE --summary s.json ARGS...` in `dir` and reaps it with `wait4`.
#[expect(clippy::zombie_processes, reason = "the child is reaped with wait4, for its rusage")]
pub fn run_measured_in(dir: &Path, recipe: &str, args: &[&str]) -> Measured {
    let mut child = runner_command(dir, &["run", recipe, "--summary", "s.json"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr_pipe, &mut text).unwrap();
        text
    });
    let mut status = 0;
    // SAFETY: `usage` is plain old data that wait4 fills in; the pid is our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    let stderr = reader.join().unwrap();
    let summary =
        std::fs::read_to_string(dir.join("s.json")).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Json::Null);
    Measured { status: ExitStatus::from_raw(status), peak_rss: usage.ru_maxrss as u64 * 1024, summary, stderr }
}

/// Asserts the run exited 0 with no failed task.
pub fn assert_ok(m: &Measured) {
    assert_eq!(m.status.code(), Some(0), "{}", m.stderr);
    assert_eq!(m.summary["tasks_failed"], 0);
}

/// `runner ARGS...` in `dir`, in an environment of its own: the developer's `RUNNER_DB`,
/// `RUNNER_PYTHON`, `NO_COLOR`, `RUST_LOG` and `RUST_BACKTRACE` are not inherited (the store
/// defaults to `dir`), and its temporary folder (`TMPDIR`: the default spill folder, scratch
/// folders and the sweep of dead runners' ones) is this test binary's own, not the machine's.
pub fn runner_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(RUNNER);
    command.args(args).current_dir(dir);
    isolate(&mut command);
    command
}

/// [`runner_command`] with variables of the test's own set on top of the isolated environment
/// (a cluster's `SLURM_CONF`, a folder of budgets).
pub fn runner_command_with_env<K, V>(dir: &Path, args: &[&str], env: impl IntoIterator<Item = (K, V)>) -> Command
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let mut command = runner_command(dir, args);
    command.envs(env);
    command
}

/// [`runner_command_with_env`] run to its end.
pub fn runner_with_env<K, V>(dir: &Path, args: &[&str], env: impl IntoIterator<Item = (K, V)>) -> std::process::Output
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    runner_command_with_env(dir, args, env).output().expect("running runner")
}

/// `PROGRAM PREFIX... runner ARGS...` in `dir` (runner started by another program, such as
/// `setpriv` dropping to another user), in [`runner_command`]'s environment.
pub fn runner_command_through(program: &str, prefix: &[&str], dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(prefix).arg(RUNNER).args(args).current_dir(dir);
    isolate(&mut command);
    command
}

/// The binary under test.
const RUNNER: &str = env!("CARGO_BIN_EXE_runner");

/// The environment of [`runner_command`], for whatever program starts runner.
fn isolate(command: &mut Command) {
    for name in ["RUNNER_DB", "RUNNER_PYTHON", "NO_COLOR", "RUST_LOG", "RUST_BACKTRACE"] {
        command.env_remove(name);
    }
    command.env("TMPDIR", temp_dir());
}

/// This test binary's temporary folder, made on first use under Cargo's folder for test
/// files (`target/tmp`, so nothing is left in the machine's `/tmp`), emptied at its next use.
pub fn temp_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let binary = std::env::current_exe().ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(binary.unwrap_or_else(|| "tests".into()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder for the tests");
        dir
    })
}

/// Whether `python3` with NumPy is here (CI installs it); says the test is skipped when not.
pub fn numpy_here() -> bool {
    let ok = std::process::Command::new("python3").args(["-c", "import numpy"]).status().is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: python3 with numpy is not installed here");
    }
    ok
}

/// Runs [`runner_command`] to its end.
pub fn runner(dir: &Path, args: &[&str]) -> std::process::Output {
    runner_command(dir, args).output().expect("running runner")
}

/// A run's stderr as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Writes `text` to `dir/name`, making its folders.
pub fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// The rows of a SQL query on the store at `db`, each column as text.
pub fn query(db: &Path, sql: &str) -> Vec<Vec<String>> {
    let connection = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut statement = connection.prepare(sql).unwrap();
    let columns = statement.column_count();
    statement
        .query_map([], |row| {
            (0..columns)
                .map(|i| {
                    Ok(match row.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => "NULL".to_string(),
                        rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                        rusqlite::types::ValueRef::Real(x) => x.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        rusqlite::types::ValueRef::Blob(b) => format!("<{} bytes>", b.len()),
                    })
                })
                .collect()
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Resident bytes of `pid` and every process below it (VmRSS, read from outside).
pub fn tree_rss(pid: i32) -> u64 {
    let mut pids = vec![pid];
    let mut at = 0;
    while at < pids.len() {
        if let Ok(threads) = std::fs::read_dir(format!("/proc/{}/task", pids[at])) {
            for thread in threads.flatten() {
                if let Ok(children) = std::fs::read_to_string(thread.path().join("children")) {
                    pids.extend(children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
                }
            }
        }
        at += 1;
    }
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok()))?
        })
        .sum::<u64>()
        * 1024
}

/// [`runner`] under the name some tests use.
pub fn runner_in(dir: &Path, args: &[&str]) -> std::process::Output {
    runner(dir, args)
}

/// Runs `command` to its end, sampling the resident bytes of its whole process tree every
/// 5 ms: its exit status, the highest sample, and its stderr (read as it comes, so a chatty
/// run cannot block on a full pipe).
pub fn run_watching_tree(mut command: Command) -> (ExitStatus, u64, String) {
    let mut child = command.stderr(Stdio::piped()).spawn().expect("running runner");
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    let pid = child.id() as i32;
    let mut highest = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        highest = highest.max(tree_rss(pid));
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    (status, highest, reader.join().unwrap())
}

/// A Python script that starts a child (same process group) and a daemon (setsid, double fork),
/// writes the pids of itself, the child and the daemon to argv[1] (whole: written aside, then
/// renamed), then sleeps argv[2] seconds (300 without it): a tree a kill must leave nothing of.
pub const SPAWN_AND_DAEMONISE: &str = r#"
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        time.sleep(300)
    os._exit(0)
daemon = os.read(r, 32).decode()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid} {daemon}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 300)
"#;

/// True while `pid` runs (a zombie waiting for its reaper does not count: it is dead).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}
