//! Which task the current thread works for.
//!
//! The engine's allocator charges every allocation to the task named here, so work a task hands
//! to other threads must carry the tag along: [`crate::TaskContext`]'s parallel helpers do that.
//! The tag is a plain `Cell<u32>` with a const initialiser, so reading it never allocates (it is
//! read from inside the global allocator).

use std::cell::Cell;

/// Tag of "no task": the engine itself, or a thread outside any task.
pub const NO_TASK: u32 = 0;

thread_local! {
    static CURRENT: Cell<u32> = const { Cell::new(NO_TASK) };
}

/// The tag of the task this thread is working for; `NO_TASK` outside tasks (and while the
/// thread is being torn down).
#[inline]
pub fn current() -> u32 {
    CURRENT.try_with(Cell::get).unwrap_or(NO_TASK)
}

/// Runs `f` with this thread tagged as `tag`, restoring the previous tag afterwards, also when
/// `f` panics.
#[inline]
pub fn with<R>(tag: u32, f: impl FnOnce() -> R) -> R {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = CURRENT.try_with(|c| c.set(self.0));
        }
    }
    let previous = CURRENT.with(|c| c.replace(tag));
    let _restore = Restore(previous);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nests_and_restores() {
        assert_eq!(current(), NO_TASK);
        with(7, || {
            assert_eq!(current(), 7);
            with(9, || assert_eq!(current(), 9));
            assert_eq!(current(), 7);
        });
        assert_eq!(current(), NO_TASK);
        let _ = std::panic::catch_unwind(|| with(3, || panic!("boom")));
        assert_eq!(current(), NO_TASK);
    }
}
