//! The `exec` plugin through the command line, as users meet it: recipes of Python commands,
//! what the store records of them, failures with their stderr, interrupted runs that must leave
//! no process behind, and the whole process tree (runner + commands, sampled from outside)
//! within the budget.
//!
//! Needs `python3` with NumPy. `{input.NAME}` and `{output}` are written escaped: the
//! engine's templates turn them into the `{input.NAME}` / `{output}` that `exec` reads.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{SPAWN_AND_DAEMONISE, alone, beside_others, runner, runner_command, running, stderr, write};

const MIB: u64 = 1 << 20;

fn cgroups_here() -> bool {
    match runner::testing::command::support() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipped: the cgroup part (no memory cgroup can be made here: {why}); the fallback is what runs");
            false
        }
    }
}

/// Thresholds a field (argv: in.npy out.npy threshold), allocating argv[4] MiB besides.
const THRESHOLD: &str = r#"
import sys, numpy as np
field = np.load(sys.argv[1])
extra = np.ones(int(sys.argv[4]) << 20, dtype=np.uint8)
np.save(sys.argv[2], (field > float(sys.argv[3])).astype(np.float32))
"#;

/// Mean of the member files (argv: out.npy in1.npy in2.npy ...).
const MEAN: &str = r#"
import sys, numpy as np
members = [np.load(p) for p in sys.argv[2:]]
np.save(sys.argv[1], np.mean(members, axis=0).astype(np.float32))
print("members", len(members))
"#;

#[test]
fn a_recipe_of_commands_runs_hands_over_files_and_records_each_tree_s_peak() {
    let _shared = beside_others();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tools/threshold.py", THRESHOLD);
    write(dir.path(), "tools/mean.py", MEAN);
    let recipe = write(
        dir.path(),
        "commands.yaml",
        r#"recipe: commands
dims:
  member: 3
  lead: [1, 2]
steps:
  field:
    plugin: synth
    over: [member, lead]
    args: {ny: 40, nx: 50, wet_fraction: 0.4, seed: "{member}/{lead}"}
  exceed:
    plugin: exec
    over: [member, lead]
    inputs: {field: field}
    args:
      command: [python3, tools/threshold.py, "{input.field}", "{output}", 0.5, 150]
      output: "work/exceed_m{member}_T{lead}.npy"
      env: {OMP_NUM_THREADS: "1"}
  blend:
    plugin: exec
    over: [lead]
    inputs: {members: exceed}
    args:
      command: [python3, tools/mean.py, "{output}", "{input.members}"]
      output: "out/prob_T{lead}.npy"
"#,
    );
    let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--workers", "2", "--cycle", "C1", "--db", "r.db"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for lead in [1, 2] {
        let path = dir.path().join(format!("out/prob_T{lead}.npy"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(String::from_utf8_lossy(&bytes[..128]).contains("'shape': (40, 50)"));
        let values: Vec<f32> = bytes[128..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert!(values.iter().all(|v| [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0].iter().any(|m| (v - m).abs() < 1e-6)));
        // The gathered input became one argument per member.
        let log = dir.path().join(format!("runner-logs/commands/C1/blend/lead={lead}.log"));
        let log = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        assert!(log.contains("members 3\n"), "{log}");
    }
    // Each exceed task's tree held its 150 MiB: recorded as its peak, not the plugin's 64 MiB.
    let db = rusqlite::Connection::open(dir.path().join("r.db")).unwrap();
    let peaks: Vec<i64> = db
        .prepare("SELECT peak_bytes FROM tasks WHERE step = 'exceed'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(peaks.len(), 6);
    for peak in peaks {
        let peak = peak as u64;
        assert!((150 * MIB..260 * MIB).contains(&peak), "an exceed task's peak: {} MiB", peak / MIB);
    }
    // A path output holds no memory; its file's size is what its consumers read, and is recorded.
    let sizes = common::query(
        &dir.path().join("r.db"),
        "SELECT step, output_bytes, file_bytes, count(*) FROM tasks WHERE step != 'field' GROUP BY step ORDER BY step",
    );
    let npy = (128 + 40 * 50 * 4).to_string();
    let npy = npy.as_str();
    assert_eq!(sizes, [["blend", "0", npy, "2"], ["exceed", "0", npy, "6"]]);
}

#[test]
fn a_failing_command_fails_its_task_with_its_stderr_and_its_log() {
    let _shared = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "fail.yaml",
        r#"recipe: failing
dims:
  member: 2
steps:
  tool:
    plugin: exec
    over: [member]
    args:
      command: [python3, -c, "import sys\nif sys.argv[1] == '1': sys.exit('bad member ' + sys.argv[1])", "{member}"]
  independent:
    plugin: noop
"#,
    );
    let out = runner(dir.path(), &["run", recipe.to_str().unwrap(), "--cycle", "C", "--no-record"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("tool[member=1]"), "{err}");
    assert!(err.contains("exited with status 1"), "{err}");
    assert!(err.contains("| bad member 1"), "the tail of its stderr: {err}");
    assert!(err.contains("runner-logs/failing/C/tool/member=1.log"), "the log is named: {err}");
    let log = std::fs::read_to_string(dir.path().join("runner-logs/failing/C/tool/member=1.log")).unwrap();
    assert!(log.contains("bad member 1") && log.contains("--- runner: exited with status 1"), "{log}");
}

/// Waits until `done` or `timeout`; returns whether it is done.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// This process's memory cgroup folder on disk (v1), where the runner makes its own.
fn memory_cgroup_dir() -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroups.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))?;
    Some(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
}

fn interrupted_run_leaves_no_process(signal: i32) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "spawn.py", SPAWN_AND_DAEMONISE);
    let recipe = write(
        dir.path(),
        "sleepers.yaml",
        r#"recipe: sleepers
dims:
  task: 2
steps:
  sleep:
    plugin: exec
    over: [task]
    # A hint: without one, the first task of a step without history runs alone until measured.
    memory: 64MiB
    args:
      command: [python3, spawn.py, "pids-{task}"]
"#,
    );
    let mut child: Child =
        runner_command(dir.path(), &["run", recipe.to_str().unwrap(), "--workers", "2", "--no-record", "--cycle", "C"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    let runner_pid = child.id() as i32;
    let files = [dir.path().join("pids-0"), dir.path().join("pids-1")];
    assert!(
        wait_until(Duration::from_secs(60), || files.iter().all(|f| f.exists())),
        "both commands start their trees"
    );
    let pids: Vec<i32> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(pids.len(), 6);
    assert!(pids.iter().all(|&p| running(p)), "every process runs before the signal");
    unsafe { libc::kill(runner_pid, signal) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(128 + signal), "{err}");
    assert!(err.contains("interrupted: stopped, 2 command(s) killed"), "{err}");
    // SIGKILLed processes are reaped by their new parents a moment later.
    wait_until(Duration::from_secs(5), || !pids.iter().any(|&p| running(p)));
    let left: Vec<i32> = pids.iter().copied().filter(|&p| running(p)).collect();
    for &pid in &left {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    if cgroups_here() {
        assert!(left.is_empty(), "processes {left:?} of {pids:?} survived the interrupted run");
        if let Some(base) = memory_cgroup_dir() {
            let prefix = format!("runner-{runner_pid}-");
            let stale: Vec<_> = std::fs::read_dir(&base)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .collect();
            assert!(stale.is_empty(), "the runner's cgroups were removed: {stale:?}");
        }
    } else {
        // Without a cgroup the setsid'd daemons escape (documented); the rest must be gone.
        let in_trees: Vec<i32> = pids.chunks(3).flat_map(|c| [c[0], c[1]]).collect();
        assert!(!in_trees.iter().any(|p| left.contains(p)), "processes {left:?} survived");
    }
    for task in 0..2 {
        let log = dir.path().join(format!("runner-logs/sleepers/C/sleep/task={task}.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        assert!(text.contains("--- runner: killed: the run was interrupted ---"), "{text}");
    }
}

#[test]
fn ctrl_c_kills_every_command_tree_of_a_running_runner() {
    let _shared = beside_others();
    interrupted_run_leaves_no_process(libc::SIGINT);
}

#[test]
fn sigterm_kills_every_command_tree_of_a_running_runner() {
    let _shared = beside_others();
    interrupted_run_leaves_no_process(libc::SIGTERM);
}

/// Runs `recipe` with `args` (a `--budget` among them) and the store `r.db`, watching the process
/// tree: it must end 0, and the tree stay within the budget + 5% + 64 MiB. Returns the tree's
/// highest resident bytes and the run's stderr.
fn run_within_the_budget(dir: &Path, recipe: &Path, args: &[&str]) -> (u64, String) {
    let mut all = vec!["run", recipe.to_str().unwrap(), "--db", "r.db"];
    all.extend_from_slice(args);
    let budget_arg = args.iter().skip_while(|a| **a != "--budget").nth(1).expect("a --budget");
    let budget = runner::plugin::size::parse_size(budget_arg).unwrap();
    let (status, highest, err) = common::run_watching_tree(runner_command(dir, &all));
    assert_eq!(status.code(), Some(0), "{err}");
    let allowed = budget + budget / 20 + 64 * MIB;
    eprintln!("highest process-tree RSS {} MiB, allowed {} MiB", highest / MIB, allowed / MIB);
    assert!(highest <= allowed, "the tree reached {} MiB, over {} MiB", highest / MIB, allowed / MIB);
    (highest, err)
}

#[test]
fn twenty_400_mib_commands_keep_the_whole_process_tree_within_the_budget() {
    let _shared = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "big.yaml",
        r#"recipe: big-commands
dims:
  task: 20
steps:
  hog:
    plugin: exec
    over: [task]
    args:
      command: [python3, -c, "import time\ndata = b'x' * (400 << 20)\ntime.sleep(0.3)"]
    memory: 440MiB
"#,
    );
    let (highest, _) =
        run_within_the_budget(dir.path(), &recipe, &["--workers", "3", "--budget", "1GiB", "--summary", "s.json"]);
    assert!(highest > 800 * MIB, "two commands ran at once: {} MiB", highest / MIB);
    let db = rusqlite::Connection::open(dir.path().join("r.db")).unwrap();
    let (n, low): (i64, i64) = db
        .query_row("SELECT COUNT(*), MIN(peak_bytes) FROM tasks WHERE step = 'hog'", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!(n, 20);
    assert!(low as u64 >= 400 * MIB, "every command's 400 MiB is its task's peak: lowest {} MiB", low as u64 / MIB);
}

#[test]
fn commands_that_outgrow_their_reservation_are_preempted_to_keep_the_budget() {
    let _shared = beside_others();
    // Each reserves 100 MiB and then holds 1.5 GiB: two at once would hold 3 GiB of a 2 GiB
    // budget. Without being asked, the runner stops the newer, and it runs again with what it
    // held reserved; every task ends ok, and the tree stays within the budget.
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "grow.yaml",
        r#"recipe: growing-commands
dims:
  task: 4
steps:
  grow:
    plugin: exec
    over: [task]
    args:
      command: [python3, -c, "import time\ndata = bytearray(1500 << 20)\nfor i in range(0, len(data), 4096): data[i] = 1\ntime.sleep(0.5)"]
    memory: 100MiB
"#,
    );
    let (_, err) = run_within_the_budget(dir.path(), &recipe, &["--workers", "2", "--budget", "2GiB"]);
    let db = rusqlite::Connection::open(dir.path().join("r.db")).unwrap();
    let (ok, attempts, low): (i64, i64, i64) = db
        .query_row(
            "SELECT SUM(status = 'ok'), MAX(attempts), MIN(peak_bytes) FROM tasks WHERE step = 'grow'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(ok, 4, "{err}");
    assert_eq!(attempts, 1, "a preemption is not an attempt that counts against retries");
    assert!(low as u64 >= 1500 * MIB, "each task's peak is its command's: lowest {} MiB", low as u64 / MIB);
}

#[test]
fn commands_of_mixed_sizes_are_preempted_to_keep_the_budget() {
    let _shared = beside_others();
    // Six tasks reserving 50 MiB each, then holding 100 MiB to 1.3 GiB: three at once could
    // hold 3.4 GiB of a 2 GiB budget. The newest of those over their reservation yield and run
    // again with what they held; all end ok, within the budget, each with its own peak.
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "mixed.yaml",
        r#"recipe: mixed-commands
vars:
  mib: {0: 1200, 1: 200, 2: 900, 3: 100, 4: 1300, 5: 300}
dims:
  task: 6
steps:
  grow:
    plugin: exec
    over: [task]
    args:
      command: [python3, -c, "import sys, time\ndata = bytearray(int(sys.argv[1]) << 20)\nfor i in range(0, len(data), 4096): data[i] = 1\ntime.sleep(0.5)", "{mib[task]}"]
    memory: 50MiB
"#,
    );
    let (_, err) = run_within_the_budget(dir.path(), &recipe, &["--workers", "3", "--budget", "2GiB"]);
    let db = rusqlite::Connection::open(dir.path().join("r.db")).unwrap();
    let mut statement =
        db.prepare("SELECT task_index, status, attempts, peak_bytes FROM tasks ORDER BY task_index").unwrap();
    let rows: Vec<(i64, String, i64, i64)> = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let sizes = [1200, 200, 900, 100, 1300, 300];
    assert_eq!(rows.len(), 6, "{rows:?}");
    for (index, status, attempts, peak) in rows {
        let size = sizes[index as usize] * MIB;
        assert_eq!((status.as_str(), attempts), ("ok", 1), "task {index}: {err}");
        assert!(peak as u64 >= size, "task {index} held {} MiB, recorded {} MiB", size / MIB, peak as u64 / MIB);
    }
}

#[test]
fn retries_after_running_out_of_memory_never_reserve_more_than_the_budget() {
    let _shared = beside_others();
    // Each task is limited to its reservation (`--enforce-memory`) and needs 1.2 GiB: killed at
    // 100 MiB, it is tried again with more reserved, up to what the budget holds — never past
    // it, however many tasks grow at once.
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "retry.yaml",
        r#"recipe: retried-commands
dims:
  task: 3
steps:
  grow:
    plugin: exec
    over: [task]
    retries: 4
    args:
      command: [python3, -c, "import time\ndata = bytearray(1200 << 20)\nfor i in range(0, len(data), 4096): data[i] = 1\ntime.sleep(0.2)"]
    memory: 100MiB
"#,
    );
    let budget = 2u64 << 30;
    let out = runner(
        dir.path(),
        &[
            "run",
            recipe.to_str().unwrap(),
            "--workers",
            "2",
            "--budget",
            "2GiB",
            "--enforce-memory",
            "--summary",
            "s.json",
            "--db",
            "r.db",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let reserved = summary["peak_reserved_bytes"].as_u64().unwrap();
    assert!(reserved <= budget, "peak reserved {} MiB of a {} MiB budget\n{err}", reserved / MIB, budget / MIB);
    assert_eq!(summary["tasks_ok"], 3, "{err}");
    let db = rusqlite::Connection::open(dir.path().join("r.db")).unwrap();
    let attempts: i64 = db.query_row("SELECT MAX(attempts) FROM tasks", [], |r| r.get(0)).unwrap();
    assert!(attempts > 1, "the first attempts ran out of memory and were retried: {err}");
}

#[test]
fn exec_is_listed_with_its_args() {
    let _shared = beside_others();
    let out = runner(Path::new("."), &["plugins"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("exec") && text.contains("command") && text.contains("output") && text.contains("env"),
        "{text}"
    );
}

/// Copies the commands pipeline (recipe, tools, cycles file) into `dir`, keeping its layout, so
/// that it runs there as from the repository root.
fn copy_commands_pipeline(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tools = root.join("recipes/commands/tools");
    for entry in std::fs::read_dir(&tools).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "py") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            write(dir, &format!("recipes/commands/tools/{}", entry.file_name().to_string_lossy()), &text);
        }
    }
    for file in ["recipes/commands/pipeline.yaml", "recipes/cycles/commands.yaml"] {
        write(dir, file, &std::fs::read_to_string(root.join(file)).unwrap());
    }
}

/// Peak bytes of `step`'s tasks in the store's run for `cycle`, highest first.
fn peaks(db: &Path, cycle: &str, step: &str) -> Vec<u64> {
    let db = rusqlite::Connection::open(db).unwrap();
    let mut statement = db
        .prepare(
            "SELECT t.peak_bytes FROM tasks t JOIN runs r USING (run_id) WHERE r.cycle = ?1 AND t.step = ?2 \
             ORDER BY t.peak_bytes DESC",
        )
        .unwrap();
    statement.query_map((cycle, step), |row| row.get::<_, i64>(0)).unwrap().map(|p| p.unwrap() as u64).collect()
}

#[test]
fn the_commands_pipeline_s_footprints_follow_the_weather() {
    let _shared = beside_others();
    let dir = tempfile::tempdir().unwrap();
    copy_commands_pipeline(dir.path());
    let recipe = "recipes/commands/pipeline.yaml";
    for (cycle, wet) in [("dry", "0.03"), ("front", "0.55")] {
        let wet = format!("wet={wet}");
        let out =
            runner(dir.path(), &["run", recipe, "--cycle", cycle, "--set", &wet, "--workers", "2", "--db", "r.db"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        for lead in [1, 2] {
            let path = dir.path().join(format!("out/commands/{cycle}/prob_T{lead:03}.npy"));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(String::from_utf8_lossy(&bytes[..128]).contains("'shape': (4, 970, 1042)"));
        }
    }
    let db = dir.path().join("r.db");
    let (dry, front) = (peaks(&db, "dry", "smooth"), peaks(&db, "front", "smooth"));
    assert_eq!((dry.len(), front.len()), (6, 6));
    eprintln!(
        "smooth peaks: dry {:?} MiB, front {:?} MiB",
        dry.iter().map(|p| p / MIB).collect::<Vec<_>>(),
        front.iter().map(|p| p / MIB).collect::<Vec<_>>()
    );
    // A neighbourhood of a front needs several times what a dry spell does.
    assert!(front[5] > 2 * dry[0], "smooth: front {} MiB vs dry {} MiB", front[5] / MIB, dry[0] / MIB);
    let (dry, front) = (peaks(&db, "dry", "exceed"), peaks(&db, "front", "exceed"));
    // Medians: a spike in a tool's last milliseconds can go unseen on a loaded machine (see
    // `command::watch`), which must not read as the weather.
    let (dry_median, front_median) = (dry[dry.len() / 2], front[front.len() / 2]);
    assert!(front_median < dry_median + dry_median / 10, "threshold works on the whole grid: {front:?} vs {dry:?}");
}

/// The CI replay of the commands pipeline with the in-process replay's thresholds. Its steps'
/// peaks are an interpreter's baseline plus a multiple of their input files' bytes, learned as a
/// line; the front's first cycle reads 8× the bytes the line was fitted over, which the line's
/// extrapolation margin covers (without it, 1 of its 22 tasks was 8% under). With 22 tasks a
/// cycle, 2% would allow no miss at all; a Python process's cgroup peak varies from one run to
/// the next (on 2026-12-04, 3 of 5 replays had one task 0.1–0.3 MiB over a 33 MiB estimate; on
/// 2026-12-05 a CI run had two tasks of one cycle over, and a `blend` task of the same dry
/// weather measured 14.6 to 21.2 MiB), so a cycle may hold two such tasks (9.1%) and not three.
#[test]
fn the_commands_replay_holds_the_estimate_thresholds() {
    // Alone: with another test's commands beside it on two cores, one of its 22 tasks once went
    // a few percent over its estimate.
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    copy_commands_pipeline(dir.path());
    let out = runner(
        dir.path(),
        &[
            "replay",
            "recipes/cycles/commands.yaml",
            "--budget",
            "1GiB",
            "--workers",
            "2",
            "--db",
            "replay.db",
            "--max-underestimate-rate",
            "0.10",
            "--max-median-slack",
            "0.25",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
}

#[test]
fn runner_cgroup_off_forces_the_fallback_and_the_log_says_how_each_peak_was_measured() {
    let _shared = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let recipe = write(
        dir.path(),
        "one.yaml",
        "recipe: one\nsteps:\n  hold:\n    plugin: exec\n    args:\n      command: [python3, -c, \"data = b'x' * (100 << 20)\"]\n",
    );
    let footer = |env: Option<&str>| {
        let mut command = runner_command(dir.path(), &["run", recipe.to_str().unwrap(), "--cycle", "C", "--no-record"]);
        if let Some(value) = env {
            command.env("RUNNER_CGROUP", value);
        }
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let log = std::fs::read_to_string(dir.path().join("runner-logs/one/C/hold/%.log")).unwrap();
        log.lines().rfind(|l| l.starts_with("--- runner: exited")).unwrap().to_string()
    };
    let forced = footer(Some("off"));
    assert!(forced.contains("(wait4+sampled: "), "{forced}");
    if cgroups_here() {
        let default = footer(None);
        assert!(default.contains("(cgroup: ") && default.contains("cgroup with page cache"), "{default}");
    }
}
