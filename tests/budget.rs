//! Runs on one machine share its memory: a run's default budget leaves out what the other live
//! runs may still take, an explicit budget beyond what is available (or what others leave) is
//! warned about, and a finished run's registration no longer counts.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:")).unwrap();
    line["MemAvailable:".len()..].trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

/// A quick run's budget, from its summary, and what it printed.
fn quick_run(dir: &Path, budgets: &Path, extra: &[&str]) -> (u64, String) {
    let recipe = dir.join("quick.yaml");
    std::fs::write(&recipe, "recipe: quick\nsteps:\n  s:\n    plugin: noop\n").unwrap();
    let mut args = vec!["run", recipe.to_str().unwrap(), "--no-record", "--summary", "quick.json"];
    args.extend_from_slice(extra);
    let out: Output = common::runner_command_with_env(dir, &args, [("RUNNER_BUDGETS_DIR", budgets)]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("quick.json")).unwrap()).unwrap();
    (summary["budget_bytes"].as_u64().unwrap(), err)
}

#[test]
fn a_run_sees_the_budget_of_another_live_run() {
    let dir = tempfile::tempdir().unwrap();
    let budgets = dir.path().join("budgets");
    let first = available() / 2;
    let slow = dir.path().join("slow.yaml");
    std::fs::write(
        &slow,
        "recipe: slow\ndims:\n  i: 20\nsteps:\n  s:\n    plugin: alloc\n    over: [i]\n    args: {bytes: 4096, hold_ms: 250}\n",
    )
    .unwrap();
    let mut holder = common::runner_command_with_env(
        dir.path(),
        &["run", slow.to_str().unwrap(), "--workers", "1", "--no-record"],
        [("RUNNER_BUDGETS_DIR", &budgets)],
    )
    .args(["--budget", &first.to_string()])
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let started = Instant::now();
    let registered = || {
        std::fs::read_dir(&budgets)
            .map(|d| d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "budget")).count())
            .unwrap_or(0)
    };
    while registered() == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "the first run never registered its budget");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The default leaves out what the first run may still take (its budget less its RSS).
    let (default, err) = quick_run(dir.path(), &budgets, &[]);
    let uncoordinated = (available() as f64 * 0.8) as u64;
    assert!(
        default + (first as f64 * 0.3) as u64 <= uncoordinated,
        "default {default} with another run's {first} held, 80% of available is {uncoordinated}: {err}"
    );
    // An explicit budget that does not fit beside it is warned about; one beyond the machine
    // says protection is off.
    let crowding = (available() as f64 * 0.7) as u64;
    let (_, err) = quick_run(dir.path(), &budgets, &["--budget", &crowding.to_string()]);
    assert!(err.contains("other runs on this machine may still take"), "{err}");
    let (huge, err) = quick_run(dir.path(), &budgets, &["--budget", "10TiB"]);
    assert_eq!(huge, 10 << 40);
    assert!(err.contains("is more than the") && err.contains("no longer protects this machine"), "{err}");

    assert!(holder.wait().unwrap().success());
    // Once the first run is gone, its budget is free again and its file is dropped.
    let (after, err) = quick_run(dir.path(), &budgets, &[]);
    assert!(after >= default + (first as f64 * 0.3) as u64, "default {after} after the other run ended: {err}");
    assert_eq!(registered(), 0, "every run here has ended: no registration is live");
}

#[test]
fn another_user_s_runs_share_the_registry_the_first_user_made() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running as another user needs root");
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    // A folder every user may enter (a tempdir is the owner's only).
    let dir = tempfile::Builder::new().prefix("runner-budget-users").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let budgets = dir.path().join("budgets");
    quick_run(dir.path(), &budgets, &[]);
    let lock = std::fs::metadata(budgets.join(".lock")).unwrap();
    assert_eq!(lock.permissions().mode() & 0o777, 0o666, "the lock is every user's");
    let args = ["run", "quick.yaml", "--no-record", "--summary", "nobody.json"];
    let out = common::runner_command_through(
        "setpriv",
        &["--reuid=65534", "--regid=65534", "--clear-groups"],
        dir.path(),
        &args,
    )
    .env("RUNNER_BUDGETS_DIR", &budgets)
    .env("TMPDIR", "/tmp")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("cannot see other runs' budgets"), "{err}");
}
