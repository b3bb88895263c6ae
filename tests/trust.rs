//! What users rely on without checking (issue 21): no output replaces the store, the recipe or
//! another input; one run at a time writes an output; a closed pipe ends a command quietly;
//! store errors say what is wrong; recipe names and cycle ids stay one folder; scratch folders
//! are private and swept; outputs stay inside the working dir through symlinks.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{runner as runner_in, runner_command, stderr};

const TINY: &str = "recipe: tiny\nsteps:\n  a:\n    plugin: noop\n";

/// A recipe whose one task holds `out/done.txt` for about `seconds`.
fn slow(seconds: u32) -> String {
    format!(
        "recipe: slow\nsteps:\n  hold:\n    plugin: exec\n    args:\n      command: [sh, -c, 'sleep {seconds}; echo ok > \"$1\"', sh, \"{{output}}\"]\n      output: out/done.txt\n"
    )
}

#[test]
fn no_output_replaces_the_store_the_recipe_or_the_cycles_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    let first = runner_in(d, &["run", "tiny.yaml", "--db", "r.db", "--cycle", "C1"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    std::os::unix::fs::symlink("r.db", d.join("link.json")).unwrap();
    let store = std::fs::read(d.join("r.db")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["report", "--db", "r.db", "-o", "r.db"], "-o r.db is the feedback store r.db"),
        (&["report", "--db", "r.db", "-o", "tiny.yaml"], "-o tiny.yaml exists and is not an HTML report"),
        (&["run", "tiny.yaml", "--db", "r.db", "--summary", "r.db"], "--summary r.db is the feedback store r.db"),
        (
            &["run", "tiny.yaml", "--db", "r.db", "--summary", "tiny.yaml"],
            "--summary tiny.yaml is the recipe tiny.yaml",
        ),
        (&["run", "tiny.yaml", "--db", "r.db", "--summary", "./link.json"], "is the feedback store r.db"),
        (&["run", "tiny.yaml", "--db", "r.db", "--summary", "r.db-wal"], "is the feedback store's -wal file"),
        (
            &["replay", "cycles.yaml", "--db", "r.db", "--summary", "cycles.yaml"],
            "--summary cycles.yaml is the cycles file cycles.yaml",
        ),
        (&["replay", "cycles.yaml", "--db", "r.db", "--report", "tiny.yaml"], "--report tiny.yaml is the recipe"),
    ];
    std::fs::write(d.join("cycles.yaml"), "recipe: tiny.yaml\ncycles:\n  - {id: C2}\n").unwrap();
    for (args, says) in cases {
        let out = runner_in(d, args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains(says) && text.contains("expected another file") || text.contains(says),
            "{args:?}: {text}"
        );
        assert_eq!(std::fs::read(d.join("r.db")).unwrap(), store, "{args:?} changed the store");
        assert_eq!(std::fs::read_to_string(d.join("tiny.yaml")).unwrap(), TINY, "{args:?} changed the recipe");
    }
    let report = runner_in(d, &["report", "--db", "r.db", "-o", "page.html"]);
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let again = runner_in(d, &["report", "--db", "r.db", "-o", "page.html"]);
    assert_eq!(again.status.code(), Some(0), "an earlier report is replaced: {}", stderr(&again));
}

/// Waits until `path` exists (the first run holds its lock).
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_run_at_a_time_writes_an_output_and_a_killed_holder_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("slow.yaml"), slow(3)).unwrap();
    let lock = d.join("out/.done.txt.runner-lock");
    let mut first = runner_command(d, &["run", "slow.yaml", "--db", "r.db", "--cycle", "C1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&lock);
    // Another cycle, another store: only the output lock stands in the way.
    let other = runner_in(d, &["run", "slow.yaml", "--db", "other.db", "--cycle", "C2"]);
    let text = stderr(&other);
    assert_eq!(other.status.code(), Some(2), "{text}");
    assert!(text.contains("another run is writing the outputs under") && text.contains("done.txt"), "{text}");
    assert!(text.contains(&format!("held by pid {}", first.id())), "{text}");
    // The same recipe and cycle in the same store is refused as a second run.
    let same = runner_in(d, &["run", "slow.yaml", "--db", "r.db", "--cycle", "C1"]);
    let text = stderr(&same);
    assert_eq!(same.status.code(), Some(2), "{text}");
    assert!(text.contains("is still running") && text.contains(&format!("pid {}", first.id())), "{text}");
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!lock.exists(), "a finished run removes its lock");
    assert_eq!(std::fs::read_to_string(d.join("out/done.txt")).unwrap(), "ok\n");

    // A holder killed with SIGKILL cannot clean up: its lock is taken over.
    std::fs::write(d.join("slow.yaml"), slow(8)).unwrap();
    let mut killed = runner_command(d, &["run", "slow.yaml", "--db", "r.db", "--cycle", "C3"]).spawn().unwrap();
    wait_for(&lock);
    killed.kill().unwrap();
    killed.wait().unwrap();
    std::fs::write(d.join("slow.yaml"), slow(0)).unwrap();
    let after = runner_in(d, &["run", "slow.yaml", "--db", "r.db", "--cycle", "C3"]);
    assert_eq!(after.status.code(), Some(0), "{}", stderr(&after));
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    assert_eq!(runner_in(d, &["run", "tiny.yaml", "--db", "r.db", "--cycle", "C1"]).status.code(), Some(0));
    for args in [
        &["plugins"][..],
        &["plan", "tiny.yaml", "--cycle", "C1"],
        &["history", "--db", "r.db"],
        &["--help"],
        &["report", "--db", "r.db", "-o", "p.html"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = runner_command(d, args).stdout(writer).output().unwrap();
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {text}");
        assert!(!text.contains("panicked") && !text.contains("Broken pipe"), "{args:?}: {text}");
    }
}

#[test]
fn a_closed_stderr_or_stdout_loses_no_work_and_keeps_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    let failing = "recipe: failing\nsteps:\n  a:\n    plugin: exec\n    args: {command: [sh, -c, 'exit 3']}\n";
    std::fs::write(d.join("failing.yaml"), failing).unwrap();
    std::fs::write(d.join("cycles.yaml"), "recipe: tiny.yaml\ncycles:\n  - {id: C1}\n  - {id: C2}\n").unwrap();
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    // (`runner … 2>&1 | head -1` once head has gone: both streams are a pipe without a reader.)
    let ended = |args: &[&str]| {
        let writer = closed();
        runner_command(d, args).stdout(writer.try_clone().unwrap()).stderr(writer).status().unwrap().code()
    };
    assert_eq!(ended(&["run", "tiny.yaml", "--db", "r.db", "--cycle", "C1", "--summary", "run.json"]), Some(0));
    assert!(d.join("run.json").exists(), "the summary is written");
    assert_eq!(
        ended(&["run", "failing.yaml", "--db", "r.db", "--cycle", "C1"]),
        Some(1),
        "a failed task still says so"
    );
    assert_eq!(ended(&["replay", "cycles.yaml", "--db", "p.db", "--summary", "replay.json"]), Some(0));
    let cycles = common::query(&d.join("p.db"), "SELECT cycle FROM runs ORDER BY run_id");
    assert_eq!(cycles, [["C1"], ["C2"]], "every cycle ran");
    assert!(d.join("replay.json").exists());
    let simulate = ["simulate", "tiny.yaml", "--db", "r.db", "--budget", "1GiB", "--summary", "sim.json"];
    assert_eq!(ended(&simulate), Some(0));
    assert!(d.join("sim.json").exists(), "the prediction's summary is written");
}

#[test]
fn an_output_path_that_is_a_symlink_a_fifo_or_a_device_is_written_into_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    // A symlink: its target gets the summary, the link stays.
    std::fs::create_dir(d.join("real")).unwrap();
    std::fs::write(d.join("real/s.json"), "{}").unwrap();
    std::os::unix::fs::symlink("real/s.json", d.join("link.json")).unwrap();
    let out = runner_in(d, &["run", "tiny.yaml", "--db", "r.db", "--cycle", "C1", "--summary", "link.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(std::fs::symlink_metadata(d.join("link.json")).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(d.join("real/s.json")).unwrap().contains("\"cycle\": \"C1\""));
    // A FIFO: read by whoever opened it (checking the path never waits on it), still a FIFO.
    let fifo = d.join("summary.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let out = runner_in(d, &["run", "tiny.yaml", "--db", "r.db", "--cycle", "C2", "--summary", "summary.fifo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(reader.join().unwrap().contains("\"cycle\": \"C2\""));
    use std::os::unix::fs::FileTypeExt as _;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // A full device: a one-line error and exit 3, no panic.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = runner_command(d, &["plugins"]).stdout(full).output().unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("cannot write to stdout: No space left on device") && !text.contains("panicked"), "{text}");
}

#[test]
fn store_errors_say_what_is_wrong_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    std::fs::create_dir(d.join("folder.db")).unwrap();
    let out = runner_in(d, &["run", "tiny.yaml", "--db", "folder.db", "--cycle", "C1"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("folder.db") && text.contains("is a directory"), "{text}");
    let help = runner_in(d, &["run", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("3 the feedback store"), "exit 3 is in --help: {help}");

    // A folder this process cannot write in: as root, the run drops to `nobody` to see it.
    let ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::copy(d.join("tiny.yaml"), ro.join("tiny.yaml")).unwrap();
    for path in [d, &ro] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let args = ["run", "tiny.yaml", "--db", "r.db", "--cycle", "C1"];
    let mut command = if root {
        common::runner_command_through("setpriv", &["--reuid=65534", "--regid=65534", "--clear-groups"], &ro, &args)
    } else {
        runner_command(&ro, &args)
    };
    // `nobody` may not write this test binary's temporary folder.
    let out = command.env("TMPDIR", "/tmp").output().unwrap();
    let text = stderr(&out);
    if root && text.contains("Permission denied") && !text.contains("r.db") {
        eprintln!("skipped: the read-only folder case: `nobody` cannot reach {}: {text}", ro.display());
        return;
    }
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.to_lowercase().contains("permission denied") && text.contains("r.db"), "{text}");
}

#[test]
fn dots_are_refused_as_recipe_names_and_cycle_ids() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("dots.yaml"), "recipe: \"..\"\nsteps:\n  a:\n    plugin: noop\n").unwrap();
    let out = runner_in(d, &["plan", "dots.yaml", "--cycle", "C1"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("dots.yaml:1:9: the recipe name `..` is only dots"), "{text}");
    std::fs::write(d.join("tiny.yaml"), TINY).unwrap();
    for cycle in [".", ".."] {
        let out = runner_in(d, &["plan", "tiny.yaml", "--cycle", cycle]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{cycle}: {text}");
        assert!(text.contains(&format!("cycle id `{cycle}`")), "{cycle}: {text}");
    }
}

#[test]
fn scratch_folders_are_private_and_those_of_dead_runners_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let left = tmp.join(format!("runner-{dead}-1f2e"));
    std::fs::create_dir_all(left.join("run-0/scratch")).unwrap();
    let recipe = "recipe: scratch\nsteps:\n  look:\n    plugin: exec\n    args:\n      \
                  command: [sh, -c, 'stat -c \"%a %n\" \"$TMPDIR\"/runner-* > \"$1\"', sh, \"{output}\"]\n      \
                  output: seen.txt\n";
    std::fs::write(d.join("scratch.yaml"), recipe).unwrap();
    let out = runner_command(d, &["run", "scratch.yaml", "--db", "r.db", "--cycle", "C1"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = std::fs::read_to_string(d.join("seen.txt")).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 1, "the dead runner's folder was swept before the run: {seen}");
    assert!(lines[0].starts_with("700 "), "{seen}");
    assert!(!left.exists());
    let remaining: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(remaining.is_empty(), "the run's own folder is removed at the end: {remaining:?}");
}

#[test]
fn a_symlinked_folder_does_not_let_outputs_leave_the_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, work.join("out")).unwrap();
    let recipe = "recipe: escape\ndims:\n  i: 2\nsteps:\n  make:\n    plugin: synth\n    over: [i]\n    args: {ny: 2, nx: 2, wet_fraction: 0.5}\n  \
                  save:\n    plugin: write_npy\n    over: [i]\n    inputs: [make]\n    args: {path: \"out/x_{i}.npy\"}\n";
    std::fs::write(work.join("escape.yaml"), recipe).unwrap();
    let out = runner_in(&work, &["run", "escape.yaml", "--db", "r.db", "--cycle", "C1"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("outside the working directory") && text.contains("through a symlink"), "{text}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing was written through the link");
}

#[test]
fn failures_of_a_step_that_differ_in_numbers_are_told_once_with_the_stderr_tail_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recipe = "recipe: grouped\ndims:\n  lead: {start: 1, stop: 8}\nsteps:\n  threshold:\n    plugin: exec\n    over: [lead]\n    \
                  args:\n      command: [python3, -c, \"import sys\\nopen(sys.argv[1])\", \"in/{cycle}/t_T{lead:03}.nc\"]\n";
    std::fs::write(d.join("grouped.yaml"), recipe).unwrap();
    let out = runner_in(d, &["run", "grouped.yaml", "--db", "r.db", "--cycle", "2026-12-01T09Z"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("failed:")).collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(failed[0].contains("failed: threshold[lead=1..8] (8 tasks): "), "{text}");
    assert!(text.contains("in/2026-12-01T09Z/t_T00{1..8}.nc"), "{text}");
    assert_eq!(text.matches("Traceback").count(), 1, "the stderr tail once: {text}");
    assert!(text.contains("(logs: ") && text.contains("and 5 more)"), "the other logs listed: {text}");
}

/// Steps whose tasks render their output paths per task: `save` writes `out/{i}.npy`, `copy`
/// writes the file named by `name`.
const PER_TASK_OUTPUTS: &str = "recipe: clash\ndims:\n  i: 3\n  name: [a, r.yaml]\nsteps:\n  field:\n    plugin: synth\n    over: [i]\n    \
     args: {ny: 4, nx: 4, wet_fraction: 0.5, seed: \"{i}\"}\n  save:\n    plugin: write_npy\n    over: [i]\n    \
     inputs: {array: field}\n    args: {path: \"out/{i}.npy\"}\n  copy:\n    plugin: exec\n    over: [name]\n    \
     args:\n      command: [sh, -c, 'echo x > \"$0\"', \"{output}\"]\n      output: \"{name}\"\n";

#[test]
fn a_task_whose_template_renders_the_store_or_the_recipe_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("out")).unwrap();
    std::os::unix::fs::symlink("out", d.join("link")).unwrap();
    std::fs::write(d.join("r.yaml"), PER_TASK_OUTPUTS).unwrap();
    // The store named through a symlinked folder: one task of `save` renders its path.
    let out = runner_in(d, &["run", "r.yaml", "--cycle", "C", "--db", "link/./2.npy"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "step `save`[i=2] writes out/2.npy, which is the feedback store link/./2.npy: writing it would replace it; \
             expected another file"
        ),
        "{err}"
    );
    assert!(!d.join("out/2.npy").exists() && !d.join("out/1.npy").exists(), "nothing ran, no store was made");
    let out = runner_in(d, &["run", "r.yaml", "--cycle", "C", "--db", "r.db"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("step `copy`[name=r.yaml] writes r.yaml, which is the recipe r.yaml"), "{err}");
    assert_eq!(std::fs::read_to_string(d.join("r.yaml")).unwrap(), PER_TASK_OUTPUTS, "the recipe stays");
    assert!(!d.join("a").exists() && !d.join("r.db").exists(), "nothing ran");
}

#[test]
fn a_task_output_hard_linked_to_the_store_is_refused_when_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("out")).unwrap();
    let recipe = PER_TASK_OUTPUTS.replace("r.yaml]", "b]");
    std::fs::write(d.join("r.yaml"), &recipe).unwrap();
    assert_eq!(runner_in(d, &["run", "r.yaml", "--cycle", "C0", "--db", "r.db"]).status.code(), Some(0));
    std::fs::remove_file(d.join("out/2.npy")).unwrap();
    // Another name for the store: no path says so, only the inode.
    std::fs::hard_link(d.join("r.db"), d.join("out/2.npy")).unwrap();
    let out = runner_in(d, &["run", "r.yaml", "--cycle", "C", "--db", "r.db"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("writing out/2.npy: it is the feedback store r.db, which no output may replace"), "{err}");
    let db = rusqlite::Connection::open(d.join("r.db")).unwrap();
    let failed: i64 = db.query_row("SELECT COUNT(*) FROM tasks WHERE status = 'failed'", [], |r| r.get(0)).unwrap();
    assert_eq!(failed, 1, "the store stays a store, with the failure in it");
    assert!(std::fs::read(d.join("out/1.npy")).unwrap().starts_with(b"\x93NUMPY"), "the others are written");
}

#[test]
fn a_task_output_that_another_step_reads_is_refused_unless_that_step_comes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("data")).unwrap();
    std::fs::write(d.join("data/2.txt"), "yesterday's\n").unwrap();
    let steps = |reader_inputs: &str| {
        format!(
            "recipe: reads\ndims:\n  i: 3\nsteps:\n  make:\n    plugin: exec\n    over: [i]\n    args:\n      \
             command: [sh, -c, 'echo {{i}} > \"$0\"', \"{{output}}\"]\n      output: \"data/{{i}}.txt\"\n  \
             show:\n    plugin: exec\n    over: [i]\n{reader_inputs}    args:\n      command: [cat, \"data/{{i}}.txt\"]\n"
        )
    };
    std::fs::write(d.join("r.yaml"), steps("")).unwrap();
    let out = runner_in(d, &["run", "r.yaml", "--cycle", "C", "--db", "r.db"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "step `make`[i=2] writes data/2.txt, which step `show`[i=2] reads (arg `command`) and does not come after \
             it: writing it would replace an input of the run"
        ),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(d.join("data/2.txt")).unwrap(), "yesterday's\n", "the input stays");
    // A step that takes `make`'s values runs after it: it reads what was written.
    std::fs::write(d.join("r.yaml"), steps("    inputs: {made: make}\n")).unwrap();
    let out = runner_in(d, &["run", "r.yaml", "--cycle", "C", "--db", "r.db"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(d.join("data/2.txt")).unwrap(), "2\n");
    // A step writing the file an earlier step read replaces the run's input.
    let in_place = "recipe: in-place\nsteps:\n  field:\n    plugin: read_npy\n    args: {path: f.npy}\n  \
                    save:\n    plugin: write_npy\n    inputs: {array: field}\n    args: {path: f.npy}\n";
    std::fs::write(d.join("p.yaml"), in_place).unwrap();
    let out = runner_in(d, &["run", "p.yaml", "--cycle", "C", "--db", "r.db"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("step `save` writes f.npy, which step `field` reads (arg `path`) and does not come after it"),
        "{err}"
    );
}
