//! Panics in plugin code (and in the engine's own workers) become messages, not crashes: the
//! process-wide hook stays quiet for a panic that [`catch`] is about to turn into an error, and
//! keeps where it happened for that message.
//!
//! The default hook would print `thread '…' panicked at …` in the middle of a progress bar or a
//! recipe report; here the panic's text and place go into the task's failure or the recipe's
//! diagnostic instead. Panics anywhere else still reach the previous hook.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};

use runner_plugin::task_tag;

thread_local! {
    /// How many [`catch`] calls are running on this thread (a panic under one is expected).
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// Where the last caught panic on this thread happened.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the hook, once per process.
pub fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = CATCHING.try_with(Cell::get).unwrap_or(0) > 0
                || task_tag::current() != task_tag::NO_TASK
                || std::thread::current().name().is_some_and(|n| n.starts_with("runner-worker-"));
            if !expected {
                previous(info);
                return;
            }
            let location = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
            let _ = LOCATION.try_with(|cell| *cell.borrow_mut() = location);
        }));
    });
}

/// Runs `f`, turning a panic into its message (with where it happened): plugin code's bug is a
/// recipe error or a task failure, never a crash.
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    let _ = CATCHING.try_with(|c| c.set(c.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    let _ = CATCHING.try_with(|c| c.set(c.get() - 1));
    result.map_err(|payload| message(&*payload))
}

/// The text of a panic payload, with where it happened when the hook saw it on this thread.
pub fn message(payload: &(dyn Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_string()
    };
    match LOCATION.try_with(|cell| cell.borrow_mut().take()).ok().flatten() {
        Some(location) => format!("{text} (at {location})"),
        None => text,
    }
}
