//! What a task costs on Slurm: submission latency per job and per array element, one poll over
//! everything in flight, and submit-to-completed throughput of trivial jobs, against the cluster
//! `.ci/slurm/up` starts (found through `$RUNNER_SLURM_DIR/env`, default `target/slurm/env`).
//!
//!   .ci/slurm/up && cargo bench --bench slurm_submit
//!
//! Submissions for latency are held (`--hold`) and cancelled afterwards, so they measure
//! `sbatch` and the controller, not the node.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runner::testing::slurm::{ArraySpec, Job, JobSpec, PollReport, Slurm, TaskMapping};

fn cluster() -> Slurm {
    let dir = std::env::var_os("RUNNER_SLURM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/slurm"));
    let env_file = dir.join("env");
    let Ok(text) = std::fs::read_to_string(&env_file) else {
        eprintln!("no Slurm cluster is up ({} does not exist): run .ci/slurm/up first", env_file.display());
        std::process::exit(1);
    };
    let conf = text.lines().find_map(|l| l.strip_prefix("export SLURM_CONF=")).expect("SLURM_CONF in the env file");
    Slurm::with_conf(conf)
}

fn spec(name: &str, command: &str, log_dir: &Path, hold: bool) -> JobSpec {
    JobSpec {
        name: name.into(),
        command: command.into(),
        mem_bytes: 16 << 20,
        cpus_per_task: 1,
        time_limit: Some(Duration::from_secs(60)),
        log_dir: log_dir.into(),
        workdir: Some(log_dir.into()),
        partition: None,
        account: None,
        extra_args: if hold { vec!["--hold".into()] } else { vec![] },
    }
}

fn array(name: &str, command: &str, log_dir: &Path, tasks: u32, hold: bool) -> ArraySpec {
    ArraySpec { job: spec(name, command, log_dir, hold), tasks, throttle: None, mapping: TaskMapping::ArrayIndex }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn wait_settled(slurm: &Slurm, jobs: &[Job]) -> PollReport {
    loop {
        let report = slurm.poll(jobs).expect("poll");
        if report.all_settled() {
            return report;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    let slurm = cluster();
    let logs = tempfile::tempdir().expect("log dir");
    let dir = logs.path();
    let mut held = Vec::new();

    let singles = 20;
    let start = Instant::now();
    for i in 0..singles {
        held.push(slurm.submit(&spec(&format!("bench/single-{i}"), "true", dir, true)).expect("sbatch"));
    }
    let per_job = start.elapsed() / singles;
    println!("sbatch, single job:           {:8.1} ms per job ({singles} jobs)", ms(per_job));

    for tasks in [10u32, 100, 1000] {
        let start = Instant::now();
        held.push(
            slurm.submit_array(&array(&format!("bench/array-{tasks}"), "true", dir, tasks, true)).expect("sbatch"),
        );
        let took = start.elapsed();
        println!(
            "sbatch, array of {tasks:>4}:        {:8.1} ms per array, {:7.3} ms per element",
            ms(took),
            ms(took) / f64::from(tasks)
        );
    }

    let elements: usize = held.iter().map(|j| j.elements().count()).sum();
    let start = Instant::now();
    let report = slurm.poll(&held).expect("poll");
    println!("poll (one squeue), {} jobs / {elements} elements: {:8.1} ms", held.len(), ms(start.elapsed()));
    assert_eq!(report.elements.len(), elements);

    let start = Instant::now();
    slurm.cancel(&held.iter().map(|j| j.id).collect::<Vec<_>>()).expect("scancel");
    println!("scancel, {} jobs:              {:8.1} ms", held.len(), ms(start.elapsed()));
    wait_settled(&slurm, &held);

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let start = Instant::now();
    let jobs: Vec<Job> = (0..singles)
        .map(|i| slurm.submit(&spec(&format!("bench/run-{i}"), "true", dir, false)).expect("sbatch"))
        .collect();
    wait_settled(&slurm, &jobs);
    let took = start.elapsed();
    println!(
        "submit to COMPLETED, {singles} single jobs of `true` on {cpus} CPUs: {:6.2} s, {:6.1} ms per job",
        took.as_secs_f64(),
        ms(took) / f64::from(singles)
    );

    let tasks = 100;
    let start = Instant::now();
    let job = slurm.submit_array(&array("bench/run-array", "true", dir, tasks, false)).expect("sbatch");
    wait_settled(&slurm, &[job]);
    let took = start.elapsed();
    println!(
        "submit to COMPLETED, array of {tasks} elements of `true` on {cpus} CPUs: {:6.2} s, {:6.1} ms per element",
        took.as_secs_f64(),
        ms(took) / f64::from(tasks)
    );
}
