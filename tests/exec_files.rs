//! The files around `exec` commands, through the command line: what `--resume` counts as a
//! command's inputs (files its argv names, `reads:`, folders by their contents), where its log
//! goes (one file per task, however its dim values are spelled), what its output is (written
//! atomically, never a directory), and what its recipe may say (`env` names).

mod common;

use std::path::Path;
use std::process::Output;

use serde_json::Value as Json;

use common::{stderr, write};

/// `runner run r.yaml --cycle C --summary s.json ARGS...` in `dir`: its output and summary.
fn run(dir: &Path, args: &[&str]) -> (Output, Json) {
    let _ = std::fs::remove_file(dir.join("s.json"));
    let output = common::runner_command(dir, &[])
        .args(["run", "r.yaml", "--cycle", "C", "--workers", "2", "--summary", "s.json"])
        .args(args)
        .output()
        .unwrap();
    let summary = std::fs::read_to_string(dir.join("s.json")).map_or(Json::Null, |t| serde_json::from_str(&t).unwrap());
    (output, summary)
}

fn reused(summary: &Json) -> u64 {
    summary["tasks_reused"].as_u64().unwrap_or_else(|| panic!("no tasks_reused in {summary}"))
}

/// Sets a file's modification time back to what it was, as a tool that lies about it would.
fn keep_mtime(path: &Path, change: impl FnOnce()) {
    let before = std::fs::metadata(path).unwrap().modified().unwrap();
    change();
    std::fs::File::open(path).unwrap().set_modified(before).unwrap();
}

/// Copies the file its argv names (`in/a.txt`, not an `{input.…}`), and lists a folder it
/// declares in `reads:`.
const NAMED_FILES: &str = r#"
recipe: named
dims:
  i: 2
steps:
  copy:
    plugin: exec
    over: [i]
    args:
      command: [sh, -c, 'cat "$1" in/store/* > "$2"', sh, in/a.txt, "{output}"]
      output: "out/{i}.txt"
      reads: [in/store]
"#;

#[test]
fn resume_runs_again_what_reads_a_changed_file_its_argv_names_or_a_changed_folder() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "r.yaml", NAMED_FILES);
    write(dir.path(), "in/a.txt", "one\n");
    write(dir.path(), "in/store/c0", "chunk 0\n");
    write(dir.path(), "in/store/c1", "chunk 1\n");
    let (out, summary) = run(dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.path().join("out/0.txt")).unwrap(), "one\nchunk 0\nchunk 1\n");
    let (out, summary_again) = run(dir.path(), &["--resume"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reused(&summary_again), 2, "nothing changed: {summary_again} (first {summary})");

    // The file named in the argv changed (`in/a.txt` is no `{input.…}`).
    write(dir.path(), "in/a.txt", "two\n");
    let (out, summary) = run(dir.path(), &["--resume"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reused(&summary), 0, "{summary}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out/1.txt")).unwrap(), "two\nchunk 0\nchunk 1\n");

    // A file inside the declared folder went; the folder's own mtime does not change.
    keep_mtime(&dir.path().join("in/store"), || std::fs::remove_file(dir.path().join("in/store/c1")).unwrap());
    let (out, summary) = run(dir.path(), &["--resume"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reused(&summary), 0, "a deleted chunk is a changed input: {summary}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out/0.txt")).unwrap(), "two\nchunk 0\n");
}

#[test]
fn each_task_has_a_log_of_its_own_however_its_dim_values_are_spelled() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "r.yaml",
        r#"
recipe: names
dims:
  name: ["a b", "a_b", "a/b", "a?b"]
steps:
  say:
    plugin: exec
    over: [name]
    args:
      command: [sh, -c, 'echo "task $1"; exit 3', sh, "{name}"]
"#,
    );
    let (out, _) = run(dir.path(), &["--no-record"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let logs = dir.path().join("runner-logs/names/C/say");
    let mut names: Vec<String> =
        std::fs::read_dir(&logs).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    for name in &names {
        let text = std::fs::read_to_string(logs.join(name)).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("task ")).count(), 1, "{name}: {text}");
    }
}

#[test]
fn env_names_are_checked_with_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    for (name, problem) in [("A=B", "holds `=`"), ("", "is empty")] {
        write(
            dir.path(),
            "r.yaml",
            &format!(
                "recipe: env\nsteps:\n  tool:\n    plugin: exec\n    args:\n      command: [env]\n      env: {{\"{name}\": eq}}\n"
            ),
        );
        let (out, _) = run(dir.path(), &["--no-record"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {err}");
        assert!(err.contains(problem) && err.contains("r.yaml:"), "{name:?}: {err}");
        assert!(!dir.path().join("runner-logs").exists(), "nothing ran");
    }
}

#[test]
fn outputs_are_written_atomically_never_a_directory_and_never_an_option() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "-n.txt", "the file\n");
    write(
        dir.path(),
        "r.yaml",
        r#"
recipe: outputs
steps:
  made:
    plugin: exec
    args:
      command: [cp, --, "-n.txt", "{output}"]
      output: "-copy.txt"
  numbered:
    plugin: exec
    inputs: {file: made}
    args:
      command: [sh, -c, 'test ! -e out/n.txt && cat "$1" > "$2"', sh, "{input.file}", "{output}"]
      output: out/n.txt
"#,
    );
    let (out, _) = run(dir.path(), &["--no-record"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // `-copy.txt` reached `cat` as `./-copy.txt`, not as options; `out/n.txt` appeared only
    // once complete (the command saw no file there while writing).
    assert_eq!(std::fs::read_to_string(dir.path().join("out/n.txt")).unwrap(), "the file\n");
    let names: Vec<_> = std::fs::read_dir(dir.path().join("out")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["n.txt"], "no temporary file is left");

    // A directory the command leaves at its output does not satisfy it.
    write(
        dir.path(),
        "r.yaml",
        "recipe: dir\nsteps:\n  tool:\n    plugin: exec\n    args:\n      command: [mkdir, \"{output}\"]\n      output: out/d.nc\n",
    );
    let (out, _) = run(dir.path(), &["--no-record"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("wrote a directory"), "{err}");
    assert!(!dir.path().join("out/d.nc").exists());
    // Nor does one that was there before.
    std::fs::create_dir_all(dir.path().join("out/d.nc")).unwrap();
    write(
        dir.path(),
        "r.yaml",
        "recipe: dir\nsteps:\n  tool:\n    plugin: exec\n    args:\n      command: [true]\n      output: out/d.nc\n",
    );
    let (out, _) = run(dir.path(), &["--no-record"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("out/d.nc is a directory"), "{err}");
}

#[test]
fn a_step_timeout_reads_as_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "r.yaml",
        "recipe: slow\nsteps:\n  nap:\n    plugin: exec\n    timeout: 2s\n    args:\n      command: [sleep, 30]\n",
    );
    let started = std::time::Instant::now();
    let (out, _) = run(dir.path(), &["--no-record"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("timed out after 2 s"), "{err}");
    assert!(!err.contains("was cancelled"), "{err}");
    assert!(started.elapsed().as_secs() < 20);
}

fn alive(pid: i32) -> bool {
    // A zombie has finished: only its parent's wait is left.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn the_orphans_of_a_killed_runner_are_killed_when_the_next_one_starts() {
    // Without a cgroup, found again by the owner in their environment.
    the_orphans_are_killed(Some("off"));
    match runner::testing::command::support() {
        Ok(_) => the_orphans_are_killed(None),
        Err(why) => eprintln!("skipped: the same with a cgroup, which cannot be made here ({why})"),
    }
}

/// Kills (SIGKILL) a runner whose command left a detached grandchild, and checks that the next
/// runner's start kills it; `cgroup` is `RUNNER_CGROUP`.
fn the_orphans_are_killed(cgroup: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    // A grandchild that detaches itself (setsid, double fork) and writes its pid.
    write(
        dir.path(),
        "r.yaml",
        r#"
recipe: orphans
steps:
  daemon:
    plugin: exec
    args:
      command: [python3, -c, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        open('pid.tmp', 'w').write(str(os.getpid())); os.rename('pid.tmp', 'pid')\n        time.sleep(300)\n    os._exit(0)\ntime.sleep(300)"]
"#,
    );
    let runner = |args: &[&str]| {
        let mut command = common::runner_command(dir.path(), args);
        if let Some(value) = cgroup {
            command.env("RUNNER_CGROUP", value);
        }
        command
    };
    let mut first =
        runner(&["run", "r.yaml", "--cycle", "C", "--no-record"]).stderr(std::process::Stdio::null()).spawn().unwrap();
    let started = std::time::Instant::now();
    while !dir.path().join("pid").exists() {
        assert!(started.elapsed().as_secs() < 30, "the daemon never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let daemon: i32 = std::fs::read_to_string(dir.path().join("pid")).unwrap().parse().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    // Not asserted alive here: another test's runner starting in this moment may kill it first.
    write(dir.path(), "next.yaml", "recipe: next\nsteps:\n  nothing:\n    plugin: noop\n");
    let out = runner(&["run", "next.yaml", "--cycle", "C", "--no-record"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let started = std::time::Instant::now();
    while alive(daemon) && started.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(daemon), "the next runner's start killed the orphan {daemon} (RUNNER_CGROUP={cgroup:?})");
}

#[test]
fn the_summary_and_the_closing_line_give_the_peak_of_the_runner_with_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "r.yaml",
        "recipe: tree\nsteps:\n  hold:\n    plugin: exec\n    args:\n      command: [python3, -c, \"import time; data = b'x' * (150 << 20); time.sleep(0.5)\"]\n",
    );
    let (out, summary) = run(dir.path(), &["--no-record"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (rss, tree) = (summary["peak_rss_bytes"].as_u64().unwrap(), summary["peak_bytes"].as_u64().unwrap());
    assert!(tree >= rss + (145 << 20), "peak_bytes {tree} against the runner's own {rss}: {summary}");
    assert!(stderr(&out).contains("(with its commands "), "{}", stderr(&out));
}
