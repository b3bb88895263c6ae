//! The command line as users meet it: exit codes, what is written, the summary JSON, plan
//! formats, the plugin listing and the help.

mod common;

use common::runner;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value as Json;

fn recipe(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes").join(name).display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn quickstart_writes_its_arrays_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = runner(
        dir.path(),
        &["run", &recipe("quickstart.yaml"), "--cycle", "2026-11-01T00Z", "--workers", "2", "--summary", "s.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for lead in [1, 2, 3, 6, 12] {
        let path = dir.path().join(format!("out/2026-11-01T00Z/prob_T{lead:03}.npy"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(bytes.len(), 128 + 3 * 970 * 1042 * 4);
        assert!(String::from_utf8_lossy(&bytes[..128]).contains("'shape': (3, 970, 1042)"));
        let probabilities = bytes[128..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()));
        let (mut low, mut high) = (f32::MAX, f32::MIN);
        for p in probabilities {
            low = low.min(p);
            high = high.max(p);
        }
        assert!(low >= 0.0 && high <= 1.0 && high > 0.0, "probabilities in [0, 1]: {low}..{high}");
    }
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    for field in [
        "recipe",
        "cycle",
        "status",
        "tasks_total",
        "tasks_ok",
        "tasks_failed",
        "tasks_skipped",
        "wall_s",
        "budget_bytes",
        "peak_rss_bytes",
        "peak_reserved_bytes",
        "spilled_bytes",
        "underestimates",
        "steps",
    ] {
        assert!(summary.get(field).is_some(), "summary lacks `{field}`: {summary}");
    }
    assert_eq!(summary["recipe"], "precip-probability");
    assert_eq!(summary["status"], "ok");
    assert_eq!(summary["tasks_total"], 190);
    assert_eq!(summary["tasks_ok"], 190);
    assert!(summary["peak_rss_bytes"].as_u64().unwrap() > 50 << 20, "peak RSS comes from the OS");
    let steps = summary["steps"].as_array().unwrap();
    let smooth = steps.iter().find(|s| s["step"] == "smooth").unwrap();
    assert_eq!(smooth["tasks"], 60);
    assert_eq!(smooth["estimate_bytes_p50"], 100 << 20, "the recipe's memory hint");
    // The neighbourhood's output alone is 3 × 970 × 1042 f32.
    assert!(smooth["peak_bytes_max"].as_u64().unwrap() >= 3 * 970 * 1042 * 4);
    for step in steps {
        for field in ["tasks", "estimate_bytes_p50", "peak_bytes_p50", "peak_bytes_max", "wall_s"] {
            assert!(step.get(field).is_some(), "step summary lacks `{field}`");
        }
    }
}

#[test]
fn a_failing_task_fails_alone_and_the_run_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    // Member 1's input file is missing; member 0's exists.
    let made = write(
        dir.path(),
        "make.yaml",
        "recipe: make\nsteps:\n  rain:\n    plugin: synth\n    args: {ny: 4, nx: 5, wet_fraction: 0.5, seed: a}\n  save:\n    plugin: write_npy\n    inputs: [rain]\n    args: {path: in/m0.npy}\n",
    );
    assert_eq!(runner(dir.path(), &["run", made.to_str().unwrap()]).status.code(), Some(0));
    let path = write(
        dir.path(),
        "fail.yaml",
        r#"recipe: failing
dims:
  member: 2
steps:
  load:
    plugin: read_npy
    over: [member]
    args: {path: "in/m{member}.npy"}
  smooth:
    plugin: nbhood
    over: [member]
    inputs: {field: load}
    args: {radius: 1}
  save:
    plugin: write_npy
    over: [member]
    inputs: {array: smooth}
    args: {path: "out/m{member}.npy"}
  independent:
    plugin: noop
"#,
    );
    let out = runner(dir.path(), &["run", path.to_str().unwrap(), "--summary", "s.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("failed: load[member=1]:") && err.contains("in/m1.npy"), "{err}");
    assert!(dir.path().join("out/m0.npy").exists(), "independent branch finished");
    assert!(!dir.path().join("out/m1.npy").exists());
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(summary["status"], "failed");
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_failed"].as_u64()), (Some(4), Some(1)));
    assert_eq!(summary["tasks_skipped"], 2);
    assert_eq!(summary["failures"][0]["key"], "member=1");
}

/// Paths that coincide only across dims (`{a}{b}` for 1,11 and 11,1) or across steps pass the
/// recipe check; the second task to claim one fails, naming the first, and the file holds the
/// first task's array, whole.
#[test]
fn two_tasks_writing_one_file_fail_the_second_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "clash.yaml",
        r#"recipe: clash
dims:
  a: [1, 11]
  b: [11, 1]
steps:
  rain:
    plugin: synth
    args: {ny: 4, nx: 5, wet_fraction: 0.5, seed: a}
  save:
    plugin: write_npy
    over: [a, b]
    inputs: [rain]
    args: {path: "out/{a}{b}.npy"}
  again:
    plugin: write_npy
    inputs: [rain]
    args: {path: "out/./x/../1111.npy"}
"#,
    );
    let out = runner(dir.path(), &["run", path.to_str().unwrap(), "--workers", "1", "--summary", "s.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!((summary["tasks_ok"].as_u64(), summary["tasks_failed"].as_u64()), (Some(4), Some(2)), "{err}");
    // Which of two clashing tasks comes second depends on the order; each clash fails one.
    let clashes: Vec<&str> = err.lines().filter(|l| l.contains("is also written by")).collect();
    assert_eq!(clashes.len(), 2, "{err}");
    assert!(clashes.iter().any(|l| l.contains("out/111.npy") && l.contains("save[a=")), "{err}");
    assert!(
        clashes.iter().any(|l| l.contains("1111.npy") && (l.contains("by again") || l.contains("by save[a=11,b=11]"))),
        "{err}"
    );
    assert!(err.contains("two tasks must not write one file (give the path a dim that tells them apart)"), "{err}");
    let bytes = std::fs::read(dir.path().join("out/111.npy")).unwrap();
    assert_eq!(bytes.len(), 128 + 4 * 5 * 4, "one whole array");
}

#[test]
fn failures_are_listed_by_index_value_and_identical_errors_grouped() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "failing.yaml",
        r#"recipe: many-failures
dims:
  i: 40
  j: 12
steps:
  same:
    plugin: read_npy
    over: [i]
    args: {path: "missing.npy"}
  each:
    plugin: read_npy
    over: [j]
    args: {path: "in/m{j}.npy"}
"#,
    );
    let out = runner(dir.path(), &["run", path.to_str().unwrap(), "--no-record", "--summary", "s.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let failed: Vec<&str> = err.lines().filter(|l| l.trim_start().starts_with("failed:")).collect();
    assert_eq!(failed.len(), 2, "{err}");
    assert!(failed[0].contains("failed: same[i=0..39] (40 tasks): reading missing.npy"), "{err}");
    // Errors that differ only in a number (the file each task read) are one error too.
    assert!(failed[1].contains("failed: each[j=0..11] (12 tasks): reading in/m{0..11}.npy: No such file"), "{err}");
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let keys: Vec<String> = summary["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}[{}]", f["step"].as_str().unwrap(), f["key"].as_str().unwrap()))
        .collect();
    let expected: Vec<String> =
        (0..40).map(|i| format!("same[i={i}]")).chain((0..12).map(|j| format!("each[j={j}]"))).collect();
    assert_eq!(keys, expected, "every failure, by step in recipe order, then by index value");
}

/// Runs `runner` with stderr on a new pseudo-terminal (stdout to a pipe, `NO_COLOR` and
/// `RUST_LOG` as given), returning what it wrote to the terminal.
fn runner_on_terminal(dir: &Path, args: &[&str], no_color: Option<&str>) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain libc calls on a descriptor this function owns; each result is checked.
    let (master, slave) = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(slave >= 0, "opening the terminal: {}", std::io::Error::last_os_error());
        // A terminal of 200 columns, so lines are drawn whole.
        let size = libc::winsize { ws_row: 40, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        assert_eq!(libc::ioctl(slave, libc::TIOCSWINSZ, &size), 0);
        (std::fs::File::from(OwnedFd::from_raw_fd(master)), OwnedFd::from_raw_fd(slave))
    };
    let mut command = common::runner_command(dir, args);
    command.stderr(slave);
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let mut child = command.spawn().expect("running runner");
    // The terminal's other end is only the child's now: reading ends (EIO) when it exits.
    drop(command);
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut text = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buffer) {
            text.extend_from_slice(&buffer[..n]);
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    child.wait().unwrap();
    reader.join().unwrap()
}

/// A recipe of one task and more workers than any machine here has CPUs: the run warns that
/// the extra workers cannot run faster and goes on.
fn warning_run(dir: &Path) -> Vec<String> {
    write(dir, "one.yaml", "recipe: one\nsteps:\n  a:\n    plugin: noop\n");
    ["run", "one.yaml", "--no-record", "--workers", "1024"].map(String::from).to_vec()
}

#[test]
fn warnings_in_a_log_file_have_no_colour_and_no_module_paths() {
    let dir = tempfile::tempdir().unwrap();
    let args = warning_run(dir.path());
    let log = std::fs::File::create(dir.path().join("log.txt")).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let status = common::runner_command(dir.path(), &args).stderr(log).status().unwrap();
    let text = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
    assert!(status.success(), "{text}");
    assert!(text.contains("warning: --workers 1024 is more than the"), "{text}");
    assert!(!text.contains("\x1b["), "colour codes in a file: {text:?}");
    assert!(!text.contains("runner::") && !text.contains("WARN"), "internal prefixes: {text:?}");
}

#[test]
fn warnings_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let args = warning_run(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let coloured = runner_on_terminal(dir.path(), &args, None);
    assert!(coloured.contains("\x1b[1;33mwarning:\x1b[0m --workers 1024 is more than"), "{coloured:?}");
    for no_color in ["1", "true"] {
        let plain = runner_on_terminal(dir.path(), &args, Some(no_color));
        assert!(plain.contains("warning: --workers 1024 is more than"), "{plain:?}");
        assert!(!plain.contains("\x1b[1;33m") && !plain.contains("runner::"), "NO_COLOR={no_color}: {plain:?}");
    }
}

#[test]
fn the_progress_bar_on_a_terminal_shows_running_tasks_memory_and_an_eta() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "slow.yaml",
        "recipe: slow\ndims:\n  i: 24\nsteps:\n  a:\n    plugin: alloc\n    over: [i]\n    args: {bytes: 1MiB, hold_ms: 100}\n",
    );
    let text = runner_on_terminal(
        dir.path(),
        &["run", "slow.yaml", "--no-record", "--workers", "2", "--budget", "1GiB"],
        None,
    );
    assert!(text.contains("/24 tasks · "), "{text:?}");
    assert!(text.contains(" running · mem ") && text.contains(" / 1.00 GiB (buffers "), "{text:?}");
    assert!(text.contains("· ETA "), "an ETA once tasks have finished: {text:?}");
    assert!(text.contains("slow ") && text.contains(": ok"), "the closing line: {text:?}");
}

#[test]
fn plan_shows_counts_estimates_and_sources_in_three_formats() {
    let dir = tempfile::tempdir().unwrap();
    let text = runner(dir.path(), &["plan", &recipe("quickstart.yaml"), "--cycle", "C"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("190 tasks"), "{text}");
    assert!(text.contains("smooth") && text.contains("100 MiB") && text.contains("hint"), "{text}");
    assert!(text.contains("largest task: smooth"), "{text}");

    let json = runner(dir.path(), &["plan", &recipe("many_inputs.yaml"), "--format", "json"]);
    let json: Json = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["tasks_total"], 1_200_001);
    assert_eq!(json["steps"][1]["inputs"][0]["gathered"], 5);
    assert_eq!(json["steps"][0]["estimate_source"], "plugin");

    let dot = runner(dir.path(), &["plan", &recipe("quickstart.yaml"), "--format", "dot"]);
    let dot = String::from_utf8_lossy(&dot.stdout);
    assert!(dot.starts_with("digraph") && dot.contains("s2 -> s3") && dot.contains("(gather)"), "{dot}");
    assert!(dir.path().read_dir().unwrap().next().is_none(), "plan runs nothing and writes nothing");
}

#[test]
fn plugins_are_listed_with_their_args() {
    let out = runner(Path::new("."), &["plugins"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for plugin in ["noop", "alloc", "synth", "threshold", "nbhood", "mean", "read_npy", "write_npy"] {
        assert!(text.lines().any(|l| l.starts_with(plugin)), "{plugin} missing from:\n{text}");
    }
    assert!(text.contains("wet_fraction") && text.contains("fuzzy_factor") && text.contains("hold_ms"));
}

#[test]
fn help_teaches_by_example() {
    for command in ["run", "plan"] {
        let out = runner(Path::new("."), &[command, "--help"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Examples:") && text.contains(&format!("runner {command} recipes/")), "{text}");
    }
    let run_help = String::from_utf8_lossy(&runner(Path::new("."), &["run", "--help"]).stdout).into_owned();
    assert!(run_help.contains("--budget") && run_help.contains("Exit codes"));
    // Ranges, units and defaults are stated.
    assert!(run_help.contains("--workers <N>") && run_help.contains("1 to 1024"), "{run_help}");
    assert!(run_help.contains("--budget <SIZE|N%>") && run_help.contains("×1024"), "{run_help}");
    let out_of_range = runner(Path::new("."), &["run", &recipe("quickstart.yaml"), "--workers", "1025"]);
    assert_eq!(out_of_range.status.code(), Some(2));
    assert!(stderr(&out_of_range).contains("1..=1024"), "{}", stderr(&out_of_range));
    let replay_help = String::from_utf8_lossy(&runner(Path::new("."), &["replay", "--help"]).stdout).into_owned();
    assert!(replay_help.contains("`0.02` for 2%") && replay_help.contains("--warmup <N>"), "{replay_help}");
    // Each command's line in the overview says what that command does, and no two say the same.
    let overview = String::from_utf8_lossy(&runner(Path::new("."), &["--help"]).stdout).into_owned();
    let summary = |command: &str| {
        let line = overview.lines().find(|l| l.trim_start().starts_with(&format!("{command} ")));
        line.map(|l| l.trim_start()[command.len()..].trim().to_owned()).unwrap_or_default()
    };
    let commands = ["run", "plan", "history", "report", "replay", "simulate", "prune", "plugins"];
    let summaries: Vec<String> = commands.iter().map(|c| summary(c)).collect();
    for (command, text) in commands.iter().zip(&summaries) {
        assert!(!text.is_empty(), "`{command}` has no summary in:\n{overview}");
    }
    assert!(summary("simulate").starts_with("Predict"), "{overview}");
    assert!(summary("prune").starts_with("Delete old runs"), "{overview}");
    let distinct: std::collections::HashSet<&String> = summaries.iter().collect();
    assert_eq!(distinct.len(), summaries.len(), "{overview}");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = runner(dir.path(), &["run", "no-such.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no-such.yaml: cannot read the recipe"), "{}", stderr(&missing));
    let budget = runner(dir.path(), &["run", &recipe("quickstart.yaml"), "--budget", "lots"]);
    assert_eq!(budget.status.code(), Some(2));
    assert!(stderr(&budget).contains("invalid size `lots`"), "{}", stderr(&budget));
    // A size without its unit is bytes: a budget no task fits is refused, not run with every task oversized.
    let unitless = runner(dir.path(), &["run", &recipe("quickstart.yaml"), "--budget", "4"]);
    assert_eq!(unitless.status.code(), Some(2));
    assert!(stderr(&unitless).contains("4 bytes is below the least budget of 1MiB"), "{}", stderr(&unitless));
    let set = runner(dir.path(), &["plan", &recipe("quickstart.yaml"), "--set", "novalue"]);
    assert_eq!(set.status.code(), Some(2));
    assert!(stderr(&set).contains("expected KEY=VALUE"));
    // A Slurm option without Slurm would do nothing: it is refused, not ignored.
    let partition = runner(dir.path(), &["run", &recipe("quickstart.yaml"), "--db", "s.db", "--partition", "short"]);
    assert_eq!(partition.status.code(), Some(2));
    assert!(stderr(&partition).contains("--partition is for runs on Slurm"), "{}", stderr(&partition));
    let cpus = runner(dir.path(), &["run", &recipe("quickstart.yaml"), "--db", "s.db", "--cpus-per-task", "4"]);
    assert_eq!(cpus.status.code(), Some(2));
    assert!(stderr(&cpus).contains("--cpus-per-task is for runs on Slurm"), "{}", stderr(&cpus));
    assert!(!dir.path().join("out").exists(), "nothing ran");
    let last = runner(dir.path(), &["history", "--last", "0"]);
    assert_eq!(last.status.code(), Some(2));
    assert!(stderr(&last).contains("0 is not in 1..=1000000"), "{}", stderr(&last));
    // Flags that would change nothing are refused: each is for another form of `history`.
    for args in [
        &["--run", "3"][..],
        &["--durations", "--last", "3"],
        &["--failed", "--last", "3"],
        &["--durations", "--interrupted"],
    ] {
        let out = runner(dir.path(), &[&["history"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot be used with") || stderr(&out).contains("required"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_task_larger_than_the_machine_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "huge.yaml",
        "recipe: huge\nsteps:\n  first:\n    plugin: noop\n  huge:\n    plugin: alloc\n    args: {bytes: 1TiB}\n",
    );
    for command in ["run", "plan"] {
        let out = runner(dir.path(), &[command, recipe.to_str().unwrap(), "--db", "s.db"]);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("step `huge` needs 1.00 TiB a task (plugin estimate)"), "{command}: {err}");
        assert!(err.contains("--allow-oversized"), "{err}");
    }
    assert!(
        !dir.path().join("s.db").exists() || {
            let db = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
            db.query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0)).unwrap() == 0
        },
        "nothing ran"
    );
}

#[test]
fn the_python_section_and_python_flag_choose_the_interpreter_of_python_steps() {
    let dir = tempfile::tempdir().unwrap();
    let step = "steps:\n  a: {plugin: python, args: {call: \"builtins:abs\", args: [-3]}}\n";
    let section = format!("recipe: sec\npython: {{interpreter: /no/such/python}}\n{step}");
    write(dir.path(), "section.yaml", &section);
    // The section's interpreter is every python step's; one that is not there is refused
    // before anything runs, at the line that names it.
    let out = runner(dir.path(), &["run", "section.yaml", "--db", "s.db"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("section.yaml:2:23"), "{}", stderr(&out));
    assert!(stderr(&out).contains("the Python interpreter `/no/such/python` is not there"), "{}", stderr(&out));
    // --python wins over the section.
    let out = runner(dir.path(), &["run", "section.yaml", "--db", "s.db", "--python", "python3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A step's own `python:` wins over both.
    let own = section.replace("args: [-3]}", "args: [-3], python: /no/such/other}");
    write(dir.path(), "own.yaml", &own);
    let out = runner(dir.path(), &["plan", "own.yaml", "--python", "python3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`/no/such/other` is not there"), "{}", stderr(&out));
    // A misspelt setting is named with what the section takes.
    write(dir.path(), "typo.yaml", &format!("recipe: sec\npython: {{interpretr: python3}}\n{step}"));
    let out = runner(dir.path(), &["plan", "typo.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown key `interpretr` in `python`")
            && stderr(&out).contains("(did you mean `interpreter`?)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_spill_folder_that_cannot_be_used_fails_the_run_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "afile", "not a folder");
    let out = runner(dir.path(), &["run", &recipe("quickstart.yaml"), "--db", "s.db", "--spill-dir", "afile"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("the spill folder afile cannot be used: File exists"), "{}", stderr(&out));
    assert!(!dir.path().join("out").exists(), "nothing ran");
}

#[test]
fn slurm_that_cannot_be_reached_fails_the_run_once_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["run", &recipe("quickstart.yaml"), "--db", "s.db", "--executor", "slurm"];
    // No folder of PATH holds Slurm's commands.
    let out = common::runner_command_with_env(dir.path(), &args, [("PATH", dir.path())]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("--executor slurm: cannot reach the cluster: cannot run `scontrol show config`"), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("scontrol")).count(), 1, "said once: {text}");
    assert!(!dir.path().join("out").exists(), "nothing ran");
}
