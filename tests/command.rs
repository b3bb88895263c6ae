//! External commands run by the engine (`runner::testing::command`), checked against what the OS says:
//! peaks against the processes' own `VmHWM`, kills against `/proc`, OOM kills against the
//! kernel's. Each measuring test runs both ways: in a memory cgroup (skipped, saying why, where
//! this process cannot make one) and through the fallback forced with `Isolation::NoCgroup`.
//!
//! Needs `python3` (numpy is not needed here).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use runner::plugin::{CommandExit, FailureKind};
use runner::testing::command::{self, Ending, Finished, Isolation, Request};
use runner::testing::measure::{PeakSource, external};

mod common;
use common::{MIB, SPAWN_AND_DAEMONISE, running};

/// The Python interpreter itself (not a launcher script in front of it).
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("these tests need python3 on PATH");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// True when commands get a cgroup here; otherwise says why the cgroup half of a test is skipped.
fn cgroups(test: &str) -> bool {
    match command::support() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipped: the cgroup half of {test} (no memory cgroup can be made here: {why})");
            false
        }
    }
}

/// The ways to measure that this machine offers.
fn isolations(test: &str) -> Vec<Isolation> {
    let mut ways = vec![Isolation::NoCgroup];
    if cgroups(test) {
        ways.insert(0, Isolation::Auto);
    }
    ways
}

fn argv(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

fn run_python(code: &str, args: &[&str], log: &Path, isolation: Isolation) -> Finished {
    let mut items = vec![python(), "-c", code];
    items.extend_from_slice(args);
    let argv = argv(&items);
    let mut request = Request::new(&argv, log);
    request.isolation = isolation;
    command::run(&request).expect("the command starts")
}

/// Allocates and touches argv[1] MiB, holds it argv[2] seconds, prints its own peak RSS: its
/// `VmHWM`, not `ru_maxrss`, which also keeps the high-water mark of what the process was
/// before its exec (a process the runner spawns shares the runner's memory until it execs, so
/// beside other tests holding 400 MiB its `ru_maxrss` said 435 MiB).
const ALLOCATE: &str = r#"
import sys, time
data = b"\x01" * (int(sys.argv[1]) << 20)
time.sleep(float(sys.argv[2]))
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("peak", int(hwm.split()[1]) * 1024, flush=True)
"#;

/// The `peak N` lines the processes printed into the log.
fn reported_peaks(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("peak ").map(|n| n.trim().parse().unwrap()))
        .collect()
}

fn expected_source(isolation: Isolation) -> PeakSource {
    match isolation {
        Isolation::Auto => PeakSource::Cgroup,
        Isolation::NoCgroup => PeakSource::Wait4Sampled,
    }
}

fn assert_within(recorded: u64, truth: u64, share: f64, what: &str) {
    let error = (recorded as f64 - truth as f64).abs() / truth as f64;
    assert!(
        error <= share,
        "{what}: recorded {} MiB, truth {} MiB ({:.1}% off, at most {:.0}% allowed)",
        recorded / MIB,
        truth / MIB,
        error * 100.0,
        share * 100.0
    );
}

#[test]
fn a_300_mib_command_is_recorded_within_5_percent_of_its_own_peak() {
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("300 MiB command") {
        let log = dir.path().join(format!("{isolation:?}.log"));
        let finished = run_python(ALLOCATE, &["300", "0.3"], &log, isolation);
        assert!(finished.success(), "{:?}: {}", finished.ending, std::fs::read_to_string(&log).unwrap());
        let own = reported_peaks(&log);
        assert_eq!(own.len(), 1);
        assert!(own[0] > 300 * MIB);
        eprintln!(
            "{isolation:?}: recorded {} MiB (sampled {} MiB, wait4 {} MiB), the process's own VmHWM {} MiB",
            finished.peak_bytes / MIB,
            finished.sampled_peak / MIB,
            finished.max_rss / MIB,
            own[0] / MIB
        );
        assert_within(finished.peak_bytes, own[0], 0.05, &format!("{isolation:?}"));
        assert_eq!(finished.peak_source, expected_source(isolation));
        // The tree's sampled resident bytes saw the allocation too (not only wait4).
        assert!(finished.sampled_peak > 290 * MIB, "{isolation:?}: sampled {} MiB", finished.sampled_peak / MIB);
        // wait4 saw the allocation too (its count and `VmHWM` differ by a few pages).
        assert!(finished.max_rss + MIB >= own[0], "{isolation:?}: wait4 {} B, VmHWM {} B", finished.max_rss, own[0]);
    }
}

/// Starts two children that each allocate 300 MiB at the same time, and waits for both.
const TWO_CHILDREN: &str = r#"
import subprocess, sys
children = [subprocess.Popen([sys.executable, "-c", sys.argv[1], "300", "0.6"]) for _ in range(2)]
sys.exit(max(c.wait() for c in children))
"#;

#[test]
fn a_tree_of_two_concurrent_300_mib_children_is_recorded_as_their_sum() {
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("two 300 MiB children") {
        let log = dir.path().join(format!("{isolation:?}.log"));
        let finished = run_python(TWO_CHILDREN, &[ALLOCATE], &log, isolation);
        assert!(finished.success(), "{:?}: {}", finished.ending, std::fs::read_to_string(&log).unwrap());
        let own = reported_peaks(&log);
        assert_eq!(own.len(), 2, "both children reported");
        let sum: u64 = own.iter().sum();
        eprintln!(
            "{isolation:?}: recorded {} MiB (sampled {} MiB, wait4 {} MiB), the children's own VmHWM {:?} MiB",
            finished.peak_bytes / MIB,
            finished.sampled_peak / MIB,
            finished.max_rss / MIB,
            own.iter().map(|b| b / MIB).collect::<Vec<_>>()
        );
        assert_within(finished.peak_bytes, sum, 0.05, &format!("{isolation:?}: the tree"));
        // One process's own peak is one child's: the sum comes from sampling the tree.
        assert!(finished.largest_process < 400 * MIB);
        assert!(finished.sampled_peak > 570 * MIB);
    }
}

#[test]
fn page_cache_written_by_a_command_is_not_resident_memory() {
    if !cgroups("page cache") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zeros");
    let log = dir.path().join("dd.log");
    let of = format!("of={}", file.display());
    let argv = argv(&["dd", "if=/dev/zero", &of, "bs=1M", "count=300"]);
    let finished = command::run(&Request::new(&argv, &log)).unwrap();
    assert!(finished.success(), "{}", std::fs::read_to_string(&log).unwrap());
    eprintln!(
        "dd of 300 MiB: recorded {:.1} MiB, the cgroup's own peak {:.1} MiB",
        finished.peak_bytes as f64 / MIB as f64,
        finished.cgroup_peak.unwrap_or(0) as f64 / MIB as f64
    );
    assert!(finished.peak_bytes < 32 * MIB, "dd's resident peak is small: {} MiB", finished.peak_bytes / MIB);
    // The cgroup's own peak counts the 300 MiB of page cache dd left behind.
    let cgroup_peak = finished.cgroup_peak.expect("a cgroup peak");
    assert!(cgroup_peak > 200 * MIB, "page cache is in the cgroup's usage: {} MiB", cgroup_peak / MIB);
}

fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect()
}

fn assert_all_gone(pids: &[i32], what: &str) {
    // SIGKILLed processes are reaped by their (new) parents a moment later.
    let until = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| running(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "{what}: processes {left:?} of {pids:?} are still running");
}

#[test]
fn a_timeout_kills_the_whole_tree_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("timeout") {
        let pids_file = dir.path().join(format!("{isolation:?}.pids"));
        let log = dir.path().join(format!("{isolation:?}.log"));
        let argv = argv(&[python(), "-c", SPAWN_AND_DAEMONISE, pids_file.to_str().unwrap(), "300"]);
        let mut request = Request::new(&argv, &log);
        request.timeout = Some(Duration::from_secs(2));
        request.isolation = isolation;
        let started = Instant::now();
        let finished = command::run(&request).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "killed at its timeout, not at the sleep's end");
        assert_eq!(finished.ending, Ending::TimedOut { after: Duration::from_secs(2) });
        let error = finished.failure().expect("a timeout is a failure");
        assert_eq!(error.kind(), FailureKind::TimedOut);
        assert!(error.message().contains("timed out after 2 s: its process tree was killed"), "{}", error.message());
        let pids = pids_in(&pids_file);
        match isolation {
            // The daemon left the tree and its process group; only the cgroup still holds it.
            Isolation::Auto => assert_all_gone(&pids, "cgroup"),
            Isolation::NoCgroup => {
                assert_all_gone(&pids[..2], "fallback");
                // Documented limit of the fallback: kill the escaped daemon ourselves.
                unsafe { libc::kill(pids[2], libc::SIGKILL) };
            }
        }
    }
}

/// Prints its last words and exits, leaving a daemon (setsid, double fork) that writes to the
/// same stdout without end; the daemon's pid goes to argv[1].
const LAST_WORDS_AND_A_CHATTY_DAEMON: &str = r#"
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        while True:
            os.write(1, b"chatter " * 512 + b"\n")
    os._exit(0)
print("last words", flush=True)
"#;

#[test]
fn output_written_before_a_command_ended_is_logged_and_a_process_that_keeps_writing_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("daemon.pid");
    let log = dir.path().join("chatty.log");
    let argv = argv(&[python(), "-c", LAST_WORDS_AND_A_CHATTY_DAEMON, pid_file.to_str().unwrap()]);
    let mut request = Request::new(&argv, &log);
    // Without a cgroup the daemon escapes the kill (documented) and keeps the pipe open.
    request.isolation = Isolation::NoCgroup;
    let started = Instant::now();
    let finished = command::run(&request).unwrap();
    let took = started.elapsed();
    // The daemon may not have written its pid yet when a quiet pipe ended the drain.
    let deadline = Instant::now() + Duration::from_secs(10);
    let daemon: i32 = loop {
        match std::fs::read_to_string(&pid_file).ok().and_then(|text| text.trim().parse().ok()) {
            Some(pid) => break pid,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            None => panic!("the daemon never wrote its pid"),
        }
    };
    unsafe { libc::kill(daemon, libc::SIGKILL) };
    assert!(finished.success(), "{:?}", finished.ending);
    // Read to the drain's limit (2 s), not for as long as the daemon writes.
    assert!(took < Duration::from_secs(6), "the command took {took:?} to end");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("last words"), "{}", &text[..text.len().min(2000)]);
}

#[test]
fn a_daemonised_grandchild_does_not_outlive_its_command() {
    if !cgroups("daemonised grandchild") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pids_file = dir.path().join("pids");
    let log = dir.path().join("daemon.log");
    // The command exits at once, successfully, leaving its child and its daemon running.
    let finished = run_python(SPAWN_AND_DAEMONISE, &[pids_file.to_str().unwrap(), "0"], &log, Isolation::Auto);
    assert!(finished.success(), "{}", std::fs::read_to_string(&log).unwrap());
    assert_eq!(finished.leftovers_killed, 2, "the `sleep` child and the daemon");
    let pids = pids_in(&pids_file);
    assert_all_gone(&pids, "leftovers of a finished command");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("killed 2 process(es) it left running"), "{text}");
}

#[test]
fn a_failing_command_reports_its_status_and_the_tail_of_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs/fail.log");
    let code = r#"
import sys
print("on stdout")
for i in range(100):
    print(f"progress {i}", file=sys.stderr)
sys.stderr.write("ValueError: threshold 'x' is not a number\n")
sys.exit(3)
"#;
    let finished = run_python(code, &[], &log, Isolation::Auto);
    assert_eq!(finished.ending, Ending::Exited(CommandExit::Code(3)));
    assert!(finished.failure().is_none(), "an exit status is the caller's to judge");
    let lines: Vec<&str> = finished.stderr_tail.lines().collect();
    assert_eq!(lines.len(), 20, "the last 20 lines");
    assert_eq!(lines[0], "progress 81");
    assert_eq!(lines[19], "ValueError: threshold 'x' is not a number");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("on stdout") && text.contains("progress 0\n") && text.contains("exited with status 3"));
    assert!(text.starts_with("--- runner: "), "{text}");
}

#[test]
fn a_command_that_cannot_start_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let argv = argv(&["no-such-program-xyz", "--help"]);
    let log = dir.path().join("x.log");
    let error = command::run(&Request::new(&argv, &log)).unwrap_err();
    assert_eq!(error.to_string(), "cannot start `no-such-program-xyz`: No such file or directory (os error 2)");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.ends_with("--- runner: cannot start `no-such-program-xyz`: No such file or directory (os error 2) ---\n"),
        "{text}"
    );
    assert!(command::run(&Request::new(&[], &log)).unwrap_err().to_string().contains("argv is empty"));
}

#[test]
fn a_command_over_its_memory_limit_is_an_out_of_memory_failure() {
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("memory limit") {
        let log = dir.path().join(format!("{isolation:?}.log"));
        let argv = argv(&[python(), "-c", ALLOCATE, "300", "2"]);
        let mut request = Request::new(&argv, &log);
        request.memory_limit = Some(100 * MIB);
        request.isolation = isolation;
        let finished = command::run(&request).unwrap();
        assert_eq!(finished.ending, Ending::OutOfMemory { limit: Some(100 * MIB) }, "{isolation:?}");
        let error = finished.failure().unwrap();
        assert_eq!(error.kind(), FailureKind::OutOfMemory);
        assert!(error.message().contains("ran out of memory at "), "{}", error.message());
        assert!(error.message().contains("(limit 100 MiB)"), "{}", error.message());
        assert!(finished.peak_bytes >= 95 * MIB, "{isolation:?}: it needed at least its limit");
    }
}

#[test]
fn cancelling_kills_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cancel.log");
    let argv = argv(&["sleep", "300"]);
    let flag = AtomicBool::new(false);
    let cancelled = || flag.load(Ordering::Relaxed);
    let mut request = Request::new(&argv, &log);
    request.cancelled = &cancelled;
    let finished = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::Relaxed);
        });
        command::run(&request).unwrap()
    });
    assert_eq!(finished.ending, Ending::Cancelled);
    assert_eq!(finished.failure().unwrap().kind(), FailureKind::Cancelled);
    assert!(finished.wall < Duration::from_secs(5));
}

#[test]
fn resident_bytes_are_published_for_the_ledger_while_the_command_runs() {
    const TAG: u32 = 7_000_001;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("live.log");
    let argv = argv(&[python(), "-c", ALLOCATE, "200", "1.0"]);
    let mut request = Request::new(&argv, &log);
    request.tag = TAG;
    let seen = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut seen = 0;
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until && seen < 190 * MIB {
                seen = seen.max(external::of(TAG));
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        });
        let finished = command::run(&request).unwrap();
        assert!(finished.success());
        watcher.join().unwrap()
    });
    assert!(seen >= 190 * MIB, "the ledger saw {} MiB of a 200 MiB command", seen / MIB);
    assert_eq!(external::of(TAG), 0, "cleared when the command ended");
}

#[test]
fn environment_additions_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let log: PathBuf = dir.path().join("env.log");
    let argv = argv(&["sh", "-c", "echo \"value=$RUNNER_TEST_VALUE\""]);
    let env = [(OsString::from("RUNNER_TEST_VALUE"), OsString::from("a b"))];
    let mut request = Request::new(&argv, &log);
    request.env = &env;
    assert!(command::run(&request).unwrap().success());
    assert!(std::fs::read_to_string(&log).unwrap().contains("value=a b\n"));
}

/// The test process holding 1 GiB (every page touched), as a runner holding a large buffer.
fn hold_a_gibibyte() -> Vec<u8> {
    let held = vec![1u8; 1 << 30];
    assert_eq!(held[held.len() - 1], 1);
    held
}

#[test]
fn a_runner_holding_1_gib_does_not_weigh_on_its_commands_peaks() {
    let held = hold_a_gibibyte();
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("runner holding 1 GiB") {
        let log = dir.path().join(format!("sleep-{isolation:?}.log"));
        let argv = argv(&["sh", "-c", "sleep 0.3"]);
        let mut request = Request::new(&argv, &log);
        request.isolation = isolation;
        let finished = command::run(&request).expect("the command starts");
        assert!(finished.success(), "{:?}", finished.ending);
        eprintln!(
            "{isolation:?}: sleep recorded at {} KiB (sampled {} KiB, largest process {} KiB, ru_maxrss {} KiB)",
            finished.peak_bytes >> 10,
            finished.sampled_peak >> 10,
            finished.largest_process >> 10,
            finished.max_rss >> 10
        );
        assert!(finished.peak_bytes < 8 * MIB, "{isolation:?}: a sleep recorded at {} MiB", finished.peak_bytes / MIB);
        assert!(finished.peak_bytes > 0, "{isolation:?}: it was measured");
    }
    // 200 at once, as 200 workers start them.
    for isolation in isolations("200 commands at once") {
        let peaks: Vec<u64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..200)
                .map(|i| {
                    let log = dir.path().join(format!("true-{isolation:?}-{i}.log"));
                    scope.spawn(move || {
                        let argv = argv(&["/bin/true"]);
                        let mut request = Request::new(&argv, &log);
                        request.isolation = isolation;
                        let finished = command::run(&request).expect("the command starts");
                        assert!(finished.success(), "{:?}", finished.ending);
                        finished.peak_bytes
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let most = peaks.iter().max().unwrap();
        eprintln!("{isolation:?}: 200 × /bin/true, the largest recorded at {} KiB", most >> 10);
        assert!(*most < 8 * MIB, "{isolation:?}: /bin/true recorded at {} MiB", most / MIB);
    }
    drop(held);
}

/// Allocates argv[1] MiB for a moment shorter than a sampling interval, frees it and lives on.
const SPIKE: &str = r#"
import sys, time
data = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(data), 4096): data[i] = 1
del data
time.sleep(0.3)
"#;

#[test]
fn a_spike_between_two_samples_is_not_missed_and_library_pages_are_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    for isolation in isolations("spike") {
        let log = dir.path().join(format!("{isolation:?}.log"));
        let finished = run_python(SPIKE, &["200"], &log, isolation);
        assert!(finished.success(), "{:?}: {}", finished.ending, std::fs::read_to_string(&log).unwrap());
        eprintln!(
            "{isolation:?}: recorded {} MiB (sampled {} MiB, largest process {} MiB, ru_maxrss {} MiB)",
            finished.peak_bytes / MIB,
            finished.sampled_peak / MIB,
            finished.largest_process / MIB,
            finished.max_rss / MIB
        );
        assert!(finished.peak_bytes >= 200 * MIB, "{isolation:?}: the spike was missed");
        // ru_maxrss counts the interpreter's file pages too; the recorded peak does not.
        assert!(finished.peak_bytes < finished.max_rss, "{isolation:?}");
        assert_within(finished.peak_bytes, 200 * MIB, 0.05, &format!("{isolation:?}: anon + shmem"));
    }
}

#[test]
fn output_past_the_log_limit_keeps_its_head_and_tail_and_says_how_much_was_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("loud.log");
    // 20 MB on stdout and 20 MB on stderr, each line numbered. Two pipes keep no order between
    // them: the last line goes to stderr only once the runner has read all of stdout (its pipe
    // is empty), or the last block of stdout could be relayed after it.
    let code = "import sys, fcntl, termios, array, time\nfor i in range(400000):\n    sys.stdout.write('out %07d %s\\n' % (i, 'x' * 36))\n    sys.stderr.write('err %07d %s\\n' % (i, 'y' * 36))\nsys.stdout.flush()\nunread = array.array('i', [1])\nwhile unread[0]:\n    time.sleep(0.01)\n    fcntl.ioctl(1, termios.FIONREAD, unread, True)\nsys.stderr.write('the last line\\n')";
    let argv = argv(&[python(), "-c", code]);
    let mut request = Request::new(&argv, &log);
    request.log_limit = 4 * MIB;
    let finished = command::run(&request).expect("the command starts");
    assert!(finished.success(), "{:?}", finished.ending);
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size < 4 * MIB + 4096, "the log holds {size} bytes");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("out 0000000 ") && text.contains("err 0000000 "), "the head is kept");
    assert!(text.contains("out 0399999 "), "the end of stdout is kept");
    assert!(text.contains("the last line\n--- runner: exited with status 0"), "the tail is kept, then the footer");
    let note = text.lines().find(|l| l.contains("of output dropped here")).expect("a line says what was dropped");
    let dropped: u64 = note.trim_start_matches("--- runner: ").split(' ').next().unwrap().parse().unwrap();
    assert_eq!(dropped, 2 * 400000 * 49 + 14 - 4 * MIB, "{note}");
    assert!(finished.stderr_tail.ends_with("the last line"), "{}", finished.stderr_tail);
}

#[test]
fn a_task_s_timeout_reads_as_one_and_names_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("slow.log");
    let started = Instant::now();
    let task = command::TaskCommand {
        default_log: log.clone(),
        timeout: Some(Duration::from_secs(1)),
        started,
        limit: None,
        reserved: 0,
        tag: runner::plugin::task_tag::NO_TASK,
        // As the engine's: a task past its timeout is also cancelled.
        cancelled: &|| started.elapsed() > Duration::from_secs(1),
    };
    let spec = runner::plugin::CommandSpec::new(argv(&["sleep", "10"]));
    let error = command::run_for_task(&spec, &task, |_| {}).unwrap_err();
    assert_eq!(error.kind(), FailureKind::TimedOut);
    assert!(error.message().contains("timed out after 1 s"), "{}", error.message());
    assert!(started.elapsed() < Duration::from_secs(5));
}
