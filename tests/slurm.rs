//! The Slurm client against a real cluster: the single-node one `.ci/slurm/up` starts (found
//! through its env file under `$RUNNER_SLURM_DIR`, default `target/slurm`). Without a running
//! cluster these tests fail and say to run `.ci/slurm/up`; they never skip.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runner::testing::slurm::{
    ArraySpec, Element, Job, JobId, JobSpec, JobState, Observed, PollReport, Slurm, SlurmError, StateSource,
    TaskMapping, write_index_file,
};

fn cluster_dir() -> PathBuf {
    std::env::var_os("RUNNER_SLURM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/slurm"))
}

/// A client of the cluster `.ci/slurm/up` started; panics, saying how to start one, otherwise.
fn cluster() -> Slurm {
    let env_file = cluster_dir().join("env");
    let text = fs::read_to_string(&env_file).unwrap_or_else(|_| {
        panic!("no Slurm cluster is up ({} does not exist): run .ci/slurm/up first", env_file.display())
    });
    let conf = text
        .lines()
        .find_map(|l| l.strip_prefix("export SLURM_CONF="))
        .unwrap_or_else(|| panic!("{} has no `export SLURM_CONF=` line: run .ci/slurm/up again", env_file.display()));
    let slurm = Slurm::with_conf(conf);
    if let Err(error) = slurm.config() {
        panic!("the Slurm cluster of {} does not answer ({error}): run .ci/slurm/up", env_file.display());
    }
    slurm
}

/// Whether the cluster enforces memory through a cgroup (else by sampling, see .ci/slurm/up).
fn enforces_memory_by_cgroup() -> bool {
    cluster_dir().join("etc/cgroup.conf").exists()
}

fn spec(name: &str, command: String, log_dir: &Path) -> JobSpec {
    JobSpec {
        name: name.into(),
        command,
        mem_bytes: 64 << 20,
        cpus_per_task: 1,
        time_limit: Some(Duration::from_secs(300)),
        log_dir: log_dir.into(),
        workdir: Some(log_dir.into()),
        partition: None,
        account: None,
        extra_args: vec![],
    }
}

/// Polls until every element is finished or vanished.
fn wait_settled(slurm: &Slurm, jobs: &[Job]) -> PollReport {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let report = slurm.poll(jobs).expect("poll");
        if report.all_settled() {
            return report;
        }
        assert!(Instant::now() < deadline, "jobs not finished after 180 s: {report:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn state(report: &PollReport, element: Element) -> JobState {
    report.get(element).state().cloned().unwrap_or_else(|| panic!("{element} vanished: {report:?}"))
}

#[test]
fn an_array_of_five_runs_each_mapped_task_and_completes() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let index_file = dir.path().join("tasks.idx");
    let tasks = [40u64, 10, 30, 20, 50];
    write_index_file(&index_file, &tasks).unwrap();
    let out = dir.path().display();
    let command =
        format!("echo \"element=$SLURM_ARRAY_TASK_ID task=$RUNNER_TASK_INDEX\" > {out}/task-$RUNNER_TASK_INDEX.txt");
    let array = ArraySpec {
        job: spec("slurm-test/array five", command, dir.path()),
        tasks: 5,
        throttle: Some(3),
        mapping: TaskMapping::IndexFile(index_file),
    };
    let job = slurm.submit_array(&array).unwrap();
    assert_eq!(job.array_len, Some(5));

    let report = wait_settled(&slurm, &[job]);
    assert_eq!(report.elements.len(), 5);
    for (element, task) in tasks.iter().enumerate() {
        let element_id = Element { job: job.id, index: Some(element as u32) };
        match report.get(element_id) {
            Observed::Known { state: JobState::Completed, source: StateSource::Queue(_) } => {}
            other => panic!("{element_id}: {other:?}"),
        }
        let written = fs::read_to_string(dir.path().join(format!("task-{task}.txt"))).unwrap();
        assert_eq!(written, format!("element={element} task={task}\n"));
        let (stdout, stderr) = runner::testing::slurm::log_paths(&array.job, element_id);
        assert!(stdout.exists(), "{} missing", stdout.display());
        assert_eq!(fs::read_to_string(&stderr).unwrap(), "", "{}", stderr.display());
    }
}

#[test]
fn a_job_over_its_memory_is_reported_out_of_memory() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    // tail holds its whole input (no newline in it), 300 MiB, 3 times the job's --mem, for 5 s:
    // long enough for sampled enforcement too (1 s samples).
    let hog = "{ head -c 300M /dev/zero; sleep 5; } | tail > /dev/null && echo survived";
    let mut job_spec = spec("slurm-test/oom", hog.into(), dir.path());
    job_spec.mem_bytes = 100 << 20;
    let job = slurm.submit(&job_spec).unwrap();
    let report = wait_settled(&slurm, &[job]);
    let element = Element { job: job.id, index: None };
    if enforces_memory_by_cgroup() {
        assert_eq!(state(&report, element), JobState::OutOfMemory, "{report:?}");
    } else {
        // Sampled enforcement (no writable memory cgroup): the job is killed, as FAILED.
        assert_eq!(state(&report, element), JobState::Failed, "{report:?}");
    }
    let (stdout, _) = runner::testing::slurm::log_paths(&job_spec, element);
    assert_eq!(fs::read_to_string(stdout).unwrap(), "", "the memory hog was killed");
}

#[test]
fn a_failing_command_is_reported_failed() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let job = slurm.submit(&spec("slurm-test/fails", "echo broken >&2; exit 3".into(), dir.path())).unwrap();
    let report = wait_settled(&slurm, &[job]);
    let element = Element { job: job.id, index: None };
    assert_eq!(state(&report, element), JobState::Failed);
    let (_, stderr) = runner::testing::slurm::log_paths(&spec("slurm-test/fails", String::new(), dir.path()), element);
    assert_eq!(fs::read_to_string(stderr).unwrap(), "broken\n");
}

#[test]
fn cancelled_jobs_end_cancelled() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let array = ArraySpec {
        job: spec("slurm-test/cancel", "sleep 300".into(), dir.path()),
        tasks: 2,
        throttle: None,
        mapping: TaskMapping::ArrayIndex,
    };
    let array_job = slurm.submit_array(&array).unwrap();
    let single = slurm.submit(&spec("slurm-test/cancel-one", "sleep 300".into(), dir.path())).unwrap();
    let jobs = [array_job, single];
    let report = slurm.poll(&jobs).unwrap();
    assert_eq!(report.elements.len(), 3);
    for observed in report.elements.values() {
        let state = observed.state().expect("just submitted: in the queue");
        assert!(state.is_waiting() || *state == JobState::Running, "{state}");
    }
    slurm.cancel(&[array_job.id, single.id]).unwrap();
    let report = wait_settled(&slurm, &jobs);
    for (element, observed) in &report.elements {
        assert_eq!(observed.state(), Some(&JobState::Cancelled), "{element}");
    }
    // Cancelling finished jobs again is harmless.
    slurm.cancel(&[array_job.id, single.id]).unwrap();
}

#[test]
fn a_job_no_source_knows_is_vanished_and_the_others_are_still_polled() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let real = slurm.submit(&spec("slurm-test/known", "true".into(), dir.path())).unwrap();
    // Below Slurm's largest job id (0x3FFFFFF), far above what the test cluster reaches.
    let unknown = Job { id: JobId(66_000_001), array_len: None };
    let unknown_array = Job { id: JobId(66_000_000), array_len: Some(2) };
    let alone = slurm.poll(&[unknown]).unwrap();
    assert_eq!(alone.get(Element { job: unknown.id, index: None }), &Observed::Vanished);

    let report = wait_settled(&slurm, &[real, unknown, unknown_array]);
    assert_eq!(report.elements.len(), 4);
    assert_eq!(state(&report, Element { job: real.id, index: None }), JobState::Completed);
    assert_eq!(report.get(Element { job: unknown_array.id, index: Some(1) }), &Observed::Vanished);
}

#[test]
fn sbatch_refusals_name_the_command_its_status_and_stderr() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let mut job_spec = spec("slurm-test/bad-partition", "true".into(), dir.path());
    job_spec.partition = Some("no-such-partition".into());
    let error = slurm.submit(&job_spec).unwrap_err();
    assert!(matches!(error, SlurmError::Failed { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.starts_with("`sbatch --parsable --job-name=slurm-test/bad-partition"), "{message}");
    assert!(message.contains("--partition=no-such-partition"), "{message}");
    assert!(message.contains("exit status: 1"), "{message}");
    assert!(message.contains("invalid partition specified: no-such-partition"), "{message}");
}

#[test]
fn an_array_beyond_max_array_size_is_refused_before_submitting() {
    let slurm = cluster();
    let dir = tempfile::tempdir().unwrap();
    let max = slurm.config().unwrap().max_array_size;
    let array = ArraySpec {
        job: spec("slurm-test/huge", "true".into(), dir.path()),
        tasks: max + 1,
        throttle: None,
        mapping: TaskMapping::ArrayIndex,
    };
    let error = slurm.submit_array(&array).unwrap_err();
    assert!(matches!(error, SlurmError::InvalidSpec { .. }), "{error:?}");
    assert!(error.to_string().contains(&format!("exceed the cluster's MaxArraySize of {max}")), "{error}");
}
