//! The budget promise, checked from outside the process: the child's peak RSS as the kernel
//! reports it (`wait4`'s `ru_maxrss`), not the runner's own figures.

use std::os::unix::process::ExitStatusExt;

use std::process::{Command, ExitStatus, Stdio};

use serde_json::Value as Json;

const MIB: u64 = 1 << 20;

/// Budget plus the tolerance the SPEC allows: 5% and 64 MiB.
fn allowed(budget: u64) -> u64 {
    budget + budget / 20 + 64 * MIB
}

struct Measured {
    status: ExitStatus,
    peak_rss: u64,
    summary: Json,
    stderr: String,
}

/// Runs `runner run RECIPE ARGS...` on recipe text and reaps it with `wait4` for its peak RSS.
fn run_measured(recipe: &str, args: &[&str]) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), recipe).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["run", "r.yaml", "--summary", "s.json"])
        .args(args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
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
    let summary = std::fs::read_to_string(dir.path().join("s.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Json::Null);
    Measured { status: ExitStatus::from_raw(status), peak_rss: usage.ru_maxrss as u64 * 1024, summary, stderr }
}

fn alloc_recipe(tasks: u32, args: &str) -> String {
    format!(
        "recipe: mem\ndims:\n  i: {tasks}\nsteps:\n  big:\n    plugin: alloc\n    over: [i]\n    args: {{{args}}}\n"
    )
}

fn assert_ok(m: &Measured) {
    assert_eq!(m.status.code(), Some(0), "{}", m.stderr);
    assert_eq!(m.summary["tasks_failed"], 0);
}

#[test]
fn forty_tasks_of_400_mib_fit_a_1_gib_budget() {
    let m = run_measured(&alloc_recipe(40, "bytes: 400MiB, hold_ms: 10"), &["--budget", "1GiB", "--workers", "2"]);
    assert_ok(&m);
    assert_eq!(m.summary["tasks_ok"], 40);
    assert!(m.peak_rss <= allowed(1 << 30), "peak RSS {} MiB", m.peak_rss / MIB);
    assert!(m.summary["peak_reserved_bytes"].as_u64().unwrap() <= 1 << 30);
}

#[test]
fn a_budget_for_one_task_runs_them_one_at_a_time() {
    let budget = 700 * MIB;
    let m = run_measured(&alloc_recipe(8, "bytes: 400MiB, hold_ms: 30"), &["--budget", "700MiB", "--workers", "2"]);
    assert_ok(&m);
    // Two at once would hold 800 MiB.
    assert!(m.peak_rss <= allowed(budget), "peak RSS {} MiB", m.peak_rss / MIB);
    let reserved = m.summary["peak_reserved_bytes"].as_u64().unwrap();
    assert!((400 * MIB..=budget).contains(&reserved), "peak reserved {reserved}");
}

#[test]
fn with_room_both_workers_are_busy() {
    let m = run_measured(&alloc_recipe(4, "bytes: 400MiB, hold_ms: 800"), &["--budget", "4GiB", "--workers", "2"]);
    assert_ok(&m);
    // Two tasks were admitted together (both reservations at once), and holding their 400 MiB
    // for 800 ms each, both were resident together.
    assert!(m.summary["peak_reserved_bytes"].as_u64().unwrap() >= 800 * MIB);
    assert!(m.peak_rss >= 750 * MIB, "peak RSS {} MiB", m.peak_rss / MIB);
}

#[test]
fn an_oversized_task_runs_alone_and_completes() {
    let recipe = "recipe: big\ndims:\n  i: 3\nsteps:\n  small:\n    plugin: alloc\n    over: [i]\n    args: {bytes: 100MiB, hold_ms: 50}\n  huge:\n    plugin: alloc\n    args: {bytes: 2GiB}\n";
    let m = run_measured(recipe, &["--budget", "1GiB", "--workers", "2"]);
    assert_ok(&m);
    assert_eq!(m.summary["oversized"], 1);
    // Alone: the 2 GiB task never overlapped a 100 MiB one.
    assert!(m.peak_rss < (2048 + 100 + 64) * MIB, "peak RSS {} MiB", m.peak_rss / MIB);
}

#[test]
fn tasks_that_announce_more_than_their_estimate_wait_for_room() {
    // Each task is estimated at 1 MiB but allocates 400 MiB, announcing it first.
    let budget = 700 * MIB;
    let m = run_measured(
        &alloc_recipe(6, "bytes: 400MiB, hold_ms: 100, estimate: 1MiB"),
        &["--budget", "700MiB", "--workers", "2"],
    );
    assert_ok(&m);
    assert!(m.peak_rss <= allowed(budget), "peak RSS {} MiB", m.peak_rss / MIB);
    // The first task runs alone (its estimate is not the plugin's own), peaks past it, and sets
    // the step's figure for the other five.
    assert_eq!(m.summary["underestimates"], 1, "{}", m.summary);
}

#[test]
fn many_sources_do_not_flood_memory_before_their_consumers() {
    // 200 sources each make a 20 MiB buffer for one consumer: 4 GiB if all were made first.
    let recipe = "recipe: flood\ndims:\n  item: 200\nsteps:\n  make:\n    plugin: alloc\n    over: [item]\n    args: {bytes: 0, output_bytes: 20MiB}\n  use:\n    plugin: noop\n    over: [item]\n    inputs: {buffer: make}\n";
    let budget = 200 * MIB;
    let m = run_measured(recipe, &["--budget", "200MiB", "--workers", "2"]);
    assert_ok(&m);
    assert_eq!(m.summary["tasks_ok"], 400);
    assert!(m.summary["peak_reserved_bytes"].as_u64().unwrap() <= budget);
    assert!(m.peak_rss <= allowed(budget), "peak RSS {} MiB", m.peak_rss / MIB);
}

#[test]
fn the_runner_reports_the_same_peak_as_the_os() {
    let m = run_measured(&alloc_recipe(1, "bytes: 512MiB"), &["--budget", "2GiB"]);
    assert_ok(&m);
    let reported = m.summary["peak_rss_bytes"].as_u64().unwrap();
    assert!(reported.abs_diff(m.peak_rss) < 16 * MIB, "summary {reported} vs kernel {}", m.peak_rss);
    let step_peak = m.summary["steps"][0]["peak_bytes_max"].as_u64().unwrap();
    assert!(step_peak.abs_diff(512 * MIB) < 512 * MIB / 20, "task peak {step_peak}");
}
