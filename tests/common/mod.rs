//! Helpers shared by the integration tests that run the `runner` binary and read what the
//! kernel says of it.

#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use serde_json::Value as Json;

pub const MIB: u64 = 1 << 20;

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["run", recipe, "--summary", "s.json"])
        .args(args)
        .current_dir(dir)
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

/// Runs `runner ARGS...` in `dir` with an environment of its own: no `RUNNER_DB` or `NO_COLOR`
/// inherited from the developer's shell, and `TMPDIR` set to `dir`'s `tmp/` when `tmp` says so.
pub fn runner_in(dir: &Path, args: &[&str]) -> std::process::Output {
    runner_command(dir, args).output().expect("running runner")
}

/// The `runner ARGS...` command of [`runner_in`], to spawn or change.
pub fn runner_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    command.args(args).current_dir(dir).env_remove("RUNNER_DB").env_remove("NO_COLOR");
    command
}
