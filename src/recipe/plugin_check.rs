//! Calls into plugin code at compile time, with panics caught: a plugin whose `check` panics
//! is a located recipe error, not the end of the process, and the panic's default report
//! (printed by Rust's hook) is replaced by the error's own words.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};

use runner_plugin::{ArgError, Args, Plugin};

thread_local! {
    /// True while this thread runs a plugin's `check`: its panics are reported as errors.
    static CHECKING: Cell<bool> = const { Cell::new(false) };
    /// Where the last caught panic happened.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// `plugin.check(args)`, or the panic's message (with where it happened) if it panicked.
pub(super) fn check_args(plugin: &dyn Plugin, args: &Args) -> Result<Result<(), ArgError>, String> {
    install_hook();
    CHECKING.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| plugin.check(args)));
    CHECKING.with(|c| c.set(false));
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        match PANIC_AT.with(|p| p.borrow_mut().take()) {
            Some(at) => format!("{message} (at {at})"),
            None => message,
        }
    })
}

/// Installs, once, a panic hook that stays silent for panics inside [`check_args`] and hands
/// every other panic to the hook that was there before (Rust's, or the scheduler's).
fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CHECKING.with(Cell::get) {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
                PANIC_AT.with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}
