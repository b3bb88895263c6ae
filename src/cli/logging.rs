//! Where `tracing` events go: stderr, as lines for people (`warning: the spill dir ... is on
//! tmpfs`), without times or module paths, coloured only on a terminal and never when `NO_COLOR`
//! is set (<https://no-color.org>). Setting `RUST_LOG` (e.g. `RUST_LOG=runner=debug`) is for
//! developers: the levels it names, each line with its time and module path. Either way a line
//! written while the progress bar is drawn clears the bar first.

use std::fmt;
use std::io::{self, IsTerminal};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use super::progress;

/// Installs the subscriber; a second call (tests, an embedding binary) leaves the first one.
pub fn init() {
    let colour = use_colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder = tracing_subscriber::fmt().with_writer(Stderr).with_ansi(colour);
    let _ = match EnvFilter::try_from_default_env() {
        Ok(filter) => builder.with_env_filter(filter).try_init(),
        Err(_) => builder.with_max_level(Level::WARN).event_format(ForPeople).try_init(),
    };
}

/// stderr, with the progress bar (when one is drawn) cleared while a line is written, so the
/// line stands on its own and the bar is drawn again below it.
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = StderrLine;

    fn make_writer(&'a self) -> StderrLine {
        StderrLine
    }
}

/// Takes each event whole: the fmt layer formats an event, then writes it in one call.
struct StderrLine;

impl io::Write for StderrLine {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        progress::suspended(|| io::stderr().write_all(line)).map(|()| line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Colour on a terminal unless `NO_COLOR` is set to anything but the empty string.
fn use_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

/// `error: ...` / `warning: ...` like the command line's own messages; the word in bold colour
/// when the writer takes ANSI escapes.
struct ForPeople;

impl<S, N> FormatEvent<S, N> for ForPeople
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let (word, colour) = level_word(*event.metadata().level());
        if writer.has_ansi_escapes() {
            write!(writer, "\x1b[{colour}m{word}:\x1b[0m ")?;
        } else {
            write!(writer, "{word}: ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The word a line starts with and its SGR colour (bold red, bold yellow, ...).
fn level_word(level: Level) -> (&'static str, &'static str) {
    match level {
        Level::ERROR => ("error", "1;31"),
        Level::WARN => ("warning", "1;33"),
        Level::INFO => ("info", "1;32"),
        Level::DEBUG => ("debug", "1;34"),
        Level::TRACE => ("trace", "1;35"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))), "an empty NO_COLOR is not set");
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn levels_read_like_the_command_lines_own_messages() {
        assert_eq!(level_word(Level::WARN).0, "warning");
        assert_eq!(level_word(Level::ERROR).0, "error");
    }
}
