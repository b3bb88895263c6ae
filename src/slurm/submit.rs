//! What a submission asks of Slurm ([`JobSpec`], [`ArraySpec`]) and how it becomes `sbatch`'s
//! options and the batch script it reads on stdin.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::SlurmError;
use super::state::{Element, JobId};

/// The environment variable through which an [`TaskMapping::IndexFile`] script hands the
/// element's task index to the command.
pub const TASK_INDEX_VAR: &str = "RUNNER_TASK_INDEX";

/// Longest job name submitted (Slurm accepts more; squeue and accounting columns do not).
const MAX_JOB_NAME: usize = 200;

/// One batch job: the command it runs and the resources it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The job's name, e.g. `recipe/step`; made key-safe by `job_name`.
    pub name: String,
    /// A shell (bash) command line, the body of the batch script. In an array job it can use
    /// `$SLURM_ARRAY_TASK_ID`, or `$RUNNER_TASK_INDEX` with [`TaskMapping::IndexFile`].
    pub command: String,
    /// `--mem`: the memory of the job on its node, rounded up to whole MiB.
    pub mem_bytes: u64,
    /// `--cpus-per-task`.
    pub cpus_per_task: u32,
    /// `--time`, rounded up to whole minutes; `None` leaves the partition's default.
    pub time_limit: Option<Duration>,
    /// Where each job (element) writes its stdout and stderr: `NAME-%j.out`/`.err` for a
    /// single job, `NAME-%A_%a.out`/`.err` for array elements (see [`log_paths`]).
    pub log_dir: PathBuf,
    /// `--chdir`; `None` runs in the submitting process's directory.
    pub workdir: Option<PathBuf>,
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// Further `sbatch` options passed through as they are (`--qos=...`, `--constraint=...`).
    pub extra_args: Vec<String>,
}

/// Which task an array element runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskMapping {
    /// The command itself maps `$SLURM_ARRAY_TASK_ID` to its task.
    ArrayIndex,
    /// Line `k + 1` of this file (written with [`write_index_file`], in a directory every node
    /// sees) is the task index of element `k`; the script exports it as `$RUNNER_TASK_INDEX`.
    IndexFile(PathBuf),
}

/// A job array: `tasks` elements of one job, indices `0..tasks`, at most `throttle` running at
/// once (`--array=0-N%K`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    pub job: JobSpec,
    pub tasks: u32,
    pub throttle: Option<u32>,
    pub mapping: TaskMapping,
}

/// Makes a job name that every Slurm command prints as one word: letters, digits and `._-/=`
/// are kept, anything else becomes `_`, and the name is cut to 200 characters.
pub fn job_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-/=".contains(c) { c } else { '_' })
        .take(MAX_JOB_NAME)
        .collect();
    if safe.is_empty() { "runner".to_string() } else { safe }
}

/// The file-name form of a job name: `/` (a recipe/step separator) becomes `.`.
fn log_stem(name: &str) -> String {
    job_name(name).replace('/', ".")
}

/// The stdout and stderr files of one job or array element of `spec`, as Slurm writes them.
pub fn log_paths(spec: &JobSpec, element: Element) -> (PathBuf, PathBuf) {
    let stem = match element.index {
        Some(index) => format!("{}-{}_{index}", log_stem(&spec.name), element.job),
        None => format!("{}-{}", log_stem(&spec.name), element.job),
    };
    (spec.log_dir.join(format!("{stem}.out")), spec.log_dir.join(format!("{stem}.err")))
}

/// Writes the task indices of an array's elements, one per line, for
/// [`TaskMapping::IndexFile`].
pub fn write_index_file(path: &Path, indices: &[u64]) -> Result<(), SlurmError> {
    let mut text = String::with_capacity(indices.len() * 8);
    for index in indices {
        let _ = writeln!(text, "{index}");
    }
    std::fs::write(path, text).map_err(|error| SlurmError::File {
        what: "cannot write task index file",
        path: path.into(),
        error,
    })
}

/// `sbatch`'s options for a single job (`array: None`) or an array.
pub(super) fn sbatch_args(spec: &JobSpec, array: Option<&ArraySpec>) -> Result<Vec<String>, SlurmError> {
    validate(spec)?;
    let stem = log_stem(&spec.name);
    let pattern = if array.is_some() { "%A_%a" } else { "%j" };
    let log = |ext: &str| spec.log_dir.join(format!("{stem}-{pattern}.{ext}")).display().to_string();
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", job_name(&spec.name)),
        format!("--mem={}", mem_option(spec.mem_bytes)),
        format!("--cpus-per-task={}", spec.cpus_per_task),
        format!("--output={}", log("out")),
        format!("--error={}", log("err")),
    ];
    if let Some(array) = array {
        args.push(match array.throttle {
            Some(k) => format!("--array=0-{}%{k}", array.tasks - 1),
            None => format!("--array=0-{}", array.tasks - 1),
        });
    }
    if let Some(limit) = spec.time_limit {
        args.push(format!("--time={}", time_option(limit)));
    }
    if let Some(dir) = &spec.workdir {
        args.push(format!("--chdir={}", dir.display()));
    }
    if let Some(partition) = &spec.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &spec.account {
        args.push(format!("--account={account}"));
    }
    args.extend(spec.extra_args.iter().cloned());
    Ok(args)
}

/// `--mem`'s value for `bytes`: whole MiB, rounded up (`301M`).
pub fn mem_option(bytes: u64) -> String {
    format!("{}M", bytes.div_ceil(1 << 20).max(1))
}

/// `--time`'s value for `limit`: whole minutes, rounded up.
pub fn time_option(limit: Duration) -> String {
    limit.as_millis().div_ceil(60_000).max(1).to_string()
}

/// Checks what Slurm would refuse late or silently change.
pub(super) fn validate(spec: &JobSpec) -> Result<(), SlurmError> {
    let invalid = |reason: String| Err(SlurmError::InvalidSpec { name: spec.name.clone(), reason });
    if spec.command.trim().is_empty() {
        return invalid("the command is empty".into());
    }
    if spec.mem_bytes == 0 {
        return invalid("--mem must be at least 1 byte (0 would mean all the node's memory)".into());
    }
    if spec.cpus_per_task == 0 {
        return invalid("--cpus-per-task must be at least 1".into());
    }
    if spec.time_limit == Some(Duration::ZERO) {
        return invalid("--time must be positive".into());
    }
    if !spec.log_dir.is_absolute() {
        return invalid(format!(
            "the log directory {} must be absolute (jobs start elsewhere)",
            spec.log_dir.display()
        ));
    }
    if spec.log_dir.to_string_lossy().contains('%') {
        // sbatch would read it as a file name pattern (%j, %A...).
        return invalid(format!("the log directory {} must not contain '%'", spec.log_dir.display()));
    }
    Ok(())
}

/// Checks an array against the cluster's `MaxArraySize`.
pub(super) fn validate_array(array: &ArraySpec, max_array_size: u32) -> Result<(), SlurmError> {
    let invalid = |reason: String| Err(SlurmError::InvalidSpec { name: array.job.name.clone(), reason });
    if array.tasks == 0 {
        return invalid("a job array needs at least one task".into());
    }
    if array.tasks > max_array_size {
        return invalid(format!(
            "{} tasks exceed the cluster's MaxArraySize of {max_array_size}: submit them as several arrays",
            array.tasks
        ));
    }
    if array.throttle == Some(0) {
        return invalid("the throttle (%K) must be at least 1".into());
    }
    if let TaskMapping::IndexFile(path) = &array.mapping
        && !path.is_absolute()
    {
        return invalid(format!("the task index file {} must be absolute", path.display()));
    }
    Ok(())
}

/// The batch script: bash, the element's task index when mapped through a file, the command.
pub(super) fn batch_script(spec: &JobSpec, mapping: Option<&TaskMapping>) -> String {
    let mut script = format!("#!/bin/bash\n# Submitted by runner: {}\n", job_name(&spec.name));
    if let Some(TaskMapping::IndexFile(path)) = mapping {
        let file = shell_quote(&path.display().to_string());
        let _ = write!(
            script,
            "{TASK_INDEX_VAR}=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1)){{p;q}}\" {file})\n\
             if [ -z \"${TASK_INDEX_VAR}\" ]; then\n  \
             echo \"runner: no task index for array element $SLURM_ARRAY_TASK_ID in \"{file} >&2\n  exit 2\nfi\n\
             export {TASK_INDEX_VAR}\n"
        );
    }
    script.push_str(&spec.command);
    script.push('\n');
    script
}

/// Quotes a word for the shell: inside single quotes everything is literal but `'` itself.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The command line as it would be typed, for error messages.
pub(super) fn display_command(program: &str, args: &[String]) -> String {
    let mut line = program.to_string();
    for arg in args {
        line.push(' ');
        let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_=./,:%@+".contains(c));
        if plain { line.push_str(arg) } else { line.push_str(&shell_quote(arg)) }
    }
    line
}

/// The ids as one comma-separated argument (`squeue -j`, `sacct -j`).
pub(super) fn id_list(ids: impl IntoIterator<Item = JobId>) -> String {
    ids.into_iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            name: "quickstart/smooth member".into(),
            command: "runner task r.yaml --step smooth".into(),
            mem_bytes: 300 * (1 << 20) + 1,
            cpus_per_task: 2,
            time_limit: Some(Duration::from_secs(61)),
            log_dir: "/shared/logs".into(),
            workdir: Some("/shared".into()),
            partition: Some("main".into()),
            account: None,
            extra_args: vec!["--qos=low".into()],
        }
    }

    #[test]
    fn array_options_round_up_memory_and_time() {
        let array = ArraySpec { job: spec(), tasks: 5, throttle: Some(2), mapping: TaskMapping::ArrayIndex };
        let args = sbatch_args(&array.job, Some(&array)).unwrap();
        assert_eq!(
            args,
            [
                "--parsable",
                "--job-name=quickstart/smooth_member",
                "--mem=301M",
                "--cpus-per-task=2",
                "--output=/shared/logs/quickstart.smooth_member-%A_%a.out",
                "--error=/shared/logs/quickstart.smooth_member-%A_%a.err",
                "--array=0-4%2",
                "--time=2",
                "--chdir=/shared",
                "--partition=main",
                "--qos=low",
            ]
        );
        let (out, err) = log_paths(&array.job, Element { job: JobId(7), index: Some(3) });
        assert_eq!(out, Path::new("/shared/logs/quickstart.smooth_member-7_3.out"));
        assert_eq!(err, Path::new("/shared/logs/quickstart.smooth_member-7_3.err"));
    }

    #[test]
    fn single_job_logs_are_named_by_job_id() {
        let args = sbatch_args(&spec(), None).unwrap();
        assert!(args.contains(&"--output=/shared/logs/quickstart.smooth_member-%j.out".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--array")));
        let (out, _) = log_paths(&spec(), Element { job: JobId(9), index: None });
        assert_eq!(out, Path::new("/shared/logs/quickstart.smooth_member-9.out"));
    }

    #[test]
    fn invalid_specs_are_refused_before_submitting() {
        let mut s = spec();
        s.mem_bytes = 0;
        let err = sbatch_args(&s, None).unwrap_err().to_string();
        assert!(err.contains("quickstart/smooth member") && err.contains("--mem"), "{err}");
        let mut s = spec();
        s.log_dir = "logs".into();
        assert!(sbatch_args(&s, None).unwrap_err().to_string().contains("must be absolute"));
        s.log_dir = "/shared/100%".into();
        assert!(sbatch_args(&s, None).unwrap_err().to_string().contains("must not contain '%'"));
        let array = ArraySpec { job: spec(), tasks: 1002, throttle: None, mapping: TaskMapping::ArrayIndex };
        let err = validate_array(&array, 1001).unwrap_err().to_string();
        assert!(err.contains("1002 tasks exceed the cluster's MaxArraySize of 1001"), "{err}");
        let array = ArraySpec { job: spec(), tasks: 0, throttle: None, mapping: TaskMapping::ArrayIndex };
        assert!(validate_array(&array, 1001).is_err());
    }

    #[test]
    fn job_names_are_key_safe() {
        assert_eq!(job_name("recipe/step[member=3]"), "recipe/step_member=3_");
        assert_eq!(job_name("a|b c"), "a_b_c");
        assert_eq!(job_name(""), "runner");
        assert_eq!(job_name(&"x".repeat(500)).len(), 200);
    }

    #[test]
    fn index_file_script_reads_the_elements_line() {
        let script = batch_script(&spec(), Some(&TaskMapping::IndexFile("/shared/it's.idx".into())));
        assert!(script.starts_with("#!/bin/bash\n"));
        assert!(
            script.contains(r#"RUNNER_TASK_INDEX=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1)){p;q}" '/shared/it'\''s.idx')"#),
            "{script}"
        );
        assert!(script.ends_with("export RUNNER_TASK_INDEX\nrunner task r.yaml --step smooth\n"), "{script}");
    }

    #[test]
    fn index_file_script_runs_in_bash() {
        let dir = tempfile::tempdir().unwrap();
        let index_file = dir.path().join("tasks.idx");
        write_index_file(&index_file, &[40, 7, 1_000_000]).unwrap();
        let mut s = spec();
        s.command = "echo \"task=$RUNNER_TASK_INDEX\"".into();
        let script = batch_script(&s, Some(&TaskMapping::IndexFile(index_file)));
        let run = |element: &str| {
            std::process::Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env("SLURM_ARRAY_TASK_ID", element)
                .output()
                .unwrap()
        };
        assert_eq!(String::from_utf8_lossy(&run("1").stdout), "task=7\n");
        assert_eq!(String::from_utf8_lossy(&run("2").stdout), "task=1000000\n");
        let missing = run("3");
        assert_eq!(missing.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&missing.stderr).contains("no task index for array element 3"));
    }

    #[test]
    fn commands_display_as_typed() {
        let line = display_command("sbatch", &["--parsable".into(), "--job-name=a b".into(), "it's".into()]);
        assert_eq!(line, r"sbatch --parsable '--job-name=a b' 'it'\''s'");
    }
}
