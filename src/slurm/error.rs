//! What can go wrong talking to Slurm: every message names the command as it was run, and for a
//! failed command its exit status and what it printed on stderr.

use std::path::PathBuf;
use std::process::ExitStatus;

/// An error of the Slurm client.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command could not be started at all (most often: Slurm's client commands are not
    /// installed or not on `PATH`).
    #[error("cannot run `{command}`: {error}{hint}", hint = spawn_hint(.error))]
    Spawn { command: String, error: std::io::Error },
    /// The command ran and exited unsuccessfully.
    #[error("`{command}` failed ({status}): {said}", said = stderr_or_none(.stderr))]
    Failed { command: String, status: ExitStatus, stderr: String },
    /// The command succeeded but printed something this client does not understand.
    #[error("`{command}` printed {found:?}, expected {expected}")]
    Parse { command: String, expected: &'static str, found: String },
    /// A submission that Slurm would refuse or that makes no sense, caught before submitting.
    #[error("invalid submission of job {name:?}: {reason}")]
    InvalidSpec { name: String, reason: String },
    /// A file the client reads or writes (a task index file, the job completion log).
    #[error("{what} {}: {error}", path.display())]
    File { what: &'static str, path: PathBuf, error: std::io::Error },
}

fn spawn_hint(error: &std::io::Error) -> &'static str {
    if error.kind() == std::io::ErrorKind::NotFound {
        " (are Slurm's client commands installed and on PATH? `.ci/slurm/up` starts a local cluster)"
    } else {
        ""
    }
}

fn stderr_or_none(stderr: &str) -> &str {
    let trimmed = stderr.trim();
    if trimmed.is_empty() { "(nothing on stderr)" } else { trimmed }
}
