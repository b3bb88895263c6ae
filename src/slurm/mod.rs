//! The Slurm client of `--executor slurm`: submits jobs and job arrays, polls their states,
//! cancels them, through Slurm's commands only (`sbatch --parsable`, `squeue -h -o`,
//! `scontrol show config`, `sacct -P`, `scancel`). Their text formats are stable across
//! releases; the `--json` schemas and libslurm's ABI (what the `slurm` crate binds) are not.
//!
//! - [`Slurm::submit`] / [`Slurm::submit_array`] turn a [`JobSpec`] / [`ArraySpec`] into one
//!   `sbatch` call whose batch script arrives on stdin ([`submit`]).
//! - [`Slurm::poll`] asks one `squeue` for every job in flight; elements that have left the queue
//!   (after `MinJobAge`) are looked up in `sacct` where the cluster has accounting, then in the
//!   job completion log where it is a file this machine can read; an element no source knows is
//!   [`Observed::Vanished`] and the caller decides from its own result files.
//! - [`Slurm::cancel`] is one `scancel` for all the jobs, for Ctrl-C and aborted runs.
//!
//! `scontrol show job` is not polled: it reads the same controller memory as `squeue -t all`
//! but one job per call.

mod error;
pub mod parse;
mod state;
pub mod submit;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};

pub use error::SlurmError;
pub use parse::ClusterConfig;
pub use state::{Element, Job, JobId, JobState, Observed, StateSource};
pub use submit::{ArraySpec, JobSpec, TASK_INDEX_VAR, TaskMapping, log_paths, write_index_file};

use parse::Unparsed;
use submit::display_command;

/// A client of one Slurm cluster.
#[derive(Debug, Default)]
pub struct Slurm {
    /// `SLURM_CONF` for every command; `None` leaves Slurm's own lookup (the environment's
    /// `SLURM_CONF`, then the compiled-in path).
    conf: Option<PathBuf>,
    config: OnceLock<ClusterConfig>,
    completion_log: Mutex<CompletionLogCache>,
}

/// The completion-log entries of the jobs this client polls, read incrementally.
#[derive(Debug, Default)]
struct CompletionLogCache {
    /// Bytes of the log already read (up to the last complete line).
    offset: u64,
    /// The jobs whose entries are kept. An entry is written after its job ends, so a job first
    /// polled after some reading forces one re-read from the start.
    watched: HashSet<JobId>,
    states: HashMap<Element, JobState>,
}

/// The state of every element of the polled jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    pub elements: BTreeMap<Element, Observed>,
    /// The node(s) each element was given, where `squeue` still says (`n2`, `n[1-3]`).
    pub nodes: BTreeMap<Element, String>,
}

impl PollReport {
    /// What is known about `element`; an element of no polled job is [`Observed::Vanished`].
    pub fn get(&self, element: Element) -> &Observed {
        self.elements.get(&element).unwrap_or(&Observed::Vanished)
    }

    /// The node(s) `element` ran on, where known.
    pub fn nodes(&self, element: Element) -> Option<&str> {
        self.nodes.get(&element).map(String::as_str)
    }

    /// True when every element is finished or vanished: nothing will change any more.
    pub fn all_settled(&self) -> bool {
        self.elements.values().all(|o| o.state().is_none_or(JobState::is_finished))
    }
}

/// What a command printed, whatever its exit status.
struct Ran {
    command: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn into_stdout(self) -> Result<String, SlurmError> {
        if self.status.success() {
            Ok(self.stdout)
        } else {
            Err(SlurmError::Failed { command: self.command, status: self.status, stderr: self.stderr })
        }
    }
}

impl Slurm {
    /// A client that finds the cluster as Slurm's commands do by themselves.
    pub fn new() -> Slurm {
        Slurm::default()
    }

    /// A client of the cluster configured by `slurm_conf` (passed as `SLURM_CONF`).
    pub fn with_conf(slurm_conf: impl Into<PathBuf>) -> Slurm {
        Slurm { conf: Some(slurm_conf.into()), ..Slurm::default() }
    }

    /// The configuration file given to [`Slurm::with_conf`].
    pub fn conf(&self) -> Option<&Path> {
        self.conf.as_deref()
    }

    /// The cluster's limits and sources (`scontrol show config`), read once.
    pub fn config(&self) -> Result<&ClusterConfig, SlurmError> {
        if let Some(config) = self.config.get() {
            return Ok(config);
        }
        let args = ["show".to_string(), "config".to_string()];
        let ran = self.run("scontrol", &args, None)?;
        let command = ran.command.clone();
        let config = parse::cluster_config(&ran.into_stdout()?).map_err(|u| parse_error(&command, u))?;
        Ok(self.config.get_or_init(|| config))
    }

    /// Submits one batch job.
    pub fn submit(&self, spec: &JobSpec) -> Result<Job, SlurmError> {
        let args = submit::sbatch_args(spec, None)?;
        let id = self.sbatch(&args, &submit::batch_script(spec, None))?;
        Ok(Job { id, array_len: None })
    }

    /// Submits one job array of `array.tasks` elements.
    pub fn submit_array(&self, array: &ArraySpec) -> Result<Job, SlurmError> {
        submit::validate(&array.job)?;
        submit::validate_array(array, self.config()?.max_array_size)?;
        let args = submit::sbatch_args(&array.job, Some(array))?;
        let id = self.sbatch(&args, &submit::batch_script(&array.job, Some(&array.mapping)))?;
        Ok(Job { id, array_len: Some(array.tasks) })
    }

    fn sbatch(&self, args: &[String], script: &str) -> Result<JobId, SlurmError> {
        let ran = self.run("sbatch", args, Some(script))?;
        let command = ran.command.clone();
        parse::sbatch_job_id(&ran.into_stdout()?).map_err(|u| parse_error(&command, u))
    }

    /// The state of every element of `jobs`: one `squeue` for all of them, then the slower
    /// sources only for the elements it no longer lists.
    pub fn poll(&self, jobs: &[Job]) -> Result<PollReport, SlurmError> {
        let mut report = PollReport::default();
        if jobs.is_empty() {
            return Ok(report);
        }
        let (mut known, nodes) = self.queue_states(jobs)?;
        report.nodes = nodes;
        let missing = |known: &HashMap<Element, (JobState, StateSource)>| -> Vec<Job> {
            jobs.iter().filter(|job| job.elements().any(|e| !known.contains_key(&e))).copied().collect()
        };
        let gone = missing(&known);
        if !gone.is_empty() && self.config()?.accounting {
            // A job id reused after the controller lost its state has several records; the last
            // row is kept (which one sacct lists last was not checked on a cluster with reuse).
            let latest: HashMap<Element, JobState> = self.accounting_states(&gone)?.into_iter().collect();
            for (element, state) in latest {
                known.entry(element).or_insert((state, StateSource::Accounting));
            }
        }
        let gone = missing(&known);
        if !gone.is_empty()
            && let Some(log) = self.config()?.completion_log.clone()
        {
            for (element, state) in self.completion_log_states(&log, &gone)? {
                known.entry(element).or_insert((state, StateSource::CompletionLog));
            }
        }
        for job in jobs {
            for element in job.elements() {
                let observed = match known.get(&element) {
                    Some((state, source)) => Observed::Known { state: state.clone(), source: source.clone() },
                    None => Observed::Vanished,
                };
                report.elements.insert(element, observed);
            }
        }
        Ok(report)
    }

    /// `squeue`'s state of each element it lists, and the node(s) of those given some.
    #[allow(clippy::type_complexity)]
    fn queue_states(
        &self,
        jobs: &[Job],
    ) -> Result<(HashMap<Element, (JobState, StateSource)>, BTreeMap<Element, String>), SlurmError> {
        let args = vec![
            "-h".into(),
            "-r".into(),
            "-t".into(),
            "all".into(),
            "-j".into(),
            submit::id_list(jobs.iter().map(|j| j.id)),
            "-o".into(),
            parse::SQUEUE_FORMAT.into(),
        ];
        let ran = self.run("squeue", &args, None)?;
        // Asked about one job only, squeue fails when the controller no longer knows it.
        if !ran.status.success() && ran.stderr.contains("Invalid job id specified") {
            return Ok((HashMap::new(), BTreeMap::new()));
        }
        let command = ran.command.clone();
        let rows = parse::squeue_rows(&ran.into_stdout()?).map_err(|u| parse_error(&command, u))?;
        let nodes = rows.iter().filter_map(|row| Some((row.element, row.nodes.clone()?))).collect();
        let states = rows.into_iter().map(|row| (row.element, (row.state, StateSource::Queue(row.reason)))).collect();
        Ok((states, nodes))
    }

    fn accounting_states(&self, jobs: &[Job]) -> Result<Vec<(Element, JobState)>, SlurmError> {
        let args = vec![
            "-n".into(),
            "-P".into(),
            "-X".into(),
            "-j".into(),
            submit::id_list(jobs.iter().map(|j| j.id)),
            format!("--format={}", parse::SACCT_FORMAT),
        ];
        let ran = self.run("sacct", &args, None)?;
        let command = ran.command.clone();
        parse::sacct_rows(&ran.into_stdout()?).map_err(|u| parse_error(&command, u))
    }

    fn completion_log_states(&self, log: &Path, jobs: &[Job]) -> Result<Vec<(Element, JobState)>, SlurmError> {
        let mut cache = self.completion_log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let new_jobs: Vec<JobId> = jobs.iter().map(|j| j.id).filter(|id| !cache.watched.contains(id)).collect();
        if !new_jobs.is_empty() {
            cache.watched.extend(new_jobs);
            cache.offset = 0;
        }
        match read_completion_log(log, &mut cache) {
            Ok(()) => {}
            // The log lives on the controller; a submit host may not see it.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(SlurmError::File { what: "cannot read the job completion log", path: log.into(), error });
            }
        }
        Ok(jobs
            .iter()
            .flat_map(|job| job.elements())
            .filter_map(|e| cache.states.get(&e).map(|state| (e, state.clone())))
            .collect())
    }

    /// Cancels the jobs (all elements of an array) with one `scancel`. Jobs that have already
    /// finished or that the controller no longer knows are not an error.
    pub fn cancel(&self, jobs: &[JobId]) -> Result<(), SlurmError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let args: Vec<String> = jobs.iter().map(JobId::to_string).collect();
        let ran = self.run("scancel", &args, None)?;
        let benign = ["already completing or completed", "Invalid job id specified"];
        let stderr_lines: Vec<&str> = ran.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        if !ran.status.success()
            && !stderr_lines.is_empty()
            && stderr_lines.iter().all(|l| benign.iter().any(|b| l.contains(b)))
        {
            return Ok(());
        }
        ran.into_stdout().map(drop)
    }

    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Ran, SlurmError> {
        let command = display_command(program, args);
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        let spawn_error = |error| SlurmError::Spawn { command: command.clone(), error };
        let mut child = cmd.spawn().map_err(spawn_error)?;
        if let Some(text) = stdin {
            // sbatch reads the whole script before it answers, so writing first cannot deadlock.
            let mut pipe = child.stdin.take().expect("stdin was piped");
            pipe.write_all(text.as_bytes()).map_err(spawn_error)?;
        }
        let output = child.wait_with_output().map_err(spawn_error)?;
        Ok(Ran {
            command,
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

fn parse_error(command: &str, unparsed: Unparsed) -> SlurmError {
    SlurmError::Parse { command: command.to_string(), expected: unparsed.expected, found: unparsed.found }
}

/// Reads the log's complete lines past `cache.offset`, keeping the entries of watched jobs.
fn read_completion_log(path: &Path, cache: &mut CompletionLogCache) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len < cache.offset {
        // The log was rotated or truncated: read the new one from its start.
        cache.offset = 0;
    }
    file.seek(SeekFrom::Start(cache.offset))?;
    let mut bytes = Vec::with_capacity((len - cache.offset) as usize);
    file.read_to_end(&mut bytes)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    for line in String::from_utf8_lossy(&bytes[..complete]).lines() {
        if let Some((element, state)) = parse::completion_log_entry(line)
            && cache.watched.contains(&element.job)
        {
            cache.states.insert(element, state);
        }
    }
    cache.offset += complete as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_cannot_start_says_which_and_why() {
        let slurm = Slurm::new();
        let Err(error) = slurm.run("runner-test-no-such-command", &["-h".into()], None) else {
            panic!("a missing program ran")
        };
        let message = error.to_string();
        assert!(message.starts_with("cannot run `runner-test-no-such-command -h`: "), "{message}");
        assert!(message.contains("are Slurm's client commands installed and on PATH?"), "{message}");
    }

    #[test]
    fn a_failed_command_shows_its_status_and_stderr() {
        let ran =
            Slurm::new().run("sh", &["-c".into(), "echo out; echo 'squeue: error: nope' >&2; exit 3".into()], None);
        let message = ran.unwrap().into_stdout().unwrap_err().to_string();
        assert_eq!(
            message,
            "`sh -c 'echo out; echo '\\''squeue: error: nope'\\'' >&2; exit 3'` failed (exit status: 3): squeue: error: nope"
        );
    }

    #[test]
    fn the_completion_log_is_read_incrementally_and_only_for_watched_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("jobcomp.txt");
        let captured: Vec<&str> = include_str!("testdata/jobcomp_filetxt.txt").lines().collect();
        // Lines for jobs 4 (element 2_0), 1, 6 (2_2) and, cut short, 5 (2_1) still being written.
        let partial = &captured[3][..40];
        fs_write(&log, &format!("{}\n{}\n{}\n{partial}", captured[0], captured[1], captured[2]));
        let slurm = Slurm::new();
        let array = Job { id: JobId(2), array_len: Some(4) };
        let single = Job { id: JobId(1), array_len: None };
        let found = slurm.completion_log_states(&log, &[array]).unwrap();
        assert_eq!(
            found,
            vec![
                (Element { job: JobId(2), index: Some(0) }, JobState::Completed),
                (Element { job: JobId(2), index: Some(2) }, JobState::Completed),
            ]
        );
        let offset = slurm.completion_log.lock().unwrap().offset;
        assert_eq!(
            offset as usize,
            captured[0].len() + captured[1].len() + captured[2].len() + 3,
            "stops before the partial line"
        );

        // The rest of the partial line arrives: it is read from where reading stopped.
        fs_write(&log, &format!("{}\n{}\n{}\n{}\n", captured[0], captured[1], captured[2], captured[3]));
        let found = slurm.completion_log_states(&log, &[array]).unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        // A job polled for the first time makes the log be read again from its start.
        let found = slurm.completion_log_states(&log, &[single]).unwrap();
        assert_eq!(found, vec![(Element { job: JobId(1), index: None }, JobState::Completed)]);
        // A log that is not there (it lives on the controller) knows nothing, without error.
        assert_eq!(slurm.completion_log_states(&dir.path().join("absent"), &[single]).unwrap(), vec![]);
    }

    fn fs_write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }
}
