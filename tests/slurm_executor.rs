//! `runner run --executor slurm` against a real cluster: the three-node one `.ci/slurm/up`
//! starts (found through its env file under `$RUNNER_SLURM_DIR`, default `target/slurm`). Without
//! a running cluster these tests fail and say to run `.ci/slurm/up`; they never skip. The test
//! that takes a node down runs alone ([`CLUSTER`]): the others' jobs must not be lost with it.
//!
//! Each test runs the `runner` binary in a fresh directory with `SLURM_CONF` pointing at the
//! cluster, and checks what a user would: the outputs (byte for byte against the local
//! executor's), the store's rows, the `--mem` each job was submitted with (the run folder's
//! `jobs.tsv`), and what `squeue` says of the jobs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use runner::testing::executor::JOB_BASELINE;
use runner::testing::plan::PLUGIN_ESTIMATE_ALLOWANCE;

use common::{stderr, write};

const MIB: u64 = 1 << 20;

/// Every test shares the cluster (a read lock) except the one that loses a node (the write lock).
static CLUSTER: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn sharing_the_cluster() -> std::sync::RwLockReadGuard<'static, ()> {
    CLUSTER.read().unwrap_or_else(|p| p.into_inner())
}

fn cluster_dir() -> PathBuf {
    std::env::var_os("RUNNER_SLURM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/slurm"))
}

/// `SLURM_CONF` of the cluster `.ci/slurm/up` started; panics, saying how to start one, when
/// there is none or it does not answer.
fn slurm_conf() -> String {
    let env_file = cluster_dir().join("env");
    let text = std::fs::read_to_string(&env_file).unwrap_or_else(|_| {
        panic!("no Slurm cluster is up ({} does not exist): run .ci/slurm/up first", env_file.display())
    });
    let conf = text
        .lines()
        .find_map(|l| l.strip_prefix("export SLURM_CONF="))
        .unwrap_or_else(|| panic!("{} has no `export SLURM_CONF=` line: run .ci/slurm/up again", env_file.display()))
        .to_string();
    let ping = Command::new("scontrol").arg("ping").env("SLURM_CONF", &conf).output();
    match ping {
        Ok(out) if String::from_utf8_lossy(&out.stdout).contains("is UP") => conf,
        Ok(out) => panic!(
            "the Slurm cluster of {} does not answer ({}): run .ci/slurm/up",
            env_file.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        Err(error) => panic!("cannot run scontrol ({error}): install Slurm's clients with .ci/slurm/up"),
    }
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "stderr:\n{}", stderr(out));
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, into);
            } else {
                into.insert(path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files);
    files
}

/// Asserts the two folders hold the same files, byte for byte, and returns how many.
fn assert_same_files(local: &Path, remote: &Path) -> usize {
    let (a, b) = (files_under(local), files_under(remote));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same files");
    for (path, bytes) in &a {
        assert!(bytes == &b[path], "{} differs between the local and the Slurm run", path.display());
    }
    a.len()
}

/// One `sbatch` of a run, as its run folder's `jobs.tsv` lists it.
#[derive(Debug, Clone)]
struct Submitted {
    job: u64,
    step: String,
    elements: u32,
    mem_bytes: u64,
    time: Option<String>,
}

/// The run folders `--shared-dir shared` of the runs in `dir` left (one per run).
fn run_folders(dir: &Path) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir.join("shared"))
        .unwrap_or_else(|e| panic!("{}/shared: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    folders
}

/// The jobs a run folder's `jobs.tsv` lists: `job step elements mem time`, `mem` as sbatch got it.
fn submitted(run_folder: &Path) -> Vec<Submitted> {
    let path = run_folder.join("jobs.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("job\tstep\telements\tmem\ttime"), "{}", path.display());
    lines
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "{line:?} in {}", path.display());
            let mem_mib: u64 =
                f[3].strip_suffix('M').and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
            Submitted {
                job: f[0].parse().unwrap(),
                step: f[1].to_string(),
                elements: f[2].parse().unwrap(),
                mem_bytes: mem_mib * MIB,
                time: (f[4] != "-").then(|| f[4].to_string()),
            }
        })
        .collect()
}

/// `squeue`'s state of every element of `job` still known to the controller (finished jobs
/// stay listed for `MinJobAge`).
fn queue_states(conf: &str, job: u64) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-t", "all", "-j", &job.to_string(), "-o", "%T"])
        .env("SLURM_CONF", conf)
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// `--mem` as sbatch gets it for a reservation of `reserved` bytes: plus the baseline, whole MiB.
fn mem_for(reserved: u64) -> u64 {
    (reserved + JOB_BASELINE).div_ceil(MIB) * MIB
}

fn store(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join("r.db")).unwrap()
}

/// Per step: (rows, rows ok, rows with one attempt, least peak), from the store's one run.
fn rows_per_step(db: &rusqlite::Connection) -> BTreeMap<String, (u64, u64, u64, u64)> {
    let mut statement = db
        .prepare(
            "SELECT step, count(*), sum(status = 'ok' AND error IS NULL), sum(attempts = 1), min(peak_bytes) \
             FROM tasks GROUP BY step",
        )
        .unwrap();
    statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (
                    row.get::<_, i64>(1)? as u64,
                    row.get::<_, i64>(2)? as u64,
                    row.get::<_, i64>(3)? as u64,
                    row.get::<_, i64>(4)? as u64,
                ),
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn executors(db: &rusqlite::Connection) -> Vec<String> {
    let mut statement = db.prepare("SELECT executor FROM runs ORDER BY run_id").unwrap();
    statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn the_quickstart_on_slurm_writes_the_local_outputs_and_records_every_task() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let recipe =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/quickstart.yaml")).unwrap();
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [local.path(), remote.path()] {
        write(dir, "quickstart.yaml", &recipe);
    }
    let out = common::runner_with_env(
        local.path(),
        &["run", "quickstart.yaml", "--cycle", "C", "--workers", "2", "--no-record"],
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);
    let args = ["run", "quickstart.yaml", "--cycle", "C", "--executor", "slurm", "--workers", "4"];
    let out = common::runner_with_env(
        remote.path(),
        &[&args[..], &["--shared-dir", "shared", "--db", "r.db"]].concat(),
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);
    let said = stderr(&out);
    assert!(said.contains("ok — 190 tasks (190 ok, 0 failed, 0 skipped)"), "{said}");
    assert!(said.contains("no local budget (jobs have their own --mem)"), "{said}");
    assert!(!said.contains("TiB"), "{said}");

    assert_eq!(assert_same_files(&local.path().join("out"), &remote.path().join("out")), 5);
    let db = store(remote.path());
    assert_eq!(executors(&db), ["slurm"]);
    let rows = rows_per_step(&db);
    let expected = [("exceed", 60), ("field", 60), ("probability", 5), ("save", 5), ("smooth", 60)];
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (step, tasks) in expected {
        let (count, ok, first_try, least_peak) = rows[step];
        assert_eq!((count, ok, first_try), (tasks, tasks, tasks), "step {step}: {rows:?}");
        // Every task but save's (it writes a file from a mapped input) allocates its output
        // (a 970 × 1042 f32 field, 4 MB) at least: measured inside its job.
        if step != "save" {
            assert!(least_peak >= 970 * 1042 * 4, "step {step}'s least peak: {least_peak} bytes");
        }
    }
    // Chunked: 60 tasks over --workers 4 are 4 jobs of 15 tasks, not 60 jobs.
    let folders = run_folders(remote.path());
    assert_eq!(folders.len(), 1);
    let jobs = submitted(&folders[0]);
    let field_elements: u32 = jobs.iter().filter(|j| j.step == "field").map(|j| j.elements).sum();
    assert_eq!(field_elements, 4, "{jobs:?}");
    // What only the tasks needed is gone; what people read is kept.
    for part in ["values", "results", "units", "scratch"] {
        assert!(!folders[0].join(part).exists(), "{part} is removed after the run");
    }
    assert!(folders[0].join("jobs.tsv").is_file() && folders[0].join("logs").is_dir());
}

/// Thresholds a field (argv: in.npy out.npy threshold), holding argv[4] MiB besides for a
/// tenth of a second: a peak in a command's last 20 ms before it exits is not seen (see
/// `command::watch`), and one allocated just before the exit was recorded at 14 MiB, not 30,
/// in 1 of 3 runs of this file.
const THRESHOLD: &str = r#"
import sys, time, numpy as np
field = np.load(sys.argv[1])
extra = np.ones(int(sys.argv[4]) << 20, dtype=np.uint8)
time.sleep(0.1)
np.save(sys.argv[2], (field > float(sys.argv[3])).astype(np.float32))
"#;

/// Mean of the member files (argv: out.npy in1.npy in2.npy ...).
const MEAN: &str = r#"
import sys, numpy as np
members = [np.load(p) for p in sys.argv[2:]]
np.save(sys.argv[1], np.mean(members, axis=0).astype(np.float32))
"#;

const COMMANDS: &str = r#"recipe: slurm-commands
dims:
  member: 3
  lead: [1, 2]
steps:
  field:
    plugin: synth
    over: [member, lead]
    args: {ny: 60, nx: 70, wet_fraction: 0.4, seed: "{member}/{lead}"}
  exceed:
    plugin: exec
    over: [member, lead]
    inputs: {field: field}
    args:
      command: [python3, tools/threshold.py, "{input.field}", "{output}", 0.5, 30]
      output: "work/exceed_m{member}_T{lead}.npy"
      env: {OMP_NUM_THREADS: "1"}
  blend:
    plugin: exec
    over: [lead]
    inputs: {members: exceed}
    args:
      command: [python3, tools/mean.py, "{output}", "{input.members}"]
      output: "out/prob_T{lead}.npy"
"#;

#[test]
fn a_recipe_of_commands_on_slurm_writes_the_local_outputs() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [local.path(), remote.path()] {
        write(dir, "tools/threshold.py", THRESHOLD);
        write(dir, "tools/mean.py", MEAN);
        write(dir, "commands.yaml", COMMANDS);
    }
    let out = common::runner_with_env(
        local.path(),
        &["run", "commands.yaml", "--cycle", "C", "--workers", "2", "--no-record"],
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);
    let args = ["run", "commands.yaml", "--cycle", "C", "--executor", "slurm", "--workers", "6", "--db", "r.db"];
    let out = common::runner_with_env(
        remote.path(),
        &[&args[..], &["--shared-dir", "shared"]].concat(),
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);

    assert_eq!(assert_same_files(&local.path().join("out"), &remote.path().join("out")), 2);
    assert_eq!(assert_same_files(&local.path().join("work"), &remote.path().join("work")), 6);
    let db = store(remote.path());
    assert_eq!(executors(&db), ["slurm"]);
    let rows = rows_per_step(&db);
    assert_eq!(rows["field"].0, 6);
    assert_eq!(rows["blend"].0, 2);
    let (count, ok, _, least_peak) = rows["exceed"];
    assert_eq!((count, ok), (6, 6), "{rows:?}");
    // Each threshold command held 30 MiB besides Python and NumPy: measured inside its job.
    assert!(least_peak >= 30 * MIB, "an exceed task's peak: {} MiB", least_peak / MIB);
    // The commands' logs are kept in the run folder, one per task.
    let folder = &run_folders(remote.path())[0];
    let log = folder.join("logs/blend/lead=1.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(text.contains("python3 tools/mean.py"), "{text}");
}

#[test]
fn a_job_over_its_mem_is_retried_bigger_and_succeeds() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    // The plugin claims 1 MiB and allocates 150 MiB without telling the ledger: the first job's
    // --mem (1 MiB + the baseline) cannot hold it; `retries: 1` runs it again, bigger.
    write(
        dir.path(),
        "outgrows.yaml",
        "recipe: outgrows\nsteps:\n  grow:\n    plugin: alloc\n    retries: 1\n    \
         args: {bytes: 150MiB, estimate: 1MiB, announce: false, output_bytes: 1KiB}\n",
    );
    let args = ["run", "outgrows.yaml", "--cycle", "C", "--executor", "slurm", "--shared-dir", "shared"];
    let out = common::runner_with_env(dir.path(), &[&args[..], &["--db", "r.db"]].concat(), [("SLURM_CONF", &conf)]);
    assert_exit(&out, 0);

    let db = store(dir.path());
    let (attempts, status, error, peak, estimate): (i64, String, Option<String>, i64, i64) = db
        .query_row(
            "SELECT attempts, status, error, peak_bytes, estimate_bytes FROM tasks WHERE step = 'grow'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!((attempts, status.as_str(), error), (2, "ok", None));
    assert!(peak as u64 >= 150 * MIB, "the retry's peak: {} MiB", peak / MIB as i64);

    let jobs = submitted(&run_folders(dir.path())[0]);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[0].mem_bytes, mem_for(MIB + PLUGIN_ESTIMATE_ALLOWANCE), "{jobs:?}");
    assert!(jobs[1].mem_bytes >= peak as u64, "the retry asks for more than the task took: {jobs:?}");
    // The row holds the attempt that succeeded, admitted above what the first was killed at.
    assert_eq!(jobs[1].mem_bytes, mem_for(estimate as u64), "{jobs:?}");
    assert!(jobs[1].mem_bytes > jobs[0].mem_bytes, "{jobs:?}");
    assert_eq!(queue_states(&conf, jobs[0].job), ["OUT_OF_MEMORY"], "the first job was killed at its --mem");
    assert_eq!(queue_states(&conf, jobs[1].job), ["COMPLETED"]);
}

/// Four tasks of 40 MiB, of a plugin that guesses 400 MiB.
const LEARNS: &str = "recipe: learns\ndims: {member: 4}\nsteps:\n  hold:\n    plugin: alloc\n    over: [member]\n    \
                      args: {bytes: 40MiB, estimate: 400MiB, hold_ms: 100}\n";

#[test]
fn a_later_cycle_s_mem_is_learned_from_the_earlier_ones() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "learns.yaml", LEARNS);
    let mut runs = Vec::new();
    for cycle in ["C1", "C2"] {
        let shared = format!("shared/{cycle}");
        let args = ["run", "learns.yaml", "--cycle", cycle, "--executor", "slurm", "--workers", "4"];
        let out = common::runner_with_env(
            dir.path(),
            &[&args[..], &["--shared-dir", &shared, "--db", "r.db"]].concat(),
            [("SLURM_CONF", &conf)],
        );
        assert_exit(&out, 0);
        let folders: Vec<PathBuf> =
            std::fs::read_dir(dir.path().join(&shared)).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(folders.len(), 1);
        runs.push(submitted(&folders[0]));
    }
    let db = store(dir.path());
    let estimates = |cycle: &str| -> Vec<(u64, String, u64, i64)> {
        let mut statement = db
            .prepare(
                "SELECT t.estimate_bytes, t.estimate_source, t.peak_bytes, t.attempts FROM tasks t \
                 JOIN runs r USING (run_id) WHERE r.cycle = ?1 ORDER BY t.task_index",
            )
            .unwrap();
        statement
            .query_map([cycle], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get::<_, i64>(2)? as u64, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let (first, second) = (estimates("C1"), estimates("C2"));
    assert_eq!((first.len(), second.len()), (4, 4));
    // Cycle 1 asks for the plugin's guess; cycle 2 for what cycle 1's tasks really took.
    for (estimate, source, peak, attempts) in &first {
        assert_eq!((*estimate, source.as_str(), *attempts), (400 * MIB + PLUGIN_ESTIMATE_ALLOWANCE, "plugin", 1));
        assert!((40 * MIB..60 * MIB).contains(peak), "a 40 MiB task's peak: {peak}");
    }
    for job in &runs[0] {
        assert_eq!(job.mem_bytes, mem_for(400 * MIB + PLUGIN_ESTIMATE_ALLOWANCE), "cycle 1's jobs: {:?}", runs[0]);
        assert_eq!(job.time, None, "no timeout and no history: the partition's time limit");
    }
    // Cycle 2's --time is learned too: 3 × its longest task (~0.1 s) plus a minute, in minutes.
    for job in &runs[1] {
        assert_eq!(job.time.as_deref(), Some("2"), "cycle 2's jobs: {:?}", runs[1]);
    }
    let peak_max = first.iter().map(|t| t.2).max().unwrap();
    for (estimate, source, _, attempts) in &second {
        assert_eq!((source.as_str(), *attempts), ("history", 1), "{second:?}");
        assert!(
            (peak_max..peak_max + peak_max / 2).contains(estimate),
            "cycle 2's estimate {estimate} is cycle 1's peak {peak_max} plus a margin"
        );
    }
    let learned = second.iter().map(|t| t.0).max().unwrap();
    assert!(!runs[1].is_empty());
    for job in &runs[1] {
        assert!(job.mem_bytes <= mem_for(learned), "cycle 2's jobs ask for the learned estimate: {:?}", runs[1]);
        assert!(job.mem_bytes >= mem_for(peak_max), "cycle 2's jobs: {:?}", runs[1]);
    }
}

#[test]
fn ctrl_c_cancels_the_run_s_jobs() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "sleepers.yaml",
        "recipe: sleepers\ndims: {task: 2}\nsteps:\n  sleep:\n    plugin: exec\n    over: [task]\n    \
         memory: 16MiB\n    timeout: 10m\n    args:\n      command: [sleep, \"300\"]\n",
    );
    let args = ["run", "sleepers.yaml", "--cycle", "C", "--executor", "slurm", "--workers", "2", "--no-record"];
    let mut child = common::runner_command_with_env(
        dir.path(),
        &[&args[..], &["--shared-dir", "shared"]].concat(),
        [("SLURM_CONF", &conf)],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Wait for the jobs to be submitted and running.
    let deadline = Instant::now() + Duration::from_secs(60);
    let jobs = loop {
        let jobs: Vec<Submitted> = std::fs::read_dir(dir.path().join("shared"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("jobs.tsv").exists())
            .flat_map(|e| submitted(&e.path()))
            .collect();
        let elements: u32 = jobs.iter().map(|j| j.elements).sum();
        if elements == 2 && jobs.iter().all(|j| queue_states(&conf, j.job).iter().all(|s| s == "RUNNING")) {
            break jobs;
        }
        assert!(Instant::now() < deadline, "the two sleepers are not running after 60 s: {jobs:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // `--time` is the task's timeout plus the margin for starting and reporting (in minutes).
    for job in &jobs {
        assert_eq!(job.time.as_deref(), Some("11"), "{jobs:?}");
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{said}");
    // scancel has been called before the runner exited; the node takes a moment to clean up.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let states: Vec<String> = jobs.iter().flat_map(|j| queue_states(&conf, j.job)).collect();
        if states.iter().all(|s| s == "CANCELLED") {
            assert_eq!(states.len(), 2);
            break;
        }
        assert!(
            states.iter().all(|s| s == "CANCELLED" || s == "COMPLETING"),
            "after Ctrl-C the jobs are cancelled, not {states:?}"
        );
        assert!(Instant::now() < deadline, "the jobs are still {states:?} 30 s after Ctrl-C");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_job_slurm_refuses_fails_its_tasks_with_slurm_s_error() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    // No node has 100 TiB: sbatch refuses the job at once.
    write(
        dir.path(),
        "huge.yaml",
        "recipe: huge\ndims: {task: 3}\nsteps:\n  huge:\n    plugin: alloc\n    over: [task]\n    \
         memory: 100TiB\n    args: {bytes: 1MiB}\n  small:\n    plugin: alloc\n    args: {bytes: 1MiB}\n",
    );
    let started = Instant::now();
    let args = ["run", "huge.yaml", "--cycle", "C", "--executor", "slurm", "--shared-dir", "shared", "--no-record"];
    let out =
        common::runner_with_env(dir.path(), &[&args[..], &["--summary", "s.json"]].concat(), [("SLURM_CONF", &conf)]);
    assert_exit(&out, 1);
    assert!(started.elapsed() < Duration::from_secs(60), "the run ended, it did not hang");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!((summary["tasks_failed"].as_u64(), summary["tasks_ok"].as_u64()), (Some(3), Some(1)), "{summary}");
    for failure in summary["failures"].as_array().unwrap() {
        let error = failure["error"].as_str().unwrap();
        assert!(error.contains("submitting to Slurm failed: `sbatch --parsable --job-name=huge/huge"), "{error}");
        assert!(error.contains("Memory specification can not be satisfied"), "{error}");
    }
}

#[test]
fn a_job_whose_runner_dies_fails_its_task_with_the_job_s_state_and_log() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    // The command kills the `runner task` that started it: the job ends without a result file.
    write(
        dir.path(),
        "dies.yaml",
        "recipe: dies\nsteps:\n  dies:\n    plugin: exec\n    memory: 16MiB\n    \
         args:\n      command: [sh, -c, \"kill -9 $PPID\"]\n",
    );
    let args = ["run", "dies.yaml", "--cycle", "C", "--executor", "slurm", "--shared-dir", "shared", "--no-record"];
    let out =
        common::runner_with_env(dir.path(), &[&args[..], &["--summary", "s.json"]].concat(), [("SLURM_CONF", &conf)]);
    assert_exit(&out, 1);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let error = summary["failures"][0]["error"].as_str().unwrap_or_else(|| panic!("{summary}"));
    assert!(error.contains("its Slurm job ended (FAILED) without the task's result"), "{error}");
    let log = error.rsplit("the job's log: ").next().unwrap();
    assert!(Path::new(log).is_file(), "the job's log {log} exists");
}

#[test]
fn quick_tasks_share_a_job_once_their_times_are_known() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "quick.yaml", "recipe: quick\ndims: {i: 8}\nsteps:\n  a:\n    plugin: noop\n    over: [i]\n");
    let mut elements = Vec::new();
    for cycle in ["C1", "C2"] {
        let shared = format!("shared/{cycle}");
        let args = ["run", "quick.yaml", "--cycle", cycle, "--executor", "slurm", "--workers", "8", "--db", "r.db"];
        let out = common::runner_with_env(
            dir.path(),
            &[&args[..], &["--shared-dir", &shared]].concat(),
            [("SLURM_CONF", &conf)],
        );
        assert_exit(&out, 0);
        let folders: Vec<PathBuf> =
            std::fs::read_dir(dir.path().join(&shared)).unwrap().flatten().map(|e| e.path()).collect();
        elements.push(submitted(&folders[0]).iter().map(|j| j.elements).sum::<u32>());
    }
    // Cycle 1 knows nothing of the tasks: spread over --workers jobs, one task each. Cycle 2
    // knows they take no time: one job runs all eight (a job costs a second to start).
    assert_eq!(elements, [8, 1]);
}

/// Copies a member field after `sleep` seconds (argv: in.npy out.npy sleep).
const SLOW_COPY: &str = r#"
import sys, time, numpy as np
field = np.load(sys.argv[1])
time.sleep(float(sys.argv[3]))
np.save(sys.argv[2], field * 2)
"#;

/// Six fields (kept for `--resume` by `cache: true`), each doubled by a command that takes
/// 1 to 6 s, and their mean.
const RESUMABLE: &str = r#"recipe: slurm-resume
dims:
  i: 6
steps:
  field:
    plugin: synth
    over: [i]
    cache: true
    args: {ny: 30, nx: 40, wet_fraction: 0.4, seed: "{i}"}
  slow:
    plugin: exec
    over: [i]
    inputs: {field: field}
    memory: 64MiB
    args:
      command: [python3, tools/slow.py, "{input.field}", "{output}", "{i}"]
      output: "out/slow_{i}.npy"
      env: {OMP_NUM_THREADS: "1"}
  blend:
    plugin: exec
    inputs: {members: slow}
    memory: 64MiB
    args:
      command: [python3, tools/mean.py, "{output}", "{input.members}"]
      output: "out/mean.npy"
"#;

/// The rows of run `run` of the store in `dir`, per status.
fn statuses(dir: &Path, run: i64) -> BTreeMap<String, u64> {
    let db = store(dir);
    let mut statement = db.prepare("SELECT status, count(*) FROM tasks WHERE run_id = ?1 GROUP BY status").unwrap();
    statement
        .query_map([run], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Waits (at most `limit`) until `done` says so, polling every 100 ms.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not after {} s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_run_killed_mid_way_resumes_on_slurm_and_writes_the_local_outputs() {
    let _cluster = sharing_the_cluster();
    let conf = slurm_conf();
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [local.path(), remote.path()] {
        write(dir, "tools/slow.py", SLOW_COPY);
        write(dir, "tools/mean.py", MEAN);
        write(dir, "resumable.yaml", RESUMABLE);
    }
    let out = common::runner_with_env(
        local.path(),
        &["run", "resumable.yaml", "--cycle", "C", "--workers", "6", "--no-record"],
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);

    let args = ["run", "resumable.yaml", "--cycle", "C", "--executor", "slurm", "--workers", "6"];
    let args = [&args[..], &["--shared-dir", "shared", "--db", "r.db"]].concat();
    let mut first = common::runner_command_with_env(remote.path(), &args, [("SLURM_CONF", &conf)])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once two slow tasks are recorded, while the others still run.
    let recorded = || -> i64 {
        let Ok(db) = rusqlite::Connection::open(remote.path().join("r.db")) else { return 0 };
        db.query_row("SELECT count(*) FROM tasks WHERE step = 'slow' AND status = 'ok'", [], |r| r.get(0)).unwrap_or(0)
    };
    wait_until(Duration::from_secs(90), "two of the slow tasks recorded", || recorded() >= 2);
    assert!(!remote.path().join("out/slow_5.npy").exists(), "the slowest task still runs when the runner is killed");
    first.kill().unwrap();
    first.wait().unwrap();
    // What a user does next: cancel the killed run's jobs (nobody waits for them any more).
    let killed_jobs: Vec<String> =
        run_folders(remote.path()).iter().flat_map(|f| submitted(f)).map(|j| j.job.to_string()).collect();
    let _ = Command::new("scancel").args(&killed_jobs).env("SLURM_CONF", &conf).status();
    // A job killed while its command wrote leaves the temporary file it was writing, named by the
    // job process's pid, which each job notes in the run folder as it starts. Whether this kill
    // caught one writing is timing: one is planted besides.
    let pids = run_folders(remote.path())[0].join("pids");
    let job_pid: u32 = std::fs::read_dir(&pids)
        .unwrap_or_else(|e| panic!("{}: {e}", pids.display()))
        .flatten()
        .find_map(|entry| entry.file_name().to_str()?.parse().ok())
        .expect("the jobs noted their pids");
    let planted = remote.path().join(format!("out/.{job_pid}-99.tmp.slow_5.npy"));
    std::fs::write(&planted, b"half").unwrap();
    // An older run folder of the same recipe by a runner of the same pid (pids repeat, in a
    // container every time): its jobs' pids are another run's, whose files are left alone.
    let killed = run_folders(remote.path())[0].clone();
    assert_eq!(std::fs::read_to_string(killed.join("run")).unwrap(), "1", "the folder names its run");
    let name = killed.file_name().unwrap().to_str().unwrap();
    let older = killed.with_file_name(format!("{}19700101T000000.000", &name[..name.rfind('-').unwrap() + 1]));
    std::fs::create_dir_all(older.join("pids")).unwrap();
    std::fs::write(older.join("run"), "7").unwrap();
    let noted: Vec<u32> =
        std::fs::read_dir(&pids).unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    let other_pid = (2..).find(|pid| !noted.contains(pid)).unwrap();
    std::fs::write(older.join("pids").join(other_pid.to_string()), "").unwrap();
    let others = remote.path().join(format!("out/.{other_pid}-98.tmp.slow_4.npy"));
    std::fs::write(&others, b"another run's").unwrap();

    let out = common::runner_with_env(remote.path(), &[&args[..], &["--resume"]].concat(), [("SLURM_CONF", &conf)]);
    assert_exit(&out, 0);
    let said = stderr(&out);
    assert!(said.contains("--resume: run 1 (killed)"), "{said}");
    assert!(!planted.exists() && said.contains("half-written temporary file"), "{said}");
    assert!(others.exists(), "another run's job's file is not the killed run's to remove");
    std::fs::remove_file(&others).unwrap();
    assert_eq!(assert_same_files(&local.path().join("out"), &remote.path().join("out")), 7);

    let resumed = statuses(remote.path(), 2);
    let reused = resumed.get("reused").copied().unwrap_or(0);
    let ran = resumed.get("ok").copied().unwrap_or(0);
    assert_eq!(reused + ran, 13, "every task is recorded once: {resumed:?}");
    // The six fields are kept values, two slow tasks finished: at least eight are taken over.
    assert!(reused >= 8, "fewer tasks ran again than the whole: {resumed:?}");
    let db = store(remote.path());
    let hashed: i64 = db
        .query_row("SELECT count(*) FROM tasks WHERE run_id = 2 AND args_hash IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(hashed, 13, "the resumed run's tasks record their hashes too, for a later --resume");
}

/// Brings node `n2` back when the test ends, whatever happened.
struct NodeBack<'a>(&'a str);

impl Drop for NodeBack<'_> {
    fn drop(&mut self) {
        let _ =
            Command::new("scontrol").args(["update", "nodename=n2", "state=resume"]).env("SLURM_CONF", self.0).status();
    }
}

/// The node-list column of every running job of the cluster.
fn running_on(conf: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "running", "-o", "%N"])
        .env("SLURM_CONF", conf)
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn a_node_lost_mid_run_has_its_tasks_run_elsewhere() {
    let _alone = CLUSTER.write().unwrap_or_else(|p| p.into_inner());
    let conf = slurm_conf();
    let recipe = r#"recipe: node-loss
dims: {i: 6}
steps:
  work:
    plugin: exec
    over: [i]
    memory: 16MiB
    args:
      command: [sh, -c, 'sleep 4 && echo {i} > "$0"', "{output}"]
      output: "out/work_{i}.txt"
"#;
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [local.path(), remote.path()] {
        write(dir, "loss.yaml", recipe);
    }
    let out = common::runner_with_env(
        local.path(),
        &["run", "loss.yaml", "--cycle", "C", "--workers", "6", "--no-record"],
        [("SLURM_CONF", &conf)],
    );
    assert_exit(&out, 0);

    let args = ["run", "loss.yaml", "--cycle", "C", "--executor", "slurm", "--workers", "6", "--shared-dir", "shared"];
    let mut child = common::runner_command_with_env(
        remote.path(),
        &[&args[..], &["--db", "r.db"]].concat(),
        [("SLURM_CONF", &conf)],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let _back = NodeBack(&conf);
    // Six 4-second tasks, two a node: n2 goes down under two of them.
    wait_until(Duration::from_secs(60), "tasks running on n2", || running_on(&conf).iter().any(|n| n == "n2"));
    let down = Command::new("scontrol")
        .args(["update", "nodename=n2", "state=down", "reason=runner-test"])
        .env("SLURM_CONF", &conf)
        .status()
        .unwrap();
    assert!(down.success());
    let status = child.wait().unwrap();
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(said.contains("node n2 was lost"), "the node's loss is named: {said}");
    assert!(said.contains("ok — 6 tasks (6 ok, 0 failed, 0 skipped)"), "{said}");
    assert_eq!(assert_same_files(&local.path().join("out"), &remote.path().join("out")), 6);
    // Not counted as attempts: every task has one, and no error.
    let rows = rows_per_step(&store(remote.path()));
    assert_eq!(rows["work"], (6, 6, 6, rows["work"].3), "{rows:?}");
    // The lost tasks' second jobs ran on the nodes left.
    let jobs = submitted(&run_folders(remote.path())[0]);
    assert!(jobs.len() >= 2, "the lost tasks were submitted again: {jobs:?}");
}
