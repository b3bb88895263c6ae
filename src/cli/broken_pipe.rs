//! A reader that goes away ends the command quietly: `runner plugins | head -1` exits 0 with
//! nothing on stderr. Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE and
//! `println!` panics with "failed printing to stdout"; that one panic, on the thread running the
//! command, is kept silent and becomes exit 0. Stdout failing otherwise (`> /dev/full`: no space
//! left) becomes a one-line error and exit 3. Every other panic is left as it was.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

thread_local! {
    /// Whether this thread runs a command under [`quiet`].
    static RUNNING_COMMAND: Cell<bool> = const { Cell::new(false) };
}

/// The start of the message `println!` panics with when stdout cannot be written.
const PRINT_FAILED: &str = "failed printing to stdout";

/// Whether a panic's text says stdout's reader has gone.
fn is_broken_pipe(text: &str) -> bool {
    text.starts_with(PRINT_FAILED) && text.contains("Broken pipe")
}

/// Whether a panic's text says stdout could not be written.
fn is_print_failure(text: &str) -> bool {
    text.starts_with(PRINT_FAILED)
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Installs a hook in front of the current one that stays quiet for a broken pipe on a thread
/// running a command.
pub fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let ours = RUNNING_COMMAND.try_with(Cell::get).unwrap_or(false);
        if ours && payload_text(info.payload()).is_some_and(is_print_failure) {
            return;
        }
        previous(info);
    }));
}

/// Runs the command `f`; a broken stdout pipe ends it with exit 0, another failure to write
/// stdout with an error.
pub fn quiet(f: impl FnOnce() -> anyhow::Result<u8>) -> anyhow::Result<u8> {
    let _ = RUNNING_COMMAND.try_with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    let _ = RUNNING_COMMAND.try_with(|c| c.set(false));
    match result {
        Ok(code) => code,
        Err(payload) if payload_text(&*payload).is_some_and(is_broken_pipe) => Ok(0),
        Err(payload) => match payload_text(&*payload).filter(|text| is_print_failure(text)) {
            Some(text) => Err(anyhow::anyhow!("cannot write to stdout{}", &text[PRINT_FAILED.len()..])),
            None => resume_unwind(payload),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_closed_stdout_is_quiet() {
        assert!(is_broken_pipe("failed printing to stdout: Broken pipe (os error 32)"));
        assert!(!is_broken_pipe("failed printing to stdout: No space left on device (os error 28)"));
        assert!(!is_broken_pipe("index out of bounds"));
        assert!(is_print_failure("failed printing to stdout: No space left on device (os error 28)"));
        assert!(!is_print_failure("index out of bounds"));
    }
}
