//! Parsers for the text Slurm's commands print, one per format this client reads. Each is
//! tested on output captured from a real cluster (`testdata/`, Slurm 22.05).

use std::path::PathBuf;
use std::time::Duration;

use super::state::{Element, JobId, JobState};

/// A line a parser did not understand, and what it expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unparsed {
    pub expected: &'static str,
    pub found: String,
}

impl Unparsed {
    fn new(expected: &'static str, found: &str) -> Unparsed {
        Unparsed { expected, found: found.to_string() }
    }
}

/// `sbatch --parsable` prints `ID` or `ID;CLUSTER`, after any warnings on stderr.
pub fn sbatch_job_id(stdout: &str) -> Result<JobId, Unparsed> {
    const EXPECTED: &str = "a job id (`ID` or `ID;CLUSTER`)";
    let line = stdout.lines().map(str::trim).rfind(|l| !l.is_empty()).ok_or_else(|| Unparsed::new(EXPECTED, stdout))?;
    let id = line.split(';').next().unwrap_or(line);
    id.parse().map(JobId).map_err(|_| Unparsed::new(EXPECTED, line))
}

/// The `squeue -o` format [`squeue_rows`] reads: raw job id, array job id, array task id, state,
/// the node it runs (or ran) on, reason (why it waits or why it ended).
pub const SQUEUE_FORMAT: &str = "%A|%F|%K|%T|%N|%r";

/// One element as `squeue` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub element: Element,
    pub state: JobState,
    /// The node(s) it was given, as Slurm writes a node list (`n2`, `n[1-3]`); `None` while
    /// it waits.
    pub nodes: Option<String>,
    /// Slurm's reason (`Resources`, `JobHeldUser`, `OutOfMemory`...); `None` when it says `None`.
    pub reason: Option<String>,
}

/// Rows of `squeue -h -r -t all -o '%A|%F|%K|%T|%N|%r'`. An array element is named by its array's
/// id and index; a collapsed range of pending elements (`0-4%2`, printed without `-r`) is
/// expanded.
pub fn squeue_rows(stdout: &str) -> Result<Vec<QueueRow>, Unparsed> {
    const EXPECTED: &str = "`JOBID|ARRAYJOBID|ARRAYTASKID|STATE|NODELIST|REASON` (squeue -o '%A|%F|%K|%T|%N|%r')";
    let mut rows = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.splitn(6, '|').collect();
        let [raw, array, task, state, nodes, reason] = fields[..] else { return Err(Unparsed::new(EXPECTED, line)) };
        let state = JobState::parse(state);
        let nodes = (!nodes.is_empty()).then(|| nodes.to_string());
        let reason = (reason != "None" && !reason.is_empty()).then(|| reason.to_string());
        let row = |element| QueueRow { element, state: state.clone(), nodes: nodes.clone(), reason: reason.clone() };
        if task == "N/A" {
            let id = raw.parse().map_err(|_| Unparsed::new(EXPECTED, line))?;
            rows.push(row(Element { job: JobId(id), index: None }));
        } else {
            let job = JobId(array.parse().map_err(|_| Unparsed::new(EXPECTED, line))?);
            let indices = array_indices(task).ok_or_else(|| Unparsed::new(EXPECTED, line))?;
            rows.extend(indices.into_iter().map(|i| row(Element { job, index: Some(i) })));
        }
    }
    Ok(rows)
}

/// Expands Slurm's notation for a set of array indices: `7`, `0-4`, `0-4%2` (throttled),
/// `[1,3-5]`, `0-10:2` (stepped). `None` when it is not that notation.
pub fn array_indices(text: &str) -> Option<Vec<u32>> {
    let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    let without_throttle = inner.split('%').next()?;
    let mut indices = Vec::new();
    for part in without_throttle.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let only = range.parse::<u32>().ok()?;
                (only, only)
            }
        };
        if first > last {
            return None;
        }
        indices.extend((first..=last).step_by(step as usize));
    }
    Some(indices)
}

/// The fields of one `Key=Value Key=Value ...` record, as `scontrol show job -o` and the
/// `jobcomp/filetxt` log print them. A value may contain spaces (a job name, a path): a word
/// without `=`, or whose key is not a plain identifier, continues the previous value.
pub fn key_values(line: &str) -> Vec<(&str, &str)> {
    let mut fields: Vec<(&str, &str)> = Vec::new();
    let mut value_start = 0;
    let mut key: Option<&str> = None;
    let mut offset = 0;
    for word in line.split(' ') {
        let word_start = offset;
        offset += word.len() + 1;
        let Some((k, _)) = word.split_once('=') else { continue };
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == ':') {
            continue;
        }
        if let Some(previous) = key {
            fields.push((previous, line[value_start..word_start].trim_end()));
        }
        key = Some(k);
        value_start = word_start + k.len() + 1;
    }
    if let Some(previous) = key {
        fields.push((previous, line[value_start.min(line.len())..].trim_end()));
    }
    fields
}

/// The element and state of one line of the `jobcomp/filetxt` log (`JobId=... JobState=...`,
/// with `ArrayJobId=`/`ArrayTaskId=` for an array element). `None` for a line that is not a job
/// record, such as a partial line still being written.
pub fn completion_log_entry(line: &str) -> Option<(Element, JobState)> {
    let fields = key_values(line);
    let get = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let state = JobState::parse(get("JobState")?);
    let element = match (get("ArrayJobId"), get("ArrayTaskId")) {
        (Some(array), Some(task)) => Element { job: JobId(array.parse().ok()?), index: Some(task.parse().ok()?) },
        _ => Element { job: JobId(get("JobId")?.parse().ok()?), index: None },
    };
    Some((element, state))
}

/// The `sacct --format` this client reads with `-n -P -X`.
pub const SACCT_FORMAT: &str = "JobID,State";

/// Rows of `sacct -n -P -X -j IDS --format=JobID,State`: `12|COMPLETED`, `10_3|OUT_OF_MEMORY`,
/// `10_[2-4%2]|PENDING` (elements not started yet, collapsed), `12|CANCELLED by 0`.
pub fn sacct_rows(stdout: &str) -> Result<Vec<(Element, JobState)>, Unparsed> {
    const EXPECTED: &str = "`JOBID|STATE` (sacct -n -P -X --format=JobID,State)";
    let mut rows = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((id, state)) = line.split_once('|') else { return Err(Unparsed::new(EXPECTED, line)) };
        let state = JobState::parse(state);
        match id.split_once('_') {
            Some((job, tasks)) => {
                let job = JobId(job.parse().map_err(|_| Unparsed::new(EXPECTED, line))?);
                let indices = array_indices(tasks).ok_or_else(|| Unparsed::new(EXPECTED, line))?;
                rows.extend(indices.into_iter().map(|i| (Element { job, index: Some(i) }, state.clone())));
            }
            None => {
                let job = JobId(id.parse().map_err(|_| Unparsed::new(EXPECTED, line))?);
                rows.push((Element { job, index: None }, state));
            }
        }
    }
    Ok(rows)
}

/// What this client needs from `scontrol show config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Array indices must be below this (`MaxArraySize`).
    pub max_array_size: u32,
    /// Whether `sacct` can answer (`AccountingStorageType` is not `accounting_storage/none`).
    pub accounting: bool,
    /// The job completion log, when the cluster writes one to a file (`jobcomp/filetxt`).
    pub completion_log: Option<PathBuf>,
    /// How long a finished job stays visible to `squeue` (`MinJobAge`).
    pub min_job_age: Duration,
}

/// Parses `scontrol show config` (`Key = Value` lines).
pub fn cluster_config(stdout: &str) -> Result<ClusterConfig, Unparsed> {
    let value = |key: &str| {
        stdout.lines().find_map(|line| {
            let (k, v) = line.split_once('=')?;
            (k.trim() == key).then(|| v.trim())
        })
    };
    let required = |key: &'static str| value(key).ok_or_else(|| Unparsed::new(key, "(no such line)"));
    let max_array_size = required("MaxArraySize")?;
    let max_array_size = max_array_size.parse().map_err(|_| Unparsed::new("MaxArraySize = N", max_array_size))?;
    let accounting = required("AccountingStorageType")? != "accounting_storage/none";
    let completion_log = match (required("JobCompType")?, value("JobCompLoc")) {
        ("jobcomp/filetxt", Some(path)) if path.starts_with('/') => Some(PathBuf::from(path)),
        _ => None,
    };
    let age = required("MinJobAge")?;
    let seconds = age.trim_end_matches("sec").trim();
    let min_job_age = Duration::from_secs(seconds.parse().map_err(|_| Unparsed::new("MinJobAge = N sec", age))?);
    Ok(ClusterConfig { max_array_size, accounting, completion_log, min_job_age })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(job: u64) -> Element {
        Element { job: JobId(job), index: None }
    }

    fn elem(job: u64, index: u32) -> Element {
        Element { job: JobId(job), index: Some(index) }
    }

    #[test]
    fn sbatch_prints_the_id_alone_or_with_the_cluster() {
        assert_eq!(sbatch_job_id("12\n"), Ok(JobId(12)));
        assert_eq!(sbatch_job_id("12;runner\n"), Ok(JobId(12)));
        assert_eq!(sbatch_job_id("sbatch: warning: something\n13\n"), Ok(JobId(13)));
        let err = sbatch_job_id("Submitted batch job 12\n").unwrap_err();
        assert_eq!(err.found, "Submitted batch job 12");
        assert!(sbatch_job_id("").is_err());
    }

    #[test]
    fn squeue_rows_name_array_elements_by_array_and_index() {
        let rows = squeue_rows(include_str!("testdata/squeue_array_expanded.txt")).unwrap();
        assert_eq!(rows.len(), 16);
        let state_of = |e: Element| rows.iter().find(|r| r.element == e).map(|r| r.state.clone());
        let reason_of = |e: Element| rows.iter().find(|r| r.element == e).and_then(|r| r.reason.clone());
        assert_eq!(reason_of(elem(10, 0)).as_deref(), Some("JobHeldUser"));
        assert_eq!(reason_of(single(11)).as_deref(), Some("Resources"));
        assert_eq!(reason_of(single(7)), None);
        let nodes_of = |e: Element| rows.iter().find(|r| r.element == e).and_then(|r| r.nodes.clone());
        assert!(nodes_of(single(7)).is_some_and(|n| n.starts_with('n')), "a running job has its node");
        assert_eq!(nodes_of(single(11)), None, "a pending job has none");
        assert_eq!(state_of(single(12)), Some(JobState::Cancelled));
        assert_eq!(state_of(single(8)), Some(JobState::Failed));
        assert_eq!(state_of(single(3)), Some(JobState::OutOfMemory));
        assert_eq!(state_of(single(11)), Some(JobState::Pending));
        assert_eq!(state_of(single(7)), Some(JobState::Running));
        // The last element of a finished array keeps the array's own id (`2|2|3|...`).
        assert_eq!(state_of(elem(2, 3)), Some(JobState::Completed));
        assert_eq!(state_of(elem(2, 0)), Some(JobState::Completed));
        for i in 0..5 {
            assert_eq!(state_of(elem(10, i)), Some(JobState::Pending), "element 10_{i}");
        }
        assert_eq!(state_of(single(2)), None, "an array is never a single job");
    }

    #[test]
    fn squeue_rows_after_release_show_throttled_and_timed_out_jobs() {
        let rows = squeue_rows(include_str!("testdata/squeue_after_release.txt")).unwrap();
        let state_of = |e: Element| rows.iter().find(|r| r.element == e).map(|r| r.state.clone());
        let reason_of = |e: Element| rows.iter().find(|r| r.element == e).and_then(|r| r.reason.clone());
        assert_eq!(reason_of(elem(10, 2)).as_deref(), Some("JobArrayTaskLimit"), "throttled by %2");
        assert_eq!(reason_of(single(7)).as_deref(), Some("TimeLimit"));
        assert_eq!(state_of(single(7)), Some(JobState::Timeout));
        assert_eq!(state_of(elem(10, 0)), Some(JobState::Completed));
        assert_eq!(state_of(elem(10, 2)), Some(JobState::Pending));
        assert_eq!(state_of(single(11)), Some(JobState::OutOfMemory));
    }

    #[test]
    fn squeue_rows_expand_a_collapsed_pending_range() {
        let rows = squeue_rows(include_str!("testdata/squeue_array_collapsed.txt")).unwrap();
        let pending: Vec<Element> = rows.iter().filter(|r| r.element.job == JobId(10)).map(|r| r.element).collect();
        assert_eq!(pending, (0..5).map(|i| elem(10, i)).collect::<Vec<_>>());
    }

    #[test]
    fn squeue_rows_reject_another_format() {
        let err = squeue_rows("12 12 N/A RUNNING None\n").unwrap_err();
        assert_eq!(err.found, "12 12 N/A RUNNING None");
        assert!(err.expected.contains("%A|%F|%K|%T|%N|%r"));
        assert!(squeue_rows("12|12|N/A|RUNNING|n1").is_err(), "no reason column");
        assert!(squeue_rows("x|12|N/A|RUNNING|n1|None").is_err());
        assert!(squeue_rows("12|12|5-1|RUNNING|n1|None").is_err());
        assert_eq!(squeue_rows("\n").unwrap(), vec![]);
    }

    #[test]
    fn array_index_notation() {
        assert_eq!(array_indices("7"), Some(vec![7]));
        assert_eq!(array_indices("0-4%2"), Some(vec![0, 1, 2, 3, 4]));
        assert_eq!(array_indices("[1,3-5]"), Some(vec![1, 3, 4, 5]));
        assert_eq!(array_indices("[2-4%2]"), Some(vec![2, 3, 4]));
        assert_eq!(array_indices("0-10:5"), Some(vec![0, 5, 10]));
        assert_eq!(array_indices("N/A"), None);
        assert_eq!(array_indices("4-2"), None);
        assert_eq!(array_indices("0-4:0"), None);
    }

    #[test]
    fn key_values_keep_spaces_inside_values() {
        let fields = key_values("JobId=4 Name=my job WorkDir=/tmp/a b ExitCode=0:0");
        assert_eq!(fields, vec![("JobId", "4"), ("Name", "my job"), ("WorkDir", "/tmp/a b"), ("ExitCode", "0:0")]);
        assert_eq!(key_values(""), vec![]);
        assert_eq!(key_values("JobId="), vec![("JobId", "")]);
    }

    #[test]
    fn key_values_read_a_real_scontrol_record() {
        // `scontrol show job -o` prints the same records as the completion log, with more keys.
        let text = include_str!("testdata/scontrol_show_job_array.txt");
        let first = key_values(text.lines().next().unwrap());
        let get = |k: &str| first.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert_eq!(get("ArrayJobId"), Some("10"));
        assert_eq!(get("ArrayTaskId"), Some("4"));
        assert_eq!(get("JobState"), Some("COMPLETED"));
        assert_eq!(get("ReqB:S:C:T"), Some("0:0:*:*"));
        assert_eq!(get("TRES"), Some("cpu=1,mem=1G,node=1,billing=1"));
        assert_eq!(get("Socks/Node"), Some("*"));
        assert_eq!(get("Power"), Some(""));
        assert_eq!(completion_log_entry(text.lines().nth(1).unwrap()), Some((elem(10, 3), JobState::Completed)));
    }

    #[test]
    fn completion_log_entries_of_every_final_state() {
        let text = include_str!("testdata/jobcomp_filetxt.txt");
        let entries: Vec<(Element, JobState)> = text.lines().filter_map(completion_log_entry).collect();
        assert_eq!(entries.len(), text.lines().count(), "every line is a job record");
        let state_of = |e: Element| entries.iter().find(|(el, _)| *el == e).map(|(_, s)| s.clone());
        assert_eq!(state_of(single(1)), Some(JobState::Completed));
        assert_eq!(state_of(single(3)), Some(JobState::OutOfMemory));
        assert_eq!(state_of(single(7)), Some(JobState::Timeout));
        assert_eq!(state_of(single(8)), Some(JobState::Failed));
        assert_eq!(state_of(single(12)), Some(JobState::Cancelled));
        assert_eq!(state_of(elem(2, 0)), Some(JobState::Completed));
        assert_eq!(state_of(elem(2, 3)), Some(JobState::Completed));
        assert_eq!(state_of(elem(10, 4)), Some(JobState::Completed));
        assert_eq!(completion_log_entry("JobId=5 UserId=root(0) Gro"), None, "a line still being written");
    }

    #[test]
    fn sacct_rows_of_single_jobs_and_array_elements() {
        // Captured with slurmdbd: array 1 (0-4%2: element 1 over its --mem, element 3 exit 3),
        // 2 cancelled while running, 3 a held array, 4 done, then array 9 (0-5%2) while running.
        let rows = sacct_rows(include_str!("testdata/sacct_array_states.txt")).unwrap();
        assert_eq!(
            rows,
            vec![
                (single(2), JobState::Cancelled),
                (single(4), JobState::Completed),
                (elem(1, 0), JobState::Completed),
                (elem(1, 1), JobState::OutOfMemory),
                (elem(1, 2), JobState::Completed),
                (elem(1, 3), JobState::Failed),
                (elem(1, 4), JobState::Completed),
                (elem(3, 0), JobState::Pending),
                (elem(3, 1), JobState::Pending),
                (elem(3, 2), JobState::Pending),
                (elem(3, 3), JobState::Pending),
                (elem(9, 0), JobState::Completed),
                (elem(9, 1), JobState::Completed),
                (elem(9, 2), JobState::Pending),
                (elem(9, 3), JobState::Pending),
                (elem(9, 4), JobState::Pending),
                (elem(9, 5), JobState::Pending),
            ]
        );
        assert!(sacct_rows("12 COMPLETED").is_err());
        assert!(sacct_rows("12.batch|COMPLETED").is_err(), "steps are not asked for (-X)");
    }

    #[test]
    fn cluster_config_from_scontrol_show_config() {
        let config = cluster_config(include_str!("testdata/scontrol_show_config.txt")).unwrap();
        assert_eq!(config.max_array_size, 1001);
        assert!(!config.accounting);
        assert_eq!(config.completion_log, Some(PathBuf::from("/work/wt/slurm/target/slurm/log/jobcomp.txt")));
        assert_eq!(config.min_job_age, Duration::from_secs(300));
        let err = cluster_config("MaxArraySize = many\n").unwrap_err();
        assert_eq!(err.found, "many");
    }

    #[test]
    fn job_states_round_trip_and_classify() {
        for word in ["PENDING", "RUNNING", "COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "NODE_FAIL"]
        {
            assert_eq!(JobState::parse(word).name(), word);
        }
        assert_eq!(JobState::parse("CANCELLED by 1000"), JobState::Cancelled);
        assert_eq!(JobState::parse("CANCELLED+"), JobState::Cancelled);
        assert_eq!(JobState::parse("REQUEUE_HOLD"), JobState::Requeued);
        assert!(JobState::OutOfMemory.is_finished());
        assert!(!JobState::Completing.is_finished(), "the node still cleans up: not final yet");
        assert!(JobState::Pending.is_waiting());
        let future = JobState::parse("LAUNCH_FAILED");
        assert_eq!(future, JobState::Unrecognised("LAUNCH_FAILED".into()));
        assert!(!future.is_finished() && !future.is_waiting());
    }
}
