//! The progress bar on a terminal: tasks done/total, reserved/budget, spilled, failures. It
//! reads the scheduler's atomic counters from its own thread, so the scheduler pays nothing.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::thread::ScopedJoinHandle;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use runner_plugin::size::format_size;

use crate::scheduler::Progress;

/// Starts drawing `progress` on stderr if it is a terminal; nothing otherwise.
pub fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    progress: &'scope Progress,
) -> Option<ScopedJoinHandle<'scope, ()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(scope.spawn(move || draw(progress)))
}

fn draw(progress: &Progress) {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} tasks · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    loop {
        let done = progress.done.load(Ordering::Relaxed);
        bar.set_length(progress.total.load(Ordering::Relaxed));
        bar.set_position(progress.finished.load(Ordering::Relaxed));
        let failed = progress.failed.load(Ordering::Relaxed);
        let mut msg = format!(
            "reserved {} / {}",
            format_size(progress.reserved.load(Ordering::Relaxed)),
            format_size(progress.budget.load(Ordering::Relaxed))
        );
        let spilled = progress.spilled.load(Ordering::Relaxed);
        if spilled > 0 {
            msg.push_str(&format!(" · spilled {}", format_size(spilled)));
        }
        if failed > 0 {
            msg.push_str(&format!(" · {failed} failed"));
        }
        bar.set_message(msg);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
}
