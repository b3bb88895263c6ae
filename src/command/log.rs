//! A command's log file: where it is (one file per task, its name an escaped task key, so no
//! two tasks share one), and how much of the command's output it keeps (`--log-limit`, 64 MiB
//! by default): the first half of the limit as written, then the last half — kept in a ring
//! inside the file, so the runner holds none of it in memory — and, where bytes were dropped
//! in between, a line saying how many.
//!
//! A service writes its task's output into the log itself (its stdout and stderr point at the
//! file): [`HandedLog`] bounds that from outside, to the same limit and with the same line.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use runner_plugin::size::format_size;

/// The default cap on the output a command keeps in its log.
pub const DEFAULT_LOG_LIMIT: u64 = 64 << 20;

static LOG_LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_LOG_LIMIT);

/// Sets the cap on each command's kept output for this process (`runner run --log-limit`).
pub fn set_log_limit(bytes: u64) {
    LOG_LIMIT.store(bytes, Ordering::Relaxed);
}

/// The cap on each command's kept output in this process.
pub fn log_limit() -> u64 {
    LOG_LIMIT.load(Ordering::Relaxed)
}

/// Where a task's commands write when the plugin does not say, relative to the directory the
/// runner started in: `runner-logs/<recipe>/<cycle>/<step>/<key>.log`, each part escaped by
/// [`file_name_of`].
pub fn task_log_path(recipe: &str, cycle: &str, step: &str, key: &str) -> PathBuf {
    PathBuf::from("runner-logs")
        .join(file_name_of(recipe))
        .join(file_name_of(cycle))
        .join(file_name_of(step))
        .join(format!("{}.log", file_name_of(key)))
}

/// Longest escaped name kept as it is; longer ones end in a hash of the whole (file names have
/// at most 255 bytes).
const MAX_NAME: usize = 180;

/// `text` as one file name, one-to-one: letters, digits and `-_=,.` stay, every other byte is
/// `%XX` (so `a b`, `a_b`, `a/b` and `a?b` are four names), a leading `.` too (no name is
/// hidden, `.` or `..`); an empty text is `%`. Past [`MAX_NAME`] bytes, the name is cut and
/// ends in a hash of the whole text.
pub fn file_name_of(text: &str) -> String {
    if text.is_empty() {
        return "%".into();
    }
    let mut name = String::with_capacity(text.len());
    for (at, byte) in text.bytes().enumerate() {
        let keep = byte.is_ascii_alphanumeric() || b"-_=,".contains(&byte) || (byte == b'.' && at > 0);
        if keep {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    if name.len() > MAX_NAME {
        let hash = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
        let mut cut = MAX_NAME - 17;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        name.push_str(&format!("~{hash:016x}"));
    }
    name
}

/// A command's log file, open for the runner's lines and the command's capped output.
pub(super) struct Log {
    file: File,
    path: PathBuf,
    /// Where the next byte goes while output is not in the ring.
    end: u64,
    limit: u64,
    /// Bytes of the command's output seen so far.
    output: u64,
    /// Where the ring of the output's last bytes starts in the file, once the head is full.
    ring_start: Option<u64>,
}

impl Log {
    /// Opens (creating it and its folders) the log at `path`; output past `limit` is dropped
    /// from the middle.
    pub fn open(path: &Path, limit: u64) -> io::Result<Log> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        let end = file.metadata()?.len();
        let mut log = Log { file, path: path.to_path_buf(), end, limit, output: 0, ring_start: None };
        let mut last = [0u8];
        if end > 0 && log.file.read_exact_at(&mut last, end - 1).is_ok() && last[0] != b'\n' {
            // What came before stopped mid-line (a process killed while it wrote): the runner's
            // next line starts one of its own.
            log.line("");
        }
        Ok(log)
    }

    /// A line of the runner's (a header, a footer), after what is there.
    pub fn line(&mut self, text: &str) {
        let line = format!("{text}\n");
        if self.file.write_all_at(line.as_bytes(), self.end).is_ok() {
            self.end += line.len() as u64;
        }
    }

    fn head(&self) -> u64 {
        halves(self.limit).0
    }

    fn ring(&self) -> u64 {
        halves(self.limit).1
    }

    /// Some of the command's output.
    pub fn output(&mut self, mut bytes: &[u8]) {
        let head = self.head();
        if self.output < head {
            let n = (head - self.output).min(bytes.len() as u64) as usize;
            let _ = self.file.write_all_at(&bytes[..n], self.end);
            self.end += n as u64;
            self.output += n as u64;
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        let ring = self.ring();
        let start = *self.ring_start.get_or_insert(self.end);
        while !bytes.is_empty() {
            let at = (self.output - head) % ring;
            let n = (ring - at).min(bytes.len() as u64) as usize;
            let _ = self.file.write_all_at(&bytes[..n], start + at);
            self.output += n as u64;
            bytes = &bytes[n..];
        }
        self.end = start + (self.output - head).min(ring);
    }

    /// How many bytes of output were dropped (not kept in the log).
    pub fn dropped(&self) -> u64 {
        self.output.saturating_sub(self.limit.max(self.head() + self.ring()))
    }

    /// Puts the ring's bytes in order, after a line saying what was dropped, once the output
    /// has ended; the runner's lines that follow go after it.
    pub fn finish(&mut self) {
        let dropped = self.dropped();
        let Some(start) = self.ring_start.filter(|_| dropped > 0) else { return };
        let ring = self.ring();
        let split = (self.output - self.head()) % ring;
        let note = dropped_note(dropped, self.limit);
        match self.reorder(start, split, ring, &note) {
            Ok((file, end)) => (self.file, self.end) = (file, end),
            Err(e) => tracing::warn!("cannot put the end of the log {} in order: {e}", self.path.display()),
        }
        self.ring_start = None;
    }

    /// Rewrites the file through a temporary one: what precedes the ring, `note`, the ring from
    /// `split` to its end, then its start up to `split`.
    fn reorder(&mut self, start: u64, split: u64, ring: u64, note: &str) -> io::Result<(File, u64)> {
        let mut name = std::ffi::OsString::from(".");
        name.push(self.path.file_name().unwrap_or_default());
        name.push(format!(".{}.tmp", std::process::id()));
        let temp_path = self.path.with_file_name(name);
        let mut temp = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&temp_path)?;
        let copied = (|| {
            self.copy(&mut temp, 0, start)?;
            temp.write_all(note.as_bytes())?;
            self.copy(&mut temp, start + split, ring - split)?;
            self.copy(&mut temp, start, split)?;
            std::fs::rename(&temp_path, &self.path)
        })();
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&temp_path);
            return Err(e);
        }
        let end = temp.seek(SeekFrom::End(0))?;
        Ok((temp, end))
    }

    fn copy(&mut self, to: &mut File, from: u64, len: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(from))?;
        let copied = io::copy(&mut (&mut self.file).take(len), to)?;
        if copied != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the log is shorter than written"));
        }
        Ok(())
    }
}

/// The runner's line that opens an attempt in a log:
/// `--- runner: WHAT (started 2026-12-01T09:00:00.000Z) ---`.
pub(super) fn header_line(what: &str) -> String {
    format!("--- runner: {what} (started {}) ---", chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"))
}

/// How a log's `limit` splits: the bytes of output kept from its start, and from its end.
fn halves(limit: u64) -> (u64, u64) {
    let head = limit / 2;
    (head, (limit - head).max(1))
}

/// The line that stands where `dropped` bytes of output were left out of a log.
fn dropped_note(dropped: u64, limit: u64) -> String {
    format!(
        "\n--- runner: {dropped} bytes ({}) of output dropped here: the log keeps the first and last {} of a \
         command's output (--log-limit {}) ---\n",
        format_size(dropped),
        format_size(halves(limit).0),
        format_size(limit),
    )
}

/// Holes are punched in whole blocks of this size (the file systems' usual block).
const BLOCK: u64 = 4096;

/// A task's log that a process writes into itself — a service, whose stdout and stderr point at
/// the file (opened `O_APPEND`) while it serves the task — bounded from outside to the same
/// limit as a [`Log`]: while the task runs, the runner calls [`HandedLog::bound`] now and then,
/// which frees the middle of this attempt's output past the limit (`fallocate` punching holes,
/// the file's length kept, so the writer's appends go on where they were); once the writer is
/// quiet, [`HandedLog::end_output`] keeps the first and last halves with [`Log`]'s line between
/// them. The runner's own lines (a header, a footer) are [`Log::line`]s.
pub(super) struct HandedLog {
    log: Log,
    /// Where this attempt's output starts: after its header.
    start: u64,
    /// Up to where the middle's blocks are freed; `u64::MAX` once the file system said it
    /// cannot punch holes.
    freed: AtomicU64,
}

impl HandedLog {
    /// Opens (creating it and its folders) the log at `path` and writes the [`header_line`] of
    /// `what` after what is there; the output that follows is this attempt's.
    pub fn open(path: &Path, limit: u64, what: &str) -> io::Result<HandedLog> {
        let mut log = Log::open(path, limit)?;
        log.line(&header_line(what));
        let start = log.end;
        Ok(HandedLog { log, start, freed: AtomicU64::new(0) })
    }

    pub fn path(&self) -> &Path {
        &self.log.path
    }

    pub fn file(&self) -> &File {
        &self.log.file
    }

    /// Where this attempt's output starts in the file.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Frees what the writer has written past the limit so far, but for the last half of the
    /// limit: at most the blocks between the first half and the last, rounded inward. Cheap
    /// (one `fstat`) while there is nothing to free; called from one thread at a time.
    pub fn bound(&self) {
        let freed = self.freed.load(Ordering::Relaxed);
        if freed == u64::MAX {
            return;
        }
        let Ok(size) = self.log.file.metadata().map(|m| m.len()) else { return };
        if size.saturating_sub(self.start) <= self.log.limit {
            return;
        }
        let (head, tail) = halves(self.log.limit);
        let from = (self.start + head).next_multiple_of(BLOCK).max(freed);
        let to = (size - tail) / BLOCK * BLOCK;
        if to <= from {
            return;
        }
        // SAFETY: fallocate on an fd we own; the range is within the file.
        let punched = unsafe {
            libc::fallocate(
                self.log.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        };
        if punched == 0 {
            self.freed.store(to, Ordering::Relaxed);
        } else {
            // EOPNOTSUPP where the file system has no holes (and any other refusal): the log
            // is bounded by `end_output` alone then, once the task is over, its disk use
            // meanwhile not.
            let error = io::Error::last_os_error();
            tracing::debug!("cannot free the middle of the log {} as it grows: {error}", self.log.path.display());
            self.freed.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Once the writer is quiet (the task is over): this attempt's output past the limit is cut
    /// to its first and last halves, with a line saying what was dropped between them, in
    /// place — the file stays the one the writer's descriptors name. Lines written after it
    /// follow the output.
    pub fn end_output(&mut self) {
        let Ok(size) = self.log.file.metadata().map(|m| m.len()) else { return };
        let (head, tail) = halves(self.log.limit);
        let dropped = size.saturating_sub(self.start).saturating_sub(head + tail);
        if dropped == 0 {
            return;
        }
        let note = dropped_note(dropped, self.log.limit);
        let cut = self.start + head;
        let tail_from = size - tail;
        if tail_from < cut + note.len() as u64 {
            // Fewer bytes over the limit than the line would take (nothing was freed then):
            // kept whole.
            return;
        }
        if let Err(e) = self.keep_ends(cut, &note, tail_from, size) {
            tracing::warn!("cannot cut the log {} to its limit: {e}", self.log.path.display());
        }
    }

    /// `note` at `cut`, then the bytes from `tail_from` to `size` moved down after it, and the
    /// file ends there. Safe in place: the bytes move towards the start.
    fn keep_ends(&self, cut: u64, note: &str, tail_from: u64, size: u64) -> io::Result<()> {
        let file = &self.log.file;
        file.write_all_at(note.as_bytes(), cut)?;
        let mut buffer = [0u8; 16 << 10];
        let (mut from, mut to) = (tail_from, cut + note.len() as u64);
        while from < size {
            let n = (size - from).min(buffer.len() as u64) as usize;
            file.read_exact_at(&mut buffer[..n], from)?;
            file.write_all_at(&buffer[..n], to)?;
            from += n as u64;
            to += n as u64;
        }
        file.set_len(to)
    }

    /// A line of the runner's (a footer), after what is there — the writer's bytes included.
    pub fn line(&mut self, text: &str) {
        if let Ok(meta) = self.log.file.metadata() {
            self.log.end = meta.len();
        }
        self.log.line(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_to_one_and_never_hidden() {
        let names: Vec<String> = ["a b", "a_b", "a/b", "a?b"].iter().map(|t| file_name_of(t)).collect();
        assert_eq!(names, ["a%20b", "a_b", "a%2Fb", "a%3Fb"]);
        assert_eq!(file_name_of("member=3,lead=1.5"), "member=3,lead=1.5");
        assert_eq!(file_name_of(".."), "%2E.");
        assert_eq!(file_name_of("a%20b"), "a%2520b");
        assert_eq!(file_name_of(""), "%");
        let long = "é".repeat(300);
        let name = file_name_of(&long);
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert_ne!(name, file_name_of(&"é".repeat(301)));
        assert_eq!(
            task_log_path("r", "2026-12-01T09Z", "s", "a/b"),
            Path::new("runner-logs/r/2026-12-01T09Z/s/a%2Fb.log")
        );
    }

    fn write_lines(log: &mut Log, lines: std::ops::Range<u32>) {
        for i in lines {
            log.output(format!("line {i:05}\n").as_bytes());
        }
    }

    #[test]
    fn output_past_the_limit_keeps_its_head_and_tail_and_says_what_was_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, "before\n").unwrap();
        let mut log = Log::open(&path, 1100).unwrap();
        log.line("--- header ---");
        write_lines(&mut log, 0..1000); // 11 bytes a line, 11 000 bytes
        log.finish();
        log.line("--- footer ---");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("before\n--- header ---\nline 00000\n"), "{text}");
        assert!(text.ends_with("line 00999\n--- footer ---\n"), "{text}");
        assert!(text.contains("9900 bytes (9.67 KiB) of output dropped here"), "{text}");
        let kept = text.lines().filter(|l| l.starts_with("line ")).count();
        assert_eq!(kept, 100, "{text}");
        assert!(!text.contains("line 00500"));
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        // Under the limit, nothing is dropped or said.
        let small = dir.path().join("small.log");
        let mut log = Log::open(&small, 1 << 20).unwrap();
        write_lines(&mut log, 0..1000);
        log.finish();
        let text = std::fs::read_to_string(&small).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(!text.contains("dropped"));
    }

    #[test]
    fn a_log_written_by_another_process_is_bounded_while_it_grows_and_cut_when_it_ends() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("service.log");
        std::fs::write(&path, "an earlier run, cut short").unwrap();
        let limit = 16 << 10;
        let mut log = HandedLog::open(&path, limit, "a test").unwrap();
        // The writer: a descriptor of its own, appending, as a service's stdout.
        let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
        let mut most_on_disk = 0;
        for i in 0..100_000u32 {
            writer.write_all(format!("line {i:06}\n").as_bytes()).unwrap();
            if i % 1000 == 999 {
                log.bound();
                most_on_disk = most_on_disk.max(std::fs::metadata(&path).unwrap().blocks() * 512);
            }
        }
        assert!(std::fs::metadata(&path).unwrap().len() > 1_000_000);
        if log.freed.load(Ordering::Relaxed) != u64::MAX {
            // The limit, what one call's interval wrote (12 KiB), the blocks cut in two, and
            // room for a file system's preallocation: far from the megabyte written.
            assert!(most_on_disk <= 256 << 10, "{most_on_disk} bytes on disk");
        }
        log.end_output();
        log.line("--- footer ---");
        writer.write_all(b"idle\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let (earlier, rest) = text.split_once('\n').unwrap();
        assert_eq!(earlier, "an earlier run, cut short", "a line of its own after the earlier run's");
        let (header, rest) = rest.split_once('\n').unwrap();
        assert!(header.starts_with("--- runner: a test (started ") && header.ends_with("Z) ---"), "{header}");
        assert!(rest.starts_with("line 000000\n"), "{}", &rest[..40]);
        assert!(text.ends_with("line 099999\n--- footer ---\nidle\n"), "{text}");
        assert!(text.contains("of output dropped here") && !text.contains('\0'), "{text}");
        let kept = text.lines().filter(|l| l.starts_with("line ")).count();
        assert!((1300..=1400).contains(&kept), "{kept} lines kept");
        assert!(text.len() < (limit as usize) + 300, "{}", text.len());
    }
}
