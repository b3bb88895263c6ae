//! Spilling end to end: a gather larger than the budget completes with the process's anonymous
//! memory (sampled from /proc) within the budget, outputs are byte-identical with and without
//! spills, a killed run's folder is removed by the next run, and an unusable spill dir is a
//! clear warning while the run goes on.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

const MIB: u64 = 1 << 20;

/// RssAnon of a running process, from /proc.
fn rss_anon(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line["RssAnon:".len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Waits for `child`, sampling its RssAnon every few milliseconds; returns the largest sample.
fn wait_sampling(child: &mut Child) -> (std::process::ExitStatus, u64) {
    let mut peak = 0;
    loop {
        if let Some(anon) = rss_anon(child.id()) {
            peak = peak.max(anon);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (status, peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn gather_recipe(members: u32, extra: &str) -> String {
    format!(
        "recipe: gather\ndims:\n  member: {members}\nsteps:\n  make:\n    plugin: alloc\n    over: [member]\n    args: {{bytes: 0, output_bytes: 100MiB}}\n  all:\n    plugin: noop\n    inputs: {{members: make}}\n{extra}"
    )
}

#[test]
fn a_gather_larger_than_the_budget_spills_and_stays_within_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.yaml"), gather_recipe(24, "")).unwrap();
    let mut child = common::runner_command(Path::new("."), &[])
        .args(["run", "g.yaml", "--budget", "1GiB", "--workers", "2", "--no-record", "--summary", "s.json"])
        .args(["--spill-dir", "spill"])
        .current_dir(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, peak_anon) = wait_sampling(&mut child);
    assert!(status.success());
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    // 24 × 100 MiB against 1 GiB: at least 1.4 GB went to disk.
    assert!(summary["spilled_bytes"].as_u64().unwrap() >= 1_400_000_000, "{summary}");
    let budget = 1u64 << 30;
    assert!(peak_anon <= budget + budget / 20 + 64 * MIB, "RssAnon peaked at {} MiB", peak_anon / MIB);
    // The run's spill folder is gone.
    let left: Vec<PathBuf> =
        std::fs::read_dir(dir.path().join("spill")).map_or(vec![], |d| d.map(|e| e.unwrap().path()).collect());
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn npy_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn spilled_runs_write_the_same_bytes() {
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/quickstart.yaml");
    let run = |budget: &str| {
        let dir = tempfile::tempdir().unwrap();
        let out = common::runner_command(Path::new("."), &[])
            .arg("run")
            .arg(&recipe)
            .args(["--cycle", "C", "--budget", budget, "--no-record", "--summary", "s.json", "--spill-dir", "spill"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
        (npy_files(&dir.path().join("out/C")), summary["spilled_bytes"].as_u64().unwrap())
    };
    let (generous, spilled_generous) = run("8GiB");
    let (tight, spilled_tight) = run("120MiB");
    assert_eq!(spilled_generous, 0);
    assert!(spilled_tight > 100 * MIB, "the tight run spilled only {spilled_tight} bytes");
    assert_eq!(generous.len(), 5);
    for ((name_a, a), (name_b, b)) in generous.iter().zip(&tight) {
        assert_eq!(name_a, name_b);
        assert!(a == b, "{name_a} differs between the generous and the spilling run");
    }
}

/// Waits until a run's spill folder under `spill` holds spilled files; returns the folder.
fn wait_for_spill_folder(spill: &Path) -> PathBuf {
    let started = Instant::now();
    loop {
        let found = std::fs::read_dir(spill).ok().and_then(|mut d| d.next()).map(|e| e.unwrap().path());
        if let Some(folder) = found.filter(|f| std::fs::read_dir(f).map_or(0, |d| d.count()) > 1) {
            return folder;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no spill folder appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a run in `dir` that spills early, then holds on in a slow last task; returns it once
/// its spill folder holds files, with that folder.
fn spawn_spilling_run(dir: &Path) -> (Child, PathBuf) {
    let slow = "  slow:\n    plugin: alloc\n    inputs: {all: all}\n    args: {bytes: 1MiB, hold_ms: 30000}\n";
    std::fs::write(dir.join("g.yaml"), gather_recipe(8, slow)).unwrap();
    let child = common::runner_command(Path::new("."), &[])
        .args(["run", "g.yaml", "--budget", "400MiB", "--no-record", "--spill-dir", "spill"])
        .current_dir(dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, wait_for_spill_folder(&dir.join("spill")))
}

#[test]
fn a_killed_runs_spill_folder_is_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, folder) = spawn_spilling_run(dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(folder.exists(), "a SIGKILLed run cannot clean up after itself");
    std::fs::write(dir.path().join("n.yaml"), "recipe: n\nsteps:\n  x:\n    plugin: noop\n").unwrap();
    let out = common::runner_command(Path::new("."), &[])
        .args(["run", "n.yaml", "--no-record", "--spill-dir", "spill"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!folder.exists(), "the next run removed {}", folder.display());
}

#[test]
fn an_unusable_spill_dir_is_named_and_fails_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.yaml"), gather_recipe(6, "")).unwrap();
    // A spill dir under a regular file cannot be created, even by root. Found only at the first
    // spill, the run would go on without spilling: it is found before anything runs.
    std::fs::write(dir.path().join("afile"), "").unwrap();
    let out = common::runner_command(Path::new("."), &[])
        .args(["run", "g.yaml", "--budget", "300MiB", "--no-record", "--summary", "s.json"])
        .args(["--spill-dir", "afile/spill"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("the spill folder afile/spill cannot be used"), "{stderr}");
    assert!(!dir.path().join("s.json").exists(), "nothing ran");
}

#[test]
fn ctrl_c_removes_the_spill_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, folder) = spawn_spilling_run(dir.path());
    // SAFETY: sending SIGINT to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!folder.exists(), "Ctrl-C left {} behind", folder.display());
}
