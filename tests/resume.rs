//! `runner run --resume`: a run killed at random points, then resumed, leaves outputs byte for
//! byte those of an uninterrupted run and no half-written file; a failed run, resumed once its
//! cause is fixed, runs only what failed and what depends on it; a changed input file is run
//! again with what reads it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use runner_plugin::Array;
use serde_json::Value as Json;

const CYCLE: &str = "2026-11-01T00Z";

/// Enough tasks (1584) for kills to land mid-run; the
/// fields are kept (`cache: true`) and there are path outputs at two levels.
const KILLED: &str = r#"
recipe: resume-killed
dims:
  member: 16
  lead: 24
steps:
  field:
    plugin: synth
    over: [member, lead]
    args: {ny: 160, nx: 170, wet_fraction: 0.3, seed: "{member}/{lead}"}
    cache: true
  exceed:
    plugin: threshold
    over: [member, lead]
    inputs: {field: field}
    args: {thresholds: [1.0]}
  smooth:
    plugin: nbhood
    over: [member, lead]
    inputs: {field: exceed}
    args: {radius: 4, shape: square}
  each:
    plugin: write_npy
    over: [member, lead]
    inputs: {array: smooth}
    args: {path: "out/{cycle}/m{member}_l{lead}.npy"}
  probability:
    plugin: mean
    over: [lead]
    inputs: {members: smooth}
  save:
    plugin: write_npy
    over: [lead]
    inputs: {array: probability}
    args: {path: "out/{cycle}/prob_l{lead}.npy"}
"#;

/// Reads `in/{i}.npy`; the thresholded fields are kept, so that a task run again can read them.
const FROM_FILES: &str = r#"
recipe: resume-files
dims:
  i: 4
steps:
  load:
    plugin: read_npy
    over: [i]
    args: {path: "in/{i}.npy"}
  exceed:
    plugin: threshold
    over: [i]
    inputs: {field: load}
    args: {thresholds: [0.5]}
    cache: true
  each:
    plugin: write_npy
    over: [i]
    inputs: {array: exceed}
    args: {path: "out/{cycle}/e{i}.npy"}
  total:
    plugin: mean
    inputs: {members: exceed}
  save:
    plugin: write_npy
    inputs: {array: total}
    args: {path: "out/{cycle}/total.npy"}
"#;

/// `runner run r.yaml` at the tests' cycle with two workers and a summary, then `args`.
fn run_command(dir: &Path, args: &[&str]) -> Command {
    let mut command =
        common::runner_command(dir, &["run", "r.yaml", "--cycle", CYCLE, "--workers", "2", "--summary", "s.json"]);
    command.args(args);
    command
}

fn run(dir: &Path, args: &[&str]) -> (Output, Json) {
    let _ = std::fs::remove_file(dir.join("s.json"));
    let output = run_command(dir, args).output().unwrap();
    let summary = std::fs::read_to_string(dir.join("s.json")).map_or(Json::Null, |t| serde_json::from_str(&t).unwrap());
    (output, summary)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every file under `dir/out`, by path relative to `dir`, with its bytes.
fn outputs(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, files);
            } else {
                files.insert(path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, &dir.join("out"), &mut files);
    files
}

fn assert_same_outputs(reference: &BTreeMap<PathBuf, Vec<u8>>, dir: &Path, context: &str) {
    let got = outputs(dir);
    let names = |files: &BTreeMap<PathBuf, Vec<u8>>| files.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&got), names(reference), "{context}: not the same files (a temporary file left behind?)");
    for (path, bytes) in reference {
        assert!(got[path] == *bytes, "{context}: {} differs from the uninterrupted run's", path.display());
    }
}

/// A small deterministic generator, so a failing kill point can be run again.
struct Lcg(u64);

impl Lcg {
    fn fraction(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn runs_killed_at_random_points_resume_to_the_uninterrupted_outputs() {
    let reference_dir = tempfile::tempdir().unwrap();
    std::fs::write(reference_dir.path().join("r.yaml"), KILLED).unwrap();
    let started = Instant::now();
    let (output, summary) = run(reference_dir.path(), &[]);
    let wall = started.elapsed();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(summary["tasks_total"], 1584);
    let reference = outputs(reference_dir.path());
    assert_eq!(reference.len(), 384 + 24);

    let seed: u64 = std::env::var("RESUME_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261201);
    let mut random = Lcg(seed);
    let (mut partly_reused, mut total_reused) = (0, 0);
    for trial in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("r.yaml"), KILLED).unwrap();
        // Kill points spread over the whole run, from start-up to the last outputs.
        let delay = wall.mul_f64(0.05 + 0.9 * (trial as f64 + random.fraction()) / 10.0);
        let mut child = run_command(dir.path(), &[]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL: nothing is cleaned up, nothing is flushed
        child.wait().unwrap();

        let (output, summary) = run(dir.path(), &["--resume"]);
        let context = format!("trial {trial} (seed {seed}, killed after {delay:?})");
        assert_eq!(output.status.code(), Some(0), "{context}: {}", stderr(&output));
        assert_same_outputs(&reference, dir.path(), &context);
        let reused = summary["tasks_reused"].as_u64().unwrap();
        let ran = summary["tasks_ok"].as_u64().unwrap();
        assert_eq!(reused + ran, 1584, "{context}: {summary}");
        eprintln!("{context}: {reused} reused, {ran} run again");
        total_reused += reused;
        if reused > 0 && ran > 0 {
            partly_reused += 1;
        }
    }
    assert!(total_reused > 0, "no kill left anything to reuse");
    assert!(partly_reused >= 3, "only {partly_reused} of 10 kills landed mid-run (seed {seed}, run took {wall:?})");
}

fn write_input(dir: &Path, i: usize, scale: f32) {
    write_input_at(&dir.join(format!("in/{i}.npy")), i, scale);
}

fn write_input_at(path: &Path, i: usize, scale: f32) {
    let data: Vec<f32> = (0..64 * 48).map(|k| ((k * (i + 3)) % 17) as f32 * scale).collect();
    let array = Array::from_vec(vec![64, 48], data).unwrap();
    runner_plugin::npy::write_array(path, &array).unwrap();
}

#[test]
fn a_failed_run_resumed_runs_only_what_failed_and_what_depends_on_it() {
    let reference_dir = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for root in [reference_dir.path(), dir.path()] {
        std::fs::write(root.join("r.yaml"), FROM_FILES).unwrap();
        for i in [0, 1, 3] {
            write_input(root, i, 0.25);
        }
    }
    write_input(reference_dir.path(), 2, 0.25);
    let (output, _) = run(reference_dir.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reference = outputs(reference_dir.path());

    // in/2.npy is missing: load[2] fails, and what reads it is skipped.
    let (output, summary) = run(dir.path(), &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_failed"].as_u64()), (Some(9), Some(1)), "{summary}");

    write_input(dir.path(), 2, 0.25);
    let (output, summary) = run(dir.path(), &["--resume"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "--resume: run 1 (failed) of cycle 2026-11-01T00Z recorded 9 finished tasks: 9 of 14 tasks taken over"
        ),
        "{text}"
    );
    // load[2], exceed[2], each[2], total and save run; the other nine are taken over (exceed's
    // kept values are what total reads).
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_reused"].as_u64()), (Some(5), Some(9)), "{summary}");
    assert_same_outputs(&reference, dir.path(), "after the resume");

    // Resuming a finished run takes everything over and writes nothing.
    let before: Vec<_> = outputs(dir.path())
        .into_keys()
        .map(|p| std::fs::metadata(dir.path().join(p)).unwrap().modified().unwrap())
        .collect();
    let (output, summary) = run(dir.path(), &["--resume"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_reused"].as_u64()), (Some(0), Some(14)), "{summary}");
    let after: Vec<_> = outputs(dir.path())
        .into_keys()
        .map(|p| std::fs::metadata(dir.path().join(p)).unwrap().modified().unwrap())
        .collect();
    assert_eq!(before, after);

    // A changed input file is read again, with everything that depends on it.
    std::thread::sleep(Duration::from_millis(20));
    write_input(dir.path(), 1, 0.5);
    write_input(reference_dir.path(), 1, 0.5);
    let (output, summary) = run(dir.path(), &["--resume"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_reused"].as_u64()), (Some(5), Some(9)), "{summary}");
    let (output, _) = run(reference_dir.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_same_outputs(&outputs(reference_dir.path()), dir.path(), "after the input changed");

    // A deleted output is made again; a changed arg runs its step again, and what it reads that is not kept.
    std::fs::remove_file(dir.path().join(format!("out/{CYCLE}/e3.npy"))).unwrap();
    let (output, summary) = run(dir.path(), &["--resume"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_reused"].as_u64()), (Some(1), Some(13)), "{summary}");
    assert_same_outputs(&outputs(reference_dir.path()), dir.path(), "after an output was deleted");
    // save runs again, and total, whose value it reads; total reads exceed's kept values.
    std::fs::write(dir.path().join("r.yaml"), FROM_FILES.replace("out/{cycle}/total.npy", "out/{cycle}/sum.npy"))
        .unwrap();
    let (output, summary) = run(dir.path(), &["--resume"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_reused"].as_u64()), (Some(2), Some(12)), "{summary}");
}

#[test]
fn resume_without_an_earlier_run_runs_everything_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), FROM_FILES).unwrap();
    for i in 0..4 {
        write_input(dir.path(), i, 1.0);
    }
    let (output, summary) = run(dir.path(), &["--resume"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("--resume: no earlier run of resume-files for cycle 2026-11-01T00Z: running everything"),
        "{text}"
    );
    assert_eq!(summary["tasks_ok"], 14);

    let output = run_command(dir.path(), &["--resume", "--no-record"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--no-record"), "{}", stderr(&output));
}

#[test]
fn a_resumed_replay_picks_up_at_the_first_unfinished_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = FROM_FILES.replace("in/{i}.npy", "in/{cycle}/{i}.npy");
    std::fs::write(dir.path().join("r.yaml"), recipe).unwrap();
    std::fs::write(
        dir.path().join("cycles.yaml"),
        "recipe: r.yaml\ncycles:\n  - {id: c1}\n  - {id: c2}\n  - {id: c3}\n",
    )
    .unwrap();
    // c2 misses one input: its replay fails there, and goes on to c3.
    for cycle in ["c1", "c2", "c3"] {
        for i in (0..4).filter(|&i| (cycle, i) != ("c2", 2)) {
            write_input_at(&dir.path().join(format!("in/{cycle}/{i}.npy")), i, 1.0);
        }
    }
    let replay = |args: &[&str]| {
        common::runner_command(dir.path(), &[])
            .args(["replay", "cycles.yaml", "--workers", "2", "--summary", "replay.json"])
            .args(args)
            .output()
            .unwrap()
    };
    let output = replay(&[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));

    write_input_at(&dir.path().join("in/c2/2.npy"), 2, 1.0);
    let output = replay(&["--resume"]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{table}\n{}", stderr(&output));
    assert!(table.contains("c1                   done in run 1: skipped (--resume)"), "{table}");
    let summary: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("replay.json")).unwrap()).unwrap();
    let cycles = summary["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 2, "{summary}");
    assert_eq!((cycles[0]["cycle"].as_str(), cycles[0]["tasks_reused"].as_u64()), (Some("c2"), Some(9)), "{summary}");
    assert_eq!((cycles[1]["cycle"].as_str(), cycles[1]["tasks_ok"].as_u64()), (Some("c3"), Some(14)), "{summary}");
}

/// A step copying files named in its command, with `resume:` as given (or none).
fn copying(resume: &str) -> String {
    format!(
        "recipe: resume-deep\ndims:\n  i: 2\nsteps:\n  copy:\n    plugin: exec\n    over: [i]\n{resume}    args:\n      \
         command: [cp, \"in/{{i}}.txt\", \"{{output}}\"]\n      output: \"out/{{i}}.txt\"\n"
    )
}

#[test]
fn resume_content_sees_an_input_rewritten_with_its_size_and_mtime_kept() {
    for (resume, rerun) in [("", false), ("    resume: content\n", true)] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("r.yaml"), copying(resume)).unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        for i in 0..2 {
            std::fs::write(dir.path().join(format!("in/{i}.txt")), "first").unwrap();
        }
        let (first, _) = run(dir.path(), &[]);
        assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
        // As `cp -p` or `rsync -t` leave a file: other bytes, its size and mtime as they were.
        let input = dir.path().join("in/0.txt");
        let mtime = std::fs::metadata(&input).unwrap().modified().unwrap();
        std::fs::write(&input, "other").unwrap();
        std::fs::File::options().write(true).open(&input).unwrap().set_modified(mtime).unwrap();
        let (resumed, _) = run(dir.path(), &["--resume"]);
        let text = stderr(&resumed);
        assert_eq!(resumed.status.code(), Some(0), "{text}");
        let copied = std::fs::read_to_string(dir.path().join("out/0.txt")).unwrap();
        if rerun {
            assert!(text.contains("1 of 2 tasks taken over"), "{text}");
            assert_eq!(copied, "other", "the changed input is copied again");
        } else {
            assert!(text.contains("2 of 2 tasks taken over"), "{text}");
            assert_eq!(copied, "first", "size and mtime cannot tell: the old copy stays");
        }
    }
}

#[test]
fn a_misspelt_resume_check_names_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), copying("    resume: contents\n")).unwrap();
    let (out, _) = run(dir.path(), &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("`resume` of step `copy` is `contents`") && text.contains("content"), "{text}");
}
